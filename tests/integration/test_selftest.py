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
