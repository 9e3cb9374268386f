"""Word ablation (seed 000 A.4, Figures 6-8; Mahto's thesis §3.5 and Figures 7-9).

How long does a word stay in each layer's cell state? For a test window of L = 70 words ending at
step t, the word w_{t-k} is ablated and the cell state at t is compared with the unablated one:

    Δc_i(k) = ||c'_i(t)_k - c_i(t)||_2 / ||c_i(t)||_2,     k = 0 .. L - 1,

averaged over the test windows (the authors: all 1,177 PTB windows of 70), per layer i and per
group of units of one layer sorted by timescale (the thesis: 100-unit groups of layer 2).

Choices where the papers are silent: a word is ablated by zeroing its embedding (the input of
the first layer at that step); each window starts from the state the unablated stream carried
to it (the same for the ablated and unablated copies), so only the ablation differs; windows
shorter than L (the stream's last) are skipped. All L ablations of a window run as one batch of
L + 1 rows, step by step, so that every step's cell state is available (``ablated_cell_states``).
"""
from __future__ import annotations

import numpy as np
import torch

from tsrnn.lab import plot
from tsrnn.lab.analysis.passes import authors_share, stream_states

AUTHORS_GROUP = 100  # the thesis' groups: 100 of layer 2's 1,150 units


def group_size(hidden: int) -> int:
    """Units per group for a layer of ``hidden`` units: the thesis' 100 of 1,150 units, scaled."""
    return authors_share(AUTHORS_GROUP, hidden)


def _rows(state, batch: int):
    """A batch-1 LM state repeated over ``batch`` rows (None stays None)."""
    if state is None:
        return None
    return [tuple(s.expand(s.shape[0], batch, s.shape[2]).contiguous() for s in layer) for layer in state]


@torch.no_grad()
def ablated_cell_states(model, x: torch.Tensor, state=None) -> list[torch.Tensor]:
    """Cell states of every layer of an AWD LM reading window x (L, 1), with each word ablated in turn.

    Returns one (L, L + 1, H) tensor per layer: entry [t, j] is c_t after step t when the word at
    step j had its embedding zeroed (j < L), and j = L is the unablated run. ``state`` is the LM
    state before the window (batch 1; None: zeros).
    """
    steps = x.shape[0]
    tokens = x.reshape(steps, 1).expand(steps, steps + 1)
    state = _rows(state, steps + 1)
    current = {"t": 0}

    def zero_word(module, args):
        inputs = args[0].clone()
        inputs[:, current["t"]] = 0  # row t has word t ablated (row L never)
        return (inputs, *args[1:])

    handle = model.rnns[0].register_forward_pre_hook(zero_word)
    cells = []
    try:
        for t in range(steps):
            current["t"] = t
            state = model(tokens[t:t + 1], state)[1]
            cells.append([layer[1][0].double() for layer in state])
    finally:
        handle.remove()
    return [torch.stack(per_step) for per_step in zip(*cells)]


def _relative_change(c: torch.Tensor) -> torch.Tensor:
    """Δc(k) for k = 0 .. L-1 from one layer's (L, L + 1, H') cell states: the last step's."""
    last = c[-1]                                   # (L + 1, H'): row j ablated word j, row L none
    change = (last[:-1] - last[-1]).norm(dim=-1) / last[-1].norm()
    return change.flip(0)                          # k = L - 1 - j


@torch.no_grad()
def word_ablation(model, windows, device, groups=None, quiet: bool = True) -> dict:
    """Mean Δc(k) per layer over the full-length test windows (state carried), and per unit group.

    groups: optional list of dicts {"layer": 1-based layer, "units": LongTensor of unit indices,
    "timescale": the group's mean timescale}; each gets its own curve from its units' cell states.
    """
    length = windows[0].shape[0]
    layer_sums, group_sums, count = None, None, 0
    for _, x, state in stream_states(model, windows, device, "word ablation", quiet):
        if x.shape[0] != length:
            continue
        cells = ablated_cell_states(model, x, state)
        per_layer = torch.stack([_relative_change(c) for c in cells])
        layer_sums = per_layer if layer_sums is None else layer_sums + per_layer
        if groups:
            per_group = torch.stack([_relative_change(cells[g["layer"] - 1][..., g["units"].to(x.device)])
                                     for g in groups])
            group_sums = per_group if group_sums is None else group_sums + per_group
        count += 1
    if count == 0:
        raise ValueError(f"the split has no full window of {length} tokens to ablate words in")
    out = {"windows": count, "distance": list(range(length)),
           "layers": [{"layer": k + 1, "change": (s / count).tolist()} for k, s in enumerate(layer_sums)],
           "groups": []}
    for g, s in zip(groups or [], group_sums if groups else []):
        out["groups"].append({"layer": g["layer"], "units": g["units"].tolist(), "timescale": g["timescale"],
                              "change": (s / count).tolist()})
    return out


def figure(summary: dict, path) -> None:
    """Δc(k) against k: one curve per layer (Figure 6), and one per unit group (Figure 7)."""
    panels = 2 if summary["groups"] else 1
    fig = plot.new_figure(figsize=(6.0 * panels, 4.2))
    axes = fig.subplots(1, panels, squeeze=False)[0]
    k = np.asarray(summary["distance"])
    for entry in summary["layers"]:
        axes[0].plot(k, entry["change"], label=f"layer {entry['layer']}")
    axes[0].set_title(f"cell-state change after ablating a word ({summary['windows']} windows)")
    if summary["groups"]:
        colours = plot.colours(len(summary["groups"]))
        for colour, entry in zip(colours, summary["groups"]):
            axes[1].plot(k, entry["change"], color=colour,
                         label=f"{len(entry['units'])} units, mean T {entry['timescale']:.3g}")
        axes[1].set_title(f"layer {summary['groups'][0]['layer']}: unit groups sorted by timescale")
    for ax in axes:
        ax.set_yscale("log")
        ax.set_xlabel("distance k of the ablated word (steps before t)")
        ax.set_ylabel("Δc(k) = ||c' - c|| / ||c||")
        ax.legend(fontsize="x-small")
    plot.save(fig, path)

