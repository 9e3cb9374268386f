"""Claim 3 (seed 002 Table 3): with samples at random times and no time input, the pLSTM
discriminates sine-wave frequencies far better than the LSTM and LSTM-chrono; with the time as an
input, or with samples every Δt = 1, the three are alike.

The three cells (110 units) in four conditions of Table 3: asynchronous and synchronous (Δt = 1)
sampling, each with and without ``--time-input``, five training seeds in every condition (as the
seed's 5 runs; a seed draws the data and the initialization, so the cells of one seed see the same
sequences: the comparison is paired by seed). The seed's recipe (``--recipe seed002 --task freq``:
Neil et al.'s data, Adam 1e-3, batch 32, 5,000 fresh training sequences per epoch, 70 epochs). Test accuracy of the
checkpoint with the best validation loss; the claim's verdict comes from the seed-level 95%
interval of pLSTM - LSTM and pLSTM - chrono accuracy in the async condition without time input.
In the other conditions the seed has the three alike: each is tested for equivalence within the
margin of ``protocols/frequency.toml`` (5 accuracy points, declared after these runs; the seed's
own "alike" models differ by up to 3.5 points). Each run's validation curve gives the epoch at
which it leaves the majority-class plateau and its largest collapse. ``experiments.
frequency_time_scaled`` runs the async condition with the time input rescaled to [0, 1).

Deviation from the seed: no sync Δt = 0.1 column (ten times the steps of Δt = 1), and Neil et
al.'s per-step gradient clipping is not done (see ``--recipe seed002``).
"""
from __future__ import annotations

import time

from experiments import common, training

NAME = "frequency"
CELLS = ("plstm", "lstm", "chrono")
OTHERS = CELLS[1:]  # the cells the pLSTM is compared with
TIME_SCALE = common.protocol("frequency_time_scaled")["time_scale"]
CONDITIONS = {"async": ["--async"], "async_time": ["--async", "--time-input"], "sync1": ["--resolution", "1"],
              "sync1_time": ["--resolution", "1", "--time-input"],
              "async_time_scaled": ["--async", "--time-input", "--time-scale", str(TIME_SCALE)]}
SEED_OF = {"async_time_scaled": "async_time"}  # the seed's row for a condition it does not run
TOY = {"args": ["--epochs", "1", "--freq-size", "64,64", "--nhid", "8"], "seeds": (0, 1)}
SIZES = {"full": {"args": [], "seeds": tuple(common.protocol(NAME)["seeds"]),
                  "conditions": ("async", "async_time", "sync1", "sync1_time")},
         "toy": {**TOY, "conditions": ("async", "sync1")}}
SEED = {"async": {"plstm": (92.57, 0.5), "lstm": (68.59, 1.4), "chrono": (69.64, 0.8)},
        "async_time": {"plstm": (84.64, 2.1), "lstm": (82.73, 0.8), "chrono": (86.25, 1.4)},
        "sync1": {"plstm": (99.29, 0.1), "lstm": (99.37, 0.1), "chrono": (99.29, 0.3)},
        "sync1_time": {"plstm": (99.49, 0.1), "lstm": (99.45, 0.2), "chrono": (99.45, 0.1)}}
# Table 3: test accuracy (%), mean and (in its brackets) spread of 5 runs
CLAIM = "async"  # the condition of the claim: pLSTM above both LSTMs
LEARNED = 0.6  # validation accuracy that marks a run off the majority-class plateau (0.52)


def runs(size: dict) -> dict[str, list[str]]:
    """The training runs, seed by seed with the claim's condition first, so that an experiment
    spread over several calls has the claim's comparison for some seeds before the others."""
    conditions = sorted(size["conditions"], key=lambda c: c != CLAIM)
    return {f"{cell}_{condition}_seed{seed}": ["--recipe", "seed002", "--task", "freq", "--cell", cell, "--seed",
                                               str(seed), *CONDITIONS[condition], *size["args"]]
            for condition in conditions for seed in size["seeds"] for cell in CELLS}


def seed_gap(condition: str, other: str) -> float:
    """Table 3's pLSTM - ``other`` accuracy in ``condition``, as a fraction."""
    row = SEED[SEED_OF.get(condition, condition)]
    return (row["plstm"][0] - row[other][0]) / 100


def verdict(results: dict, seed_size: bool = False) -> str:
    """Every condition's half of the claim from its seed-paired test-accuracy intervals
    (``results["paired"]``: condition -> other cell -> pLSTM - other): in ``CLAIM`` the pLSTM ahead
    (``common.verdict``), in the others the three alike (``common.alike`` within the record's
    margin, else the frequency protocol's; unless the record's protocol declared it before the runs
    (``margin_before_runs``), its verdicts say so: not like-for-like). A rescaled time input is not the seed's protocol either.
    ``seed_size``: the seed's 70 epochs (``--size full``)."""
    margin = results.get("margin", common.protocol(NAME)["margin"])  # the protocol's, for a record made before
    late = [] if results.get("margin_before_runs") else ["the margin declared after the runs"]
    parts = []
    for condition, gaps in results["paired"].items():
        unlike = "; ".join((["the time input rescaled (the seed's is raw)"] if condition in SEED_OF else [])
                           + (late if condition != CLAIM else []))
        said = {}
        for other, gap in gaps.items():
            measure = common.Measure(f"plstm - {other}", seed_gap(condition, other), " points", 100)
            said[other] = (common.verdict(gap, measure, unlike, seed_size) if condition == CLAIM
                           else common.alike(gap, measure, margin, unlike, seed_size))
        parts.append(f"{condition} ({'pLSTM ahead' if condition == CLAIM else 'alike'}): " + common.against(said))
    return "; ".join(parts)


def learning(run_dir) -> dict:
    """How a run learned, from its validation accuracy after each epoch: the first epoch at which it
    reaches ``LEARNED`` (None: never) and its largest fall below the best so far (a collapse)."""
    points = [(r["epoch"], r["accuracy"]) for r in training.metrics(run_dir)]
    best, fall = 0.0, 0.0
    for _, value in points:
        best = max(best, value)
        fall = max(fall, best - value)
    return {"first_epoch": training.first_step(points, LEARNED), "largest_fall": fall}


def detail(accuracy: dict, gaps: dict, learned: dict) -> str:
    """Markdown: test accuracy (%) mean +- sd over seeds per condition and cell, then each seed's
    (a mean over seeds of which some failed to learn hides it), the seed-paired intervals of pLSTM
    - each LSTM, and Table 3's mean (spread); below it, how each run learned (``learning``)."""
    header = "test accuracy %: mean +- sd (seed 0, 1, ...)"
    lines = [f"| {header} | " + " | ".join(CELLS) + " | " + " | ".join(f"plstm - {o}, paired" for o in OTHERS)
             + " | the seed (Table 3): " + ", ".join(CELLS) + " |", "|---|" + "---|" * (len(CELLS) + len(OTHERS) + 1)]
    for condition, by_cell in accuracy.items():
        cells = [(common.interval(by_cell[cell].values()), by_cell[cell].values()) for cell in CELLS]
        shown = [f"{100 * c['mean']:.1f} +- {100 * c['sd']:.1f} (" + ", ".join(f"{100 * v:.1f}" for v in values) + ")"
                 for c, values in cells]
        shown += [f"{100 * g['mean']:+.1f} [{100 * g['low']:.1f}, {100 * g['high']:.1f}]"
                  for g in (gaps[condition][o] for o in OTHERS)]
        lines.append(f"| {condition} | " + " | ".join(shown) + " | "
                     + ", ".join(_seed(condition, cell) for cell in CELLS) + " |")
    lines += ["", f"| epoch at which validation accuracy first reaches {LEARNED} (seed 0, 1, ...); its largest fall "
                  "below its best | " + " | ".join(CELLS) + " |", "|---|" + "---|" * len(CELLS)]
    for condition, by_cell in learned.items():
        shown = ["epochs " + ", ".join("never" if r["first_epoch"] is None else str(r["first_epoch"])
                                       for r in by_cell[cell].values())
                 + "; falls " + ", ".join(f"{r['largest_fall']:.2f}" for r in by_cell[cell].values()) for cell in CELLS]
        lines.append(f"| {condition} | " + " | ".join(shown) + " |")
    return "\n".join(lines)


def _seed(condition: str, cell: str, unit: str = "") -> str:
    """Table 3's number for a cell: "92.57 (0.5)"."""
    mean, spread = SEED[SEED_OF.get(condition, condition)][cell]
    return f"{mean}{unit} ({spread})"


ROWS = {NAME: {"claim": "3. Frequency discrimination: pLSTM above LSTM and chrono with async samples and no time "
                        "input, the three alike otherwise (seed 002 Table 3)",
              "gpu": "tsrnn train --recipe seed002 --task freq --async --cell C --seed S, C = plstm, lstm, chrono"},
        "frequency_time_scaled": {
            "claim": "3. Frequency discrimination, async with the time input rescaled to [0, 1): the three alike "
                     "(seed 002 Table 3's 'w/ TIME' row, raw time)",
            "gpu": "tsrnn train --recipe seed002 --task freq --async --time-input --time-scale 0.008 --cell C --seed S"}}
WHAT = {"async": "async, no time input", "async_time_scaled": "async, time input rescaled"}


def run(name: str, doc: str, argv, sizes: dict) -> int:
    """Train and score the record ``name`` (a key of ``ROWS``) over the conditions of ``sizes``;
    its first condition is the one the record's text, figure and majority class describe."""
    args = common.arguments(name, doc, argv, sizes=tuple(sizes))
    started = time.time()
    size = sizes[args.size]
    dirs = training.train(name, runs(size), args)
    accuracy = {condition: {cell: {seed: training.test_metrics(dirs[f"{cell}_{condition}_seed{seed}"])["accuracy"]
                                   for seed in size["seeds"]} for cell in CELLS}
                for condition in size["conditions"]}
    first, shown = size["seeds"][0], size["conditions"][0]
    majority = training.test_metrics(dirs[f"plstm_{shown}_seed{first}"])["majority"]
    paired = {condition: {other: common.paired(by_cell["plstm"], by_cell[other]) for other in OTHERS}
              for condition, by_cell in accuracy.items()}
    gaps = paired[shown]
    learned = {condition: {cell: {seed: learning(dirs[f"{cell}_{condition}_seed{seed}"]) for seed in size["seeds"]}
                           for cell in CELLS} for condition in size["conditions"]}
    claim = accuracy[shown]
    ours = (f"{WHAT[shown]}, test accuracy: " + ", ".join(
        f"{cell} {100 * common.interval(claim[cell].values())['mean']:.1f}% +- "
        f"{100 * common.interval(claim[cell].values())['sd']:.1f}" for cell in CELLS)
        + f" (majority class {100 * majority:.1f}%); " + "; ".join(
        f"plstm - {other}: {common.described(gaps[other], ' points', 100)}" for other in gaps))
    epochs = "70 epochs" if not size["args"] else f"{common.option(size['args'], '--epochs')} epoch"
    row = {**ROWS[name],
           "seed": ", ".join(f"{cell} {_seed(shown, cell, '%')}" for cell in CELLS) + " (mean (spread) of 5 runs)",
           "ours": ours, "verdict": None,
           "model": "1 layer, 110 units (as seed)",
           "epochs": f"{epochs} of 5,000 fresh sequences, Adam 1e-3, batch 32 (as seed)",
           "seeds": ", ".join(map(str, size["seeds"])) + " in every condition (seed: 5 runs)"}
    curves = {cell: training.curve(dirs[f"{cell}_{shown}_seed{first}"], "accuracy") for cell in CELLS}
    figure = common.curves_figure(curves, "training step (batch 32)", "validation accuracy",
                                  f"{WHAT[shown]} (seed {first})")
    results = {"test_accuracy": accuracy, "majority": majority, "paired": paired, "learning": learned,
               "valid_accuracy": curves, "seed": SEED, "margin": common.protocol(name)["margin"],
               "margin_before_runs": common.protocol(name)["before_runs"]}
    row["verdict"] = verdict(results, args.size == "full")
    common.report(name, args, row, results, figure, dirs, started, detail=detail(accuracy, paired, learned))
    return 0


def main(argv=None) -> int:
    return run(NAME, __doc__, argv, SIZES)


if __name__ == "__main__":
    raise SystemExit(main())
