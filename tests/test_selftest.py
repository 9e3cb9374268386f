"""The README's main job: `tsrnn selftest` checks every op and fails on a mismatch."""
import subprocess
import sys


from tsrnn import selftest
from conftest import needs_native


@needs_native
def test_selftest_passes_and_prints_every_op():
    lines = []
    assert selftest.run(steps=5, batch=2, hidden=8, repeats=1, out=lines.append) == 0
    text = "\n".join(lines)
    for case in selftest.CASES:
        assert case.name in text
    assert "all ops match" in text


@needs_native
def test_selftest_fails_on_a_wrong_kernel(monkeypatch):
    broken = selftest.Case("broken lstm", lambda t, f: (selftest.functional.linear_scan(t["a"], t["u"] * 1.001, t["x0"], backend="native"),),
                           selftest.CASES[-1].reference, selftest.CASES[-1].tensors)
    monkeypatch.setattr(selftest, "CASES", (broken,))
    lines = []
    assert selftest.run(steps=4, batch=2, hidden=4, repeats=1, out=lines.append) == 1
    assert any("MISMATCH" in line for line in lines)


def test_cli_rejects_bad_arguments():
    result = subprocess.run([sys.executable, "-m", "tsrnn", "selftest", "--steps", "0"],
                            capture_output=True, text=True)
    assert result.returncode == 2 and "--steps must be >= 1" in result.stderr
