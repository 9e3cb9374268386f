"""What the analyses share: a model's recurrent layers, the test stream in the authors' windows,
and passes that reduce per-step traces as they go.

A "layer" here is one (module, k) pair of a tsrnn recurrent module (``tsrnn.LSTM``,
``tsrnn.PowerLawLSTM``) in registration order: the AWD LM's three single-layer modules are its
layers 0, 1, 2 (the papers' layers 1, 2, 3).
"""
from __future__ import annotations

import contextlib
import functools

import torch
from tqdm import tqdm

from tsrnn.lab import data as datasets
from tsrnn.modules import LSTM
from tsrnn.modules.stacked import StackedRNN

WINDOW = 70  # seed 000's test sequence length ("During inference, all test sequences were length 70")
AUTHORS_UNITS = 1150  # the width of layer 2 in seed 000's LM, which its chunks and groups divide


def authors_share(units: int, hidden: int) -> int:
    """``units`` of the authors' 1,150-unit layer scaled to a layer of ``hidden`` units (at least 1),
    so that a narrower layer is cut into as many chunks or groups as theirs."""
    return max(1, round(units * hidden / AUTHORS_UNITS))


def _modules(model) -> list[StackedRNN]:
    modules = [m for m in model.modules() if isinstance(m, StackedRNN)]
    if not modules:
        raise ValueError(f"{type(model).__name__} has no tsrnn recurrent layer (tsrnn.LSTM or tsrnn.PowerLawLSTM)")
    return modules


def recurrent_layers(model) -> list[tuple[StackedRNN, int]]:
    """Every (module, layer index) of the tsrnn recurrent modules inside ``model``, in order."""
    return [(m, k) for m in _modules(model) for k in range(m.num_layers)]


def assigned_timescales(module: StackedRNN, layer: int) -> torch.Tensor | None:
    """The fixed timescales of an MTS layer (float64 CPU), or None for a layer that learns its biases."""
    if not isinstance(module, LSTM):
        return None
    ts = module.timescales(layer)
    return None if ts is None else ts.detach().double().cpu()


def progress(items, desc: str, quiet: bool):
    """``items`` with a tqdm bar on stderr unless ``quiet``."""
    return items if quiet else tqdm(items, desc=desc, leave=False, dynamic_ncols=True)


def lm_windows(ids: torch.Tensor, length: int = WINDOW, limit: int | None = None) -> list[torch.Tensor]:
    """A split read as one stream (batch size 1) cut into windows x of ``length`` tokens, (length, 1)
    each, as seed 000's authors read their test set (the last window may be shorter); the first
    ``limit`` windows if given."""
    stream = datasets.batchify(ids, 1)
    windows = [x for x, _ in datasets.bptt_batches(stream, length)]
    return windows if limit is None else windows[:limit]


@torch.no_grad()
def stream_states(model, windows, device, desc: str = "test stream", quiet: bool = True):
    """Yield (index, x, state before x) for each window, then run the LM on it to carry the state:
    the authors' stateful pass over the test stream. ``model`` is an ``AWDLSTMLM`` in eval mode."""
    state = None
    for i, x in enumerate(progress(windows, desc, quiet)):
        x = x.to(device)
        yield i, x, state
        state = model(x, state)[1]


@contextlib.contextmanager
def watching(model, callback):
    """Within the block, ``callback(i, traces)`` after every forward of the i-th recurrent module of
    ``model`` (``StackedRNN.watch``); yields the modules."""
    modules = _modules(model)
    with contextlib.ExitStack() as stack:
        for i, module in enumerate(modules):
            stack.enter_context(module.watch(functools.partial(callback, i)))
        yield modules


@torch.no_grad()
def mean_forget_gates(model, run) -> list[torch.Tensor]:
    """Mean forget gate of every unit over every step and row that ``run()`` feeds ``model``: one
    float64 (H,) tensor per layer (``recurrent_layers`` order), summed in float64 as the pass goes."""
    sums: dict = {}
    counts: dict = {}

    def accumulate(i, traces):
        for k, layer in enumerate(traces):
            f = layer["f"].detach().double()
            sums[i, k] = sums.get((i, k), 0) + f.sum((0, 1)).cpu()
            counts[i, k] = counts.get((i, k), 0) + f.shape[0] * f.shape[1]

    with watching(model, accumulate) as modules:
        run()
    keys = [(i, k) for i, m in enumerate(modules) for k in range(m.num_layers)]
    missing = [key for key in keys if key not in sums]
    if missing:
        raise ValueError(f"the pass ran no data through {len(missing)} recurrent layer(s)")
    return [sums[key] / counts[key] for key in keys]


@torch.no_grad()
def traces_of(model, call) -> list[dict]:
    """The per-step traces of every layer during one ``call()`` (each layer's last forward)."""
    seen: dict = {}
    with watching(model, seen.__setitem__):
        call()
    return [layer for i in sorted(seen) for layer in seen[i]]
