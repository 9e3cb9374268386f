"""Claim 8 (seed 002 Table 2): on character-level PTB the pLSTM reaches a lower test BPC than an
LSTM with about as many parameters.

One layer each, embeddings tied to the output layer (so the embedding is as wide as the layer),
the pLSTM (3 gate rows per unit) wider than the LSTM (4) so both have about the same
recurrent-layer parameters, as the seed's 716 / 828 units, five training seeds as the seed's.
Test bits per character of the checkpoint with the best validation loss; the verdict comes from
the seed-paired 95% interval of LSTM - pLSTM BPC.

The seed's size is ``tsrnn train --recipe seed002 --task lm --data PTB_DIR --cell plstm`` (and
``--cell lstm``): 594 / 515 units, which give the seed's ~2.15M parameters in this tied model
(716 / 828 tied units would be 4.1M / 4.2M; see tsrnn/lab/training/recipes.py).

Deviation from the seed, to fit CPU minutes (a run took about 5 minutes, two at once on 2 cores):
128 / 148 units (seed: 716 / 828), batch 32 (seed: 128), windows of 150 characters (as the
seed's shorter setting), one epoch of Adam 3e-3 (seed: 50 epochs), tsrnn's AWD-LSTM LM with its
light default dropout (the seed does not describe its regularization).
"""
from __future__ import annotations

import time

from experiments import common, training

NAME = "char_ptb"
UNITS = {"small": {"plstm": "148", "lstm": "128"}, "toy": {"plstm": "9", "lstm": "8"}}
SIZES = {"small": ["--batch-size", "32", "--bptt", "150", "--epochs", "1", "--valid-every", "350"],
         "toy": ["--batch-size", "4", "--bptt", "20", "--epochs", "1", "--max-steps", "3"]}
SEEDS = {"small": (0, 1, 2, 3, 4), "toy": (0, 1)}
SEED = {"plstm": 1.420, "lstm": 1.426}


def _parameters(run_dir) -> int:
    _, model = training.restore(run_dir)
    return sum(p.numel() for name, p in model.named_parameters() if name.startswith("rnns"))


def verdict(results: dict, seed_size: bool = False) -> str:
    """The claim's status from the seed-paired 95% interval of LSTM - pLSTM test BPC: the seed's
    data (Mikolov's ptb.char files), smaller models after one epoch (seed: 50)."""
    bpc = results["test_bpc"]
    gap = common.paired(bpc["lstm"], bpc["plstm"])
    measure = common.Measure("LSTM - pLSTM", SEED["lstm"] - SEED["plstm"], " BPC", 1, 4)
    return common.verdict(gap, measure, common.SHORTER, seed_size)


def main(argv=None) -> int:
    args = common.arguments(NAME, __doc__, argv, data="ptb")
    started = time.time()
    seeds, units = SEEDS[args.size], UNITS[args.size]
    runs = {f"{cell}_seed{seed}": ["--task", "lm", "--data", args.ptb, "--level", "char", "--cell", cell, "--nhid", n,
                                   "--emsize", n, "--seed", str(seed), *SIZES[args.size]]
            for seed in seeds for cell, n in units.items()}
    dirs = training.train(NAME, runs, args, checkpoints=True)
    bpc = {cell: {seed: training.test_metrics(dirs[f"{cell}_seed{seed}"])["bpc"] for seed in seeds} for cell in units}
    params = {cell: _parameters(dirs[f"{cell}_seed{seeds[0]}"]) for cell in units}
    curves = {cell: training.curve(dirs[f"{cell}_seed{seeds[0]}"], "bpc") for cell in units}
    ours = "test BPC (mean +- sd) " + ", ".join(
        f"{cell} {common.interval(bpc[cell].values())['mean']:.3f} +- {common.interval(bpc[cell].values())['sd']:.3f} "
        f"({units[cell]} units, {params[cell] / 1e3:.0f}K recurrent parameters)" for cell in units)
    row = {"claim": "8. Character-level PTB, BPC: pLSTM vs LSTM (seed 002 Table 2)",
           "seed": "pLSTM 1.420, LSTM 1.426 (sequence length 150; 5 seeds)",
           "ours": ours, "verdict": verdict({"test_bpc": bpc}, args.size == "full"),
           "model": "1 layer, LSTM 128 / pLSTM 148 units (seed: 716 / 828)",
           "epochs": f"{common.option(SIZES[args.size], '--epochs')} (Adam 3e-3; seed: 50)",
           "seeds": ", ".join(map(str, seeds)) + " (seed: 5)",
           "gpu": "tsrnn train --recipe seed002 --task lm --data PTB_DIR --cell plstm (and --cell lstm): the seed's "
                  "~2.15M parameters, which tsrnn's tied one-layer model holds at 594 / 515 units (the seed's 828 / "
                  "716 units count the recurrent weights alone), batch 128, --bptt 150, 50 epochs of Adam 1e-3"}
    figure = common.curves_figure(curves, "training step", "validation bits per character",
                                  f"character-level PTB (seed {seeds[0]})")
    results = {"test_bpc": bpc, "recurrent_parameters": params, "valid_bpc": curves, "seed": SEED}
    common.report(NAME, args, row, results, figure, dirs, started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
