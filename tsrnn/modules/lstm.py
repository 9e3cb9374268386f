"""tsrnn.LSTM: a drop-in torch.nn.LSTM whose layers can have fixed timescales (S1-S4).

A multi-timescale (MTS) layer gives unit j the timescale T_j through fixed gate biases:
effective forget bias b_f(T_j) = -log(expm1(1/T_j)) and input bias -b_f(T_j). They live in the
buffer ``bias_fixed_l{k}``, never in a Parameter, so no optimizer (momentum, weight decay, Adam)
can move them; the raw entries of bias_ih/bias_hh they replace get no gradient, and a saved
state_dict writes them so that b_ih + b_hh equals the effective bias (a torch.nn.LSTM that loads
it computes the same function).
"""
from __future__ import annotations

import warnings
import weakref

import torch

from tsrnn import _validation as check
from tsrnn.ops.recurrence import cells, paths
from tsrnn.modules.stacked import StackedRNN
from tsrnn.memory.timescales import bias_from_timescale, timescale_from_bias

FREEZE = ("gates", "all")


class LSTM(StackedRNN):
    """Drop-in for ``torch.nn.LSTM`` (same parameters, state_dict and forward) with fused kernels.

    The arguments up to ``dtype`` are torch.nn.LSTM's, in its order; ``device`` and ``dtype`` place
    the parameters (and fixed biases). ``bidirectional`` and ``proj_size`` are accepted at their
    defaults only (False, 0): tsrnn runs unidirectional layers without projection, and other values
    raise a ValueError. The tsrnn arguments are keyword-only:

    Args:
        timescales: None, or one entry per layer, each None (biases learned as usual) or H
            timescales > 0 (fixed input and forget biases, S3-S4).
        freeze: "gates" fixes only the i and f biases of MTS layers (g and o train); "all" fixes
            the whole effective bias vector, as the seed-000 authors did.
        backend: "auto" | "reference" | "native" | "triton", or one path by name, e.g.
            "onednn" or "triton_step" (see ``tsrnn.backend``).

    ``out, (h_n, c_n) = m(x, (h0, c0))`` with x (T, B, I), or (B, T, I) if batch_first, or
    (T, I) unbatched, or a ``PackedSequence`` (out is then one too), as torch.nn.LSTM takes them.
    ``m(x, lengths=lengths)`` with x padded and lengths (B,) integers in [0, T] runs row b for
    its first lengths[b] steps only: out is zero past them, h_n and c_n are each row's after its
    last step (h0, c0 for a length of 0), and the fused paths do no work for rows that have ended.
    """

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, proj_size=0, device=None, dtype=None, *,
                 timescales=None, freeze="gates", backend="auto"):
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, backend,
                         cells.CELLS["lstm"], device=device, dtype=dtype, bidirectional=bidirectional,
                         proj_size=proj_size)
        check.choice("freeze", freeze, FREEZE)
        self.freeze = freeze
        if timescales is None:
            timescales = [None] * num_layers
        if not isinstance(timescales, (list, tuple)) or len(timescales) != num_layers:
            raise ValueError(f"timescales must be None or a list of {num_layers} entries (one per layer)")
        self.timescale_layers = tuple(k for k, ts in enumerate(timescales) if ts is not None)
        if self.timescale_layers and not bias:
            raise ValueError("timescales need bias=True: they are fixed gate biases")
        for k in self.timescale_layers:
            self.register_buffer(f"bias_fixed_l{k}", self._fixed_bias(k, timescales[k]))
        self.flatten_parameters()

    def _fixed_bias(self, layer: int, timescales) -> torch.Tensor:
        """The fixed part of a layer's effective bias: (i, f) rows, or all 4H rows if freeze="all"."""
        name = f"timescales[{layer}]"
        try:
            ts = torch.as_tensor(timescales, dtype=torch.float64).detach().cpu()
        except (TypeError, ValueError, RuntimeError) as err:
            raise TypeError(f"{name} must be a 1-D tensor or sequence of numbers ({err})") from None
        check.tensor(name, ts, 1)
        check.shape(name, ts, (self.hidden_size,))
        check.positive(name, ts)
        b_f = bias_from_timescale(ts)
        fixed = torch.cat([-b_f, b_f])
        weight = getattr(self, f"bias_ih_l{layer}")
        if self.freeze == "all":
            fixed = torch.cat([fixed, self.raw_bias(layer).detach()[2 * self.hidden_size:].double().cpu()])
        return fixed.to(device=weight.device, dtype=weight.dtype)

    def gate_biases(self, layer: int) -> torch.Tensor:
        """The effective (4H,) bias the layer uses: b_ih + b_hh with the fixed entries in place."""
        return self._gate_biases(check.index("layer", layer, self.num_layers))

    def _gate_biases(self, layer: int, mark: bool = False) -> torch.Tensor | None:
        """``gate_biases`` of a layer index known to be valid (None without biases): an MTS layer's
        eagerly through ``_EffectiveBias`` (built once per state of its biases), traced as plain
        ops. With ``mark`` (the forward's own call, eager only) the bias carries the pair torch's
        LSTM kernel adds in its place (``paths.torch_bias``): b_ih and b_hh of a plain layer, the
        effective bias and a zero vector of an MTS layer (the slots of its flat buffer where
        ``flatten_parameters`` made one and the bias is written there)."""
        if not self.bias:
            return None
        b_ih, b_hh = self._member(f"bias_ih_l{layer}"), self._member(f"bias_hh_l{layer}")
        eager = check.eager()
        if layer not in self.timescale_layers:
            bias = b_ih + b_hh
            return paths.torch_bias(bias, b_ih, b_hh) if mark and eager else bias
        fixed = self._member(f"bias_fixed_l{layer}")
        if not eager:
            return torch.cat([fixed, (b_ih + b_hh)[fixed.shape[0]:]])
        memo = self._memo(layer, b_ih.device)
        bias = _EffectiveBias.apply(b_ih, b_hh, fixed, memo)
        if not mark:
            return bias
        slot = memo.get("slot")
        zeros = memo["zeros"] if slot is not None and memo["value"] is slot else paths.zeros(
            bias.shape[0], bias.dtype, bias.device)
        return paths.torch_bias(bias, None, zeros)

    def _memo(self, layer: int, device: torch.device) -> dict:
        """An MTS layer's effective-bias memo on ``device`` (``_EffectiveBias``; one per device:
        nn.DataParallel's replicas share this module's dict). Not pickled (``__getstate__``)."""
        return self.__dict__.setdefault("_bias_memo", {}).setdefault((layer, device), {})

    def flatten_parameters(self) -> None:
        """As torch.nn.LSTM's: on CUDA, where cuDNN takes a layer's tensors, they become views of
        one buffer in cuDNN's layout, W_ih, W_hh, b_ih, b_hh (an MTS layer's buffer holds its
        effective bias and a zero vector in the biases' places; its b_ih and b_hh stay apart), so
        the cudnn path hands cuDNN the module's own tensors and cuDNN copies none of them. Run at
        construction, after every move or cast (``.to``, ``.cuda``, ``.half``...) and on a copy
        or an unpickled module. A no-op for a layer that is flat already, on the CPU (oneDNN takes
        the tensors as they are), where torch would not flatten (bf16, cuDNN off), for a layer
        whose weights are not the module's Parameters (weight drop, parametrizations) and, as
        torch's, for a module with tied parameters."""
        params = [p for p in self._parameters.values() if p is not None]
        if len({p.data_ptr() for p in params}) != len(params):
            return
        for k in range(self.num_layers):
            self._flatten_layer(k)

    def _flatten_layer(self, layer: int) -> None:
        """``flatten_parameters`` for one layer."""
        mts = layer in self.timescale_layers
        names = [f"weight_ih_l{layer}", f"weight_hh_l{layer}"]
        if self.bias and not mts:
            names += [f"bias_ih_l{layer}", f"bias_hh_l{layer}"]
        params = [self._parameters.get(name) for name in names]
        if any(p is None for p in params):
            return  # not the module's Parameters
        layout = _flat_layout(params)
        if layout is None:
            return
        memo = self._memo(layer, params[0].device) if mts else {}
        slots = [memo.get("slot"), memo.get("zeros")] if mts else []
        if all(t is not None for t in slots) and paths.one_buffer(*params, *slots):
            return
        rows = params[0].shape[0]
        slots = [params[0].new_empty(rows), params[0].new_zeros(rows)] if mts else []
        try:
            with torch.no_grad():
                layout(params + slots, self.input_size if layer == 0 else self.hidden_size, self.hidden_size)
        except RuntimeError as err:  # the layer stays as it was: cuDNN copies its weights per call
            warnings.warn(f"tsrnn.LSTM: layer {layer}'s weights could not be laid out in one buffer for cuDNN "
                          f"({err}); cuDNN copies them on every call", RuntimeWarning, stacklevel=3)
            return
        if mts:
            _EffectiveBias.forget(memo)
            memo.update(slot=slots[0], zeros=slots[1])  # the effective bias is built afresh, into the slot

    def _apply(self, fn, recurse=True):
        result = super()._apply(fn, recurse)
        self.flatten_parameters()  # as torch.nn.LSTM: a move or a cast makes new tensors
        return result

    def __getstate__(self):
        state = self.__dict__.copy()
        state.pop("_bias_memo", None)  # built again on the first call (it holds hooks and weak references)
        return state

    def __setstate__(self, state):
        super().__setstate__(state)
        self.flatten_parameters()  # as torch.nn.LSTM: a copy or an unpickled module has separate tensors

    def timescales(self, layer: int) -> torch.Tensor | None:
        """The fixed timescales of an MTS layer (S2 of its forget bias), or None."""
        layer = check.index("layer", layer, self.num_layers)
        if layer not in self.timescale_layers:
            return None
        b_f = getattr(self, f"bias_fixed_l{layer}")[self.hidden_size:2 * self.hidden_size]
        return timescale_from_bias(b_f.double())

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        for k in self.timescale_layers:
            fixed = getattr(self, f"bias_fixed_l{k}").detach()
            n = fixed.shape[0]
            b_ih = destination[f"{prefix}bias_ih_l{k}"].detach().clone()
            b_hh = destination[f"{prefix}bias_hh_l{k}"].detach().clone()
            b_ih[:n], b_hh[:n] = fixed, 0
            destination[f"{prefix}bias_ih_l{k}"], destination[f"{prefix}bias_hh_l{k}"] = b_ih, b_hh

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # A torch.nn.LSTM state_dict has no fixed biases: keep the ones built from `timescales`.
        for k in self.timescale_layers:
            state_dict.setdefault(f"{prefix}bias_fixed_l{k}", getattr(self, f"bias_fixed_l{k}"))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _layer_inputs(self, layer: int) -> tuple:
        return self._gate_biases(layer, mark=True), None


def _flat_layout(tensors: list):
    """How to lay one layer's tensors (W_ih, W_hh and b_ih, b_hh where it has them) out in one
    buffer for cuDNN, with two bias vectors after W_hh where the layer gives none, or None where
    cuDNN would not take them as one (off CUDA, cuDNN off or unable to take a tensor, mixed dtypes,
    aliased tensors), as torch.nn.LSTM.flatten_parameters decides."""
    first = tensors[0]
    if not (first.is_cuda and torch._use_cudnn_rnn_flatten_weight()):
        return None
    if any(t.dtype != first.dtype or not t.is_cuda or not torch.backends.cudnn.is_acceptable(t) for t in tensors):
        return None
    if len({t.data_ptr() for t in tensors}) != len(tensors):
        return None
    return _cudnn_layout


def _cudnn_layout(tensors: list, input_size: int, hidden_size: int) -> None:
    """Make ``tensors`` views of one new buffer in cuDNN's layout for one unidirectional LSTM layer
    (torch's ``_cudnn_rnn_flatten_weight``, which copies them in and points each at its place)."""
    from torch.backends.cudnn import rnn

    with torch.cuda.device_of(tensors[0]):
        torch._cudnn_rnn_flatten_weight(tensors, len(tensors), input_size, rnn.get_cudnn_mode("LSTM"), hidden_size,
                                        0, 1, False, False)


class _EffectiveBias(torch.autograd.Function):
    """An MTS layer's effective bias b = [fixed; (b_ih + b_hh)[n:]] (n = len(fixed)), kept in
    ``memo`` so a warm call builds no bias (on CUDA: launches no kernel for it). It is built again
    when b_ih, b_hh or fixed are other tensors than last time (held by weak reference, so a new
    tensor at a freed one's address is not taken for it), when their version, memory, dtype or
    device changed (an optimizer step, a load, a move), after a backward that reached b_ih or b_hh
    (a hook: the ``p.data.add_(...)`` training loops, whose writes torch counts as no new version),
    and after a write into a view it handed out. Where the module has a flat cuDNN buffer it is
    written into the buffer's slot (``memo["slot"]``) when the same tensors changed version, as an
    optimizer's step writes torch.nn.LSTM's weights in place; otherwise into a new tensor (a
    normal one under torch.inference_mode too), so that a graph still waiting for its backward
    keeps the bias it saw. A write through ``.data`` with no backward after it is not seen (write
    in place under torch.no_grad(), as optimizers and load_state_dict do). Backward: the incoming
    gradient to b_ih and to b_hh, zero in the fixed rows (they are no parameters)."""

    @staticmethod
    def forward(ctx, b_ih, b_hh, fixed, memo):
        sources = (b_ih, b_hh, fixed)
        refs = memo.get("refs")
        same = refs is not None and all(ref() is t for ref, t in zip(refs, sources))
        key = tuple((t._version, t.data_ptr(), t.dtype, t.device) for t in sources)
        value = memo.get("value")
        if not same or memo["stale"] or key != memo["key"] or value._version != memo["written"]:
            moved = refs is None or (same and key != memo["key"])  # the first build, or the same tensors written
            with torch.inference_mode(False), torch.no_grad():  # (the first turns grad mode on)
                value = torch.cat([fixed, (b_ih + b_hh)[fixed.shape[0]:]])
                slot = memo.get("slot")
                if moved and slot is not None and (slot.dtype, slot.device, slot.shape) == (
                        value.dtype, value.device, value.shape):
                    value = slot.copy_(value)
            if not same:
                _EffectiveBias.watch(memo, sources)
            memo.update(value=value, key=key, written=value._version, stale=False)
        ctx.fixed = fixed.shape[0]
        return value.view_as(value)  # a new tensor object each call, the same memory

    @staticmethod
    def watch(memo: dict, sources: tuple) -> None:
        """Key ``memo`` on ``sources`` (weak references) and mark it stale after every backward
        that accumulates a gradient into one of them."""
        _EffectiveBias.forget(memo)

        def stale(_):
            memo["stale"] = True

        memo["refs"] = tuple(weakref.ref(t) for t in sources)
        memo["hooks"] = [t.register_post_accumulate_grad_hook(stale) for t in sources if t.is_leaf and t.requires_grad]

    @staticmethod
    def forget(memo: dict) -> None:
        """Empty ``memo`` of what it was built from (its slots stay)."""
        for hook in memo.get("hooks", ()):
            hook.remove()
        for name in ("refs", "hooks", "value", "key", "written", "stale"):
            memo.pop(name, None)

    @staticmethod
    def backward(ctx, grad):
        grad = torch.cat([grad.new_zeros(ctx.fixed), grad[ctx.fixed:]])
        return grad, grad, None, None
