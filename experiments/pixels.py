"""Claim 4 (seed 002 Table 1, in spirit): read pixel by pixel, digits are classified better by the
pLSTM than by the LSTM, and the gap is larger when the pixels are permuted.

pLSTM and LSTM, sequential and permuted pixel order, three seeds each, on scikit-learn's 8x8
digits (64 steps; 1,297 / 250 / 250). Test accuracy of the checkpoint with the best validation
loss, mean and standard deviation over seeds.

Deviation from the seed: 8x8 digits instead of MNIST (784 steps, a GPU job: ``--data MNIST_DIR``),
128 units (seed: 256, 512), 20 epochs of Adam 3e-3 (seed: Adam 1e-3, epochs unstated).
"""
from __future__ import annotations

import time

from experiments import common, training

NAME = "pixels"
CELLS = ("plstm", "lstm")
ORDERS = {"sequential": [], "permuted": ["--permute"]}
SIZES = {"small": {"args": ["--epochs", "20"], "seeds": (0, 1, 2)},
         "toy": {"args": ["--epochs", "1", "--max-steps", "3", "--nhid", "8"], "seeds": (0,)}}
SEED = {"sequential": {"plstm": 99.1, "lstm": 98.7}, "permuted": {"plstm": 94.4, "lstm": 91.3}}


def _seed_gap(order: str) -> float:
    """The seed's pLSTM - LSTM accuracy on MNIST in ``order``, as a fraction."""
    return (SEED[order]["plstm"] - SEED[order]["lstm"]) / 100


def verdict(results: dict, seed_size: bool = False) -> str:
    """The claim's status from seed-paired 95% intervals: in each pixel order of pLSTM - LSTM test
    accuracy, and for "the gap is larger when permuted" of the permuted gap minus the sequential
    one (the same seed in both orders); not like-for-like: 64-step 8x8 digits, not 784-step MNIST."""
    parts, gaps = [], {}
    for order, by_cell in results["test_accuracy"].items():
        gap = common.paired(by_cell["plstm"], by_cell["lstm"])
        gaps[order] = dict(zip(gap["seeds"], gap["diffs"]))
        measure = common.Measure("plstm - lstm", _seed_gap(order), " points", 100)
        parts.append(f"{order}: {common.verdict(gap, measure, common.NOT_LIKE_FOR_LIKE, seed_size)}")
    larger = common.paired(gaps["permuted"], gaps["sequential"])
    measure = common.Measure("permuted gap - sequential gap", _seed_gap("permuted") - _seed_gap("sequential"),
                             " points", 100)
    parts.append(f"gap larger when permuted: {common.verdict(larger, measure, common.NOT_LIKE_FOR_LIKE, seed_size)}")
    return "; ".join(parts)


def _figure(test, seeds):
    from tsrnn.lab import plot

    fig = plot.new_figure((6, 4))
    axes = fig.subplots()
    for k, cell in enumerate(CELLS):
        for j, order in enumerate(ORDERS):
            values = [100 * test[order][cell][seed] for seed in seeds]
            mean, std = common.mean_std(values)
            axes.bar(j + 0.4 * k - 0.2, mean, 0.4, yerr=std, capsize=4, color=common.COLOURS[cell],
                     label=cell if j == 0 else None)
            axes.plot([j + 0.4 * k - 0.2] * len(values), values, "k.")
    axes.set_xticks(range(len(ORDERS)), list(ORDERS))
    axes.set(ylabel="test accuracy (%)", title="8x8 digits pixel by pixel (mean, sd, runs)")
    axes.set_ylim(bottom=50)
    axes.legend()
    return fig


def main(argv=None) -> int:
    args = common.arguments(NAME, __doc__, argv)
    started = time.time()
    size = SIZES[args.size]
    runs = {f"{cell}_{order}_seed{seed}": ["--task", "pixels", "--cell", cell, "--seed", str(seed), *flags,
                                           *size["args"]]
            for order, flags in ORDERS.items() for cell in CELLS for seed in size["seeds"]}
    dirs = training.train(NAME, runs, args)
    test = {order: {cell: {seed: training.test_metrics(dirs[f"{cell}_{order}_seed{seed}"])["accuracy"]
                           for seed in size["seeds"]} for cell in CELLS} for order in ORDERS}
    summary = {order: {cell: common.mean_std(list(test[order][cell].values())) for cell in CELLS} for order in ORDERS}
    ours = "; ".join(f"{order}: " + ", ".join(f"{cell} {100 * summary[order][cell][0]:.1f}% +- "
                                              f"{100 * summary[order][cell][1]:.1f}" for cell in CELLS)
                     for order in ORDERS)
    row = {"claim": "4. Pixel-by-pixel digits, sequential and permuted: pLSTM vs LSTM (seed 002 Table 1, on 8x8 "
                    "digits)",
           "seed": "; ".join(f"{order} MNIST: " + ", ".join(f"{cell} {SEED[order][cell]}%" for cell in CELLS)
                             for order in ORDERS),
           "ours": ours + f" (test, mean +- sd of {len(size['seeds'])} seeds)",
           "verdict": verdict({"test_accuracy": test}, args.size == "full"),
           "model": "1 layer, 128 units (seed: 256)",
           "epochs": f"{common.option(size['args'], '--epochs')} (Adam 3e-3)",
           "seeds": ", ".join(map(str, size["seeds"])) + " (seed: 3)",
           "gpu": "tsrnn train --recipe seed002 --task pixels --data MNIST_DIR --cell C --seed S (and --permute), "
                  "C = plstm, lstm"}
    common.report(NAME, args, row, {"test_accuracy": test, "mean_std": summary, "seed": SEED},
                  _figure(test, size["seeds"]), dirs, started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
