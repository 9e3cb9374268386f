"""``pytest bench/``'s summary (bench/speed_summary.py): a row per cell and device, ratios to
torch.nn.LSTM and to the step loop, and a warning when the repeats disagree, tested by injecting
noise into its clock; and the bench's default run leaves the detailed tables out."""
import itertools
import pathlib
import random
import subprocess
import sys

import pytest

from tsrnn import backend

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import speed_summary  # noqa: E402

pytestmark = pytest.mark.skipif(not backend.native_available(), reason="the summary times tsrnn's compiled paths")


@pytest.fixture
def tiny(monkeypatch):
    """The summary at shapes that run in milliseconds."""
    monkeypatch.setattr(speed_summary, "T", 3)
    monkeypatch.setattr(speed_summary, "B", 2)
    monkeypatch.setattr(speed_summary, "H", 4)
    monkeypatch.setattr(speed_summary, "TILT_SHAPE", (5, 2, 3))


def clock(durations):
    """A clock whose (start, end) readings around each call are ``durations`` seconds apart, in turn."""
    now, readings, pending = [0.0], itertools.count(), iter(durations)

    def read():
        value = now[0]
        if next(readings) % 2 == 0:
            now[0] += next(pending)
        return value
    return read


def test_summary_has_a_row_per_cell_and_device_with_both_ratios(tiny):
    rows = speed_summary.measure_all(rounds=9, clock=clock(itertools.repeat(0.25)))  # exact in binary
    assert [(row.cell, row.device) for row in rows] == [(cell.name, device.type) for device in speed_summary.devices()
                                                        for cell in speed_summary.CELLS]
    for row in rows:
        assert set(row.ratios) == ({"step loop"} if row.cell == "TILT" else {"torch.nn.LSTM", "step loop"})
        assert all((r.median, r.low, r.high, r.rounds) == (1.0, 1.0, 1.0, 9) for r in row.ratios.values())
        assert row.path and row.path != "reference"
    lines = speed_summary.table(rows)
    assert not any("WARNING" in line for line in lines)
    assert any(line.startswith("CPU: ") for line in lines) and any("torch " in line for line in lines)
    tilt = next(line for line in lines if line.startswith("TILT"))
    assert "n/a" in tilt and "chunked" in tilt


def test_summary_warns_when_noise_is_injected_into_its_clock(tiny):
    rng = random.Random(0)
    stalls = (0.25 * (100 if rng.random() < 0.2 else 1) for _ in itertools.count())  # a stalled core: 1 call in 5 100x slower
    lines = speed_summary.table(speed_summary.measure_all(rounds=9, clock=clock(stalls)))
    warning = lines.index(next(line for line in lines if line.startswith("WARNING: the repeats disagree")))
    flagged = [line.split(":")[0].strip() for line in lines[warning + 1:]]
    assert "LSTM cpu" in flagged and len(flagged) >= 3, lines


def test_summary_checks_each_cell_against_its_step_loop_before_timing(tiny, monkeypatch):
    monkeypatch.setattr(speed_summary.tsrnn.reference, "tilt", lambda u, *args: (u[:, :, None] * 0 + 1, None))
    with pytest.raises(AssertionError, match="disagrees with its step loop before timing"):
        speed_summary.measure(speed_summary.CELLS[-1], speed_summary.devices()[0], rounds=1)


def test_pytest_bench_runs_the_summary_and_leaves_the_tables_to_minus_m_detail():
    def collected(*args):
        result = subprocess.run([sys.executable, "-m", "pytest", "--co", "-q", *args], cwd=ROOT, capture_output=True,
                                text=True, timeout=120)
        return [line for line in result.stdout.splitlines() if "::" in line]

    assert collected("bench") == ["bench/test_summary.py::test_summary"]
    detail = collected("bench", "-m", "detail")
    assert detail and "bench/test_summary.py::test_summary" not in detail
    assert all(line.startswith("bench/test_tilt.py::") for line in collected("bench/test_tilt.py"))
