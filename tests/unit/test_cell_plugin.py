"""A cell is one plug-in (ARCHITECTURE.md, "Adding a cell"): its facts and torch step live in its
own file under tsrnn/ops/recurrence/cells/, and no engine file outside that folder branches on
which cell it runs (the Triton kernels' one dispatch, cells_triton.py, is the exception)."""
import pathlib
import re

import pytest
import torch

import tsrnn
from tsrnn.ops.recurrence import cells

ENGINE = pathlib.Path(tsrnn.__file__).parent
ALLOWED = {ENGINE / "ops" / "recurrence" / "cells_triton.py"}
# a branch on a cell's identity: has_p, an input-gate test, a cell compared with a name
BRANCH = re.compile(r"\bhas_p\b|\binput_gate\s*[!=]=|\bcell(?:\.name)?\s*(?:[!=]=|\bin\b|\bnot in\b)\s*[\"'(\[]"
                    r"|\.startswith\(\s*[\"']plstm")


def branches(text: str) -> list[str]:
    """The lines of ``text`` that branch on a cell's identity."""
    return [line.strip() for line in text.splitlines() if BRANCH.search(line)]


def engine_files():
    for path in sorted(ENGINE.rglob("*.py")):
        if "lab" in path.relative_to(ENGINE).parts or (ENGINE / "ops" / "recurrence" / "cells") in path.parents:
            continue
        if path not in ALLOWED:
            yield path


def test_no_engine_file_branches_on_a_cell():
    found = {str(p.relative_to(ENGINE)): branches(p.read_text()) for p in engine_files()}
    assert not {k: v for k, v in found.items() if v}


@pytest.mark.parametrize("line", ["if cell.has_p:", "if cell == \"lstm\":", "if call.cell != 'lstm':",
                                  "x = 1 if self.input_gate == 'coupled' else 2",
                                  "if cell.name in (\"plstm_coupled\",):", "if name.startswith(\"plstm\"):"])
def test_the_scan_sees_a_planted_branch(line):
    assert branches(f"a = 1\n{line}\n") == [line]


@pytest.mark.parametrize("name", list(cells.CELLS))
def test_a_cell_step_returns_what_its_record_declares(name):
    """The torch step's shapes agree with the record: G gate rows in, H units out, one new state
    per name of ``states``, and every trace that is not a state among its values."""
    cell = cells.CELLS[name]
    B, H = 3, 5
    g = torch.Generator().manual_seed(0)
    z = torch.randn(B, cell.num_gates * H, generator=g, dtype=torch.float64)
    states = tuple(torch.rand(B, H, generator=g, dtype=torch.float64) for _ in cell.states)
    params = tuple(torch.rand(H, generator=g, dtype=torch.float64) + 0.1 for _ in cell.params)
    h, new, values = cell.step(z, states, params, 1.0, cell.defaults)
    assert h.shape == (B, H) and len(new) == cell.num_states and all(s.shape == (B, H) for s in new)
    assert set(cell.traces) - set(cell.states) <= set(values)
    assert set(cell.math_states) <= set(cell.states) and set(cell.positive) <= {*cell.params, *dict(cell.constants)}
    with pytest.raises(RuntimeError):  # a row too few: the step reads exactly G gate rows
        cell.step(z[:, :-H], states, params, 1.0, cell.defaults)
