"""Forget-gate maps (seed 000 A.3, Figure 5; Mahto's thesis Figures 4-5).

Over one test window, each layer's units are sorted by their mean forget gate on that window
(increasing from top to bottom) and averaged in groups of 10 consecutive sorted units, giving a
(steps x groups) map. As the authors' ``forget_gate_estimation``, the window is the test stream's
window starting at token 350 (the sixth window of 70, the state carried from the start). For
a layer with fixed timescales each group also gets its mean assigned timescale.
"""
from __future__ import annotations

import numpy as np
import torch

from tsrnn.lab import plot
from tsrnn.lab.analysis.passes import assigned_timescales, recurrent_layers, stream_states, traces_of

GROUP = 10
SAMPLE = 5  # the authors' window: `if i != 350: continue` with windows of 70


def forget_gate_map(gates: torch.Tensor, group: int = GROUP, assigned: torch.Tensor | None = None) -> dict:
    """Sort the units of ``gates`` (T, H) by mean over T (ascending, stable), average groups of
    ``group`` consecutive sorted units (the last group may be smaller): {"map": (T, G) list,
    "order": the sorted unit indices, "group_mean": each group's mean gate, and "group_assigned":
    each group's mean assigned timescale if ``assigned`` (H,) is given}."""
    gates = gates.detach().double().cpu()
    order = torch.argsort(gates.mean(0), stable=True)
    groups = order.split(group)
    grouped = torch.stack([gates[:, idx].mean(1) for idx in groups], 1)
    out = {"map": grouped.tolist(), "order": order.tolist(), "group": group,
           "group_mean": grouped.mean(0).tolist(), "group_assigned": None}
    if assigned is not None:
        out["group_assigned"] = [float(assigned[idx].mean()) for idx in groups]
    return out


@torch.no_grad()
def lm_forget_maps(model, windows, device, vocab=None, sample: int = SAMPLE, group: int = GROUP) -> dict:
    """``forget_gate_map`` of every layer of an AWD LM on test window ``sample`` (the state carried
    from the stream's start), with the window's words if ``vocab`` is given."""
    sample = min(sample, len(windows) - 1)
    for i, x, state in stream_states(model, windows, device):
        if i == sample:
            traces = traces_of(model, lambda: model(x, state))
            break
    layers = []
    for k, ((module, j), trace) in enumerate(zip(recurrent_layers(model), traces)):
        entry = forget_gate_map(trace["f"][:, 0], group, assigned_timescales(module, j))
        layers.append({"layer": k + 1, **entry})
    words = None if vocab is None else [vocab.itos[int(t)] for t in windows[sample][:, 0]]
    return {"window": sample, "first_token": sample * windows[0].shape[0], "words": words, "layers": layers}


def figure(summary: dict, path) -> None:
    """One heat map per layer: steps (words) across, sorted unit groups down (increasing mean
    forget gate), with each group's mean assigned timescale on the right for fixed layers."""
    layers = summary["layers"]
    fig = plot.new_figure(figsize=(11.0, 3.2 * len(layers)))
    words = summary["words"]
    for ax, entry in zip(fig.subplots(len(layers), 1, squeeze=False)[:, 0], layers):
        grid = np.asarray(entry["map"]).T  # (groups, steps)
        image = ax.imshow(grid, aspect="auto", vmin=0.0, vmax=1.0, cmap="viridis", interpolation="nearest")
        bar = fig.colorbar(image, ax=ax)
        bar.set_label("forget gate f")
        ax.set_ylabel(f"unit groups of {entry['group']}\n(sorted by mean f)")
        ax.set_title(f"layer {entry['layer']}: forget gates over test window {summary['window']} "
                     f"(tokens {summary['first_token']}..)")
        if words is not None and len(words) <= 80:
            ax.set_xticks(range(len(words)), words, rotation=90, fontsize="x-small")
        else:
            ax.set_xlabel("step in the window")
        if entry["group_assigned"] is not None:
            right = ax.secondary_yaxis("right")
            ticks = np.linspace(0, len(entry["group_assigned"]) - 1, min(8, len(entry["group_assigned"]))).round()
            right.set_yticks(ticks, [f"{entry['group_assigned'][int(t)]:.3g}" for t in ticks], fontsize="x-small")
            right.set_ylabel("assigned T")
    plot.save(fig, path)
