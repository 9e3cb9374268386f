"""`tsrnn selftest` (docs/kernels.md) checks every op on this machine and fails on a mismatch."""
import subprocess
import sys


from tsrnn.lab import selftest
from conftest import needs_native, wrap_layer_runs


@needs_native
def test_selftest_passes_and_prints_every_op():
    lines = []
    assert selftest.run(steps=5, batch=2, hidden=8, repeats=1, out=lines.append) == 0
    text = "\n".join(lines)
    for case in selftest.cases():
        assert case.name in text
    assert "all paths match" in text
    header = next(line for line in lines if line.startswith("path "))
    assert "/ torch" in header and "/ loop" in header and "speed-up" not in text
    lstm = next(line for line in lines if line.startswith("lstm cpu")).split()
    scan = next(line for line in lines if line.startswith("linear_scan cpu")).split()
    assert lstm[-3].endswith("x") and lstm[-2].endswith("x") and scan[-3] == "n/a" and scan[-2].endswith("x")


@needs_native
def test_selftest_times_each_path_over_torch_lstm_and_over_the_step_loop(monkeypatch):
    """The two ratio columns are the path's time over torch.nn.LSTM's and over the loop's, not swapped
    and not the loop's speed-up (a fake clock: the path 2 ms, torch.nn.LSTM 4 ms, the loop 8 ms)."""
    fixed = {selftest.PATH: [2.0], selftest.TORCH_LSTM: [4.0], selftest.LOOP: [8.0]}
    monkeypatch.setattr(selftest.speed, "time_rounds", lambda calls, rounds, **_: {name: fixed[name] for name in calls})
    lstm = next(case for case in selftest.cases() if case.name == "lstm cpu")
    columns, noise = selftest._timing(lstm, (3, 2, 4, 4), 1)
    assert columns.split() == ["2.0", "0.50x", "0.25x"] and noise is None
    scan = next(case for case in selftest.cases() if case.name == "linear_scan cpu")
    assert selftest._timing(scan, (3, 2, 4, 4), 1)[0].split() == ["2.0", "n/a", "0.25x"]


@needs_native
def test_selftest_fails_on_a_wrong_kernel(monkeypatch):
    def wrap(original):
        def skewed(*args, **kwargs):
            out, finals, forget = original(*args, **kwargs)
            return out * 1.001, finals, forget
        return skewed

    wrap_layer_runs(monkeypatch, wrap, kinds=("operator",))
    lines = []
    assert selftest.run(steps=4, batch=2, hidden=4, repeats=1, out=lines.append) == 1
    assert any("MISMATCH" in line and "lstm cpu" in line for line in lines)


def test_cli_rejects_bad_arguments():
    result = subprocess.run([sys.executable, "-m", "tsrnn", "selftest", "--steps", "0"],
                            capture_output=True, text=True)
    assert result.returncode == 2 and "--steps must be >= 1" in result.stderr
