"""The public API is typed (PEP 561: tsrnn/py.typed): every public function and method of the
modules, the functional ops, the memory science and tsrnn.load has annotated parameters and
return, and mypy (pyproject.toml's [tool.mypy]) finds no error in those files."""
from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import tsrnn
from tsrnn import functional
from tsrnn.lab import loading
from tsrnn.memory import averaging, contexts, tilt, timescales
from tsrnn.modules import stacked

ROOT = Path(__file__).resolve().parents[2]
CLASSES = (tsrnn.LSTM, tsrnn.PowerLawLSTM, stacked.StackedRNN, tilt.TILT, contexts.BufferContext,
           contexts.TILTContext, contexts.TILTBufferContext, loading.Trained)
MODULES = (functional, timescales, averaging, loading)


def _public():
    for cls in CLASSES:
        for name, member in vars(cls).items():
            if name.startswith("_") and name != "__init__":
                continue
            if isinstance(member, property):
                member = member.fget
            if isinstance(member, (classmethod, staticmethod)):
                member = member.__func__
            if inspect.isfunction(member):
                yield f"{cls.__name__}.{name}", member
    for module in MODULES:
        for name, member in vars(module).items():
            if not name.startswith("_") and inspect.isfunction(member) and member.__module__ == module.__name__:
                yield f"{module.__name__}.{name}", member


PUBLIC = dict(_public())


def test_the_public_api_is_found():
    assert {"LSTM.__init__", "LSTM.from_torch", "PowerLawLSTM.forward", "StackedRNN.forward", "TILT.forward",
            "tsrnn.functional.lstm", "tsrnn.memory.timescales.inverse_gamma_quantiles",
            "tsrnn.lab.loading.load", "Trained.score"} <= set(PUBLIC)


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_every_public_signature_is_annotated(name):
    signature = inspect.signature(inspect.unwrap(PUBLIC[name]))
    missing = [p for p, v in signature.parameters.items()
               if p not in ("self", "cls") and v.annotation is inspect.Parameter.empty]
    assert not missing, f"{name}: parameters without a type: {missing}"
    assert signature.return_annotation is not inspect.Signature.empty, f"{name}: no return type"


def test_py_typed_marks_the_package():
    assert (Path(tsrnn.__file__).parent / "py.typed").is_file()


@pytest.mark.slow
def test_mypy_finds_no_error():
    pytest.importorskip("mypy")
    if not (ROOT / "pyproject.toml").is_file():
        pytest.skip("needs the source tree and its pyproject.toml")
    result = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental"], cwd=ROOT, capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success: no issues found" in result.stdout
