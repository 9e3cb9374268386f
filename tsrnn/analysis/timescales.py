"""Unit timescales of a trained model (seed 000 Eq. 3, Figures 1 and 4; Mahto's thesis Figures 1 and 6).

Each unit's timescale is estimated from its mean forget gate over the test set (S6),

    T_est = -1 / log(mean_{t,b} f_t),

read as seed 000's authors read it (``util/estimate_timescale.py``): the test split as one stream
(batch size 1) in windows of 70 tokens, the state carried from window to window. Per layer (and
for all layers pooled, as in Figure 1) the Inverse-Gamma shape α and a narrow Gaussian's mean μ
are fitted by the Kolmogorov-Smirnov statistic (``tsrnn.timescales``); for layers with fixed
(assigned) timescales the assigned and estimated ones are compared (Figure 4), by the Pearson
correlation of their logarithms and the Spearman rank correlation. Layers are numbered from 1,
as in the papers.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from tsrnn import plot
from tsrnn import timescales as ts
from tsrnn.analysis.passes import assigned_timescales, mean_forget_gates, recurrent_layers, stream_states


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
