"""The stacked modules' input and output layout: the input's checks, its time-major view (or
packed rows with a ``Packing``), the initial states checked and stacked as (L * D, B, ·), the
output in the caller's layout, and a sequence read backwards within its length (a bidirectional
layer's reverse direction). ``InputLayout`` is a base of ``tsrnn.modules.stacked.StackedRNN``."""
from __future__ import annotations

from typing import Callable, Optional, Sequence, overload

import torch
from torch.nn.utils.rnn import PackedSequence

from tsrnn import _validation as check
from tsrnn import precision
from tsrnn.ops.recurrence.cells import Cell
from tsrnn.ops.recurrence.packing import Packing

# An initial state: None (zeros), or one (L * D, B, H) tensor per state of the cell ((h0, c0);
# the pLSTM's (h0, c0, a0)).
State = Optional[Sequence[torch.Tensor]]

_NUMBER_WORDS = {2: "two", 3: "three"}  # a cell's count of states, as torch.nn.LSTM's messages write it


class InputLayout:
    """The layout methods of ``StackedRNN`` (which sets the attributes below)."""

    mode: str
    input_size: int
    hidden_size: int
    num_layers: int
    batch_first: bool
    cell: Cell
    _directions: tuple[str, ...]
    _out_size: int
    _member: Callable[[str], torch.Tensor]

    def _check_input(self, x: torch.Tensor, packed: bool, low: torch.dtype | None) -> None:
        """The input's rank (2 or 3, a PackedSequence's data 2), the parameters' dtype (as autocast
        to ``low`` casts them), features, at least one step and row, and device: the refusals of
        torch.nn.LSTM, with its messages first."""
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"input must be a torch.Tensor, got {type(x).__name__}")
        if packed and x.dim() != 2:
            raise check.ShapeError(f"input must have 2 dimensions, got {x.dim()}; a PackedSequence's data is "
                                   f"(steps summed over rows, input_size), got shape {tuple(x.shape)}")
        if x.dim() not in (2, 3):
            raise check.ShapeError(f"LSTM: Expected input to be 2D or 3D, got {x.dim()}D instead; input has shape "
                                   f"{tuple(x.shape)}")
        weight = self._member("weight_ih_l0")
        expected = weight.dtype if low is None else precision.cast(low, weight)[0].dtype
        if x.dtype != expected:
            detail = ("; the input must be floating-point" if not x.is_floating_point() else
                      "" if low is None else f"; under autocast to {low} the weights run in {expected}")
            raise check.DtypeError(f"RNN input dtype ({x.dtype}) does not match weight dtype ({expected}). Convert "
                                   f"input: input.to({expected}), or convert model: model.to({x.dtype}){detail}")
        if x.shape[-1] != self.input_size:
            raise check.ShapeError(f"input.size(-1) must be equal to input_size. Expected {self.input_size}, got "
                                   f"{x.shape[-1]}; input has shape {tuple(x.shape)}")
        if x.shape[1 if self.batch_first and x.dim() == 3 else 0] == 0:  # no rows (B = 0) is an empty batch
            raise check.ShapeError(f"Expected sequence length to be larger than 0 in RNN; input has shape "
                                   f"{tuple(x.shape)}")
        if x.device != weight.device:
            raise check.DeviceError(f"Input and parameter tensors are not at the same device, found input tensor at "
                                    f"{x.device} and parameter tensor at {weight.device}; move the input, or the "
                                    "module with .to(device)")

    def _time_major(self, input, x, lengths) -> tuple[torch.Tensor, bool, Packing | None]:
        """(x, unbatched, packing): ``input``'s checked data ``x`` as (T, B, I), or as packed rows
        (N, I) with the ``Packing`` of a PackedSequence or of a padded input's ``lengths``;
        unbatched: it came as (T, I)."""
        if isinstance(input, PackedSequence):
            if lengths is not None:
                raise ValueError("lengths= is for a padded input; a PackedSequence carries its own lengths")
            return x, False, Packing(input.batch_sizes, input.sorted_indices, input.batch_sizes.shape[0],
                                     int(input.batch_sizes[0]), x.device)
        if x.dim() == 2:
            if lengths is not None:
                raise ValueError("lengths= needs a batched input (T, B, I) or (B, T, I); got an unbatched (T, I)")
            return x.unsqueeze(1), True, None
        x = x.transpose(0, 1) if self.batch_first else x
        if lengths is None:
            return x, False, None
        lengths = check.sequence_lengths(lengths, x.shape[0], x.shape[1])
        return x, False, Packing.from_lengths(lengths, x.shape[0]).to(x.device)

    def _layout_out(self, out: torch.Tensor, unbatched: bool) -> torch.Tensor:
        if unbatched:
            return out.squeeze(1)
        return out.transpose(0, 1) if self.batch_first else out

    def _initial_states(self, given, x: torch.Tensor, batch: int, unbatched: bool):
        """Initial states (L * D, B, H) per layer and direction (D = 2 if bidirectional, else 1;
        row 2k + d the layer k's direction d, as torch), one per name of ``cell.initial_states``;
        h0 has P units with a projection; zeros when ``given`` is None. The states of
        ``cell.math_states`` (the pLSTM age, which a bf16 layer carries in float32) may have
        another dtype and must be >= 0. The refusals torch.nn.LSTM makes start with its messages:
        states named hx and cx, or hidden[k] in the cell's order, an unbatched state's shape with
        the batch of 1 that torch adds."""
        names = self.cell.initial_states
        rows = self.num_layers * len(self._directions)
        if given is None:
            return [x.new_zeros(rows, batch, self._out_size if name == "h0" else self.hidden_size) for name in names]
        if not isinstance(given, (tuple, list)) or len(given) != len(names):
            got = type(given).__name__
            if isinstance(given, (tuple, list)):
                missing = names[len(given):]
                got = f"{len(given)} {'entry' if len(given) == 1 else 'entries'}" + (f": {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} "
                                                 "missing" if missing else "")
            raise check.StateError(f"{self.mode.lower()} expects {_NUMBER_WORDS[len(names)]} hidden states; the "
                                   f"initial state must be a tuple ({', '.join(names)}), got {got}")
        for name, state in zip(names, given):
            check.tensor(name, state)
        shapes = {name: (rows, self._state_size(name)) if unbatched else (rows, batch, self._state_size(name))
                  for name in names}
        rank = 2 if unbatched else 3
        if x.dim() == 3 and any(state.dim() != rank for state in given[:2]):  # not for a PackedSequence's rows
            name, state = next((n, s) for n, s in zip(names, given) if s.dim() != rank)
            raise check.ShapeError(
                f"For {'unbatched 2-D' if unbatched else 'batched 3-D'} input, hx and cx should also be {rank}-D but "
                f"got ({given[0].dim()}-D, {given[1].dim()}-D) tensors; {name} must have shape {shapes[name]}, got "
                f"{tuple(state.shape)}")
        states = []
        for k, (name, state) in enumerate(zip(names, given)):
            if tuple(state.shape) != shapes[name]:
                as_batched = [*state.shape[:1], 1, *state.shape[1:]] if unbatched else list(state.shape)
                raise check.ShapeError(f"Expected hidden[{k}] size {(rows, batch, self._state_size(name))}, got "
                                       f"{as_batched}; {name} must have shape {shapes[name]}, got {tuple(state.shape)}")
            if state.device != x.device:
                raise check.DeviceError(f"Input and hidden tensors are not at the same device, found input tensor at "
                                        f"{x.device} and hidden tensor at {state.device}; move {name} to {x.device}")
            if name in self.cell.initial_math_states:
                check.nonnegative(name, state)
            else:
                check.same_dtype("input", x, **{name: state})
            states.append(state.unsqueeze(1) if unbatched else state)
        return states

    def _state_size(self, name: str) -> int:
        """The units of the initial state ``name``: h0 has P with a projection, the others H."""
        return self._out_size if name == "h0" else self.hidden_size

    def _no_step(self, x, initial, traces: bool):
        """``forward``'s results where every length is 0: zero output and traces, the initial states."""
        zeros = x.new_zeros(*x.shape[:2], self.hidden_size)
        out = x.new_zeros(*x.shape[:2], self._out_size * len(self._directions))
        per_layer = [{n: zeros for n in self.cell.traces} if traces else None
                     for _ in range(self.num_layers * len(self._directions))]
        return self._layout_out(out, False), tuple(initial), per_layer


@overload
def backwards(data: torch.Tensor, packing: Packing | None) -> torch.Tensor: ...


@overload
def backwards(data: None, packing: Packing | None) -> None: ...


def backwards(data: torch.Tensor | None, packing: Packing | None) -> torch.Tensor | None:
    """Every sequence of ``data`` read backwards within its own length: (T, B, ...) flipped in
    time, or packed rows (N, ...) through ``packing.reversed``; its own inverse. None stays None."""
    if data is None:
        return None
    return data.flip(0) if packing is None else data.index_select(0, packing.reversed)


def backwards_padded(per_step: torch.Tensor, packing: Packing | None) -> torch.Tensor:
    """``backwards`` of a layer's padded traces (T', live, ...) in packed order, zero past the ends."""
    if packing is None:
        return per_step.flip(0)
    return packing.unpack(backwards(packing.pack(per_step), packing))
