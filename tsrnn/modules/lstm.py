"""tsrnn.LSTM: a drop-in torch.nn.LSTM whose layers can have fixed timescales (S1-S4).

A multi-timescale (MTS) layer gives unit j the timescale T_j through fixed gate biases, forget
b_f(T_j) (S3) and input -b_f(T_j) (S4), in the buffer ``bias_fixed_l{k}`` (``..._reverse`` for the
reverse direction): no optimizer moves them, and they stay float32 in a bf16 or fp16 module. The
raw bias entries they replace get no gradient; a saved state_dict writes b_ih + b_hh equal to the
effective bias, so a torch.nn.LSTM loads it (strict=False) and computes the same function
(``to_torch()``; ``LSTM.from_torch`` the reverse).
"""
from __future__ import annotations

import warnings
from typing import Sequence

import torch

from tsrnn import _validation as check
from tsrnn.modules.effective_bias import EffectiveBias, effective_bias, equal_rows, full_precision
from tsrnn.modules.stacked import StackedRNN
from tsrnn.ops.recurrence import cells, paths
from tsrnn.memory.timescales import bias_from_timescale, timescale_from_bias

FREEZE = ("gates", "all")


class LSTM(StackedRNN):
    """Drop-in for ``torch.nn.LSTM`` (same parameters, state_dict and forward) with fused kernels.

    The arguments up to ``dtype`` are torch.nn.LSTM's, in its order and with its rules (the flags
    must be bools); ``device`` and ``dtype`` place the parameters (and fixed biases, float32 for a
    16-bit dtype). ``bidirectional=True`` adds each layer's reverse direction (parameters
    ``..._reverse``; out has 2 * H features, h_n and c_n 2 * num_layers rows, as torch's);
    ``proj_size`` P > 0 is torch's projection h_t = W_hr (o tanh(c_t)) (weight_hr_l{k}; h and out
    of P units), which only torch's LSTM kernels (onednn, cudnn) and the reference run: "auto"
    takes one of those, a fused path named by ``backend`` refuses. The tsrnn arguments are
    keyword-only:

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

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None, *,
                 timescales: Sequence[torch.Tensor | None] | None = None, freeze: str = "gates",
                 backend: str = "auto") -> None:
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, backend,
                         cells.CELLS["lstm"], device=device, dtype=dtype, bidirectional=bidirectional,
                         proj_size=proj_size)
        self._init_timescales(timescales, freeze)
        self.flatten_parameters()

    def _init_timescales(self, timescales, freeze) -> None:
        """Check ``timescales`` and ``freeze`` and register the fixed biases of the MTS layers."""
        num_layers = self.num_layers
        check.choice("freeze", freeze, FREEZE)
        self.freeze = freeze
        if timescales is None:
            timescales = [None] * num_layers
        if not isinstance(timescales, (list, tuple)) or len(timescales) != num_layers:
            raise ValueError(f"timescales must be None or a list of {num_layers} entries (one per layer)")
        self.timescale_layers = tuple(k for k, ts in enumerate(timescales) if ts is not None)
        if self.timescale_layers and not self.bias:
            raise ValueError("timescales need bias=True: they are fixed gate biases")
        for k in self.timescale_layers:
            for suffix in self._directions:
                self.register_buffer(f"bias_fixed_l{k}{suffix}", self._fixed_bias(k, suffix, timescales[k]))

    def _fixed_bias(self, layer: int, suffix: str, timescales) -> torch.Tensor:
        """The fixed part of a layer's effective bias: (i, f) rows, or all 4H rows if freeze="all",
        in the parameters' dtype, float32 for a 16-bit one."""
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
        weight = getattr(self, f"bias_ih_l{layer}{suffix}")
        if self.freeze == "all":
            fixed = torch.cat([fixed, self._mts_raw_bias(layer, suffix).detach()[2 * self.hidden_size:].double().cpu()])
        return fixed.to(device=weight.device, dtype=full_precision(weight.dtype))

    def _mts_raw_bias(self, layer: int, suffix: str) -> torch.Tensor:
        """``raw_bias`` of an MTS layer, which has biases (timescales need bias=True)."""
        raw = self.raw_bias(layer, suffix)
        if raw is None:
            raise ValueError("timescales need bias=True: they are fixed gate biases")
        return raw

    def gate_biases(self, layer: int, reverse: bool = False) -> torch.Tensor | None:
        """The effective (4H,) bias the layer uses (its reverse direction's with ``reverse``): b_ih
        + b_hh with the fixed entries in place; an MTS layer's in float32 in a 16-bit module. None
        for a module with bias=False. A new tensor, computed from the parameters (autograd reaches
        them through it); the forward keeps its own (``_biases``)."""
        return self._summed_biases(check.index("layer", layer, self.num_layers), self._suffix(reverse))

    def _summed_biases(self, layer: int, suffix: str) -> torch.Tensor | None:
        """``gate_biases`` of a valid layer index and a direction's suffix, as plain ops."""
        if not self.bias:
            return None
        b_ih, b_hh = self._member(f"bias_ih_l{layer}{suffix}"), self._member(f"bias_hh_l{layer}{suffix}")
        if layer not in self.timescale_layers:
            return b_ih + b_hh
        return effective_bias(self._member(f"bias_fixed_l{layer}{suffix}"), b_ih, b_hh)

    def _biases(self, layer: int, suffix: str) -> tuple:
        """(bias, torch_bias) of a layer's forward (``Layer``; both None without biases): eagerly,
        (None, (b_ih, b_hh)) or an MTS layer's ``EffectiveBias`` with (it, zero vector); traced,
        (the effective bias as plain ops, None)."""
        if not self.bias or not check.eager():
            return self._summed_biases(layer, suffix), None
        b_ih, b_hh = self._member(f"bias_ih_l{layer}{suffix}"), self._member(f"bias_hh_l{layer}{suffix}")
        if layer not in self.timescale_layers:
            return None, (b_ih, b_hh)
        memo = self._memo(layer, suffix, b_ih.device)
        bias = EffectiveBias.apply(b_ih, b_hh, self._member(f"bias_fixed_l{layer}{suffix}"), memo)
        return bias, (bias, memo["zeros"])

    def _memo(self, layer: int, suffix: str, device: torch.device) -> dict:
        """An MTS layer's (direction's) ``EffectiveBias`` memo on ``device``; not pickled."""
        return self.__dict__.setdefault("_bias_memo", {}).setdefault((layer, suffix, device), {})

    def flatten_parameters(self) -> None:
        """As torch.nn.LSTM's: on CUDA, a layer's tensors become views of one buffer in cuDNN's
        layout (an MTS layer's holds its effective bias and a zero vector in the biases' places).
        Run at construction, after every move or cast, and on a copy or unpickled module. A no-op
        where torch would not flatten (CPU, bf16, cuDNN off, tied parameters) and for weights that
        are not the module's Parameters (weight drop, parametrizations)."""
        params = [p for p in self._parameters.values() if p is not None]
        if len({p.data_ptr() for p in params}) != len(params):
            return
        for k in range(self.num_layers):
            for suffix in self._directions:
                self._flatten_layer(k, suffix)

    def _flatten_layer(self, layer: int, suffix: str) -> None:
        """``flatten_parameters`` for one layer's direction."""
        mts = layer in self.timescale_layers
        names = [f"weight_ih_l{layer}{suffix}", f"weight_hh_l{layer}{suffix}"]
        if self.bias and not mts:
            names += [f"bias_ih_l{layer}{suffix}", f"bias_hh_l{layer}{suffix}"]
        if self.proj_size:
            names.append(f"weight_hr_l{layer}{suffix}")
        params = [p for p in (self._parameters.get(name) for name in names) if p is not None]
        if len(params) < len(names):
            return  # not the module's Parameters
        layout = _flat_layout(params)
        if layout is None:
            return
        memo = self._memo(layer, suffix, params[0].device) if mts else {}
        slots: list = [memo.get("slot"), memo.get("zeros")] if mts else []
        weights, projection = (params[:-1], params[-1:]) if self.proj_size else (params, [])
        if all(t is not None for t in slots) and paths.one_buffer(*weights, *slots, *projection):
            return
        rows = params[0].shape[0]
        slots = [params[0].new_empty(rows), params[0].new_zeros(rows)] if mts else []
        try:
            with torch.no_grad():
                layout(weights + slots + projection, params[0].shape[1], self.hidden_size, self.proj_size)
        except RuntimeError as err:  # the layer stays as it was: cuDNN copies its weights per call
            warnings.warn(f"tsrnn.LSTM: layer {layer}'s weights could not be laid out in one buffer for cuDNN "
                          f"({err}); cuDNN copies them on every call", RuntimeWarning, stacklevel=3)
            return
        if mts:
            EffectiveBias.forget(memo)
            memo.update(slot=slots[0], zeros=slots[1])  # the effective bias is built afresh, into the slot

    def _apply(self, fn, recurse=True):
        result = super()._apply(fn, recurse)
        self.flatten_parameters()  # as torch.nn.LSTM: a move or a cast makes new tensors
        return result

    def __getstate__(self):
        state = self.__dict__.copy()
        state.pop("_bias_memo", None)  # built again on the first call (it holds weak references)
        return state

    def __setstate__(self, state):
        super().__setstate__(state)
        self.flatten_parameters()  # as torch.nn.LSTM: a copy or an unpickled module has separate tensors

    def timescales(self, layer: int) -> torch.Tensor | None:
        """The fixed timescales of an MTS layer (S2 of its forget bias; both directions share them), or None."""
        layer = check.index("layer", layer, self.num_layers)
        if layer not in self.timescale_layers:
            return None
        b_f = getattr(self, f"bias_fixed_l{layer}")[self.hidden_size:2 * self.hidden_size]
        return timescale_from_bias(b_f.double())

    def _fixed_names(self):
        """(layer, suffix) of every MTS layer's direction, with its fixed biases."""
        return [(k, suffix) for k in self.timescale_layers for suffix in self._directions]

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        for k, suffix in self._fixed_names():
            fixed = getattr(self, f"bias_fixed_l{k}{suffix}").detach()
            n = fixed.shape[0]
            b_ih = destination[f"{prefix}bias_ih_l{k}{suffix}"].detach().clone()
            b_hh = destination[f"{prefix}bias_hh_l{k}{suffix}"].detach().clone()
            b_ih[:n], b_hh[:n] = fixed, 0
            destination[f"{prefix}bias_ih_l{k}{suffix}"], destination[f"{prefix}bias_hh_l{k}{suffix}"] = b_ih, b_hh

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        """nn.Module's; a state dict without fixed biases (a torch.nn.LSTM's) keeps the ones built
        from ``timescales``, with one warning where its fixed rows of b_ih + b_hh differ from them
        (the loaded model computed another function there)."""
        changed = []
        for k, suffix in self._fixed_names():
            name = f"bias_fixed_l{k}{suffix}"
            fixed = getattr(self, name)
            if prefix + name not in state_dict:
                state_dict[prefix + name] = fixed
                b_ih, b_hh = (state_dict.get(f"{prefix}bias_{kind}_l{k}{suffix}") for kind in ("ih", "hh"))
                if b_ih is not None and b_hh is not None and not equal_rows(b_ih + b_hh, fixed):
                    changed.append(f"{k}{suffix}")
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        if changed:
            rows = "i and f" if self.freeze == "gates" else "all"
            warnings.warn(f"tsrnn.LSTM: the loaded state dict has no fixed biases and its b_ih + b_hh differ from "
                          f"this module's fixed ones in the {rows} rows of layer(s) {', '.join(changed)}; the fixed "
                          "biases (from timescales) were kept, so the module does not compute what the saved one did",
                          UserWarning, stacklevel=3)

    def _exact_bias(self, layer: int) -> bool:
        return layer in self.timescale_layers

    def _full_precision_buffers(self) -> list[str]:
        return [f"bias_fixed_l{k}{suffix}" for k, suffix in self._fixed_names()]

    def to_torch(self) -> torch.nn.LSTM:
        """A torch.nn.LSTM computing the same function (arguments, device, dtype, training mode),
        an MTS layer's fixed biases folded into bias_ih (rounded to a 16-bit module's dtype)."""
        weight = self._member("weight_ih_l0")
        lstm = torch.nn.LSTM(self.input_size, self.hidden_size, self.num_layers, self.bias, self.batch_first,
                             self.dropout, self.bidirectional, self.proj_size, device=weight.device, dtype=weight.dtype)
        fixed = {f"bias_fixed_l{k}{suffix}" for k, suffix in self._fixed_names()}
        lstm.load_state_dict({k: v for k, v in self.state_dict().items() if k not in fixed})
        return lstm.train(self.training)

    @classmethod
    def from_torch(cls, lstm: torch.nn.LSTM, timescales: Sequence[torch.Tensor | None] | None = None, *,
                   freeze: str = "gates",
                   backend: str = "auto") -> "LSTM":
        """A tsrnn.LSTM with ``lstm``'s arguments, weights, device, dtype and training mode; with
        ``timescales``, MTS layers whose fixed biases replace ``lstm``'s in their rows (freeze="all":
        g and o rows from ``lstm``), without a warning. ``from_torch(m.to_torch(), ts)`` computes
        what ``m`` computes."""
        if not isinstance(lstm, torch.nn.LSTM):
            raise TypeError(f"lstm must be a torch.nn.LSTM, got {type(lstm).__name__}")
        weight = lstm.all_weights[0][0]
        module = cls(lstm.input_size, lstm.hidden_size, lstm.num_layers, lstm.bias, lstm.batch_first, lstm.dropout,
                     lstm.bidirectional, lstm.proj_size, device=weight.device, dtype=weight.dtype,
                     timescales=timescales, freeze=freeze, backend=backend)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="tsrnn.LSTM: the loaded state dict has no fixed biases")
            module.load_state_dict(lstm.state_dict())
        if freeze == "all":
            with torch.no_grad():
                for k, suffix in module._fixed_names():
                    raw = module._mts_raw_bias(k, suffix)
                    getattr(module, f"bias_fixed_l{k}{suffix}")[2 * module.hidden_size:] = raw[2 * module.hidden_size:]
        return module.train(lstm.training)


def _flat_layout(tensors: list):
    """The function laying one layer's tensors out in one cuDNN buffer, or None where
    torch.nn.LSTM.flatten_parameters would not (off CUDA, cuDNN off, mixed dtypes, aliases)."""
    first = tensors[0]
    if not (first.is_cuda and torch._use_cudnn_rnn_flatten_weight()):
        return None
    if any(t.dtype != first.dtype or not t.is_cuda or not torch.backends.cudnn.is_acceptable(t) for t in tensors):
        return None
    if len({t.data_ptr() for t in tensors}) != len(tensors):
        return None
    return _cudnn_layout


def _cudnn_layout(tensors: list, input_size: int, hidden_size: int, proj_size: int) -> None:
    """Make ``tensors`` views of one new buffer in cuDNN's layout for one unidirectional layer."""
    from torch.backends.cudnn import rnn

    with torch.cuda.device_of(tensors[0]):
        torch._cudnn_rnn_flatten_weight(tensors, len(tensors), input_size, rnn.get_cudnn_mode("LSTM"), hidden_size,
                                        proj_size, 1, False, False)
