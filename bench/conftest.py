"""Benchmarks check correctness before they time (llm.c discipline): see `checked`.

``pytest bench/`` runs the summary (test_summary.py: each cell against torch.nn.LSTM and its step
loop, printed at the end); the detailed pytest-benchmark tables of the other files run with
``-m detail``, or when their file is named (``pytest bench/test_tilt.py``).
"""
from pathlib import Path

import pytest
import torch

from tsrnn import backend

SUMMARY_FILE = "test_summary.py"
SUMMARY_PROPERTY = "tsrnn speed summary"  # the summary test's record_property name (it crosses xdist workers)
_summaries: list[str] = []


def _named(config, path: Path) -> bool:
    """Whether the command line names this file (or a test in it), not only its folder."""
    root = Path(config.invocation_params.dir)
    return any((root / arg.split("::")[0]).resolve() == path for arg in config.args)


def pytest_collection_modifyitems(config, items):
    if not backend.native_available():
        skip = pytest.mark.skip(reason=f"tsrnn._C not loaded: {backend.LOAD_ERROR}")
        for item in items:
            item.add_marker(skip)
    detail = [item for item in items if item.path.name != SUMMARY_FILE]
    for item in detail:
        item.add_marker(pytest.mark.detail)
    if not config.option.markexpr:
        left_out = [item for item in detail if not _named(config, item.path)]
        if left_out:
            config.hook.pytest_deselected(items=left_out)
            items[:] = [item for item in items if item not in left_out]


def pytest_runtest_logreport(report):
    if report.when == "call":  # the teardown's report carries the item's properties again
        _summaries.extend(value for name, value in report.user_properties if name == SUMMARY_PROPERTY)


def pytest_terminal_summary(terminalreporter):
    for summary in _summaries:
        terminalreporter.section(SUMMARY_PROPERTY)
        terminalreporter.write_line(summary)


def fwd_bwd(module, x, **kwargs):
    """One training step's recurrent work: forward, then backward through every parameter."""
    out = module(x, **kwargs)[0]
    out.sum().backward()
    return out


def checked(module, reference_module, x, atol=1e-4, **kwargs):
    """Assert that ``module`` computes what ``reference_module`` does on ``x`` before timing."""
    with torch.no_grad():
        out, ref = module(x, **kwargs)[0], reference_module(x, **kwargs)[0]
    err = (out - ref).abs().max().item()
    assert err < atol, f"benchmarked module disagrees with its reference: max error {err:.2e}"
