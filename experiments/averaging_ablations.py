"""Seed 001's two ablations of the averaging memory on PTB: counting h_0 in the average, and a
memory that spans sentences.

- h_0 (seed 001 §3, its footnote 3, and §6.3: "allowing the initial state of all zeros to be
  included in the memory when averaging improves the performance"): the Averaging LM as claim 7
  trains it against the same model with ``--no-h0`` (m_t averages h_1 .. h_{t-1} alone). Claim:
  test perplexity without h_0 - with h_0 > 0.
- Memory span (§6: "we have permitted the memory buffer to hold longer sequences before being
  reset and the performance of the Averaging LSTM-LM dipped"): with ``--memory-span stream`` the
  corpus is read as streams of consecutive windows, the LSTM state and the memory carried across
  sentences, so the state alone also sees more context; the memory's own effect is therefore
  measured against the same stream-reading LM without memory (``--no-memory``): the gain of the
  memory, without - with memory perplexity, in sentence batches minus in streams. Claim: > 0 (the
  memory helps less when it spans sentences). The two readings score different targets (a stream
  also scores each sentence's first word), so their perplexities are compared only through the
  gains.

Models, sizes, seeds and training are claim 7's (``experiments.averaging_lm``: 2 x 200, one epoch
of Adam 3e-3); verdicts by ``experiments.common.verdict`` from seed-paired 95% intervals, never
"reproduced" at this size. Not run for a record yet (REPRODUCTION.md, "What the scripts do not run
yet", gives the cost).
"""
from __future__ import annotations

import time

from experiments import averaging_lm, common, training

NAME = "averaging_ablations"
MODELS = {"averaging": [], "no_h0": ["--no-h0"], "lstm": ["--no-memory"],
          "averaging_stream": ["--memory-span", "stream"], "lstm_stream": ["--no-memory", "--memory-span", "stream"]}
SEEDS = {"small": (0, 1, 2), "toy": (0,)}


def verdict(results: dict, seed_size: bool = False) -> str:
    """Both ablations from seed-paired 95% intervals of test perplexity (``results["test_ppl"]``:
    model -> seed -> ppl); the seed's data, reduced models after one epoch."""
    test = results["test_ppl"]
    h0 = common.paired(test["no_h0"], test["averaging"])
    sentence = {s: test["lstm"][s] - test["averaging"][s] for s in test["averaging"]}
    stream = {s: test["lstm_stream"][s] - test["averaging_stream"][s] for s in test["averaging_stream"]}
    span = common.paired(sentence, stream)
    h0_measure = common.Measure("without - with h_0", None, " ppl")
    span_measure = common.Measure("memory's gain in sentences - in streams", None, " ppl")
    return (f"h_0 counted: {common.verdict(h0, h0_measure, common.SHORTER, seed_size)}; memory reset at each "
            f"sentence: {common.verdict(span, span_measure, common.SHORTER, seed_size)}")


def main(argv=None) -> int:
    args = common.arguments(NAME, __doc__, argv, data="ptb")
    started = time.time()
    shared = ["--task", "averaging-lm", "--data", args.ptb, "--order", "corpus", *averaging_lm.SIZES[args.size]]
    seeds = SEEDS[args.size]
    dirs = training.train(NAME, {f"{model}_seed{seed}": [*shared, *flags, "--seed", str(seed)] for seed in seeds
                               for model, flags in MODELS.items()}, args)
    test = {model: {seed: training.test_metrics(dirs[f"{model}_seed{seed}"])["ppl"] for seed in seeds}
            for model in MODELS}
    curves = {model: training.curve(dirs[f"{model}_seed{seeds[0]}"], "ppl") for model in ("averaging", "no_h0")}
    results = {"test_ppl": test, "valid_ppl": curves}
    ours = "test ppl (mean over the seeds): " + ", ".join(
        f"{model} {common.interval(test[model].values())['mean']:.1f}" for model in MODELS)
    row = {"claim": "13. Averaging LM ablations: h_0 counted in the average, and the memory reset at each sentence "
                    "(seed 001 §3, §6)",
           "seed": "counting h_0 improves perplexity; a memory spanning longer sequences did worse (no numbers given)",
           "ours": ours, "verdict": verdict(results, False), "model": "claim 7's: 2 x 200, emb 200 (seed: 2 x 650)",
           "epochs": "claim 7's: 1 (Adam 3e-3; seed: SGD, early stopping)", "seeds": ", ".join(map(str, seeds)),
           "gpu": "tsrnn train --recipe seed001 --data PTB_DIR (and --no-h0; --memory-span stream, with and without "
                  "--no-memory)"}
    figure = common.curves_figure({"averaging": curves["averaging"], "lstm": curves["no_h0"]},
                                  "training step (32 sentences)", "validation perplexity",
                                  f"PTB sentences, h_0 counted or not (seed {seeds[0]})",
                                  {"averaging": "h_0 counted", "lstm": "--no-h0"})
    common.report(NAME, args, row, results, figure, dirs, started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
