"""tsrnn.PowerLawLSTM: the power-law forget-gate LSTM of seed 002 (S7-S9), stacked.

Each unit forgets as a power law of the time since its last reset, f = (age ratio)^(-p) with a
per-unit decay exponent p = σ(p_logit) initialized so that p ~ U(0, 1). The state (h, c, a)
carries the age a instead of absolute and reference times, so it can be passed from one call
to the next (truncated BPTT) with no global clock.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence

from tsrnn import _validation as check
from tsrnn.modules.stacked import StackedRNN, State
from tsrnn.ops.recurrence import cells


class PowerLawLSTM(StackedRNN):
    """Stacked pLSTM with fused kernels.

    The arguments up to ``dtype`` are torch.nn.LSTM's, in its order and with its rules.
    ``bidirectional=True`` (tsrnn's extension) adds each layer's reverse direction (parameters
    ``..._reverse``, its own p), reading each sequence backwards within its length, Δt included
    (the Δt of the same position, not shifted). ``proj_size`` must be 0. Keyword-only:

    Args:
        eps: ε of the forget gate (S7), > 0.
        input_gate: "coupled" (i = 1 - f, gates r, g, o: the paper's choice) or "separate"
            (i = σ(z_i), gates i, r, g, o).
        learn_p: train p_logit (a Parameter) or keep it fixed (a buffer); None (the default):
            learn p unless fixed_p is given. learn_p=True with fixed_p is an error.
        fixed_p: one decay exponent p > 0 for every unit, fixed (buffers ``p_l{k}``, no p_logit;
            p >= 1 allowed, as seed 002 §5.1).

    ``out, (h_n, c_n, a_n) = m(x, state=None, dt=None, lengths=None)``; dt (T, B) or (T, B, 1)
    step lengths > 0 ((B, T) or (B, T, 1) if batch_first), None for Δt = 1; x may be a
    PackedSequence (dt then one of the same batch_sizes), or padded with ``lengths`` (B,): see
    ``tsrnn.LSTM``. a_n is each row's age after its last step.
    """

    mode = "PLSTM"

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None, *, eps: float = 1e-3,
                 input_gate: str = "coupled", learn_p: bool | None = None, fixed_p: float | None = None,
                 backend: str = "auto") -> None:
        cell = cells.plstm_cell(input_gate)
        check.positive_real("eps", eps)
        check.choice("learn_p", learn_p, (None, True, False))
        if fixed_p is not None:
            fixed_p = check.positive_real("fixed_p", fixed_p)
            if learn_p:
                raise ValueError(f"learn_p=True and fixed_p={fixed_p!r} contradict each other: "
                                 "a fixed p is not learned")
        learn_p = fixed_p is None if learn_p is None else bool(learn_p)
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, backend, cell,
                         device=device, dtype=dtype, bidirectional=bidirectional, proj_size=proj_size)
        self.eps, self.input_gate, self.learn_p = float(eps), input_gate, learn_p
        self.fixed_p = fixed_p
        names = [f"l{k}{suffix}" for k in range(num_layers) for suffix in self._directions]
        if fixed_p is not None:
            full = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype  # a fixed p never rounds
            for name in names:
                self.register_buffer(f"p_{name}", torch.full((hidden_size,), fixed_p, device=device, dtype=full))
            return
        for name in names:
            p_logit = torch.empty(hidden_size, device=device, dtype=dtype)
            if learn_p:
                self.register_parameter(f"p_logit_{name}", nn.Parameter(p_logit))
            else:
                self.register_buffer(f"p_logit_{name}", p_logit)
        self.reset_p()

    def _check_projection(self, proj_size: int, hidden_size: int) -> None:
        """torch.nn.LSTM's rule for ``proj_size`` (the same refusals, with its messages), then any
        projection refused: the pLSTM has none."""
        super()._check_projection(proj_size, hidden_size)
        if proj_size:
            raise ValueError(f"proj_size={proj_size} is not supported: tsrnn.PowerLawLSTM has no projection "
                             "(proj_size=0); torch.nn.LSTM's projection is tsrnn.LSTM's proj_size")

    def reset_parameters(self) -> None:
        """torch.nn.LSTM's initialization of the weights and biases, and p ~ U(0, 1) again where p
        is drawn (``reset_p``; a fixed p stays)."""
        super().reset_parameters()
        if self.fixed_p is None:
            self.reset_p()

    def _full_precision_buffers(self) -> list[str]:
        if self.fixed_p is None:
            return []
        return [f"p_l{k}{suffix}" for k in range(self.num_layers) for suffix in self._directions]

    @torch.no_grad()
    def reset_p(self, generator: torch.Generator | None = None) -> None:
        """Draw p ~ U(0, 1) for every unit (p_logit = logit(p))."""
        if self.fixed_p is not None:
            raise ValueError(f"this PowerLawLSTM has p fixed at {self.fixed_p}; it has no p to draw")
        for k in range(self.num_layers):
            for suffix in self._directions:
                p_logit = getattr(self, f"p_logit_l{k}{suffix}")
                u = torch.rand(p_logit.shape, generator=generator, dtype=torch.float64)
                p_logit.copy_(torch.logit(u.clamp(1e-6, 1 - 1e-6)))

    def p(self, layer: int, reverse: bool = False) -> torch.Tensor:
        """Decay exponents σ(p_logit) of one layer (of its reverse direction with ``reverse``), (H,)."""
        return self._p(check.index("layer", layer, self.num_layers), self._suffix(reverse))

    def _p(self, layer: int, suffix: str = "") -> torch.Tensor:
        """``p`` of a layer index known to be valid and a direction's suffix."""
        if self.fixed_p is not None:
            return self._member(f"p_l{layer}{suffix}")
        return torch.sigmoid(self._member(f"p_logit_l{layer}{suffix}"))

    def extra_repr(self) -> str:
        p = f"fixed_p={self.fixed_p}" if self.fixed_p is not None else f"learn_p={self.learn_p}"
        return super().extra_repr() + f", eps={self.eps}, input_gate={self.input_gate!r}, {p}"

    def _params(self, layer: int, suffix: str) -> tuple:
        return (self._p(layer, suffix),)

    def _constants(self) -> tuple:
        return (self.eps,)

    def _call_inputs(self, x, unbatched, packing, dt=None) -> dict:
        """dt checked in the caller's layout (see the class), passed on detached as (T, B), or (N,)
        when packed."""
        if dt is None:
            return {"dt": None}
        if packing is not None and x.dim() == 2:  # the rows of a PackedSequence
            if not isinstance(dt, PackedSequence) or not torch.equal(dt.batch_sizes, packing.batch_sizes):
                raise TypeError("with a PackedSequence input, dt must be a PackedSequence of the same batch_sizes "
                                "(pack it as the input, e.g. with pack_padded_sequence and the same lengths)")
            data = dt.data.squeeze(-1) if dt.data.dim() == 2 and dt.data.shape[-1] == 1 else dt.data
            check.tensor("dt", data, 1)
            check.shape("dt", data, (x.shape[0],))
            check.same_device("input", x, dt=data)
            check.positive("dt", data)
            return {"dt": data.detach()}
        steps, batch = x.shape[0], x.shape[1]
        layout = (steps,) if unbatched else ((batch, steps) if self.batch_first else (steps, batch))
        check.tensor("dt", dt)
        if tuple(dt.shape) not in (layout, layout + (1,)):
            raise ValueError(f"dt must have shape {layout} or {layout + (1,)}, got {tuple(dt.shape)}")
        check.same_device("input", x, dt=dt)
        check.positive("dt", dt)
        if dt.dim() > len(layout):
            dt = dt.squeeze(-1)
        if unbatched:
            dt = dt.unsqueeze(1)
        elif self.batch_first:
            dt = dt.transpose(0, 1)
        return {"dt": (dt if packing is None else packing.pack(dt)).detach()}

    # dt comes before lengths: a positional call differs from StackedRNN's (input, hx, lengths)
    def forward(self, input: torch.Tensor | PackedSequence, state: State = None,  # type: ignore[override]
                dt: torch.Tensor | None = None,
                lengths: torch.Tensor | Sequence[int] | None = None) -> tuple[torch.Tensor | PackedSequence, tuple[torch.Tensor, ...]]:
        return super().forward(input, state, lengths, dt=dt)

    # dt comes before lengths, as in forward
    def forget_gates(self, input: torch.Tensor | PackedSequence, state: State = None,  # type: ignore[override]
                     dt: torch.Tensor | None = None,
                     lengths: torch.Tensor | Sequence[int] | None = None) -> list[torch.Tensor]:
        """Forget-gate values (T, B, H) of every layer for this input (S6 data)."""
        return super().forget_gates(input, state, lengths, dt=dt)

    @torch.no_grad()
    def trace(self, input: torch.Tensor | PackedSequence, state: State = None, dt: torch.Tensor | None = None,
              lengths: torch.Tensor | Sequence[int] | None = None) -> list[dict[str, torch.Tensor]]:
        """The pLSTM's inner variables for this input (seed 002 §5.2), one dict per layer and
        direction in h_n's row order (a reverse direction's traces in input time order, its age
        counted from the sequence's end): "r" the reset gate, "a" the age after the step (S9),
        "f" the forget gate, each (T, B, H) time-major in the math dtype, and "p" (H,)."""
        traces = self._traces(input, state, lengths, dt=dt)
        directions = len(self._directions)
        return [{"r": t["r"], "a": t["a"], "f": t["f"], "p": self.p(i // directions, bool(i % directions)).detach()}
                for i, t in enumerate(traces)]
