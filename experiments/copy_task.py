"""Claim 2 (seed 002 Fig 3A): on the copy task at T = 200 the pLSTM converges faster than the LSTM
with and without chrono initialization.

pLSTM, LSTM and LSTM-chrono (T_max = 3T/2) with the seed's recipe (``--recipe seed002``: 128
units, RMSprop 1e-3, batch 128, a fixed set of 100K training and 10K validation sequences drawn
from the training seed, so the three cells of one seed see the same data), three training seeds,
trained until both validation accuracies reach 0.99 or a step cap. Validation symbol accuracy
(the 10 copied symbols; chance 1/8) every 250 steps. "Converges faster" is measured two ways per
seed: the step at which the symbol accuracy first reaches 0.99 (censored at the cap), and the
area under the accuracy curve (the mean validation accuracy over the cap's steps, a run that
stopped counting at its final accuracy); each pair of the seed's order (pLSTM before chrono before
LSTM) gets a verdict from the seed-paired 95% interval of the area. The area measures convergence
only where the runs converge: with no run at 0.99 by the cap the claim is "not tested"; with some,
the verdict says how many reached it.

Deviation from the seed: the seed trains until 99.9% (``--stop-accuracy 0.999``) and shows one
run per model; here 0.99 (the accuracy its §5.2 analyses use) within a cap of 3,000 steps, to fit
the CPU budget (3,000 steps are 3.8 passes over the 100K sequences; the authors' code gives a run up
to 200 such epochs before it calls it failed); T = 500 and 1000 are left to a GPU (each step costs
T + 20 recurrent steps). ``--size t100`` trains T = 100 to 0.99 within 30,000 steps over five seeds
instead (``protocols/copy_task_t100.toml``, record ``copy_task_t100``). No gradient clipping, as the paper (the authors' notebook clips at 1.0).
"""
from __future__ import annotations

import time

from experiments import common, training

NAME = "copy_task"
CELLS = ("plstm", "lstm", "chrono")
TARGET = 0.99
T100 = common.protocol("copy_task_t100")
SIZES = {"full": {"delay": 200, "steps": 3000, "valid_every": 250, "seeds": (0, 1, 2), "args": []},
         "t100": {"delay": T100["delay"], "steps": T100["steps"], "valid_every": 250, "seeds": tuple(T100["seeds"]),
                  "args": []},
         "toy": {"delay": 10, "steps": 6, "valid_every": 2, "seeds": (0, 1),
                 "args": ["--nhid", "8", "--copy-size", "64,32", "--batch-size", "16"]}}


def runs(size: dict) -> dict[str, list[str]]:
    """The training runs, seed by seed."""
    return {f"{cell}_seed{seed}": ["--recipe", "seed002", "--task", "copy", "--cell", cell, "--seed", str(seed),
                                   "--delay", str(size["delay"]), "--stop-accuracy", str(TARGET), "--max-steps",
                                   str(size["steps"]), "--valid-every", str(size["valid_every"]), *size["args"]]
            for seed in size["seeds"] for cell in CELLS}


def area(points: list[tuple[int, float]], steps: int, every: int) -> float:
    """Mean validation accuracy at the steps every, 2 every, ..., steps, each the last accuracy
    measured at or before it: a run that stopped early (at an epoch's end, off this grid) keeps the
    accuracy that stopped it for the steps it did not train."""
    points, k, last, total = sorted(points), 0, 0.0, 0.0
    grid = range(every, steps + 1, every)
    for step in grid:
        while k < len(points) and points[k][0] <= step:
            last, k = points[k][1], k + 1
        total += last
    return total / len(grid)


ORDER = (("plstm", "lstm"), ("plstm", "chrono"), ("chrono", "lstm"))  # the seed's order: pLSTM, chrono, LSTM


def verdict(results: dict, seed_size: bool = False) -> str:
    """Each pair of the seed's convergence order (``ORDER``: the first converges before the second)
    from the seed-paired interval of the area under the accuracy curve, first - second. The area
    stands for convergence only where the runs converge: "not tested" when no run reached the
    target within the cap; "reproduced" or "reversed" need every run to reach it (else the
    verdict says how many did). ``seed_size``: the seed's delay, model and batch (``--size full``)."""
    runs = [step for by_seed in results["first_step_at_target"].values() for step in by_seed.values()]
    converged = sum(step is not None for step in runs)
    reached = f"{converged} of {len(runs)} runs reached {results['target']} within {results['steps']} steps"
    parts = []
    for first, second in ORDER:
        gap = common.paired(results["area"][first], results["area"][second])
        measure = common.Measure(f"area {first} - {second}", None, "", 1, 3)
        said = common.verdict(gap, measure, "" if converged == len(runs) else reached, seed_size,
                              "" if converged else reached)
        parts.append(f"{first} before {second}: {said}")
    return "; ".join(parts)


def _last(curves: dict, cell: str, seeds, digits: int) -> str:
    """The last value of each seed's curve of ``cell``, as "a, b, c"."""
    return ", ".join(f"{curves[f'{cell}_seed{s}'][-1][1]:.{digits}f}" for s in seeds)


def _figure(curves, delay):
    from tsrnn.lab import plot

    fig = plot.new_figure((6, 4))
    axes = fig.subplots()
    for run, points in curves.items():
        cell = run.split("_")[0]
        axes.plot([p[0] for p in points], [p[1] for p in points], color=common.COLOURS[cell], alpha=0.8,
                  label=cell if run.endswith("seed0") else None)
    axes.axhline(1 / 8, color="k", ls=":", lw=0.8, label="chance")
    axes.set(xlabel="training step (batch 128)", ylabel="validation symbol accuracy", title=f"copy task, T = {delay}",
             ylim=(0, 1.02))
    axes.legend()
    return fig


RECORDS = {"t100": "copy_task_t100"}  # sizes with a record of their own (protocols/copy_task_t100.toml)


def main(argv=None) -> int:
    args = common.arguments(NAME, __doc__, argv, sizes=tuple(SIZES), reported=("full", *RECORDS))
    started = time.time()
    size = SIZES[args.size]
    name = RECORDS.get(args.size, NAME)
    dirs = training.train(name, runs(size), args)
    curves = {run: training.curve(dirs[run], "accuracy") for run in dirs}
    losses = {run: training.curve(dirs[run], "loss") for run in dirs}
    baseline = training.curve(next(iter(dirs.values())), "baseline_loss")[-1][1]
    seeds = size["seeds"]
    areas = {cell: {s: area(curves[f"{cell}_seed{s}"], size["steps"], size["valid_every"]) for s in seeds}
             for cell in CELLS}
    reached = {cell: {s: training.first_step(curves[f"{cell}_seed{s}"], TARGET) for s in seeds} for cell in CELLS}
    gaps = {other: common.paired(areas["plstm"], areas[other]) for other in ("lstm", "chrono")}
    solved = {cell: sum(step is not None for step in reached[cell].values()) for cell in CELLS}
    ours = (f"T = {size['delay']}, {size['steps']} steps: mean validation accuracy over training "
            + ", ".join(f"{cell} {common.interval(areas[cell].values())['mean']:.2f}" for cell in CELLS)
            + "; at the last step, accuracy (chance 0.125) and validation loss (memoryless baseline "
            + f"{baseline:.4f}), seed by seed: " + "; ".join(
                f"{cell} {_last(curves, cell, seeds, 3)} (loss {_last(losses, cell, seeds, 4)})" for cell in CELLS)
            + "; runs reaching 0.99: " + ", ".join(f"{cell} {solved[cell]}/{len(seeds)}" for cell in CELLS)
            + "; plstm - " + "; plstm - ".join(f"{other}: {common.described(gaps[other], '', 1, 3)}"
                                                 for other in gaps))
    row = {"claim": f"2. Copy task, T = {size['delay']}: pLSTM converges before LSTM-chrono and LSTM (seed 002 Fig 3A, "
                    "T = 200)",
           "seed": "T = 200: pLSTM converges first, then chrono, then LSTM (one run each, to 99.9%)",
           "ours": ours, "verdict": None,
           "model": "1 layer, 128 units (as seed)",
           "epochs": f"until 0.99 or {size['steps']} steps (batch 128, RMSprop 1e-3, 100K sequences: as seed; "
                     "seed: until 0.999)",
           "seeds": ", ".join(map(str, seeds)) + " (seed: one run per model)",
           "gpu": "tsrnn train --recipe seed002 --delay T --cell C, T = 200, 500, 1000, C = plstm, lstm, chrono"}
    results = {"target": TARGET, "steps": size["steps"], "valid_accuracy": curves, "valid_loss": losses,
               "baseline_loss": baseline, "area": areas,
               "first_step_at_target": reached, "paired_area": gaps}
    row["verdict"] = verdict(results, args.size == "full")
    common.report(name, args, row, results, _figure(curves, size["delay"]), dirs, started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
