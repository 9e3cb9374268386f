"""A layer call as two records: what the layer is (``Layer``) and what runs through it (``Inputs``).
Every path's runner takes ``run(path, layer, inputs, traces)`` (tsrnn/ops/recurrence/paths.py)."""
from __future__ import annotations

from typing import NamedTuple

from torch import Tensor

from tsrnn.ops.recurrence.cells import Cell
from tsrnn.ops.recurrence.packing import Packing


class Layer(NamedTuple):
    """One layer (one direction) of a cell, immutable.

    w_ih (G*H, I), w_hh (G*H, H) (or (G*H, P) with w_hr), w_hr (P, H) the LSTM's projection or None;
    ``bias``: the one vector (G*H,) z adds, or None (no bias, or the sum of ``torch_bias``);
    ``torch_bias``: the pair (b_ih, b_hh) torch's LSTM kernel adds as it is (a module's own tensors,
    views of its flat cuDNN buffer where it has one), or None; ``params`` the cell's per-unit
    parameters (H,) each and ``constants`` its floats, in the cell's order."""

    cell: Cell
    w_ih: Tensor
    w_hh: Tensor
    bias: Tensor | None = None
    torch_bias: tuple[Tensor, Tensor] | None = None
    w_hr: Tensor | None = None
    params: tuple[Tensor, ...] = ()
    constants: tuple[float, ...] = ()

    def added_bias(self) -> Tensor | None:
        """The bias as one vector: ``bias``, else the sum of ``torch_bias`` (None without either)."""
        if self.bias is not None or self.torch_bias is None:
            return self.bias
        return self.torch_bias[0] + self.torch_bias[1]

    @property
    def has_bias(self) -> bool:
        return self.bias is not None or self.torch_bias is not None


class Inputs(NamedTuple):
    """What runs through a layer: x (T, B, I), or packed (N, I) with ``packing`` (a ``Packing`` of
    rows sorted by length); h0 and each of ``states`` (1, B, ·), a module's row of its stacked
    states, as the final states come back; ``steps`` the cell's step input (T, B) (packed (N,)) or
    None."""

    x: Tensor
    h0: Tensor
    states: tuple[Tensor, ...]
    steps: Tensor | None = None
    packing: Packing | None = None
