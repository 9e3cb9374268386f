"""Unit timescales of a trained model (seed 000 Eq. 3, Figures 1 and 4; Mahto's thesis Figures 1 and 6).

Each unit's timescale is estimated from its mean forget gate over the test set (S6),

    T_est = -1 / log(mean_{t,b} f_t),

read as seed 000's authors read it (``util/estimate_timescale.py``): the test split as one stream
(batch size 1) in windows of 70 tokens, the state carried from window to window. Per layer (and
for all layers pooled, as in Figure 1) the Inverse-Gamma shape α and a narrow Gaussian's mean μ
are fitted by the Kolmogorov-Smirnov statistic (``tsrnn.memory.timescales``); for layers with fixed
(assigned) timescales the assigned and estimated ones are compared (Figure 4), by the Pearson
correlation of their logarithms and the Spearman rank correlation. Layers are numbered from 1,
as in the papers.

Figure 1 of seed 000 compares two LMs: "we trained an LSTM language model on a natural language
corpus (PTB), and then trained the same model on a Markovian dataset generated with the bigram
statistics of PTB (Markov-PTB)" (§3.2.1; ``tsrnn.lab.data.markov``); the Inverse Gamma should fit the
first, a narrow Gaussian (σ = 0.1, "an approximate delta function") the second. ``comparison``
and ``comparison_figure`` put the pooled timescales of such LMs, each estimated on its own
corpus's test stream, and their KS curves side by side. Mahto's thesis Figure 1 is the same
distribution for the baseline LSTM LM alone ("most having timescale less than 20").
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from tsrnn.lab import plot
from tsrnn.memory import timescales as ts
from tsrnn.lab.analysis.passes import assigned_timescales, mean_forget_gates, recurrent_layers, stream_states


@dataclass
class LayerTimescales:
    """One layer's mean forget gates, estimated timescales (S6) and assigned ones (None: learned)."""
    layer: int                       # 1-based, as in the papers
    mean_forget: torch.Tensor        # (H,) float64
    estimated: torch.Tensor          # (H,) float64, +inf for a mean gate of exactly 1
    assigned: torch.Tensor | None    # (H,) float64 or None


def layer_timescales(model, run) -> list[LayerTimescales]:
    """Estimated (and assigned) timescales of every layer from the forget gates of the pass ``run()``."""
    means = mean_forget_gates(model, run)
    return [LayerTimescales(k + 1, mean, ts.estimate_timescales(mean[None]), assigned_timescales(module, j))
            for k, ((module, j), mean) in enumerate(zip(recurrent_layers(model), means))]


def lm_layer_timescales(model, windows, device, quiet: bool = True) -> list[LayerTimescales]:
    """``layer_timescales`` of an AWD LM over test windows (``passes.lm_windows``) with the state
    carried: the authors' protocol."""
    def run():
        for _ in stream_states(model, windows, device, "timescales", quiet):
            pass
    return layer_timescales(model, run)


def _log_correlations(assigned: torch.Tensor, estimated: torch.Tensor) -> dict:
    """Pearson correlation of log T (finite pairs) and Spearman rank correlation (all pairs)."""
    import scipy.stats

    a, e = assigned.numpy(), estimated.numpy()
    finite = np.isfinite(a) & np.isfinite(e)
    pearson = float(np.corrcoef(np.log(a[finite]), np.log(e[finite]))[0, 1]) if finite.sum() > 1 else math.nan
    return {"pearson_log": pearson, "spearman": float(scipy.stats.spearmanr(a, e).statistic)}


def _fits(values: torch.Tensor, sigma: float) -> dict:
    """Both KS fits of a set of timescales, with their whole curves (the figure draws them)."""
    gamma = ts.fit_inverse_gamma(values)
    gauss = ts.fit_narrow_gaussian(values, sigma=sigma)
    finite = values[torch.isfinite(values)]
    return {
        "units": values.numel(),
        "infinite": int((~torch.isfinite(values)).sum()),
        "median": float(values.median()),
        "max_finite": float(finite.max()),
        "fraction_below_10": float((values < 10).double().mean()),
        "fraction_below_20": float((values < 20).double().mean()),
        "inverse_gamma": {"alpha": gamma.alpha, "ks": gamma.statistic,
                          "curve": {"alpha": gamma.alphas.tolist(), "ks": gamma.statistics.tolist()}},
        "gaussian": {"mu": gauss.mu, "sigma": gauss.sigma, "ks": gauss.statistic,
                     "curve": {"mu": gauss.mus.tolist(), "ks": gauss.statistics.tolist()}},
        "best_fit": "inverse-gamma" if gamma.statistic <= gauss.statistic else "gaussian",
    }


def summarize(layers: list[LayerTimescales], sigma: float = 0.1) -> dict:
    """Every number the timescale figures show: per layer and pooled ("all"), the fits, and for
    fixed layers the assigned vs estimated correlations."""
    out = []
    for layer in layers:
        entry = {"layer": layer.layer, **_fits(layer.estimated, sigma), "estimated": layer.estimated.tolist(),
                 "mean_forget": layer.mean_forget.tolist(), "assigned": None}
        if layer.assigned is not None:
            entry["assigned"] = layer.assigned.tolist()
            entry["assigned_vs_estimated"] = _log_correlations(layer.assigned, layer.estimated)
        out.append(entry)
    pooled = torch.cat([layer.estimated for layer in layers])
    return {"protocol": "mean forget gate over the test stream, batch 1, windows of 70 (seed 000 Eq. 3)",
            "layers": out, "all": _fits(pooled, sigma)}


def _log_density(values: np.ndarray, pdf) -> np.ndarray:
    """Density of log10 T when T has density ``pdf``: pdf(T) T ln 10."""
    return pdf(values) * values * math.log(10)


def figure(summary: dict, path) -> None:
    """Figure 1 of seed 000 per layer and pooled: histogram of log10 T_est with the best
    Inverse-Gamma and narrow-Gaussian densities, and the KS statistic against α and μ."""
    import scipy.stats

    rows = [(f"layer {e['layer']}", e) for e in summary["layers"]] + [("all layers", summary["all"])]
    pooled = np.concatenate([np.asarray(e["estimated"]) for e in summary["layers"]])
    fig = plot.new_figure(figsize=(12.0, 2.8 * len(rows)))
    axes = fig.subplots(len(rows), 3, squeeze=False)
    for row, (name, entry) in enumerate(rows):
        values = np.asarray(entry["estimated"]) if "estimated" in entry else pooled
        finite = values[np.isfinite(values)]
        ax = axes[row, 0]
        bins = np.linspace(np.log10(finite.min()), np.log10(finite.max()) + 1e-9, 31)
        counts, _, _ = ax.hist(np.log10(finite), bins=bins, color="0.6", label=f"estimated ({finite.size} units)")
        grid = np.logspace(bins[0], bins[-1], 400)
        scale = finite.size * (bins[1] - bins[0])
        gamma, gauss = entry["inverse_gamma"], entry["gaussian"]
        ax.plot(np.log10(grid), scale * _log_density(grid, scipy.stats.invgamma(gamma["alpha"]).pdf), "b--",
                label=f"Inverse Gamma α = {gamma['alpha']:.2f} (KS {gamma['ks']:.3f})")
        ax.plot(np.log10(grid), scale * _log_density(grid, scipy.stats.norm(gauss["mu"], gauss["sigma"]).pdf),
                "r:", label=f"Gaussian μ = {gauss['mu']:.2f}, σ = {gauss['sigma']:g} (KS {gauss['ks']:.3f})")
        ax.set_ylim(0, 1.3 * counts.max())  # a narrow Gaussian's peak would dwarf the histogram
        ax.set_xlabel("log10 estimated timescale T_est (steps)")
        ax.set_ylabel("units")
        ax.set_title(f"{name}: timescale distribution")
        ax.legend(fontsize="x-small")
        for col, (family, key, symbol) in enumerate((("inverse_gamma", "alpha", "α"), ("gaussian", "mu", "μ")), 1):
            curve = entry[family]["curve"]
            axes[row, col].plot(curve[key], curve["ks"], color="b" if col == 1 else "r")
            axes[row, col].axvline(entry[family][key], color="k", linewidth=0.8, linestyle="--",
                                   label=f"best {symbol} = {entry[family][key]:.2f}")
            axes[row, col].set_xlabel(symbol + (" (Inverse Gamma shape)" if col == 1 else " (Gaussian mean, steps)"))
            axes[row, col].set_ylabel("KS statistic")
            axes[row, col].set_title(f"{name}: fit by KS statistic")
            axes[row, col].legend(fontsize="x-small")
    plot.save(fig, path)


def assigned_figure(summary: dict, path) -> bool:
    """Seed 000 Figure 4: assigned vs estimated timescale of every unit of each fixed layer
    (log-log, with the identity line). False (nothing written) when no layer is fixed."""
    fixed = [e for e in summary["layers"] if e["assigned"] is not None]
    if not fixed:
        return False
    fig = plot.new_figure(figsize=(4.6 * len(fixed), 4.2))
    for ax, entry in zip(fig.subplots(1, len(fixed), squeeze=False)[0], fixed):
        a, e = np.asarray(entry["assigned"]), np.asarray(entry["estimated"])
        keep = np.isfinite(a) & np.isfinite(e)
        ax.loglog(a[keep], e[keep], ".", markersize=3, label="units")
        low, high = min(a[keep].min(), e[keep].min()), max(a[keep].max(), e[keep].max())
        ax.loglog([low, high], [low, high], "k--", linewidth=0.8, label="estimated = assigned")
        corr = entry["assigned_vs_estimated"]
        ax.set_title(f"layer {entry['layer']}: r(log) = {corr['pearson_log']:.3f}, "
                     f"ρ = {corr['spearman']:.3f}", fontsize="medium")
        ax.set_xlabel("assigned timescale (steps)")
        ax.set_ylabel("estimated timescale T_est (steps)")
        ax.legend(fontsize="x-small")
    plot.save(fig, path)
    return True


def comparison(models: list[dict]) -> dict:
    """Seed 000 Figure 1: the pooled timescales of several LMs and their fits. ``models``: one dict
    per LM with "label", "checkpoint", "corpus" and "summary" (its ``summarize``); returns
    {"models": [...]}, each model its label, checkpoint, corpus, pooled ``estimated`` timescales,
    the pooled fits of ``summarize``'s "all" (best α, μ, KS statistics and curves, best_fit) and
    per layer the best α, μ, their KS statistics and best_fit."""
    out = []
    for model in models:
        summary = model["summary"]
        layers = [{"layer": e["layer"], "median": e["median"], "best_fit": e["best_fit"],
                   "inverse_gamma": {k: e["inverse_gamma"][k] for k in ("alpha", "ks")},
                   "gaussian": {k: e["gaussian"][k] for k in ("mu", "sigma", "ks")}} for e in summary["layers"]]
        pooled = [t for e in summary["layers"] for t in e["estimated"]]
        out.append({"label": model["label"], "checkpoint": model["checkpoint"], "corpus": model["corpus"],
                    **summary["all"], "estimated": pooled, "layers": layers})
    return {"protocol": "each LM's units pooled over its layers, T_est on its own corpus's test stream (seed 000 "
                        "Eq. 3, Figure 1)", "models": out}


def comparison_figure(summary: dict, path) -> None:
    """Seed 000 Figure 1: left, each LM's histogram of log10 T_est (all layers) with its best fit
    (Inverse Gamma or narrow Gaussian, whichever has the smaller KS statistic); middle and right,
    the KS statistic against α (Inverse Gamma) and μ (narrow Gaussian) for each LM."""
    import scipy.stats

    models = summary["models"]
    colours = ["tab:blue", "tab:red", *plot.colours(max(0, len(models) - 2))]  # the paper: PTB blue, Markov red
    finite = [np.asarray([t for t in m["estimated"] if t is not None and math.isfinite(t)]) for m in models]
    everything = np.concatenate(finite)
    bins = np.linspace(np.log10(everything.min()), np.log10(everything.max()) + 1e-9, 41)
    grid = np.logspace(bins[0], bins[-1], 400)
    fig = plot.new_figure(figsize=(14.0, 4.2))
    hist, by_alpha, by_mu = fig.subplots(1, 3)
    top = 0.0
    for model, values, colour in zip(models, finite, colours):
        counts, _, _ = hist.hist(np.log10(values), bins=bins, density=True, histtype="step", color=colour,
                                 linewidth=1.5, label=f"{model['label']} ({values.size} units)")
        top = max(top, counts.max())
        gamma, gauss = model["inverse_gamma"], model["gaussian"]
        if model["best_fit"] == "inverse-gamma":
            pdf, text = scipy.stats.invgamma(gamma["alpha"]).pdf, f"Inverse Gamma α = {gamma['alpha']:.2f}"
        else:
            pdf, text = scipy.stats.norm(gauss["mu"], gauss["sigma"]).pdf, f"Gaussian μ = {gauss['mu']:.2f}"
        best = min(gamma["ks"], gauss["ks"])
        hist.plot(np.log10(grid), _log_density(grid, pdf), ":", color=colour, linewidth=2.0,
                  label=f"{model['label']} best fit: {text} (KS {best:.3f})")
        for ax, family, key, symbol in ((by_alpha, "inverse_gamma", "alpha", "α"), (by_mu, "gaussian", "mu", "μ")):
            curve = model[family]["curve"]
            ax.plot(curve[key], curve["ks"], color=colour,
                    label=f"{model['label']}: best {symbol} = {model[family][key]:.2f} (KS {model[family]['ks']:.3f})")
            ax.axvline(model[family][key], color=colour, linewidth=0.8, linestyle="--")
    hist.set_ylim(0, 1.3 * top)  # a narrow Gaussian's peak would dwarf the histograms
    hist.set_xlabel("log10 estimated timescale T_est (steps)")
    hist.set_ylabel("density of log10 T_est")
    hist.set_title("timescale distributions (all layers)")
    hist.legend(fontsize="x-small")
    for ax, name in ((by_alpha, "α (Inverse Gamma shape)"), (by_mu, "μ (narrow Gaussian mean, steps)")):
        ax.set_xlabel(name)
        ax.set_ylabel("KS statistic (lower is better)")
        ax.set_title("fit by KS statistic")
        ax.legend(fontsize="x-small")
    plot.save(fig, path)
