"""tsrnn.LSTM: a drop-in torch.nn.LSTM whose layers can have fixed timescales (S1-S4).

A multi-timescale (MTS) layer gives unit j the timescale T_j through fixed gate biases:
effective forget bias b_f(T_j) = -log(expm1(1/T_j)) and input bias -b_f(T_j). They live in the
buffer ``bias_fixed_l{k}``, never in a Parameter, so no optimizer (momentum, weight decay, Adam)
can move them; the raw entries of bias_ih/bias_hh they replace get no gradient, and a saved
state_dict writes them so that b_ih + b_hh equals the effective bias (a torch.nn.LSTM that loads
it computes the same function).
"""
from __future__ import annotations

import torch

from tsrnn import _validation as check
from tsrnn.ops.recurrence import cells
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

    def _gate_biases(self, layer: int) -> torch.Tensor:
        """``gate_biases`` of a layer index known to be valid: an MTS layer's eagerly through
        ``_EffectiveBias`` (built once per version of its biases), traced as plain ops."""
        if layer not in self.timescale_layers:
            return self.raw_bias(layer)
        b_ih, b_hh = self._member(f"bias_ih_l{layer}"), self._member(f"bias_hh_l{layer}")
        fixed = self._member(f"bias_fixed_l{layer}")
        if not check.eager():
            return torch.cat([fixed, (b_ih + b_hh)[fixed.shape[0]:]])
        memos = self.__dict__.setdefault("_bias_memo", {})  # an MTS layer -> its _EffectiveBias memo
        return _EffectiveBias.apply(b_ih, b_hh, fixed, memos.setdefault(layer, {}))

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
        return self._gate_biases(layer), None


class _EffectiveBias(torch.autograd.Function):
    """An MTS layer's effective bias b = [fixed; (b_ih + b_hh)[n:]] (n = len(fixed)), computed once
    per version of b_ih, b_hh and fixed (an optimizer step, a load or a move makes a new one) and
    kept in ``memo``, so a warm call builds no bias (on CUDA: launches no kernel for it); a write
    through ``.data``, which torch counts as no new version, is not seen (write in place under
    torch.no_grad(), as optimizers and load_state_dict do). Backward:
    the incoming gradient to b_ih and to b_hh, zero in the fixed rows (they are no parameters)."""

    @staticmethod
    def forward(ctx, b_ih, b_hh, fixed, memo):
        key = tuple((t._version, t.data_ptr(), t.dtype, t.device) for t in (b_ih, b_hh, fixed))
        if memo.get("key") != key:
            memo["value"], memo["key"] = torch.cat([fixed, (b_ih + b_hh)[fixed.shape[0]:]]), key
        ctx.fixed = fixed.shape[0]
        value = memo["value"]
        return value.view_as(value)  # a new tensor object each call, the same memory

    @staticmethod
    def backward(ctx, grad):
        grad = torch.cat([grad.new_zeros(ctx.fixed), grad[ctx.fixed:]])
        return grad, grad, None, None
