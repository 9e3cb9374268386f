"""Routing of information by timescale (seed 000 §3.2.4 and A.7, Figures 3 and 11-12; Mahto's
thesis §4.2.2).

The units of one layer (the papers: layer 2, 1,150 units) are sorted by timescale and cut into
chunks (the papers: 23 chunks of 50). Each chunk in turn is ablated by zeroing its units'
output where the next layer reads it (as the authors' ``model_ablation.py``, which zeroes those
inputs of layer 3; the layer's own recurrence still sees them), the test set is scored with the
evaluation protocol (``tsrnn eval``: one stream, batch size 1), and the perplexity with the chunk
ablated is divided by the perplexity without, overall and per word-frequency bin.

Sorting: by assigned timescale for a fixed layer, else by estimated timescale, longest first
(the authors' unit order, Inverse-Gamma quantiles from the largest). A layer narrower than
1,150 units gets chunks of round(50 H / 1150) units (at least 1): as many chunks as the authors'.
"""
from __future__ import annotations

import numpy as np
import torch

from tsrnn.lab import plot
from tsrnn.lab.analysis.passes import WINDOW, authors_share, progress
from tsrnn.lab.training import evaluation

AUTHORS_CHUNK = 50


def chunk_size(hidden: int) -> int:
    """Units per chunk for a layer of ``hidden`` units: the authors' 50 of 1,150 units, scaled."""
    return authors_share(AUTHORS_CHUNK, hidden)


def bin_perplexities(nll: torch.Tensor, bins: torch.Tensor) -> list[float]:
    """Perplexity over all targets, then per frequency bin (``evaluation.BINS``; NaN if empty)."""
    nll = nll.double()
    out = [float(nll.mean().exp())]
    for b in range(len(evaluation.BINS)):
        chosen = nll[bins == b]
        out.append(float(chosen.mean().exp()) if chosen.numel() else float("nan"))
    return out


class ZeroedOutput:
    """Context manager: ``module``'s output (T, B, H) has ``units`` zeroed for whatever reads it;
    with ``h_n`` also the final h of the state it returns (what a classifier reads), else that
    state is untouched (the state an LM carries to its next window)."""

    def __init__(self, module, units: torch.Tensor, h_n: bool = False):
        self.module, self.units, self.h_n = module, units, h_n

    def _hook(self, module, args, result):
        out, state = result
        out = out.clone()
        out[..., self.units.to(out.device)] = 0
        if self.h_n:
            h = state[0].clone()
            h[..., self.units.to(h.device)] = 0
            state = (h, *state[1:])
        return out, state

    def __enter__(self):
        self.handle = self.module.register_forward_hook(self._hook)
        return self

    def __exit__(self, *exc):
        self.handle.remove()


@torch.no_grad()
def routing(task, model, layer: int, order: torch.Tensor, timescales: torch.Tensor, chunk: int | None = None,
            split: str = "test", quiet: bool = True, windows: int | None = None) -> dict:
    """Perplexity ratios (ablated / intact) per chunk of ``layer`` (1-based) and frequency bin.

    order: the layer's units sorted as they are chunked; timescales: (H,) the timescales the
    chunks report (their mean). ``task`` is the lm task of the checkpoint, ``model`` its AWD LM.
    windows: score only the split's first ``windows`` windows of ``passes.WINDOW`` tokens (the
    text the other analyses read with ``--windows``), else all of it.
    """
    module = model.rnns[layer - 1]
    chunk = chunk or chunk_size(module.hidden_size)
    tokens = None if windows is None else windows * WINDOW + 1
    nll, targets = task.token_nll(model, split, tokens=tokens)
    bins = evaluation.target_bins(targets, evaluation.word_counts(task.corpus))
    intact = bin_perplexities(nll, bins)
    rows = []
    for units in progress(order.split(chunk), "routing", quiet):
        with ZeroedOutput(module, units):
            ablated = bin_perplexities(task.token_nll(model, split, tokens=tokens)[0], bins)
        rows.append({"units": units.tolist(), "timescale": float(timescales[units].mean()),
                     "ppl": ablated, "ratio": [a / b for a, b in zip(ablated, intact)]})
    return {"layer": layer, "chunk": chunk, "split": split, "windows": windows, "bins": ["all", *evaluation.BINS],
            "targets": [int(targets.numel()), *[int((bins == b).sum()) for b in range(len(evaluation.BINS))]],
            "intact_ppl": intact, "chunks": rows}


def figure(summary: dict, path) -> None:
    """Figure 3 of seed 000: perplexity ratio per frequency bin against the ablated chunk's mean
    timescale (the chunks in sorted order along x)."""
    fig = plot.new_figure(figsize=(8.0, 4.6))
    ax = fig.add_subplot()
    chunks = summary["chunks"]
    x = np.arange(len(chunks))
    for i, (name, colour) in enumerate(zip(summary["bins"], ["k", *plot.colours(len(summary["bins"]) - 1)])):
        if summary["targets"][i] == 0:
            continue
        ax.plot(x, [c["ratio"][i] for c in chunks], marker="o", markersize=3, color=colour,
                linewidth=2.0 if name == "all" else 1.2, label=f"{name} ({summary['targets'][i]} targets)")
    ax.axhline(1.0, color="0.5", linewidth=0.8, linestyle="--")
    step = max(1, len(chunks) // 12)
    ax.set_xticks(x[::step], [f"{c['timescale']:.3g}" for c in chunks[::step]], rotation=45, fontsize="small")
    ax.set_xlabel(f"mean timescale of the ablated chunk of {summary['chunk']} units (steps; longest first)")
    ax.set_ylabel("perplexity ablated / intact")
    ax.set_title(f"routing: layer {summary['layer']} chunks ablated, {summary['split']} perplexity by word frequency")
    ax.legend(fontsize="x-small", title="frequency bin")
    plot.save(fig, path)
