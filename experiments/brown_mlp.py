"""Claim 6 (seed 004 Fig 5): the Bengio MLP LM over a TILT context beats the same MLP over a
buffer of the last n words; the TILT-Buffer context sits between them.

Buffer-MLP, TILT-MLP and TILT-Buffer-MLP at n = 5 inputs on the Brown corpus as seed 004 splits it
(the first ~800K words to train; perplexity on the ~200K words after them, the ``valid`` split; the
vocabulary: words seen more than 5 times in the whole corpus), 30-d features and 100 hidden units as
the seed, trained by ``--recipe seed004-tuned``: tsrnn's recipe, not the seed's. The seed's stated
one (``--recipe seed004``: SGD lr 1e-3, 20 epochs) ended far above the perplexity the seed and
Bengio et al. report (an earlier record of this script: Buffer 430 to 434, where the seed has 262
and Bengio et al. about 276), so the comparison was between undertrained models; seed004-tuned
(the rarer words as one ``<unk>`` symbol, as Bengio et al.; Adam 1e-3 with weight decay 1e-5, four
128-word streams a step, 7 epochs; its NOTES give every choice and the search that found it) brings
the Buffer-MLP within ``LEVEL`` (300, a bound of tsrnn's own: the seed reports 262 and Bengio et
al. about 276 on their test split, with another vocabulary). Three training seeds (``--seeds`` picks
fewer), each run scored after its last epoch, on the 200K words (the seed's evaluation, on which
the recipe was chosen) and on the held-out rest of the corpus (``test``). The unigram model of the
training counts is the baseline, by the seed's formula (count / training words, over the targets
seen in training) and add-one smoothed (every target). The verdict comes from the seed-paired 95%
interval of Buffer - TILT perplexity.

Deviation from the seed: the training recipe (above); n = 5 only (Fig 5 shows n = 1..8:
``experiments.brown_sweeps``); the context state carries across the windows, so every TILT slot
sees the whole document so far; only the gradient into earlier embeddings stops at the window. The
corpus is NLTK's Brown archive split at document boundaries; its unigram baselines bracket the
seed's 853 without meeting it, so the data are not taken as the seed's either: the verdict is never
"reproduced" or "reversed" (it says why), and the record gives the unigram numbers. ``--brown``
also takes a text-corpus folder (the toy test's): cut into documents, with the vocabulary of its
training text.
"""
from __future__ import annotations

import time

from experiments import common, training
from tsrnn.lab.data.brown import is_brown_path

NAME = "brown_mlp"
CONTEXTS = ("tilt", "buffer", "tilt-buffer")
RECIPE = "seed004-tuned"
SIZES = {"full": {"n": (5,), "seeds": (0, 1, 2), "args": ["--recipe", RECIPE]},
         "toy": {"n": (2,), "seeds": (0, 1),
                 "args": ["--epochs", "1", "--max-steps", "2", "--bptt", "16", "--batch-size", "4"]}}
SEED = {"tilt": {5: 244, 8: 235}, "buffer": {5: 262, 8: 254}, "unigram": 853}
RECIPE_CAVEAT = "tsrnn's training recipe, not the seed's stated one"
LEVEL = 300  # tsrnn's bound for the Buffer-MLP at n = 5 (the seed reports 262, Bengio et al. about 276)


def recipe(size: str, corpus: str) -> list[str]:
    """The ``tsrnn train`` options every run of ``size`` shares: the task, the corpus, the recipe
    and, on Brown, the vocabulary of the whole corpus (a text corpus: its training text's)."""
    vocab = ["--vocab-from", "all"] if is_brown_path(corpus) else []
    return ["--task", "mlp-lm", "--data", corpus, *vocab, *SIZES[size]["args"]]


def unlike(results: dict) -> str:
    """How the comparison is not the seed's: a training recipe other than the seed's stated one
    (``results["recipe"]``; records made before it was kept ran ``seed004``), and data not shown to
    be the seed's (the unigram baselines, the seed's formula over the targets seen in training and
    add-one, beside the seed's 853)."""
    recipe = [] if results.get("recipe", "seed004") == "seed004" else [RECIPE_CAVEAT]
    unigram = (f"unigram {results['unigram_seen_ppl']:.0f} to {results['unigram_ppl']:.0f} against the seed's "
               f"{SEED['unigram']}")
    return "; ".join([*recipe, unigram])


def seed_gap(n) -> float | None:
    """The seed's Buffer - TILT perplexity at input size ``n`` (Fig 5 states it at n = 5 and 8)."""
    n = int(n)
    return SEED["buffer"][n] - SEED["tilt"][n] if n in SEED["tilt"] else None


def verdict(results: dict, seed_size: bool = False) -> str:
    """The claim's status at each n from the seed-paired 95% interval of Buffer - TILT
    perplexity on the 200K words the seed evaluates on, then on the held-out rest of the corpus
    (when the record has it); never like-for-like: the corpus cannot be checked to be the seed's
    (``unlike``). ``seed_size``: the seed's model (``--size full``)."""
    parts = []
    splits = {"": "ppl_per_seed", "held-out rest, ": "test_ppl_per_seed"}  # the seed's evaluation words first
    for split, key in ((split, key) for split, key in splits.items() if key in results):
        for n, tilt in results[key]["tilt"].items():
            gap = common.paired(results[key]["buffer"][n], tilt)
            measure = common.Measure("buffer - tilt", seed_gap(n), " ppl", 1, 0)
            parts.append(f"{split}n = {n}: {common.verdict(gap, measure, unlike(results), seed_size)}")
    return "; ".join(parts)


def _level(per_seed: dict) -> str:
    """On how many seeds the Buffer-MLP at n = 5 ends within ``LEVEL``."""
    buffer = per_seed["buffer"].get(5)
    if not buffer:
        return ""
    within = sum(value <= LEVEL for value in buffer.values())
    return f"; the Buffer-MLP at n = 5 within {LEVEL} (tsrnn's bound) on {within} of {len(buffer)} seeds"


def perplexity(values) -> str:
    """The seeds' perplexities as "mean +- sd", or the one seed's."""
    stats = common.interval(values)
    return f"{stats['mean']:.0f}" + (f" +- {stats['sd']:.0f}" if stats["n"] > 1 else "")


def figure(curves, unigram, n):
    """Validation perplexity by epoch at input size ``n``, a line per context and training seed,
    beside the seed's perplexities after its 20 epochs and the unigram baselines."""
    from tsrnn.lab import plot

    fig = plot.new_figure((6, 4))
    axes = fig.subplots()
    for context in CONTEXTS:
        colour = common.COLOURS[context]
        for i, points in enumerate(curves[context].values()):
            axes.plot(*zip(*points), "o-", ms=3, color=colour, label=f"{context}-MLP" if i == 0 else None)
        if n in SEED.get(context, {}):
            axes.plot([20], [SEED[context][n]], "*", ms=12, color=colour, label=f"seed 004's {context}, 20 epochs")
    for value, style, what in ((unigram["unigram_seen_ppl"], ":", "unigram, the seed's formula"),
                               (unigram["unigram_ppl"], "--", "unigram, add-one"),
                               (SEED["unigram"], "-", "seed 004's unigram")):
        axes.axhline(value, color="k" if style != "-" else "0.6", ls=style, lw=1, label=what)
    axes.set_yscale("log")
    axes.set(xlabel="epoch", ylabel="perplexity, the 200K words after training",
             title=f"Brown corpus, Bengio MLP LM, n = {n}")
    axes.legend(fontsize=7)
    return fig


def main(argv=None) -> int:
    args = common.arguments(NAME, __doc__, argv, data="brown", sizes=tuple(SIZES),
                            seeds={name: size["seeds"] for name, size in SIZES.items()})
    started = time.time()
    size = SIZES[args.size]
    seeds = args.seeds
    runs = {f"{context}_n{n}_seed{seed}": [*recipe(args.size, args.brown), "--context", context, "--n", str(n),
                                           "--seed", str(seed)]
            for seed in seeds for n in size["n"] for context in CONTEXTS}
    dirs = training.train(NAME, runs, args)
    validations = {run: training.metrics(dirs[run]) for run in runs}
    last = {run: validations[run][-1] for run in runs}  # the last epoch's: no split is left to select on
    per_seed = {context: {n: {seed: last[f"{context}_n{n}_seed{seed}"]["ppl"] for seed in seeds} for n in size["n"]}
                for context in CONTEXTS}
    ppl = {context: {n: common.interval(per_seed[context][n].values())["mean"] for n in size["n"]}
           for context in CONTEXTS}
    first = last[f"{CONTEXTS[0]}_n{size['n'][0]}_seed{seeds[0]}"]  # every run shares the corpus and vocabulary
    unigram = {key: first[key] for key in ("unigram_seen_ppl", "unigram_ppl", "unseen_targets")}
    steps = {run: last[run]["step"] for run in runs}
    epochs = [len({record["epoch"] for record in validations[run]}) for run in runs]
    test = {context: {n: {seed: training.test_metrics(dirs[f"{context}_n{n}_seed{seed}"], "last.pt")["ppl"]
                          for seed in seeds} for n in size["n"]} for context in CONTEXTS}
    over = ", mean +- sd over the seeds" if len(seeds) > 1 else ""
    ours = "; ".join(f"n = {n}: " + ", ".join(f"{context} {perplexity(per_seed[context][n].values())}"
                                            for context in CONTEXTS) for n in size["n"])
    ours += (f" (perplexity of the 200K words after training, after the last epoch{over}; on the held-out rest of "
             "the corpus: " + "; ".join(f"n = {n}: " + ", ".join(f"{context} {perplexity(test[context][n].values())}"
                                                               for context in CONTEXTS) for n in size["n"])
             + f"){_level(per_seed)}; unigram {unigram['unigram_seen_ppl']:.0f} by the seed's formula (the "
             f"{100 * unigram['unseen_targets']:.1f}% of targets unseen in training left out), "
             f"{unigram['unigram_ppl']:.0f} add-one")
    row = {"claim": "6. TILT-MLP vs Buffer-MLP vs TILT-Buffer-MLP on Brown (seed 004 Fig 5)",
           "seed": "n = 5: TILT 244, Buffer 262; n = 8: TILT 235, Buffer 254; TILT below Buffer at every n; "
                   "unigram 853",
           "ours": ours, "verdict": None,
           "model": "emb 30, hidden 100 (as seed)",
           "epochs": f"{min(epochs)} to {max(epochs)} epochs, {min(steps.values())} to {max(steps.values())} steps "
                     "(recipe seed004-tuned: Adam 1e-3, weight decay 1e-5, 4 x 128 words a step, rare words <unk>; "
                     "seed: 20 epochs, SGD 1e-3)",
           "seeds": ", ".join(map(str, seeds)),
           "gpu": "tsrnn train --recipe seed004-tuned --data brown.zip --context C --n N, C = tilt, buffer, "
                  "tilt-buffer, N = 1..8 (python -m experiments.brown_sweeps --experiment 1)"}
    n = size["n"][0]
    curves = {context: {seed: [(r["epoch"], r["ppl"]) for r in validations[f"{context}_n{n}_seed{seed}"]]
                        for seed in seeds} for context in CONTEXTS}
    results = {"ppl": ppl, "ppl_per_seed": per_seed, "test_ppl_per_seed": test, **unigram, "steps": steps,
               f"curves_n{n}": curves, "seed": SEED, "recipe": RECIPE if args.size == "full" else None}
    row["verdict"] = verdict(results, args.size == "full")
    common.report(NAME, args, row, results, figure(curves, unigram, n), dirs, started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
