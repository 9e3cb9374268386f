"""The pLSTM's own analyses (seed 002 §5.2-5.3, Figure 5 and Figure A.4).

- **Learned p**: the distribution of the decay exponents p of every pLSTM layer (A.4 B, D).
- **p t-test** (§5.2): "p learned in the T = 200 condition is significantly larger than p learned
  in the T = 500 condition (μ_T200 = 0.41, μ_T500 = 0.19, t = 6.9, p < 0.001, Cohen's d = 0.87)":
  an unpaired two-sample t-test between the units of two trained models, layer by layer (the seed
  does not say Student or Welch; with 128 units each its t = 6.9 fits d √(n/2) = 0.87 · 8, which
  either gives at equal n; Student's pooled form is tsrnn's default).
- **Reset traces**: on a sample of copy-task sequences, the reset gate r_t and the age
  a_t = t - k_t of every unit (the paper draws the reference time k_t; S9). A unit is
  *later-reset* when it keeps its reference time through the delay: its age at the last blank
  before the signal, averaged over the sample, is at least half the delay (the paper describes
  these units, "do not reset k_t until the reproduction of target elements starts", without a
  number; r is a sigmoid, never exactly 0, so the age of a unit that barely resets still grows
  more slowly than t: half the delay is tsrnn's threshold).
- **Unit ablation** (§5.3, Figure 5): test accuracy as 5 units at a time are ablated, up to 100
  (of 128 in the seed), in a random order (``torch.randperm`` seeded with the checkpoint's
  ``--seed``, recorded as ``seed``) and, on the copy task, with the later-reset units first. An
  ablated unit is silenced everywhere: its columns of W_hh are zeroed (no recurrent input from
  it) and its output and final h are zeroed for the readout, so h_j reaches nothing; this works
  for every cell, in the copy model and in a single-layer classifier (freq, pixels, imdb: the
  seed runs it on the copy task only).
- **p sensitivity**: the test metrics of a trained pLSTM with every unit's p held at each of
  several values, after its own p. This probes a trained model after the fact; it is not seed
  002's Figure A.3 (§5.1), which trains a model at each fixed p and compares how they converge
  (``tsrnn train --fixed-p P``, one run per value).
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import torch

from tsrnn.lab import plot
from tsrnn.lab.analysis.passes import progress, traces_of
from tsrnn.lab.analysis.routing import ZeroedOutput
from tsrnn.lab.data.copy import copy_task
from tsrnn.modules import PowerLawLSTM
from tsrnn.lab.training import checkpoint

N_COPY = 10  # symbols per copy sequence (tsrnn.lab.data.copy.copy_task's default, seed 002)
STEP, LIMIT = 5, 100  # seed 002 §5.3: "We randomly sampled 100 of the 128 units and ablated 5 units at a time"


def learned_p(model) -> list[dict]:
    """The decay exponents of every pLSTM layer: values and summary statistics."""
    out = []
    modules = [m for m in model.modules() if isinstance(m, PowerLawLSTM)]
    for module in modules:
        for k in range(module.num_layers):
            p = module.p(k).detach().double().cpu()
            out.append({"layer": len(out) + 1, "p": p.tolist(), "mean": float(p.mean()), "std": float(p.std()),
                        "quartiles": torch.quantile(p, torch.tensor([0.25, 0.5, 0.75], dtype=p.dtype)).tolist(),
                        "fixed": module.fixed_p is not None})
    return out


def parse_p_values(text: str) -> tuple[float, ...]:
    """``"0.25,0.5,1.5"`` -> (0.25, 0.5, 1.5): finite decay exponents p > 0 (``tsrnn analyze
    --fixed-p``); ValueError naming the text."""
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        values = ()
    if not values or not all(math.isfinite(v) and v > 0 for v in values):
        raise ValueError(f"--fixed-p expects finite decay exponents p > 0 separated by commas (e.g. 0.25,0.5,1,1.5), "
                         f"got {text!r}")
    return values


class HeldP:
    """Context manager: every unit's p in every layer (and direction) of each ``PowerLawLSTM`` in
    ``model`` held at ``value``, whether the module learned p or was trained with a fixed one (a
    p >= 1, which σ(p_logit) cannot reach, too). No weight is written: the module's ``_p``, which
    every forward and ``p()`` read, is shadowed by one returning ``value`` in its p's dtype and
    device, and removed on exit, so the module reads its own p again."""

    def __init__(self, model, value: float):
        self.modules = [m for m in model.modules() if isinstance(m, PowerLawLSTM)]
        if not self.modules:
            raise ValueError("the model has no pLSTM layer: no p to hold")
        self.value = float(value)

    def __enter__(self):
        for module in self.modules:
            module._p = lambda layer, suffix="", own=module._p: torch.full_like(own(layer, suffix), self.value)
        return self

    def __exit__(self, *exc):
        for module in self.modules:
            del module._p


@torch.no_grad()
def p_sensitivity(task, model, values, split: str = "test", quiet: bool = True) -> dict:
    """The metrics of ``task.evaluate(model, split)`` (accuracy and loss, or whatever the task
    reports) of a trained pLSTM with its own p, the first row ("p": "trained": learned, or the
    fixed p it was trained with), then with every unit's p held at each of ``values``
    (``HeldP``); ``mean_p`` is the mean p over every unit of every layer. A post-hoc sensitivity
    of one trained model to its decay exponent, not seed 002's Figure A.3 (§5.1), which trains a
    model at each fixed p and compares their convergence (``tsrnn train --fixed-p P``)."""
    own = torch.cat([torch.tensor(layer["p"], dtype=torch.float64) for layer in learned_p(model)])
    rows = [{"p": "trained", "mean_p": float(own.mean()), "metrics": task.evaluate(model, split)}]
    for value in progress(values, "p sensitivity", quiet):
        with HeldP(model, value):
            rows.append({"p": value, "mean_p": value, "metrics": task.evaluate(model, split)})
    return {"split": split, "rows": rows}


def p_sensitivity_figure(summary: dict, path, title: str) -> None:
    """One panel per metric of ``p_sensitivity``: the metric against the p every unit is held at,
    the trained model's result dashed and starred at its mean p."""
    trained, held = summary["rows"][0], summary["rows"][1:]
    names = list(trained["metrics"])
    fig = plot.new_figure(figsize=(4.0 * len(names), 3.6))
    for ax, name in zip(fig.subplots(1, len(names), squeeze=False)[0], names):
        ax.plot([row["p"] for row in held], [row["metrics"][name] for row in held], marker="o", markersize=3,
                label="every unit's p held")
        ax.axhline(trained["metrics"][name], color="0.5", linestyle="--", linewidth=0.8)
        ax.plot([trained["mean_p"]], [trained["metrics"][name]], marker="*", markersize=10, color="tab:red",
                linestyle="none", label=f"trained p (mean {trained['mean_p']:.3f})")
        ax.set_xlabel("decay exponent p")
        ax.set_ylabel(f"{summary['split']} {name}")
        ax.legend(fontsize="x-small")
    fig.suptitle(f"p sensitivity of a trained pLSTM, {title}", fontsize="medium")
    plot.save(fig, path)


def p_ttest(a, b, equal_var: bool = True) -> dict:
    """Two-sided unpaired two-sample t-test of the decay exponents ``a`` against ``b`` (seed 002
    §5.2), scipy.stats.ttest_ind. Student's (``equal_var``, the default):

        t = (mean_a - mean_b) / (s √(1/n_a + 1/n_b)),  s² = ((n_a - 1) s_a² + (n_b - 1) s_b²) / (n_a + n_b - 2),

    df = n_a + n_b - 2; Welch's: t = (mean_a - mean_b) / √(s_a²/n_a + s_b²/n_b), Welch-Satterthwaite
    df. Cohen's d = (mean_a - mean_b) / s (pooled s either way); s_a, s_b sample sds (n - 1)."""
    import scipy.stats  # here, not at import time: it costs ~0.7 s

    a, b = (np.asarray(torch.as_tensor(v, dtype=torch.float64).cpu()).ravel() for v in (a, b))
    if min(a.size, b.size) < 2:
        raise ValueError(f"a t-test needs at least 2 values per sample, got {a.size} and {b.size}")
    sd_a, sd_b = float(a.std(ddof=1)), float(b.std(ddof=1))
    if sd_a == 0 and sd_b == 0:
        raise ValueError(f"both samples of p are constant ({a[0]:g} and {b[0]:g}; p fixed?): no t-test")
    result = scipy.stats.ttest_ind(a, b, equal_var=equal_var)
    n_a, n_b = a.size, b.size
    pooled = math.sqrt(((n_a - 1) * sd_a ** 2 + (n_b - 1) * sd_b ** 2) / (n_a + n_b - 2))
    return {"test": "Student" if equal_var else "Welch", "n_a": n_a, "n_b": n_b, "mean_a": float(a.mean()),
            "mean_b": float(b.mean()), "sd_a": sd_a, "sd_b": sd_b, "t": float(result.statistic),
            "df": float(result.df), "p_value": float(result.pvalue),
            "cohens_d": (float(a.mean()) - float(b.mean())) / pooled}


_P_KEY = re.compile(r"(?:^|\.)p(?:_logit)?_l\d+$")


def checkpoint_p(path) -> list[torch.Tensor]:
    """The decay exponents p (H,) float64 of every pLSTM layer in a checkpoint, read from its weights
    (no data needed), in ``learned_p``'s order; ValueError if it has none."""
    weights = checkpoint.load(path)["model"]
    layers = [torch.sigmoid(v).double() if "p_logit_l" in k else v.double()
              for k, v in weights.items() if _P_KEY.search(k)]
    if not layers:
        raise ValueError(f"{path} has no pLSTM layer: no learned p to compare")
    return layers


def compare_p(path_a, path_b, equal_var: bool = True) -> dict:
    """``p_ttest`` of two pLSTM checkpoints' p, layer by layer (seed 002 §5.2: T = 200 vs T = 500)."""
    a, b = checkpoint_p(path_a), checkpoint_p(path_b)
    if len(a) != len(b):
        raise ValueError(f"{path_a} has {len(a)} pLSTM layers and {path_b} {len(b)}: the p t-test pairs layers")
    return {"a": str(path_a), "b": str(path_b),
            "layers": [{"layer": k + 1, "p_a": pa.tolist(), "p_b": pb.tolist(), **p_ttest(pa, pb, equal_var)}
                       for k, (pa, pb) in enumerate(zip(a, b))]}


def compare_figure(summary: dict, path) -> None:
    """Histograms of the two checkpoints' p per layer, with the t-test in each title."""
    layers = summary["layers"]
    names = [f"{Path(summary[key]).parent.name}/{Path(summary[key]).name}" for key in ("a", "b")]
    fig = plot.new_figure(figsize=(5.0 * len(layers), 3.8))
    for ax, entry in zip(fig.subplots(1, len(layers), squeeze=False)[0], layers):
        values = [np.asarray(entry["p_a"]), np.asarray(entry["p_b"])]
        bins = np.linspace(min(0.0, *(v.min() for v in values)), max(1.0, *(v.max() for v in values)), 21)
        for v, name, key, colour in zip(values, names, ("a", "b"), ("tab:blue", "tab:orange")):
            ax.hist(v, bins=bins, color=colour, alpha=0.5, label=f"{name}: mean {entry['mean_' + key]:.3f}")
        ax.set_xlabel("decay exponent p")
        ax.set_ylabel("units")
        ax.set_title(f"layer {entry['layer']}: t({entry['df']:g}) = {entry['t']:.2f}, p = {entry['p_value']:.2g}",
                     fontsize="small")
        ax.legend(fontsize="x-small")
    plot.save(fig, path)


def copy_sample(task):
    """A batch of test copy sequences at the trained delay ``task.args.delay`` (fixed even for a
    variable-delay model), drawn from the task's test seed: x, y (T + 20, batch)."""
    g = torch.Generator().manual_seed(10_001 + task.args.seed)  # CopyTask.evaluate's test generator
    return copy_task(task.args.batch_size, task.args.delay, n_copy=N_COPY, generator=g)


@torch.no_grad()
def reset_traces(model, x: torch.Tensor) -> dict:
    """r and a (T, B, H) of the copy model's recurrent layer on x (T, B) category ids."""
    traces = traces_of(model, lambda: model(x))
    return {"r": traces[0]["r"].double().cpu(), "a": traces[0]["a"].double().cpu()}


def later_reset_units(ages: torch.Tensor, delay: int, n_copy: int = N_COPY) -> torch.Tensor:
    """Units whose mean age over the batch at the last blank before the signal (step
    n_copy + delay - 1, 0-based) is at least delay / 2: a bool (H,) mask."""
    return ages[n_copy + delay - 1].mean(0) >= delay / 2


class AblatedUnits:
    """Context manager: ``units`` of a single-layer recurrent module silenced (W_hh columns, output
    and h_n zeroed); the weights are restored on exit."""

    def __init__(self, module, units: torch.Tensor):
        if module.num_layers != 1:
            raise ValueError("unit ablation needs a single-layer recurrent module")
        self.module, self.units = module, units
        self.output = ZeroedOutput(module, units, h_n=True)

    def __enter__(self):
        w = self.module.weight_hh_l0
        self.saved = w.detach().clone()
        with torch.no_grad():
            w[:, self.units.to(w.device)] = 0
        self.output.__enter__()
        return self

    def __exit__(self, *exc):
        self.output.__exit__(*exc)
        with torch.no_grad():
            self.module.weight_hh_l0.copy_(self.saved)


@torch.no_grad()
def unit_ablation(task, model, seed: int, chance: float, later: torch.Tensor | None = None, step: int = STEP,
                  limit: int = LIMIT, quiet: bool = True) -> dict:
    """Test accuracy (``task.evaluate(model, "test")["accuracy"]``) of a model whose recurrent layer
    ``model.rnn`` has one layer, with its first 0, step, 2 step, ... (up to ``limit``) units
    ablated in each order: "random" (``torch.randperm`` from ``seed``) and, given the bool (H,)
    mask ``later``, "later-reset first" (those units, then the others in the random order).
    ``chance`` is the accuracy of a uniform guess, recorded for the figure."""
    module = model.rnn
    random = torch.randperm(module.hidden_size, generator=torch.Generator().manual_seed(seed))
    orders = {"random": random}
    if later is not None:
        orders["later-reset first"] = torch.cat([later.nonzero()[:, 0], random[~later[random]]])
    counts = list(range(0, min(limit, module.hidden_size) + 1, step))
    curves = {}
    for name, order in orders.items():
        accuracy = []
        for n in progress(counts, f"unit ablation ({name})", quiet):
            with AblatedUnits(module, order[:n]):
                accuracy.append(task.evaluate(model, "test")["accuracy"])
        curves[name] = {"order": order.tolist(), "accuracy": accuracy}
    return {"ablated": counts, "orders": curves, "chance": chance, "seed": seed}


def copy_analysis(task, model, quiet: bool = True) -> dict:
    """Reset traces, later-reset units (pLSTM) and unit ablation curves of a copy-task checkpoint."""
    model.eval()
    device = next(model.parameters()).device
    x, _ = copy_sample(task)
    out = {"delay": task.args.delay, "sample": x.shape[1]}
    later = None
    if isinstance(model.rnn, PowerLawLSTM):
        traces = reset_traces(model, x.to(device))
        later = later_reset_units(traces["a"], task.args.delay)
        p = model.rnn.p(0).detach().double().cpu()
        out.update({"later_reset": later.nonzero()[:, 0].tolist(), "later_reset_share": float(later.double().mean()),
                    "p_later_reset_mean": float(p[later].mean()) if later.any() else None,
                    "p_other_mean": float(p[~later].mean()) if (~later).any() else None,
                    "reference_time": (torch.arange(1, x.shape[0] + 1, dtype=torch.float64)[:, None]
                                       - traces["a"][:, 0]).tolist(),
                    "mean_reset": traces["r"].mean(1).tolist()})
    out["ablation"] = unit_ablation(task, model, task.args.seed, 1.0 / model.n_symbols, later, quiet=quiet)
    return out


def p_figure(layers: list[dict], path, later_reset: list | None = None) -> None:
    """Histogram of the learned p of each pLSTM layer (seed 002 Figure A.4 B/D), later-reset
    units marked."""
    fig = plot.new_figure(figsize=(5.0 * len(layers), 3.8))
    for ax, entry in zip(fig.subplots(1, len(layers), squeeze=False)[0], layers):
        p = np.asarray(entry["p"])
        bins = np.linspace(min(0.0, p.min()), max(1.0, p.max()), 21)
        ax.hist(p, bins=bins, color="0.6", label=f"all units ({p.size})")
        if later_reset:
            ax.hist(p[later_reset], bins=bins, color="tab:orange", label=f"later-reset ({len(later_reset)})")
        ax.axvline(entry["mean"], color="k", linestyle="--", linewidth=0.8, label=f"mean {entry['mean']:.3f}")
        ax.set_xlabel("decay exponent p")
        ax.set_ylabel("units")
        ax.set_title(f"pLSTM layer {entry['layer']}: learned p" + (" (fixed)" if entry["fixed"] else ""))
        ax.legend(fontsize="x-small")
    plot.save(fig, path)


def reset_figure(summary: dict, path) -> None:
    """Reference time k_t = t - a_t of every unit on the first sample sequence (seed 002 Figure
    A.4 A/C), later-reset units in orange, the signal marked."""
    k = np.asarray(summary["reference_time"])  # (T, H)
    t = np.arange(1, k.shape[0] + 1)
    later = set(summary["later_reset"])
    fig = plot.new_figure(figsize=(7.5, 4.5))
    ax = fig.add_subplot()
    for j in range(k.shape[1]):
        ax.plot(t, k[:, j], color="tab:orange" if j in later else "0.7", linewidth=1.0 if j in later else 0.6,
                zorder=2 if j in later else 1)
    ax.plot([], [], color="0.7", label=f"other units ({k.shape[1] - len(later)})")
    ax.plot([], [], color="tab:orange", label=f"later-reset units ({len(later)})")
    signal = N_COPY + summary["delay"] + 1
    ax.axvline(signal, color="k", linestyle="--", linewidth=0.8, label=f"signal (t = {signal})")
    ax.set_xlabel("time step t")
    ax.set_ylabel("reference time k_t = t - a_t")
    ax.set_title(f"pLSTM reset behaviour on a copy sequence (T = {summary['delay']})")
    ax.legend(fontsize="x-small")
    plot.save(fig, path)


def ablation_figure(ablation: dict, path, title: str) -> None:
    """Seed 002 Figure 5: test accuracy against the number of ablated units, per order
    (``unit_ablation``'s result)."""
    fig = plot.new_figure(figsize=(6.5, 4.2))
    ax = fig.add_subplot()
    for name, curve in ablation["orders"].items():
        ax.plot(ablation["ablated"], curve["accuracy"], marker="o", markersize=3, label=f"{name} order")
    ax.axhline(ablation["chance"], color="0.5", linestyle="--", linewidth=0.8,
               label=f"chance ({ablation['chance']:.3g})")
    ax.set_xlabel("ablated units")
    ax.set_ylabel("test accuracy")
    ax.set_ylim(0, 1)
    ax.set_title(f"unit ablation, {title} (random order: seed {ablation['seed']})")
    ax.legend(fontsize="x-small")
    plot.save(fig, path)
