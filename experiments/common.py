"""What every reproduction script shares: its command line and protocol, the statistics and
verdict words of its claims, the JSON record and figure it writes, and the machine it ran on.

A script lists its training runs as ``tsrnn train`` argument lists for two sizes: ``small``, the
reported CPU run, and ``toy``, seconds-long, which CI runs so that the scripts keep working;
``experiments.training`` trains them. ``report`` writes ``OUT/NAME.json`` (every number the
table and figure show, the command, sizes, seeds, wall time and machine) and ``OUT/NAME.png``;
``experiments.table`` turns the JSON files into the table of ``experiments/REPRODUCTION.md``.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import shlex
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

import torch

from experiments.training import finished
from tsrnn.lab.analysis.command import strict_json

RESULTS = Path(__file__).parent / "results"
PROTOCOLS = Path(__file__).parent / "protocols"
COLOURS = {"mts": "tab:red", "plstm": "tab:red", "lstm": "tab:blue", "chrono": "tab:green", "tilt": "tab:red",
           "buffer": "tab:blue", "tilt-buffer": "tab:purple", "averaging": "tab:red"}  # one colour per model


def arguments(module: str, doc: str, argv=None, data: str | None = None,
              sizes: tuple[str, ...] = ("small", "toy"), seeds: dict | None = None, extend=None,
              reported: tuple[str, ...] | None = None) -> argparse.Namespace:
    """The common options of the script ``experiments.<module>`` (docstring ``doc``), parsed from
    ``argv`` (default: the command line); ``data`` names its corpus option (``--ptb`` or
    ``--brown``); ``sizes``: the script's sizes, the reported one first; ``seeds``: each size's
    training seeds, given by a script that takes ``--seeds`` (a subset of the size's, e.g. the ones
    a machine's budget allows; ``args.seeds`` is then the chosen ones in the size's order, all of
    them by default). The default folders depend on the size: only the reported size writes into
    experiments/results and runs/experiments, so a toy run never writes over the reported results
    or their checkpoints (``reported``: the sizes that do, default the first). ``extend(parser)``
    adds the script's own options."""
    p = argparse.ArgumentParser(prog=f"python -m experiments.{module}", description=doc.splitlines()[0])
    p.add_argument("--size", choices=sizes, default=sizes[0],
                   help=f"{sizes[0]}: the reported CPU run; toy: seconds, to check the script works")
    p.add_argument("--out", help="where NAME.json and NAME.png go (default: experiments/results for the reported size, "
                                 "RUNS/results otherwise)")
    p.add_argument("--runs", help="checkpoints and logs of the training runs (default: runs/experiments for the "
                                  "reported size, runs/experiments/SIZE otherwise)")
    p.add_argument("--jobs", type=int, default=2, help="training runs at once")
    p.add_argument("--threads", type=int, default=1, help="torch threads per training run")
    if seeds is not None:
        p.add_argument("--seeds", type=int, nargs="+", metavar="SEED", help="train and report only these of the "
                       "size's training seeds (default: all of them)")
    if data == "ptb":
        p.add_argument("--ptb", required=True, help="directory with ptb.{train,valid,test}.txt (and ptb.char.*)")
    elif data == "brown":
        p.add_argument("--brown", required=True, help="NLTK's brown.zip, or a text corpus directory")
    if extend is not None:
        extend(p)
    args = p.parse_args(argv)
    if seeds is not None:
        listed = tuple(seeds[args.size])
        chosen = listed if args.seeds is None else args.seeds
        if set(chosen) - set(listed) or len(set(chosen)) != len(chosen):
            p.error(f"--seeds {' '.join(map(str, chosen))}: choose distinct seeds among the --size {args.size} "
                    f"seeds {' '.join(map(str, listed))}")
        args.seeds = tuple(seed for seed in listed if seed in chosen)
    args.module, args.argv = module, list(sys.argv[1:] if argv is None else argv)
    if data is not None:  # one spelling of the corpus path, so that a rerun finds its finished runs
        setattr(args, data, str(Path(getattr(args, data)).resolve()))
    args.corpus = getattr(args, data) if data is not None else None  # the path the ledger spells CORPUS
    reported = args.size in (reported or sizes[:1])
    args.runs = args.runs or ("runs/experiments" if reported else f"runs/experiments/{args.size}")
    args.out = args.out or (str(RESULTS) if reported else f"{args.runs}/results")
    return args


def protocol(name: str) -> dict:
    """The protocol of the record ``name``: ``protocols/NAME.toml`` (see protocols/README.md)."""
    path = PROTOCOLS / f"{name}.toml"
    try:
        return tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} does not exist: an experiment declares its protocol before it runs "
                                "(experiments/protocols/README.md)") from None


def command_line(args) -> str:
    """How the script was called, corpus paths shown as placeholders (PTB_DIR, brown.zip) and the
    folder options left out."""
    hide = {"--ptb": "PTB_DIR", "--brown": "brown.zip", "--runs": None, "--out": None}
    words, argv = [], iter(args.argv)
    for word in argv:
        flag, equals, _ = word.partition("=")
        if flag not in hide:
            words.append(word)
            continue
        if not equals:
            next(argv, None)
        if hide[flag] is not None:
            words += [flag, hide[flag]]
    return shlex.join(["python", "-m", f"experiments.{args.module}", *words])


def machine() -> str:
    """The CPU, core count and software versions, as one line."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gpu = f", {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""
    return (f"{cpu}, {os.cpu_count()} cores{gpu}; Python {platform.python_version()}, torch {torch.__version__}")


def option(argv: list[str], flag: str) -> str:
    """The value given to ``flag`` in a ``tsrnn train`` argument list."""
    return argv[argv.index(flag) + 1]


def mean_std(values) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one value)."""
    values = [float(v) for v in values]
    mean = sum(values) / len(values)
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1) if len(values) > 1 else 0.0
    return mean, math.sqrt(var)


def interval(values, level: float = 0.95) -> dict:
    """Mean, sample sd and the two-sided Student-t interval of the mean of ``values`` (one per
    training seed): mean -+ t_{(1+level)/2, n-1} sd / sqrt(n); NaN bounds for fewer than 2."""
    import scipy.stats

    values = [float(v) for v in values]
    mean, sd = mean_std(values)
    n = len(values)
    half = float(scipy.stats.t.ppf((1 + level) / 2, n - 1)) * sd / math.sqrt(n) if n > 1 else float("nan")
    return {"n": n, "mean": mean, "sd": sd, "low": mean - half, "high": mean + half, "level": level}


def paired(better: dict, other: dict, level: float = 0.95) -> dict:
    """The seed-by-seed differences ``better[seed] - other[seed]`` over the seeds both have
    (the same seed gives both models the same data and data order) and their ``interval``."""
    seeds = sorted(set(better) & set(other), key=str)
    if not seeds:
        raise ValueError(f"no training seed is in both: {sorted(better, key=str)} and {sorted(other, key=str)}")
    diffs = [float(better[s]) - float(other[s]) for s in seeds]
    return {"seeds": seeds, "diffs": diffs, **interval(diffs, level)}


NOT_LIKE_FOR_LIKE = "not like-for-like data"  # the seed's task, on other data (8x8 digits for MNIST)
SHORTER = "shorter training than the seed's"  # the seed's data, trained for far fewer epochs
NOT_SEED_SIZE = "not the seed's size"
WORDS = ("reproduced", "consistent", "inconclusive", "reversed", "against the claim", "not tested")
EQUIVALENCE_LEVEL = 0.90  # two one-sided tests at 5% each: the 90% interval inside the margin


@dataclass(frozen=True)
class Measure:
    """What a claim's comparison measures: ``what`` names the difference ("buffer - tilt"),
    ``seed`` is the seed's own value of it in the measure's units (None: the seed reports none),
    and ``unit``, ``scale``, ``digits`` say how it is shown (accuracy 0.24 as "+24.0 points":
    unit " points", scale 100)."""
    what: str
    seed: float | None
    unit: str = ""
    scale: float = 1.0
    digits: int = 1

    def number(self, value: float, sign: str = "+", unit: bool = True) -> str:
        return f"{self.scale * value:{sign}.{self.digits}f}{self.unit if unit else ''}"

    def seed_clause(self, stats: dict) -> str:
        """Whether the seed's value lies inside the 95% interval."""
        if self.seed is None:
            return "the seed reports no value of this measure"
        if stats["n"] < 2:
            return f"the seed's {self.number(self.seed)}: no interval from one seed"
        inside = stats["low"] <= self.seed <= stats["high"]
        return f"the seed's {self.number(self.seed)} {'inside' if inside else 'outside'} the interval"


def _why(reasons: list[str]) -> str:
    return f" ({'; '.join(reasons)})" if reasons else ""


def verdict(stats: dict, measure: Measure, unlike: str = "", seed_size: bool = False, untested: str = "") -> str:
    """What a seed-level interval of a difference (``measure.what``: the model the claim favours
    minus the other) says of the claim, by one rule for both directions (``WORDS``), followed by
    the interval (``described``):

    - "not tested" when the measure cannot decide the claim (``untested`` says why, e.g. no run
      reached the claim's end point), whatever the interval;
    - an interval that includes 0, or one seed, is "inconclusive", whichever way its mean leans;
    - an interval above 0 is "reproduced" and one below 0 "reversed" like-for-like (the seed's
      size, ``seed_size``, and its data and protocol, ``unlike`` empty); otherwise the same
      intervals give "consistent" and "against the claim", saying how the comparison is not the
      seed's (``unlike``; "not the seed's size").

    Every verdict says, in its brackets, whether the seed's own value (``measure.seed``) lies inside
    the interval."""
    differs = ([] if seed_size else [NOT_SEED_SIZE]) + ([unlike] if unlike else [])
    seed = measure.seed_clause(stats)
    shown = f"{measure.what} {described(stats, measure.unit, measure.scale, measure.digits)}"
    if untested:
        return f"not tested{_why([untested, seed])}, {shown}"
    if stats["n"] >= 2 and not (math.isfinite(stats["low"]) and math.isfinite(stats["high"])):
        return f"inconclusive{_why(['the interval is not finite', *differs, seed])}, {shown}"
    if stats["n"] < 2 or stats["low"] <= 0 <= stats["high"]:
        why = "one seed" if stats["n"] < 2 else f"the {100 * stats['level']:.0f}% interval includes 0"
        return f"inconclusive{_why([why, *differs, seed])}, {shown}"
    above = stats["low"] > 0
    word = ("reproduced" if above else "reversed") if not differs else (
        "consistent" if above else "against the claim")
    return f"{word}{_why([*differs, seed])}, {shown}"


def alike(stats: dict, measure: Measure, margin: float, unlike: str = "", seed_size: bool = False) -> str:
    """What a seed-level interval says of a claim that two models are alike, tested for equivalence
    against ``margin`` (in the measure's units, declared in the experiment's protocol before its
    runs) by two one-sided t tests at 5% each, that is by the ``EQUIVALENCE_LEVEL`` (90%) interval:

    - inside (-margin, margin): "reproduced" like-for-like, else "consistent";
    - the 95% interval wholly beyond the margin (a difference larger than the margin shown):
      "reversed" like-for-like, else "against the claim";
    - anything else, and one seed, is "inconclusive": the runs cannot tell "alike" from "apart"
      (a weak test).

    Followed by the 95% interval; the brackets say whether the seed's value lies inside it."""
    import scipy.stats

    differs = ([] if seed_size else [NOT_SEED_SIZE]) + ([unlike] if unlike else [])
    seed = measure.seed_clause(stats)
    shown = f"{measure.what} {described(stats, measure.unit, measure.scale, measure.digits)}"
    band = f"the margin +-{measure.number(margin, '')}"
    if stats["n"] < 2:
        return f"inconclusive{_why(['one seed', *differs, seed])}, {shown}"
    if not (math.isfinite(stats["low"]) and math.isfinite(stats["high"])):
        return f"inconclusive{_why(['the interval is not finite', *differs, seed])}, {shown}"
    half = (float(scipy.stats.t.ppf((1 + EQUIVALENCE_LEVEL) / 2, stats["n"] - 1)) * stats["sd"]
            / math.sqrt(stats["n"]))
    low, high = stats["mean"] - half, stats["mean"] + half
    tost = (f"the {100 * EQUIVALENCE_LEVEL:.0f}% interval [{measure.number(low, '', False)}, "
            f"{measure.number(high, '', False)}]{measure.unit}")
    if -margin < low and high < margin:
        word = "reproduced" if not differs else "consistent"
        return f"{word}{_why([f'{tost} inside {band}', *differs, seed])}, {shown}"
    if stats["low"] > margin or stats["high"] < -margin:
        word = "reversed" if not differs else "against the claim"
        return f"{word}{_why([f'the 95% interval beyond {band}', *differs, seed])}, {shown}"
    return f"inconclusive{_why([f'{tost} not inside {band}', *differs, seed])}, {shown}"


def one_model(favours: bool, why: str, seed_size: bool = False) -> str:
    """The verdict of a claim measured on one trained model (no interval over trainings):
    "inconclusive" whichever way the measure leans (``favours``: toward the claim), saying which
    way; ``why`` names the measure."""
    differs = "" if seed_size else f"; {NOT_SEED_SIZE}"
    lean = "leans toward the claim" if favours else "leans away from the claim"
    return f"inconclusive (one trained model; {why}: {lean}{differs})"


def against(verdicts: dict[str, str]) -> str:
    """One verdict per compared model as the table's text: "vs lstm: ...; vs chrono: ..."."""
    return "; ".join(f"vs {other}: {v}" for other, v in verdicts.items())


def described(stats: dict, unit: str = "", scale: float = 1.0, digits: int = 1) -> str:
    """``stats`` (an ``interval``) as text: "+2.1 [0.4, 3.8] points (95% t interval, 3 seeds)", or
    "+2.1 points (one seed)"."""
    mean = f"{scale * stats['mean']:+.{digits}f}"
    if stats["n"] < 2:
        return f"{mean}{unit} (one seed)"
    low, high = (f"{scale * stats[k]:.{digits}f}" for k in ("low", "high"))
    return f"{mean} [{low}, {high}]{unit} ({100 * stats['level']:.0f}% t interval, {stats['n']} seeds)"


def curves_figure(curves: dict[str, list[tuple]], xlabel: str, ylabel: str, title: str, labels=None):
    """One axes with a line per model (colour from COLOURS): ``curves`` model -> [(x, y), ...];
    ``labels`` model -> legend text (default: the model's name)."""
    from tsrnn.lab import plot

    fig = plot.new_figure((6, 4))
    axes = fig.subplots()
    for model, points in curves.items():
        axes.plot([p[0] for p in points], [p[1] for p in points], "o-", color=COLOURS[model],
                  label=(labels or {}).get(model, model))
    axes.set(xlabel=xlabel, ylabel=ylabel, title=title)
    axes.legend()
    return fig


def _jobs(values) -> int | str:
    """The runs' ``--jobs``: the one value, or "1 to 2" when calls ran them differently."""
    values = sorted(set(values))
    return values[0] if len(values) == 1 else f"{values[0]} to {values[-1]}"


def report(name: str, args, row: dict, results: dict, figure, dirs: dict[str, Path], started: float,
           detail: str | None = None, declared: str | None = None) -> Path:
    """Write ``OUT/NAME.json`` and the figure ``OUT/NAME.png``; return the JSON's path.

    row: the table's columns for this claim: "claim", "seed" (the seed's number), "ours",
    "verdict" (``verdict`` of the claim's comparison), "model" (model size), "epochs", "seeds",
    and "gpu" (the seed's full-size command); ``detail``: a markdown table shown below the
    claims' table (every number behind "ours", beside the seed's); ``declared``: the record's
    protocol (``protocols/DECLARED.toml``, default NAME), which the record holds; added
    here: the command, "train_min" (the training times of the runs in ``dirs`` added up, each
    run once however many names it has there; ``jobs`` of them ran at once, "1 to 2" where calls
    differed), "wall_min" (this call, training skipped for runs that had finished), machine and
    date. results: every number behind ``ours`` and the figure.
    """
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from tsrnn.lab import plot

    plot.save(figure, out / f"{name}.png")
    declared = declared or name
    runs = set(dirs.values())
    record = {"name": name, "size": args.size, **row, "command": command_line(args),
              **({"protocol": protocol(declared)} if (PROTOCOLS / f"{declared}.toml").exists() else {}),
              "train_min": round(sum(finished(d)["wall_s"] for d in runs) / 60, 1),
              "jobs": _jobs(finished(d)["jobs"] for d in runs),
              "wall_min": round((time.time() - started) / 60, 1), "machine": machine(),
              "date": datetime.date.today().isoformat(), "results": results, **({"detail": detail} if detail else {})}
    path = out / f"{name}.json"
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # two workers finishing at once write whole files
    temporary.write_text(json.dumps(strict_json(record), indent=1) + "\n")
    os.replace(temporary, path)
    print(f"[{name}] {row['ours']}\n[{name}] wrote {path} and {out / f'{name}.png'}", flush=True)
    return path
