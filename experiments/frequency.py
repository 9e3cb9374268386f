"""Claim 3 (seed 002 Table 3, async column): with samples at random times and no time input, the
pLSTM discriminates sine-wave frequencies far better than the LSTM and LSTM-chrono.

The three cells on the asynchronous task without ``--time-input``: the pLSTM gets each gap
between samples through its gate (Δt), the LSTMs see only the sample values. Test accuracy of the
checkpoint with the best validation loss, against always answering the majority class.

Deviation from the seed, to fit CPU minutes: 15 epochs of 5,000 fresh sequences (seed: 70) and
one seed (seed: 5); Neil et al.'s per-step gradient clipping is not done (see ``--recipe seed002``).
"""
from __future__ import annotations

import time

from experiments import common

NAME = "frequency"
CELLS = ("plstm", "lstm", "chrono")
SIZES = {"small": ["--epochs", "15"], "toy": ["--epochs", "1", "--freq-size", "64,64", "--nhid", "8"]}
SEED = {"plstm": 92.57, "lstm": 68.59, "chrono": 69.64}


def main(argv=None) -> int:
    args = common.arguments(NAME, __doc__, argv)
    started = time.time()
    runs = {cell: ["--task", "freq", "--async", "--cell", cell, *SIZES[args.size]] for cell in CELLS}
    dirs = common.train(NAME, runs, args)
    test = {cell: common.test_metrics(dirs[cell]) for cell in CELLS}
    curves = {cell: common.curve(dirs[cell], "accuracy") for cell in CELLS}
    ours = ("test accuracy " + ", ".join(f"{cell} {100 * test[cell]['accuracy']:.1f}%" for cell in CELLS)
            + f" (majority class {100 * test[CELLS[0]]['majority']:.1f}%)")
    row = {"claim": "3. Frequency discrimination, async, no time input (seed 002 Table 3)",
           "seed": ", ".join(f"{cell} {value}%" for cell, value in SEED.items()),
           "ours": ours, "model": "1 layer, 110 units (as seed)",
           "epochs": f"{common.option(SIZES[args.size], '--epochs')} of 5,000 sequences (seed: 70)",
           "seeds": "0 (seed: 5 runs)",
           "gpu": "tsrnn train --recipe seed002 --task freq --async --cell C, C = plstm, lstm, chrono"}
    figure = common.curves_figure(curves, "training step (batch 32)", "validation accuracy",
                                  "frequency discrimination, async, no time input")
    common.report(NAME, args, row, {"test": test, "valid_accuracy": curves, "seed": SEED}, figure, dirs,
                  started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
