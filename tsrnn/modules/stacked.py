"""What tsrnn.LSTM and tsrnn.PowerLawLSTM share: parameters named as in torch.nn.LSTM, input
layout (time-major, batch_first, unbatched; a PackedSequence, or padded with ``lengths=``),
initial states, the loop over layers with dropout between them (``forward``, one method: the
hot path of ARCHITECTURE.md), autocast, and the traces handed to watchers (``watch``, which
``forget_gates`` and the pLSTM's ``trace`` use). A subclass names its cell
(``tsrnn.ops.recurrence.cells``) and says, per layer, what its layers take besides the weights
(``_layer_inputs``: the effective bias and p; ε is the module's ``eps``, 0 without one) and, per
call, what its forward takes besides the input and state (``_call_inputs``: the pLSTM's Δt)."""
from __future__ import annotations

import contextlib
import math
import numbers
import warnings

import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence

from tsrnn import _validation as check
from tsrnn import functional, precision
from tsrnn.backend import BACKENDS, PATHS
from tsrnn.ops.recurrence.cells import Cell
from tsrnn.ops.recurrence.packing import Packing


class StackedRNN(nn.Module):
    """Base of the stacked recurrent modules of ``cell`` (``cell.num_gates`` rows of W per unit)."""

    def __init__(self, input_size, hidden_size, num_layers, bias, batch_first, dropout, backend,
                 cell: Cell, device=None, dtype=None, bidirectional=False, proj_size=0):
        super().__init__()
        self._check_torch_only_options(bidirectional, proj_size)
        for name, value in (("input_size", input_size), ("hidden_size", hidden_size),
                            ("num_layers", num_layers)):
            check.count(name, value)
        if not 0 <= check.real("dropout", dropout) <= 1:
            raise ValueError(f"dropout must be in [0, 1], got {dropout!r}")
        if dropout > 0 and num_layers == 1:  # torch.nn.LSTM's warning, word for word
            warnings.warn("dropout option adds dropout after all but last recurrent layer, so non-zero dropout "
                          f"expects num_layers greater than 1, but got dropout={dropout} and num_layers={num_layers}",
                          stacklevel=3)
        check.choice("backend", backend, BACKENDS + tuple(p for p in PATHS["recurrence"] if p not in BACKENDS))
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout = bias, batch_first, float(dropout)
        self.backend, self.cell = backend, cell
        factory = {"device": device, "dtype": dtype}
        rows = cell.num_gates * hidden_size
        for k in range(num_layers):
            layer_in = input_size if k == 0 else hidden_size
            self.register_parameter(f"weight_ih_l{k}", nn.Parameter(torch.empty(rows, layer_in, **factory)))
            self.register_parameter(f"weight_hh_l{k}", nn.Parameter(torch.empty(rows, hidden_size, **factory)))
            if bias:
                self.register_parameter(f"bias_ih_l{k}", nn.Parameter(torch.empty(rows, **factory)))
                self.register_parameter(f"bias_hh_l{k}", nn.Parameter(torch.empty(rows, **factory)))
        self._init_weights()
        self._watchers = []

    @contextlib.contextmanager
    def watch(self, callback):
        """Within the block, every forward also computes its per-step traces and hands them to
        ``callback(traces)``: one dict per layer of (T, B, H) tensors, "f" the forget gate (and for
        the pLSTM "r" and "a", as ``trace`` returns them; a fused path adds its other saved
        activations). Analyses (``tsrnn.analysis``) reduce the traces as a pass goes, so a long
        pass never holds them all. The outputs are a plain forward's, computed on a path that
        returns traces (not oneDNN or cuDNN, so equal up to rounding where "auto" picks those)."""
        self._watchers.append(callback)
        try:
            yield self
        finally:
            self._watchers.remove(callback)

    def _notify(self, traces) -> None:
        """Hand a forward's traces to every watcher (none outside a ``watch`` block)."""
        for callback in list(self._watchers):
            callback(traces)

    def _check_torch_only_options(self, bidirectional, proj_size) -> None:
        """torch.nn.LSTM's ``bidirectional`` and ``proj_size`` are accepted at their defaults only."""
        name = f"tsrnn.{type(self).__name__}"
        if bidirectional:
            raise ValueError(
                f"bidirectional={bidirectional!r} is not supported: {name} runs unidirectional layers "
                "without projection. For a bidirectional layer, run two modules, one on the input and one "
                "on the input reversed in time, reverse the second output back and concatenate the two "
                "along the feature dimension")
        if isinstance(proj_size, bool) or not isinstance(proj_size, numbers.Integral):
            raise TypeError(f"proj_size must be an int, got {type(proj_size).__name__}")
        if proj_size != 0:
            raise ValueError(
                f"proj_size={proj_size!r} is not supported: {name} runs unidirectional layers without "
                "projection (proj_size=0). A torch.nn.Linear(hidden_size, proj_size) on the output "
                "projects the features, though not the state fed back into the recurrence")

    def _init_weights(self) -> None:
        """torch.nn.LSTM's initialization: every weight and bias ~ U(-1/sqrt(H), 1/sqrt(H))."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        with torch.no_grad():
            for name, param in self.named_parameters(recurse=False):
                if name.startswith(("weight_", "bias_")):
                    param.uniform_(-bound, bound)

    def weights(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(W_ih, W_hh) of one layer."""
        layer = check.index("layer", layer, self.num_layers)
        return getattr(self, f"weight_ih_l{layer}"), getattr(self, f"weight_hh_l{layer}")

    def _member(self, name: str) -> torch.Tensor:
        """The parameter or buffer ``name``, as ``getattr`` gives it: from the module's tables
        where it is registered there, else through getattr (what torch's parametrizations, weight
        norm or AWD-LSTM's weight drop put in its place). nn.Module's ``__getattr__``, which a plain
        ``self.name`` reaches, costs about 1.7 µs a call on a 2-core Xeon: a tenth of a warm T = 1
        forward's host time over a layer's five tensors."""
        found = self._parameters.get(name)
        if found is None:
            found = self._buffers.get(name)
        return found if found is not None else getattr(self, name)

    def raw_bias(self, layer: int) -> torch.Tensor | None:
        """b_ih + b_hh of one layer, or None without biases."""
        if not self.bias:
            return None
        return self._member(f"bias_ih_l{layer}") + self._member(f"bias_hh_l{layer}")

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}, num_layers={self.num_layers}"
        if not self.bias:
            s += ", bias=False"
        if self.batch_first:
            s += ", batch_first=True"
        if self.dropout:
            s += f", dropout={self.dropout}"
        return s + f", backend={self.backend!r}"

    # -- inputs and outputs -------------------------------------------------------------
    def _check_input(self, x: torch.Tensor, ndims, low: torch.dtype | None) -> None:
        """The input's rank, features, at least one step and row, and the parameters' dtype (as
        autocast to ``low`` casts them) and device."""
        check.tensor("input", x, ndims)
        if x.shape[-1] != self.input_size:
            raise ValueError(f"input must have {self.input_size} features in its last dimension, "
                             f"got shape {tuple(x.shape)}")
        if x.numel() == 0:
            raise ValueError(f"input must have at least one step and one batch row, got shape {tuple(x.shape)}")
        weight = self._member("weight_ih_l0")
        expected = weight.dtype if low is None else precision.cast(low, weight)[0].dtype
        if x.dtype != expected:
            raise TypeError(f"input has dtype {x.dtype} but the module's parameters are {expected}; "
                            "cast the input, or the module with .to(dtype)")
        if x.device != weight.device:
            raise ValueError(f"input is on {x.device} but the module's parameters are on {weight.device}; "
                             "move the input, or the module with .to(device)")

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
        """Per-layer initial states (L, B, H), one per name of ``cell.initial_states``; zeros when
        ``given`` is None. The states of ``cell.math_states`` (the pLSTM age, which a bf16 layer
        carries in float32) may have another dtype and must be >= 0."""
        names = self.cell.initial_states
        shape = (self.num_layers, self.hidden_size) if unbatched else (self.num_layers, batch, self.hidden_size)
        if given is None:
            return [x.new_zeros(self.num_layers, batch, self.hidden_size) for _ in names]
        if not isinstance(given, (tuple, list)) or len(given) != len(names):
            got = type(given).__name__
            if isinstance(given, (tuple, list)):
                missing = names[len(given):]
                got = f"{len(given)} {'entry' if len(given) == 1 else 'entries'}" + (f": {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} "
                                                 "missing" if missing else "")
            raise TypeError(f"the initial state must be a tuple ({', '.join(names)}), got {got}")
        states = []
        for name, state in zip(names, given):
            check.tensor(name, state)
            check.shape(name, state, shape)
            check.same_device("input", x, **{name: state})
            if name in self.cell.initial_math_states:
                check.nonnegative(name, state)
            else:
                check.same_dtype("input", x, **{name: state})
            states.append(state.unsqueeze(1) if unbatched else state)
        return states

    # -- the subclass's hooks ----------------------------------------------------------------
    def _layer_inputs(self, layer: int) -> tuple:
        """(bias, p) of one layer: the effective bias or None, and the pLSTM's decay exponents or None."""
        raise NotImplementedError

    def _call_inputs(self, x: torch.Tensor, unbatched: bool, packing: Packing | None) -> dict:
        """What one forward call adds for every layer, from the forward's own keyword arguments
        (none here; the pLSTM's "dt"), in the layout of x (``_time_major``'s: packed rows for a
        PackedSequence, padded with ``lengths=``)."""
        return {}

    def _no_step(self, x, initial, traces: bool):
        """``forward``'s results where every length is 0: zero output and traces, the initial states."""
        zeros = x.new_zeros(*x.shape[:2], self.hidden_size)
        per_layer = [{n: zeros for n in self.cell.traces} if traces else None for _ in range(self.num_layers)]
        return self._layout_out(zeros, False), tuple(initial), per_layer

    def flatten_parameters(self) -> None:
        """A no-op here (code written for cuDNN, such as AWD-LSTM's, calls it): every path of the
        pLSTM reads each layer's tensors as they are; ``tsrnn.LSTM`` lays its layers out for cuDNN."""

    def __prepare_scriptable__(self):
        raise RuntimeError(f"torch.jit.script cannot compile {type(self).__name__} (its forward takes keyword inputs "
                           "and dispatches to kernels in Python); use torch.jit.trace, torch.compile or "
                           "torch.onnx.export(..., dynamo=True)")

    def forward(self, input, hx=None, lengths=None, **inputs):
        """``out, state = m(input, hx)``: the torch.nn.LSTM convention, input a tensor or a
        PackedSequence (out is then one too); ``lengths`` (B,) integers in [0, T], for a padded
        input: row b runs its first lengths[b] steps, out is zero past them and the final states are
        each row's after its last step. Subclasses document their state and keyword inputs.

        The pass: every layer in turn, with dropout between them in training; under autocast, as a
        layer of its dtype (``tsrnn.precision``). The input and states are checked here once; each
        layer runs unchecked on the path ``functional._route`` gives, on packed rows for a
        PackedSequence or with ``lengths`` (the rows sorted by length once, for all layers). Inside
        a ``watch`` block the per-step traces of every layer go to the watchers."""
        traces = bool(self._watchers)
        packed = isinstance(input, PackedSequence)
        data = input.data if packed else input
        with precision.layer_region(data) as low:
            if low is not None:
                (data,) = precision.cast(low, data)
            self._check_input(data, 2 if packed else (2, 3), low)
            x, unbatched, packing = self._time_major(input, data, lengths)
            batch = x.shape[1] if packing is None else packing.batch
            if low is not None and isinstance(hx, (tuple, list)):
                math_states = [self.cell.initial_states.index(n) for n in self.cell.initial_math_states]
                hx = tuple(s if k in math_states else precision.cast(low, s)[0] for k, s in enumerate(hx))
            initial = self._initial_states(hx, x, batch, unbatched)
            per_call = self._call_inputs(x, unbatched, packing, **inputs)
            if packing is not None and packing.live == 0:
                out, state, per_layer = self._no_step(x, initial, traces)
                self._notify(per_layer)
                return out, state
            layer_packing = None
            if packing is not None:
                if not packed:
                    x = packing.pack(x)  # padded with lengths: packed once for every layer
                layer_packing = Packing.in_order(packing.batch_sizes, x.device)
            dt, eps = per_call.get("dt"), self.__dict__.get("eps", 0.0)  # the pLSTM's plain attribute; none: 0
            finals, per_layer = [], []
            for k in range(self.num_layers):
                h0, *states = [s[k] for s in initial] if packing is None else [packing.sort(s[k]) for s in initial]
                bias, p = self._layer_inputs(k)
                w_ih, w_hh = self._member(f"weight_ih_l{k}"), self._member(f"weight_hh_l{k}")
                if low is not None:
                    w_ih, w_hh, bias = precision.cast(low, w_ih, w_hh, bias)
                path = functional._route(self.cell, x, h0, states, w_ih, w_hh, bias, p, dt, eps, self.backend, traces,
                                         layer_packing)
                x, layer_finals, layer_traces = path.run["recurrence"](path, self.cell, x, h0, states, w_ih, w_hh, bias,
                                                                       p, dt, eps, traces, layer_packing)
                if traces:
                    layer_traces = functional._with_ages(self.cell, layer_traces, states, dt, layer_packing)
                if packing is not None:
                    layer_finals = [packing.unsort(f, s[k]) for f, s in zip(layer_finals, initial)]
                    layer_traces = layer_traces and {n: packing.reorder(v) for n, v in layer_traces.items()}
                finals.append(layer_finals)
                per_layer.append(layer_traces if traces else None)
                if self.dropout and self.training and k < self.num_layers - 1:
                    x = nn.functional.dropout(x, self.dropout, training=True)
        state = [torch.stack(s) if len(s) > 1 else s[0].unsqueeze(0) for s in zip(*finals)]
        if unbatched:
            state = [s.squeeze(1) for s in state]
        if traces:
            self._notify(per_layer)
        if packed:
            return PackedSequence(x, input.batch_sizes, input.sorted_indices, input.unsorted_indices), tuple(state)
        return self._layout_out(x if packing is None else packing.unpack(x), unbatched), tuple(state)

    def _traces(self, input, hx, lengths, **inputs) -> list[dict]:
        """Every layer's per-step traces for this input (a forward inside a ``watch`` block)."""
        seen = []
        with self.watch(seen.append):
            StackedRNN.forward(self, input, hx, lengths, **inputs)
        return seen[0]

    @torch.no_grad()
    def forget_gates(self, input, hx=None, lengths=None, **inputs) -> list[torch.Tensor]:
        """Forget-gate values (T, B, H) of every layer for this input (S6 data); with lengths or a
        PackedSequence, zero past each row's end."""
        return [traces["f"] for traces in self._traces(input, hx, lengths, **inputs)]
