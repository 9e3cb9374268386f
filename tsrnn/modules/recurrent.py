"""``tsrnn.Recurrent``: a stack of layers of any cell of ``tsrnn.ops.recurrence.cells.CELLS`` that
has no per-unit parameters and no step input, by name (the pLSTM cells have their own module,
``tsrnn.PowerLawLSTM``)."""
from __future__ import annotations

from typing import Mapping

import torch

from tsrnn import _validation as check
from tsrnn.memory.timescales import chrono as chrono_biases
from tsrnn.modules.stacked import StackedRNN
from tsrnn.ops.recurrence import cells


class Recurrent(StackedRNN):
    """``out, state = tsrnn.Recurrent(input_size, hidden_size, cell="janet")(x)``: torch.nn.LSTM's
    conventions (batch_first, bidirectional, dropout, a PackedSequence or ``lengths=``, parameters
    ``weight_ih_l{k}``, ``weight_hh_l{k}``, ``bias_ih_l{k}``, ``bias_hh_l{k}`` of G*H rows in the
    cell's gate order); ``state`` is (h_n, *states_n) in the cell's order, each
    (num_layers * directions, B, H).

    ``constants``: the cell's constants by name (its defaults where absent, e.g. JANET's beta).
    ``chrono``: t_max of chrono initialisation (``tsrnn.memory.timescales.chrono``): the "f" gate's
    b_ih = log U[1, t_max - 1] and, for a cell with an "i" gate, its b_ih = -b_f; the other biases
    0. None: torch.nn.LSTM's uniform initialisation of every parameter."""

    def __init__(self, input_size: int, hidden_size: int, cell: str, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None, *,
                 constants: Mapping[str, float] | None = None, chrono: float | None = None,
                 backend: str = "auto") -> None:
        described = cells.get(cell)
        extra = [*described.params, *([] if described.step_input is None else [described.step_input])]
        if extra:
            raise ValueError(f"tsrnn.Recurrent runs cells without per-unit parameters or a step input; {cell} has "
                             f"{', '.join(extra)}")
        given = dict(constants or {})
        unknown = set(given) - {name for name, _ in described.constants}
        if unknown:
            raise ValueError(f"the cell {cell} has no constant {sorted(unknown)[0]!r}; its constants are "
                             f"{[name for name, _ in described.constants]}")
        values = check.cell_constants(described, [given.get(name, default) for name, default in described.constants])
        if chrono is not None and not bias:
            raise ValueError("chrono initialises the biases: it needs bias=True")
        if chrono is not None and "f" not in described.gates:
            raise ValueError(f"chrono initialises the forget gate's bias; the cell {cell} has no gate 'f'")
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, backend, described,
                         device=device, dtype=dtype, bidirectional=bidirectional)
        self.constants, self.chrono = dict(zip((name for name, _ in described.constants), values)), chrono
        self._constant_values = values
        if chrono is not None:
            self.reset_chrono()

    @torch.no_grad()
    def reset_chrono(self, generator: torch.Generator | None = None) -> None:
        """Chrono initialisation of every layer's biases (class docstring), drawn with ``generator``."""
        if self.chrono is None:
            raise ValueError("reset_chrono needs the module's chrono (t_max); it was made with chrono=None")
        gates, hidden, t_max = self.cell.gates, self.hidden_size, self.chrono
        for names in self._all_weights:
            b_ih, b_hh = (self._member(name) for name in names if name.startswith(("bias_ih", "bias_hh")))
            b_ih.zero_()
            b_hh.zero_()
            forget = chrono_biases(hidden, t_max, generator).to(b_ih)
            f = gates.index("f")
            b_ih[f * hidden:(f + 1) * hidden] = forget
            if "i" in gates:
                i = gates.index("i")
                b_ih[i * hidden:(i + 1) * hidden] = -forget

    def extra_repr(self) -> str:
        constants = "".join(f", {name}={value:g}" for name, value in self.constants.items())
        chrono = f", chrono={self.chrono:g}" if self.chrono is not None else ""
        return super().extra_repr() + f", cell={self.cell.name!r}{constants}{chrono}"

    def _constants(self) -> tuple:
        return self._constant_values
