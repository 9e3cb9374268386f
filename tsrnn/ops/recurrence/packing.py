"""Variable-length batches: torch's packed layout, and the map between it and a padded batch.

A batch of B sequences with lengths L_b <= T, padded to (T, B, ...), runs in the packed layout of
``torch.nn.utils.rnn.PackedSequence``: the rows sorted by length, longest first (stably), and step
t holding only the rows still running, ``batch_sizes[t] = #{b: L_b > t}`` of them, stacked over
t into (N, ...) with N = sum_b L_b. ``Packing`` holds one batch's map, from ``lengths`` (a row
of length 0 runs no step: zero output, its initial state as final) or from a PackedSequence.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from tsrnn import _validation as check


@dataclass(frozen=True, eq=False)
class Packing:
    """The packed layout of B rows padded to ``steps`` steps.

    ``batch_sizes`` (T',) int64 on the CPU, T' the longest length (>= 1 unless every length is 0);
    ``order`` (B,) on the rows' device: packed row k is row ``order[k]`` of the padded batch (the
    rows by length, longest first; None for the identity); ``live`` rows have at least one step:
    the first ``live`` of ``order``."""

    batch_sizes: torch.Tensor
    order: torch.Tensor | None
    steps: int
    batch: int
    device: torch.device

    def __post_init__(self):
        if torch.device(self.device).type == "cuda" and check.capturing():
            raise RuntimeError("tsrnn: a variable-length batch (lengths= or a PackedSequence) cannot be captured in "
                               "a CUDA graph: its step sizes are host data that each call reads; capture a padded "
                               "batch without lengths")

    @classmethod
    def from_lengths(cls, lengths: torch.Tensor, steps: int) -> Packing:
        """The layout of rows of ``lengths`` (B,) int64 on the CPU, each in [0, steps]."""
        _not_exporting()
        order = torch.sort(lengths, descending=True, stable=True).indices
        longest = int(lengths.max()) if lengths.numel() else 0
        batch_sizes = (lengths.unsqueeze(0) > torch.arange(longest).unsqueeze(1)).sum(1)
        return cls(batch_sizes, order, steps, lengths.shape[0], lengths.device)

    @classmethod
    def in_order(cls, batch_sizes: torch.Tensor, device: torch.device) -> Packing:
        """The layout of ``batch_sizes`` with its rows already sorted (a PackedSequence's data)."""
        _not_exporting()
        return cls(batch_sizes, None, batch_sizes.shape[0], int(batch_sizes[0]), device)

    def to(self, device: torch.device) -> Packing:
        """The same layout, indexing tensors on ``device``."""
        order = None if self.order is None else self.order.to(device)
        return Packing(self.batch_sizes, order, self.steps, self.batch, torch.device(device))

    @property
    def live(self) -> int:
        """The rows with at least one step."""
        return int(self.batch_sizes[0]) if self.batch_sizes.numel() else 0

    @property
    def rows(self) -> int:
        """N, the packed rows."""
        return int(self.batch_sizes.sum())

    @functools.cached_property
    def lengths(self) -> torch.Tensor:
        """(live,) int64 on the CPU: the steps of each packed row, longest first."""
        return (self.batch_sizes.unsqueeze(0) > torch.arange(self.live).unsqueeze(1)).sum(1)

    @functools.cached_property
    def _first(self) -> torch.Tensor:
        """(T' + 1,) int64 on the CPU: the first packed row of each step, then N."""
        return torch.cat([self.batch_sizes.new_zeros(1), self.batch_sizes.cumsum(0)])

    @functools.cached_property
    def index(self) -> torch.Tensor:
        """(N,) on the device: each packed row's position t * B + b in the padded (T, B) batch."""
        step = torch.repeat_interleave(torch.arange(self.batch_sizes.shape[0]), self.batch_sizes)
        rank = torch.arange(self.rows) - self._first[step]
        row = rank if self.order is None else self.order.cpu()[rank]
        return (step * self.batch + row).to(self.device)

    @functools.cached_property
    def last(self) -> torch.Tensor:
        """(live,) on the device: the packed row of each packed row's last step."""
        return (self._first[self.lengths - 1] + torch.arange(self.live)).to(self.device)

    @functools.cached_property
    def mask(self) -> torch.Tensor:
        """(T, B) bool on the device: the steps each row runs, in the padded layout."""
        return torch.zeros(self.steps * self.batch, dtype=torch.bool, device=self.device).index_fill_(
            0, self.index, True).view(self.steps, self.batch)

    @functools.cached_property
    def reversed(self) -> torch.Tensor:
        """(N,) on the device: (t, b) -> (L_b - 1 - t, b); ``data.index_select(0, reversed)`` runs
        every sequence backwards within its own length (an involution)."""
        step = torch.repeat_interleave(torch.arange(self.batch_sizes.shape[0]), self.batch_sizes)
        rank = torch.arange(self.rows) - self._first[step]
        return (self._first[self.lengths[rank] - 1 - step] + rank).to(self.device)

    def pack(self, padded: torch.Tensor) -> torch.Tensor:
        """(T, B, ...) -> (N, ...): the packed rows."""
        return padded.reshape(self.steps * self.batch, *padded.shape[2:]).index_select(0, self.index)

    def unpack(self, data: torch.Tensor) -> torch.Tensor:
        """(N, ...) -> (T, B, ...), zero at the steps past each row's end."""
        out = data.new_zeros(self.steps * self.batch, *data.shape[1:])
        return out.index_copy(0, self.index, data).view(self.steps, self.batch, *data.shape[1:])

    def reorder(self, padded: torch.Tensor) -> torch.Tensor:
        """(T', live, ...) in packed order, zero past the ends (a layer's traces) -> (T, B, ...) per row."""
        inner = Packing.in_order(self.batch_sizes, self.device)
        return self.unpack(inner.pack(padded))

    def sort(self, state: torch.Tensor) -> torch.Tensor:
        """(..., B, H) per row -> (..., live, H) in packed order."""
        if self.order is None:
            return state
        return state.index_select(-2, self.order[:self.live])

    def unsort(self, final: torch.Tensor, initial: torch.Tensor) -> torch.Tensor:
        """(..., live, H) in packed order -> (..., B, H) per row; a row of no step keeps ``initial``."""
        if self.order is None:
            return final
        if self.live < self.batch:
            final = torch.cat([final, initial.index_select(-2, self.order[self.live:]).to(final.dtype)], -2)
        return final.index_select(-2, torch.argsort(self.order))


def _not_exporting() -> None:
    """A clear error where torch.export (or ONNX export) traces a variable-length batch."""
    if torch.compiler.is_exporting():
        raise ValueError("tsrnn: torch.export and ONNX export take full-length sequences: lengths= and "
                         "PackedSequence inputs are not exported (their layout is computed from the lengths' "
                         "values); export the padded call and mask the outputs past each row's end")
