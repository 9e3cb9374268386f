"""``tsrnn analyze CHECKPOINT --out DIR``: the analyses that fit the checkpoint's task, as PNGs and
one ``summary.json`` holding every number the figures show.

- lm (every cell): timescales and their fits (+ assigned vs estimated for fixed layers), the
  forget-gate map, word ablation per layer and per unit group of layer 2, routing by timescale
  chunk of layer 2; for a pLSTM LM also the learned p.
- copy: unit ablation (random order; for the pLSTM also later-reset units first), and for the
  pLSTM the reset traces, later-reset units and learned p.
- mlp-lm with a TILT or TILT-Buffer context: the receptive fields.
- imdb (every cell): test accuracy by review length (seed 002 Figure 4); with the pLSTM also the learned p.
- freq, pixels with the pLSTM: the learned p.
- ``--ablate-units`` (freq, pixels, imdb; any cell): seed 002 §5.3's unit ablation (Figure 5),
  random order only (later-reset units are defined by the copy task's delay; the copy analysis
  runs the ablation by default, so the option is refused there).
- ``--fixed-p P1,P2,...`` (any pLSTM checkpoint): the task's metrics on ``--split`` with every
  unit's p held at each value, after the trained p: a post-hoc sensitivity of the trained model,
  not seed 002's Figure A.3, which trains one model per fixed p (``tsrnn train --fixed-p P``).
- ``--compare-p B.pt`` (any pLSTM checkpoint): seed 002 §5.2's t-test of this checkpoint's p against B's.
- ``--compare-timescales B.pt`` (lm): seed 000 Figure 1, this LM's timescale distribution and fits
  beside B's (the paper: an LM trained on PTB beside the same model trained on Markov-PTB).

``--only NAMES`` runs those analyses alone (the names are ``summary.json``'s keys); ``--windows N``
has every lm analysis read the split's first N windows of 70 tokens. ``summary.json`` is rewritten
as each analysis finishes ("finished": false until the last has), so a long run's finished
analyses are on disk before it ends.

Analyses that need an MTS layer's fixed timescales (assigned vs estimated) are skipped for an
LSTM or pLSTM LM, with the reason in the analysis's "skipped" entry and on the terminal.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Iterator

import torch

from tsrnn.lab import plot
from tsrnn.lab.analysis import by_length, forget_map, passes, plstm, receptive_fields, routing, timescales, word_ablation
from tsrnn.modules import PowerLawLSTM
from tsrnn.lab.training import checkpoint
from tsrnn.lab.loading import restore

def _lm(task, model, args, out: Path, wanted) -> Iterator[tuple[str, dict]]:
    """timescales, forget_gates, word_ablation and routing, those ``wanted`` (the unit timescales
    that sort layer 2 for the last two are estimated either way, not recorded unless wanted)."""
    device = next(model.parameters()).device
    windows = passes.lm_windows(task.split(args.split), passes.WINDOW, args.windows)
    layers = None
    if any(wanted(name) for name in ("timescales", "word_ablation", "routing", "timescale_comparison")):
        layers = timescales.lm_layer_timescales(model, windows, device, args.quiet)
    if wanted("timescales") or wanted("timescale_comparison"):
        entry = timescales.summarize(layers)
        if wanted("timescales"):
            timescales.figure(entry, out / "timescales.png")
            figures = ["timescales.png"]
            if timescales.assigned_figure(entry, out / "assigned_vs_estimated.png"):
                figures.append("assigned_vs_estimated.png")
            else:
                entry["skipped"] = {"assigned_vs_estimated.png": NO_ASSIGNED}
            entry["figures"] = figures
        yield "timescales", entry

    if wanted("forget_gates"):
        entry = forget_map.lm_forget_maps(model, windows, device, task.vocab)
        forget_map.figure(entry, out / "forget_gates.png")
        yield "forget_gates", {**entry, "figures": ["forget_gates.png"]}

    if not (wanted("word_ablation") or wanted("routing")):
        return
    chosen = layers[1] if len(layers) > 1 else layers[0]  # the papers' layer 2
    unit_T = chosen.assigned if chosen.assigned is not None else chosen.estimated
    order = torch.argsort(unit_T, descending=True, stable=True)
    if wanted("word_ablation"):
        groups = [{"layer": chosen.layer, "units": idx, "timescale": float(unit_T[idx].mean())}
                  for idx in order.split(word_ablation.group_size(order.numel()))]
        entry = word_ablation.word_ablation(model, windows, device, groups, args.quiet)
        word_ablation.figure(entry, out / "word_ablation.png")
        yield "word_ablation", {**entry, "figures": ["word_ablation.png"]}
    if wanted("routing"):
        entry = routing.routing(task, model, chosen.layer, order, unit_T, split=args.split, quiet=args.quiet,
                                windows=args.windows)
        entry["sorted_by"] = "assigned" if chosen.assigned is not None else "estimated"
        routing.figure(entry, out / "routing.png")
        yield "routing", {**entry, "figures": ["routing.png"]}


NO_ASSIGNED = ("no layer has fixed (assigned) timescales, so there is nothing to compare the estimates with "
               "(an MTS LM's layers 1-2 have them: train --cell mts)")


def _compare_timescales(task, first: dict, args, out: Path, device) -> dict:
    """Seed 000 Figure 1: this LM's timescales (``first``, its summary) beside those of the LM
    ``args.compare_timescales``, each estimated on its own corpus's ``args.split`` stream."""
    other_task, other = restore(args.compare_timescales, args.compare_data, device)
    windows = passes.lm_windows(other_task.split(args.split), passes.WINDOW, args.windows)
    second = timescales.summarize(timescales.lm_layer_timescales(other, windows, device, args.quiet))
    labels = [task.corpus.name, other_task.corpus.name]
    if labels[0] == labels[1]:
        labels = [str(args.checkpoint), str(args.compare_timescales)]
    summary = timescales.comparison([
        {"label": labels[0], "checkpoint": str(args.checkpoint), "corpus": task.corpus.name, "summary": first},
        {"label": labels[1], "checkpoint": str(args.compare_timescales), "corpus": other_task.corpus.name,
         "summary": second}])
    timescales.comparison_figure(summary, out / "timescale_comparison.png")
    for m in summary["models"]:
        gamma, gauss = m["inverse_gamma"], m["gaussian"]
        print(f"timescales of {m['label']}: Inverse Gamma α = {gamma['alpha']:.2f} (KS {gamma['ks']:.3f}), "
              f"Gaussian μ = {gauss['mu']:.2f} (KS {gauss['ks']:.3f}), best fit {m['best_fit']}")
    return {**summary, "figures": ["timescale_comparison.png"]}


def _learned_p(model, out: Path, later_reset=None) -> dict:
    layers = plstm.learned_p(model)
    plstm.p_figure(layers, out / "learned_p.png", later_reset)
    return {"layers": layers, "figures": ["learned_p.png"]}


def _copy(task, model, args, out: Path, wanted) -> Iterator[tuple[str, dict]]:
    summary = plstm.copy_analysis(task, model, args.quiet)
    plstm.ablation_figure(summary["ablation"], out / "unit_ablation.png", f"copy task T = {summary['delay']}")
    summary["figures"] = ["unit_ablation.png"]
    if "later_reset" in summary:
        plstm.reset_figure(summary, out / "reset_traces.png")
        summary["figures"].append("reset_traces.png")
    yield "copy", summary


def _tilt(task, model, args, out: Path, wanted) -> Iterator[tuple[str, dict]]:
    if not receptive_fields.is_tilt(model.context):
        raise ValueError(f"{args.checkpoint} is a Buffer-MLP: its context is a plain shift register with no "
                         "receptive fields to analyze (train --context tilt or tilt-buffer)")
    summary = receptive_fields.receptive_fields(model.context)
    receptive_fields.figure(model.context, summary, out / "receptive_fields.png")
    yield "receptive_fields", {**summary, "figures": ["receptive_fields.png"]}


def _imdb(task, model, args, out: Path, wanted) -> Iterator[tuple[str, dict]]:
    summary = by_length.imdb_by_length(task, model, args.split, args.length_bins)
    by_length.figure({task.args.cell: summary}, out / "accuracy_by_length.png")
    print("accuracy by review length: " + ", ".join(f"{b['label']} {b['accuracy']:.3f} (n {b['count']})"
                                                    for b in summary["bins"]))
    yield "by_length", {**summary, "figures": ["accuracy_by_length.png"]}


def _unit_ablation(task, model, args, out: Path) -> dict:
    """Seed 002 §5.3 on a single-layer classifier: random order from the checkpoint's --seed,
    chance 1 / classes."""
    summary = plstm.unit_ablation(task, model, task.args.seed, 1.0 / model.n_classes, quiet=args.quiet)
    plstm.ablation_figure(summary, out / "unit_ablation.png", f"{task.name} task")
    return {**summary, "figures": ["unit_ablation.png"]}


def _p_sensitivity(task, model, args, out: Path) -> dict:
    summary = plstm.p_sensitivity(task, model, args.held_p, args.split, args.quiet)
    plstm.p_sensitivity_figure(summary, out / "p_sensitivity.png", f"{task.name} task")
    for row in summary["rows"]:
        held = f"trained p (mean {row['mean_p']:.3f})" if row["p"] == "trained" else f"p = {row['p']:g}"
        print(f"p sensitivity ({args.split}), {held}: "
              + ", ".join(f"{name} {value:.4g}" for name, value in row["metrics"].items()))
    return {**summary, "figures": ["p_sensitivity.png"]}


def _p_ttest(summary: dict, out: Path) -> dict:
    plstm.compare_figure(summary, out / "p_compare.png")
    for e in summary["layers"]:
        print(f"p t-test ({e['test']}), layer {e['layer']}: mean {e['mean_a']:.3f} (sd {e['sd_a']:.3f}, n {e['n_a']}) "
              f"vs {e['mean_b']:.3f} (sd {e['sd_b']:.3f}, n {e['n_b']}), t = {e['t']:.3f}, df = {e['df']:g}, "
              f"p = {e['p_value']:.3g}, Cohen's d = {e['cohens_d']:.3f}")
    return {**summary, "figures": ["p_compare.png"]}


RUNNERS = {"lm": _lm, "copy": _copy, "mlp-lm": _tilt, "imdb": _imdb}
P_ONLY = ("freq", "pixels")
ABLATABLE = ("freq", "pixels", "imdb")  # single-layer recurrent classifiers: --ablate-units
# The analyses of each task's runner, in the order they run (--only chooses among them).
OWN = {"lm": ("timescales", "forget_gates", "word_ablation", "routing"), "copy": ("copy",),
       "mlp-lm": ("receptive_fields",), "imdb": ("by_length",)}


def available(name: str, has_p: bool, args) -> list[str]:
    """The analyses ``tsrnn analyze`` runs on a ``name`` checkpoint with these flags, in order."""
    return [*OWN.get(name, ()), *(["unit_ablation"] if args.ablate_units else []),
            *(["learned_p"] if has_p else []), *(["p_sensitivity"] if args.held_p else []),
            *(["p_ttest"] if args.compare_p else []), *(["timescale_comparison"] if args.compare_timescales else [])]


class Summary:
    """``summary.json``, rewritten (atomically) as each analysis finishes: ``finished`` is false
    until the last one has; ``analyses`` holds those done so far."""

    def __init__(self, path: Path, head: dict):
        self.path, self.data = path, {**head, "finished": False, "analyses": {}}
        self._write()

    def add(self, name: str, entry: dict) -> None:
        self.data["analyses"][name] = entry
        self._write()

    def finish(self) -> None:
        self.data["finished"] = True
        self._write()

    def _write(self) -> None:
        part = self.path.with_name(self.path.name + ".part")
        part.write_text(json.dumps(strict_json(self.data), indent=1) + "\n")
        os.replace(part, self.path)


def strict_json(value):
    """``value`` with NaN and inf as null (strict JSON), through dicts, lists and tuples."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(v) for v in value]
    return value


def run(args) -> int:
    try:
        plot.require_matplotlib()
    except ImportError as exc:
        raise ValueError(str(exc)) from None
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    state = checkpoint.load(args.checkpoint)
    name = state["task"]
    cell = state["config"].get("cell")
    has_p = cell == "plstm"
    if args.ablate_units and name not in ABLATABLE:
        raise ValueError(f"--ablate-units silences units of a single-layer recurrent classifier ({', '.join(ABLATABLE)} "
                         f"checkpoints; a copy checkpoint's copy analysis ablates units already); {args.checkpoint} is "
                         f"a {name!r} checkpoint")
    if name not in RUNNERS and not (name in P_ONLY and (has_p or args.ablate_units)):
        raise ValueError(f"tsrnn analyze has no analysis for a {name!r} checkpoint with cell {cell!r}: it analyzes lm, "
                         f"copy, imdb and mlp-lm (TILT) checkpoints, the pLSTM's learned p of {', '.join(P_ONLY)}, "
                         f"and with --ablate-units {', '.join(P_ONLY)} checkpoints of every cell")
    if args.held_p is not None:
        args.held_p = plstm.parse_p_values(args.held_p)
        if not has_p:
            raise ValueError(f"--fixed-p holds the pLSTM's decay exponent p; {args.checkpoint} is a {name!r} "
                             f"checkpoint with cell {cell!r}, which has no p")
    if args.length_bins is not None and name != "imdb":
        raise ValueError(f"--length-bins applies to imdb checkpoints; {args.checkpoint} is a {name!r} checkpoint")
    args.length_bins = by_length.parse_boundaries(args.length_bins) if args.length_bins else by_length.BOUNDARIES
    compared = plstm.compare_p(args.checkpoint, args.compare_p) if args.compare_p else None
    if args.compare_data is not None and args.compare_timescales is None:
        raise ValueError("--compare-data names the corpus of --compare-timescales, which is not given")
    if args.compare_timescales is not None:
        other = checkpoint.load(checkpoint.check_file(args.compare_timescales))["task"]
        if name != "lm" or other != "lm":
            raise ValueError(f"--compare-timescales compares two lm checkpoints; {args.checkpoint} is a {name!r} "
                             f"and {args.compare_timescales} a {other!r} checkpoint")
    names = available(name, has_p, args)
    if args.windows is not None and name != "lm":
        raise ValueError(f"--windows picks the test windows of an lm checkpoint's analyses; {args.checkpoint} is a "
                         f"{name!r} checkpoint, whose analyses read no windows")
    chosen = names if args.only is None else [part.strip() for part in args.only.split(",")]
    unknown = [part for part in chosen if part not in names]
    if unknown or not chosen:
        raise ValueError(f"--only {args.only}: {', '.join(unknown) or 'no name'} is not an analysis of this "
                         f"checkpoint; it has {', '.join(names)}")
    wanted = set(chosen).__contains__
    task, model = restore(args.checkpoint, args.data, device)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary = Summary(out / "summary.json", {
        "checkpoint": str(args.checkpoint), "task": name, "config": state["config"], "split": args.split,
        "windows": args.windows, "only": args.only and chosen, "tsrnn_version": state.get("tsrnn_version")})
    analyses = summary.data["analyses"]
    timescale_summary = None
    for analysis, entry in (RUNNERS[name](task, model, args, out, wanted) if name in RUNNERS else ()):
        if analysis == "timescales":
            timescale_summary = entry
        if wanted(analysis):
            summary.add(analysis, entry)
    if wanted("unit_ablation"):
        summary.add("unit_ablation", _unit_ablation(task, model, args, out))
    if wanted("learned_p"):
        summary.add("learned_p", _learned_p(model, out, analyses.get("copy", {}).get("later_reset")))
    if wanted("p_sensitivity"):
        summary.add("p_sensitivity", _p_sensitivity(task, model, args, out))
    if wanted("p_ttest"):
        summary.add("p_ttest", _p_ttest(compared, out))
    if wanted("timescale_comparison"):
        summary.add("timescale_comparison", _compare_timescales(task, timescale_summary, args, out, device))
    summary.finish()
    figures = [f for entry in analyses.values() for f in entry.get("figures", [])]
    print(f"tsrnn analyze: {', '.join(analyses)} of {args.checkpoint}")
    print(f"wrote {', '.join(figures)} and summary.json in {out}")
    for entry in analyses.values():
        for figure, why in entry.get("skipped", {}).items():
            print(f"skipped {figure}: {why}")
    return 0
