"""The compiled cells (csrc/recurrence/cells/list.h's TSRNN_CELLS) are the Python cells
(tsrnn.ops.recurrence.cells.CELLS), in the same order, each with the same gates, states, saved
activations, per-unit parameters, step input and constants: a cell added on one side only, or
declared differently, fails here. A small C++ program that includes list.h prints each cell's
declarations (the constexprs the kernels compile against, not a parse of the source).
"""
import pathlib
import shutil
import subprocess

import pytest

from tsrnn.ops.recurrence.cells import CELLS

pytestmark = [pytest.mark.slow,  # compiles a header-only program (about a second)
              pytest.mark.skipif(shutil.which("g++") is None, reason="the cell list is read with g++")]

ROOT = pathlib.Path(__file__).resolve().parents[3]
PROGRAM = r"""
#include <cstdio>
#include "recurrence/cells/list.h"
#define TSRNN_PRINT_CELL(C)                                                                          \
  std::printf("%s %d %d %d %d %d %d\n", C::kName, C::kGates, C::kStates, C::kSaved, C::kParams, \
              static_cast<int>(C::kStepInput), C::kConstants);
int main() {
  using namespace tsrnn;
  TSRNN_CELLS(TSRNN_PRINT_CELL)
}
"""


def compiled_cells(tmp_path, list_dir=None):
    """[(name, gates, states, saved, params, step_input, constants)] of TSRNN_CELLS, in order;
    ``list_dir`` a folder of headers ahead of csrc/ (a planted list)."""
    source, binary = tmp_path / "cells.cpp", tmp_path / "cells"
    source.write_text(PROGRAM)
    include = ([f"-I{list_dir}"] if list_dir else []) + [f"-I{ROOT / 'csrc'}"]
    subprocess.run(["g++", "-std=c++17", *include, str(source), "-o", str(binary)], check=True,
                   capture_output=True, text=True, timeout=120)
    out = subprocess.run([str(binary)], check=True, capture_output=True, text=True, timeout=60).stdout
    return [(name, *map(int, rest)) for name, *rest in (line.split() for line in out.splitlines())]


def python_cells():
    return [(cell.name, cell.num_gates, cell.num_states, cell.num_saved, len(cell.params),
             int(cell.step_input is not None), len(cell.constants)) for cell in CELLS.values()]


def test_the_compiled_cells_are_the_python_cells(tmp_path):
    assert compiled_cells(tmp_path) == python_cells()


def test_a_planted_mismatch_fails(tmp_path):
    """list.h with the coupled pLSTM left out, and with the LSTM's saved count changed: both differ."""
    planted = tmp_path / "include" / "recurrence" / "cells"
    planted.mkdir(parents=True)
    text = (ROOT / "csrc" / "recurrence" / "cells" / "list.h").read_text()
    line = "  X(PlstmCoupled)      \\\n"
    assert line in text
    (planted / "list.h").write_text(text.replace(line, ""))
    assert compiled_cells(tmp_path, tmp_path / "include") != python_cells()
    lstm = (ROOT / "csrc" / "recurrence" / "cells" / "lstm.h").read_text()
    assert "kSaved = 4;" in lstm
    (planted / "list.h").write_text(text.replace('"recurrence/cells/lstm.h"', '"recurrence/cells/lstm_planted.h"'))
    (planted / "lstm_planted.h").write_text(lstm.replace("kSaved = 4;", "kSaved = 5;"))
    assert compiled_cells(tmp_path, tmp_path / "include") != python_cells()
