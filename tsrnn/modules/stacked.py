"""What tsrnn.LSTM and tsrnn.PowerLawLSTM share: parameters named as in torch.nn.LSTM, the loop
over layers with dropout between them (``forward``, one method: the hot path of ARCHITECTURE.md),
autocast, and the traces handed to watchers (``watch``, which ``forget_gates`` and the pLSTM's
``trace`` use); the input layout and initial states are ``tsrnn.modules.layout``'s. A subclass names its cell
(``tsrnn.ops.recurrence.cells``) and says, per layer, what its layers take besides the weights
(``_biases``, ``_params``, ``_constants``: the cell's) and, per call, what its forward takes besides
the input and state (``_call_inputs``: the cell's step input, the pLSTM's Δt)."""
from __future__ import annotations

import contextlib
import math
import numbers
import warnings
from typing import Callable, Iterator, Sequence

import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence

from tsrnn import _validation as check
from tsrnn import precision
from tsrnn.backend import BACKENDS, PATHS, routing
from tsrnn.modules.layout import InputLayout, State, backwards, backwards_padded
from tsrnn.ops.recurrence.cells import Cell
from tsrnn.ops.recurrence.layer import Inputs, Layer
from tsrnn.ops.recurrence.packing import Packing

DIRECTIONS = ("", "_reverse")  # the suffix of each direction's parameter names, as torch.nn.LSTM's
_NO_REGION = contextlib.nullcontext()  # ``forward``'s block outside autocast (reentrant: one for every call)


class StackedRNN(InputLayout, nn.Module):
    """Base of the stacked recurrent modules of ``cell`` (``cell.num_gates`` rows of W per unit).

    Its parameters are torch.nn.LSTM's, named and ordered as torch's, per layer k and direction
    (suffix "" and, bidirectional, "_reverse"): weight_ih_l{k}, weight_hh_l{k}, bias_ih_l{k},
    bias_hh_l{k} and, with ``proj_size`` P > 0, weight_hr_l{k} (P, H). ``_flat_weights_names``,
    ``_all_weights``, ``_flat_weights`` and ``all_weights`` list them as torch.nn.LSTM does (the
    pLSTM's p and the fixed timescale biases are not among them)."""

    mode = "LSTM"  # torch.nn.RNNBase's: the kind of cell (tsrnn.PowerLawLSTM: "PLSTM")
    input_size: int
    hidden_size: int
    num_layers: int
    bias: bool
    batch_first: bool
    dropout: float
    bidirectional: bool
    proj_size: int
    backend: str
    cell: Cell
    _directions: tuple[str, ...]
    _out_size: int
    _flat_weights_names: list[str]
    _all_weights: list[list[str]]

    def __init__(self, input_size: int, hidden_size: int, num_layers: int, bias: bool, batch_first: bool,
                 dropout: float, backend: str, cell: Cell, device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None, bidirectional: bool = False, proj_size: int = 0) -> None:
        super().__init__()
        # torch.nn.LSTM's checks in its order, each message starting with torch's (then tsrnn's detail)
        if isinstance(dropout, bool) or not isinstance(dropout, numbers.Real) or not 0 <= dropout <= 1:
            raise ValueError("dropout should be a number in range [0, 1] representing the probability of an element "
                             f"being zeroed; got {dropout!r}")
        for name, value in (("bias", bias), ("batch_first", batch_first), ("bidirectional", bidirectional)):
            check.flag(name, value)
        sizes = {"input_size": input_size, "hidden_size": hidden_size, "num_layers": num_layers}
        for name, size in {**sizes, "proj_size": proj_size}.items():
            if isinstance(size, bool) or not isinstance(size, numbers.Integral):
                raise TypeError(f"{name} should be of type int, got: {type(size).__name__}")
        for name, size in sizes.items():
            if size <= 0:
                raise ValueError(f"{name} must be greater than zero; got {size}")
        self._check_projection(proj_size, hidden_size)
        if dropout > 0 and num_layers == 1:  # torch.nn.LSTM's warning, word for word
            warnings.warn("dropout option adds dropout after all but last recurrent layer, so non-zero dropout "
                          f"expects num_layers greater than 1, but got dropout={dropout} and num_layers={num_layers}",
                          stacklevel=3)
        check.choice("backend", backend, BACKENDS + tuple(p for p in PATHS["recurrence"] if p not in BACKENDS))
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout = bias, batch_first, float(dropout)
        self.bidirectional, self.proj_size = bidirectional, int(proj_size)
        self.backend, self.cell = backend, cell
        # plain attributes (read per call): the parameter-name suffix of each direction, ("",) or
        # ("", "_reverse"); the units of h, of each direction's output and of what a layer feeds back
        self._directions = DIRECTIONS if bidirectional else DIRECTIONS[:1]
        self._out_size = self.proj_size or hidden_size
        factory = {"device": device, "dtype": dtype}
        rows, out_size = cell.num_gates * hidden_size, self._out_size
        self._flat_weights_names, self._all_weights = [], []
        for k in range(num_layers):
            shapes = {"weight_ih": (rows, input_size if k == 0 else out_size * len(self._directions)),
                      "weight_hh": (rows, out_size)}
            if bias:
                shapes.update(bias_ih=(rows,), bias_hh=(rows,))
            if proj_size:
                shapes["weight_hr"] = (proj_size, hidden_size)
            for suffix in self._directions:
                names = [f"{kind}_l{k}{suffix}" for kind in shapes]
                for name, size in zip(names, shapes.values()):
                    self.register_parameter(name, nn.Parameter(torch.empty(size, **factory)))
                self._flat_weights_names.extend(names)
                self._all_weights.append(names)
        StackedRNN.reset_parameters(self)
        self._watchers: list[Callable] = []

    @property
    def _flat_weights(self) -> list:
        """The tensors of ``_flat_weights_names``, as getattr gives them (a weight drop's too)."""
        return [self._member(name) for name in self._flat_weights_names]

    @property
    def all_weights(self) -> list[list]:
        """torch.nn.LSTM's: per layer and direction, the list of its weights and biases."""
        return [[self._member(name) for name in names] for names in self._all_weights]

    def _check_projection(self, proj_size: int, hidden_size: int) -> None:
        """torch.nn.LSTM's rule for ``proj_size``: 0 (no projection) or in [1, hidden_size)."""
        if proj_size < 0:
            raise ValueError(f"proj_size should be a positive integer or zero to disable projections; got {proj_size}")
        if proj_size >= hidden_size:
            raise ValueError(f"proj_size has to be smaller than hidden_size; got proj_size={proj_size} and "
                             f"hidden_size={hidden_size}")

    @contextlib.contextmanager
    def watch(self, callback: Callable[[list[dict[str, torch.Tensor]]], object]) -> Iterator[StackedRNN]:
        """Within the block, every forward also computes its per-step traces and hands them to
        ``callback(traces)``: one dict per layer of (T, B, H) tensors, "f" the forget gate (and for
        the pLSTM "r" and "a", as ``trace`` returns them; a fused path adds its other saved
        activations). Analyses (``tsrnn.lab.analysis``) reduce the traces as a pass goes, so a long
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

    def reset_parameters(self) -> None:
        """torch.nn.LSTM's initialization: every weight and bias ~ U(-1/sqrt(H), 1/sqrt(H)) (buffers,
        such as fixed timescale biases, stay as they are)."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        with torch.no_grad():
            for name, param in self.named_parameters(recurse=False):
                if name.startswith(("weight_", "bias_")):
                    param.uniform_(-bound, bound)

    def _suffix(self, reverse) -> str:
        """The parameter-name suffix of the direction ``reverse`` (a bool; True needs a bidirectional module)."""
        check.flag("reverse", reverse)
        if reverse and not self.bidirectional:
            raise ValueError("reverse=True names the reverse direction of a bidirectional module; this one has "
                             "bidirectional=False")
        return DIRECTIONS[reverse]

    def weights(self, layer: int, reverse: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """(W_ih, W_hh) of one layer (of its reverse direction with ``reverse``)."""
        layer, suffix = check.index("layer", layer, self.num_layers), self._suffix(reverse)
        return self._member(f"weight_ih_l{layer}{suffix}"), self._member(f"weight_hh_l{layer}{suffix}")

    def _member(self, name: str) -> torch.Tensor:
        """The parameter or buffer ``name``, as ``getattr`` gives it: from the module's tables
        where it is registered there, else through getattr (what torch's parametrizations, weight
        norm or AWD-LSTM's weight drop put in its place), without nn.Module's slower ``__getattr__``."""
        found: torch.Tensor | None = self._parameters.get(name)
        if found is None:
            found = self._buffers.get(name)
        return found if found is not None else getattr(self, name)

    def raw_bias(self, layer: int, suffix: str = "") -> torch.Tensor | None:
        """b_ih + b_hh of one layer and direction (``suffix``), or None without biases."""
        if not self.bias:
            return None
        return self._member(f"bias_ih_l{layer}{suffix}") + self._member(f"bias_hh_l{layer}{suffix}")

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}, num_layers={self.num_layers}"
        if self.proj_size:
            s += f", proj_size={self.proj_size}"
        if not self.bias:
            s += ", bias=False"
        if self.batch_first:
            s += ", batch_first=True"
        if self.dropout:
            s += f", dropout={self.dropout}"
        if self.bidirectional:
            s += ", bidirectional=True"
        return s + f", backend={self.backend!r}"


    # -- the subclass's hooks ----------------------------------------------------------------
    def _biases(self, layer: int, suffix: str) -> tuple:
        """(bias, torch_bias) of one layer and direction (``suffix`` of ``DIRECTIONS``), as
        ``Layer`` holds them: eagerly (None, (b_ih, b_hh)), the pair the paths add (torch's LSTM
        kernel as it is); while tracing (b_ih + b_hh, None); (None, None) without biases."""
        if not self.bias:
            return None, None
        b_ih, b_hh = self._member(f"bias_ih_l{layer}{suffix}"), self._member(f"bias_hh_l{layer}{suffix}")
        return (None, (b_ih, b_hh)) if check.eager() else (b_ih + b_hh, None)

    def _params(self, layer: int, suffix: str) -> tuple:
        """The cell's per-unit parameters of one layer and direction, in the cell's order."""
        return ()

    def _constants(self) -> tuple:
        """The cell's constants, in its order."""
        return self.cell.defaults

    def _exact_bias(self, layer: int) -> bool:
        """Whether a layer's effective bias is kept as it is under autocast (fixed timescale biases,
        formed in float32 or float64: ``tsrnn.LSTM``)."""
        return False

    def _full_precision_buffers(self) -> list[str]:
        """The buffers that stay float32 when the module is cast to bf16 or fp16 (fixed timescale
        biases, a fixed p): ``_apply``."""
        return []

    def _apply(self, fn, recurse=True):
        """nn.Module's, with ``_full_precision_buffers`` kept in float32 (or float64) when ``fn``
        casts them to a 16-bit dtype (``.half()``, ``.bfloat16()``, ``.to(dtype)``): a forget bias
        of timescale 40,000 rounded to bf16 would be one of timescale 41,151."""
        kept = {name: self._buffers[name] for name in self._full_precision_buffers()}
        result = super()._apply(fn, recurse)
        for name, before in kept.items():
            after = self._buffers[name]
            if after.dtype in precision.LOW_PRECISION:
                self._buffers[name] = before.to(device=after.device, dtype=torch.float32)
        return result

    def _call_inputs(self, x: torch.Tensor, unbatched: bool, packing: Packing | None) -> dict:
        """What one forward call adds for every layer, from the forward's own keyword arguments
        (none here; the pLSTM's "dt"), in the layout of x (``_time_major``'s: packed rows for a
        PackedSequence, padded with ``lengths=``)."""
        return {}

    def flatten_parameters(self) -> None:
        """A no-op here (code written for cuDNN, such as AWD-LSTM's, calls it): every path of the
        pLSTM reads each layer's tensors as they are; ``tsrnn.LSTM`` lays its layers out for cuDNN."""

    def __prepare_scriptable__(self):
        raise RuntimeError(f"torch.jit.script cannot compile {type(self).__name__} (its forward takes keyword inputs "
                           "and dispatches to kernels in Python); use torch.jit.trace, torch.compile or "
                           "torch.onnx.export(..., dynamo=True)")

    def forward(self, input: torch.Tensor | PackedSequence, hx: State = None,
                lengths: torch.Tensor | Sequence[int] | None = None,
                **inputs: torch.Tensor | None) -> tuple[torch.Tensor | PackedSequence, tuple[torch.Tensor, ...]]:
        """``out, state = m(input, hx)``: the torch.nn.LSTM convention, input a tensor or a
        PackedSequence (out is then one too); ``lengths`` (B,) integers in [0, T], for a padded
        input: row b runs its first lengths[b] steps, out is zero past them and the final states are
        each row's after its last step. Subclasses document their state and keyword inputs.

        The pass: every layer in turn, with dropout between them in training; under autocast, as a
        layer of its dtype (``tsrnn.precision``). The input and states are checked here once; each
        layer runs unchecked on the path ``tsrnn.backend.routing.route`` gives, on packed rows for a
        PackedSequence or with ``lengths`` (the rows sorted by length once, for all layers). A
        bidirectional layer runs its reverse direction as a second call on every sequence read
        backwards within its own length (``backwards``), and concatenates the two outputs, forward
        first, as torch.nn.LSTM. A batch of 0 rows runs the reference loops on empty tensors (an
        empty output, as torch's). Inside a ``watch`` block the per-step traces of every layer
        and direction go to the watchers."""
        traces = bool(self._watchers)
        data = input.data if isinstance(input, PackedSequence) else input
        low = precision.autocast_of(data)
        with _NO_REGION if low is None else torch.autocast(data.device.type, enabled=False):
            if low is not None:  # the layers run in the dtypes chosen here, autocast off
                (data,) = precision.cast(low, data)
            packed = isinstance(input, PackedSequence)
            self._check_input(data, packed, low)
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
            steps = per_call.get(self.cell.step_input)
            constants = self._constants()
            backend = self.backend if batch else "reference"  # no row: the loops on empty tensors
            finals, per_layer, directions = [], [], self._directions
            one_row = self.num_layers == len(directions) == 1  # the stacked states are the layer's own rows
            for k in range(self.num_layers):
                outs = []
                for d, suffix in enumerate(directions):
                    row = k * len(directions) + d
                    h0, *states = initial if one_row else [s[row:row + 1] for s in initial]  # (1, B, ·) each
                    if packing is not None:
                        h0, *states = [packing.sort(s) for s in (h0, *states)]
                    bias, torch_bias = self._biases(k, suffix)
                    w_ih, w_hh = self._member(f"weight_ih_l{k}{suffix}"), self._member(f"weight_hh_l{k}{suffix}")
                    w_hr = self._member(f"weight_hr_l{k}{suffix}") if self.proj_size else None
                    if low is not None:
                        w_ih, w_hh, w_hr = precision.cast(low, w_ih, w_hh, w_hr)
                        if not self._exact_bias(k):
                            (bias,) = precision.cast(low, bias)
                            torch_bias = torch_bias and tuple(precision.cast(low, *torch_bias))
                    layer = Layer(self.cell, w_ih, w_hh, bias, torch_bias, w_hr, self._params(k, suffix), constants)
                    run_inputs = Inputs(x if d == 0 else backwards(x, layer_packing), h0, tuple(states),
                                    steps if d == 0 else backwards(steps, layer_packing), layer_packing)
                    path = routing.route(layer, run_inputs, backend, traces)
                    out, layer_finals, layer_traces = path.run["recurrence"](path, layer, run_inputs, traces)
                    if traces and d == 1:
                        layer_traces = {n: backwards_padded(v, layer_packing) for n, v in layer_traces.items()}
                    outs.append(out if d == 0 else backwards(out, layer_packing))
                    if packing is not None:
                        layer_finals = [packing.unsort(f, s[row:row + 1]) for f, s in zip(layer_finals, initial)]
                        layer_traces = layer_traces and {n: packing.reorder(v) for n, v in layer_traces.items()}
                    finals.append(layer_finals)
                    per_layer.append(layer_traces if traces else None)
                x = outs[0] if len(outs) == 1 else torch.cat(outs, -1)
                if self.dropout and self.training and k < self.num_layers - 1:
                    x = nn.functional.dropout(x, self.dropout, training=True)
        state = finals[0] if one_row else [torch.cat(s) for s in zip(*finals)]
        if unbatched:
            state = [s.squeeze(1) for s in state]
        if traces:
            self._notify(per_layer)
        if isinstance(input, PackedSequence):
            return PackedSequence(x, input.batch_sizes, input.sorted_indices, input.unsorted_indices), tuple(state)
        return self._layout_out(x if packing is None else packing.unpack(x), unbatched), tuple(state)

    def _traces(self, input, hx, lengths, **inputs) -> list[dict]:
        """Every layer's per-step traces for this input (a forward inside a ``watch`` block)."""
        seen: list[list[dict]] = []
        with self.watch(seen.append):
            StackedRNN.forward(self, input, hx, lengths, **inputs)
        return seen[0]

    @torch.no_grad()
    def forget_gates(self, input: torch.Tensor | PackedSequence, hx: State = None,
                     lengths: torch.Tensor | Sequence[int] | None = None,
                     **inputs: torch.Tensor | None) -> list[torch.Tensor]:
        """Forget-gate values (T, B, H) of every layer (and direction, as h_n's rows) for this input
        (S6 data); with lengths or a PackedSequence, zero past each row's end."""
        return [traces["f"] for traces in self._traces(input, hx, lengths, **inputs)]
