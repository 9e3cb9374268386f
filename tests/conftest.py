"""Shared test helpers; the tolerance and shape tables and the random layer arguments are
tsrnn.testing's (import them from there)."""
from __future__ import annotations

import os
import pathlib

import pytest
import torch

if not torch.cuda.is_available():  # run the Triton kernels on CPU tensors; must precede their import
    os.environ.setdefault("TRITON_INTERPRET", "1")

from tsrnn import backend
from tsrnn.ops.recurrence.cells import CELLS
from tsrnn.testing import _error, layer_args
from tsrnn.backend import cache, choice, registry, trust


@pytest.fixture(autouse=True, scope="session")
def one_thread():
    """Tests use tiny shapes: one thread keeps them fast on a shared 2-core machine. The kernels'
    multi-thread paths are tested with explicit thread counts (test_cpu_kernels.py)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True, scope="session")
def session_cache(tmp_path_factory):
    """The backend's disk cache (tsrnn.backend.cache) of this session in a folder of its own, never
    the user's ~/.cache; subprocesses inherit TSRNN_CACHE_DIR."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TSRNN_CACHE_DIR", str(tmp_path_factory.mktemp("tsrnn-cache")))
        yield


@pytest.fixture
def clean_backend_state(monkeypatch, tmp_path_factory):
    """No TSRNN_* variables from the caller's shell, and fresh warnings, choices and verdicts, and a
    disk cache of the test's own (empty, not read yet)."""
    for name in ("TSRNN_BACKEND", "TSRNN_AUTOTUNE", "TSRNN_VERIFY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TSRNN_CACHE_DIR", str(tmp_path_factory.mktemp("tsrnn-cache")))
    monkeypatch.setattr(cache, "_stores", {})
    monkeypatch.setattr(cache, "_warned", set())
    monkeypatch.setattr(registry, "_warned", set())
    monkeypatch.setattr(choice, "_tuned", {})
    monkeypatch.setattr(trust, "_verdicts", {})
    monkeypatch.setattr(choice, "_reused", {})
    monkeypatch.setattr(choice, "MEMO", {})


def forget_verdicts():
    """Drops every verdict of "auto", in memory and in the test's disk cache (clean_backend_state's
    folder): the next call verifies again."""
    trust._verdicts.clear()
    cache.forget()
    for file in cache.directory().iterdir():
        file.unlink()


def script_module(path):
    """The Python file at ``path`` (a script of bench/ or docs/, which are no packages) as a module."""
    import importlib.util

    path = pathlib.Path(path)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def corpus_folder(folder, text, name="{split}.txt"):
    """``folder`` made a corpus whose train, valid and test files (named by ``name``) each hold
    ``text``; its path as a str."""
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for split in ("train", "valid", "test"):
        (folder / name.format(split=split)).write_text(text)
    return str(folder)


def concatenated(tensors, input_size, hidden_size, proj_size):
    """The CPU stand-in for cuDNN's layout (``tsrnn.LSTM.flatten_parameters``): the tensors one
    after the other in one new buffer."""
    flat = torch.cat([t.reshape(-1) for t in tensors])
    offset = 0
    for t in tensors:
        t.set_(flat.untyped_storage(), offset, t.shape)
        offset += t.numel()


@pytest.fixture
def flat_on_cpu(monkeypatch):
    """tsrnn.LSTM lays its layers out in one buffer on the CPU too (``concatenated``), as on CUDA."""
    from tsrnn.modules import lstm

    monkeypatch.setattr(lstm, "_flat_layout", lambda tensors: concatenated)


def wrap_layer_runs(monkeypatch, wrap, kinds=("reference", "torch_lstm", "operator")):
    """For this test, every path of ``kinds`` runs its recurrent layers through ``wrap(runner)``, the
    runner its record holds (``Path.run["recurrence"]``, called with the record first)."""
    seen = set()
    for record in backend.REGISTRY.values():
        runs = record.run
        if "recurrence" in runs and record.kind in kinds and id(runs) not in seen:
            seen.add(id(runs))
            monkeypatch.setitem(runs, "recurrence", wrap(runs["recurrence"]))


needs_native = pytest.mark.skipif(not backend.native_available(), reason=f"tsrnn._C not loaded: {backend.LOAD_ERROR}")


def assert_close(actual, expected, tol, what=""):
    """max |actual - expected| <= atol + rtol * max |expected|: tsrnn.testing's rule, ``tol`` a row
    of its TOLERANCE or GRAD_TOLERANCE."""
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    err, bound = _error(actual, expected, tol)
    assert err <= bound, f"{what}: max error {err:.3e} > {bound:.3e}"


def cast(args, dtype, requires_grad=False):
    """A copy of ``args`` with the float tensors in ``dtype`` (dt stays float64 data)."""
    out = {}
    for name, value in args.items():
        if isinstance(value, torch.Tensor) and name != "dt":
            value = value.detach().to(dtype).requires_grad_(requires_grad)
        out[name] = value
    return out


def op_inputs(cell, T, B, I, H, dt, dtype=torch.float32, seed=None, device="cpu"):
    """Positional arguments of torch.ops.tsrnn.recurrence_forward (without ``save``) for a random
    layer: (cell, xg, w_hh, h0, state0, params [P, H] or None, steps [T, B] or None, constants
    (the cell's defaults, a list)), the tensors on ``device``."""
    a = layer_args(cell, T, B, I, H, seed=T * 31 + H if seed is None else seed, dt=dt)
    described = CELLS[cell]
    xg = (a["x"].reshape(T * B, I) @ a["w_ih"].T + a["bias"]).view(T, B, described.num_gates * H)
    state0 = torch.stack([a[f"{s}0"] for s in described.states])
    params = torch.stack([a[name] for name in described.params]) if described.params else None
    cast_ = lambda t: None if t is None else t.to(device, dtype)  # noqa: E731
    return (cell, cast_(xg), cast_(a["w_hh"]), cast_(a["h0"]), cast_(state0), cast_(params), cast_(a.get("dt")),
            list(described.defaults))


# The tiers (pyproject.toml's markers) are the folders: tests/unit, tests/kernels (mirroring
# tsrnn/ops and csrc: recurrence/, linear_scan/, gemm/) and tests/integration.
TIERS = ("unit", "kernels", "integration")


def pytest_collection_modifyitems(config, items):
    """Marks each test with its folder's tier (select one with -m)."""
    here = pathlib.Path(__file__).parent
    for item in items:
        parts = item.path.relative_to(here).parts
        if parts[0] in TIERS:
            item.add_marker(getattr(pytest.mark, parts[0]))
