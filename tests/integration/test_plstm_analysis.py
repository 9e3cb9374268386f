"""Seed 002 §5.2's t-test of the learned p (tsrnn.analysis.plstm.p_ttest): against scipy and the
formulas written out on fixed numbers, then `tsrnn analyze A.pt --compare-p B.pt` on tiny pLSTM
checkpoints."""
import json
import math

import numpy as np
import pytest
import scipy.stats
import torch

from tsrnn.lab import cli
from tsrnn.lab.analysis import plstm
from tsrnn.lab.loading import restore

pytest.importorskip("matplotlib")

A = [0.12, 0.41, 0.35, 0.83, 0.50, 0.66]
B = [0.05, 0.21, 0.15, 0.33, 0.09]


def test_p_ttest_against_scipy_and_by_hand():
    out = plstm.p_ttest(A, B)
    want = scipy.stats.ttest_ind(A, B)
    assert (out["t"], out["p_value"], out["df"]) == (pytest.approx(want.statistic, abs=1e-12),
                                                      pytest.approx(want.pvalue, abs=1e-12), 9.0)
    n_a, n_b, m_a, m_b = 6, 5, sum(A) / 6, sum(B) / 5
    s_a = math.sqrt(sum((x - m_a) ** 2 for x in A) / 5)
    s_b = math.sqrt(sum((x - m_b) ** 2 for x in B) / 4)
    pooled = math.sqrt((5 * s_a ** 2 + 4 * s_b ** 2) / 9)
    assert out["t"] == pytest.approx((m_a - m_b) / (pooled * math.sqrt(1 / 6 + 1 / 5)), abs=1e-12)
    assert out["p_value"] == pytest.approx(2 * scipy.stats.t.sf(abs(out["t"]), 9), abs=1e-12)
    assert (out["mean_a"], out["mean_b"], out["sd_a"], out["sd_b"]) == pytest.approx((m_a, m_b, s_a, s_b), abs=1e-12)
    assert (out["n_a"], out["n_b"], out["test"]) == (n_a, n_b, "Student")
    assert out["cohens_d"] == pytest.approx((m_a - m_b) / pooled, abs=1e-12)

    welch = plstm.p_ttest(torch.tensor(A, dtype=torch.float64), np.array(B), equal_var=False)
    want = scipy.stats.ttest_ind(A, B, equal_var=False)
    va, vb = s_a ** 2 / 6, s_b ** 2 / 5
    assert welch["t"] == pytest.approx((m_a - m_b) / math.sqrt(va + vb), abs=1e-12)
    assert welch["df"] == pytest.approx((va + vb) ** 2 / (va ** 2 / 5 + vb ** 2 / 4), abs=1e-12)
    assert (welch["p_value"], welch["test"]) == (pytest.approx(want.pvalue, abs=1e-12), "Welch")
    assert welch["cohens_d"] == out["cohens_d"]


def test_equal_sizes_give_the_seeds_t_from_d():
    """Seed 002: 128 units each, d = 0.87 and t = 6.9; Student's t = d √(n/2) for equal n."""
    g = torch.Generator().manual_seed(0)
    a, b = 0.41 + 0.2 * torch.rand(128, generator=g), 0.19 + 0.3 * torch.rand(128, generator=g)
    out = plstm.p_ttest(a, b)
    assert out["t"] == pytest.approx(out["cohens_d"] * 8, abs=1e-12) and out["df"] == 254


def test_p_ttest_errors():
    with pytest.raises(ValueError, match="at least 2 values per sample, got 1 and 5"):
        plstm.p_ttest([0.3], B)
    with pytest.raises(ValueError, match=r"both samples of p are constant \(0.5 and 1.5; p fixed\?\)"):
        plstm.p_ttest([0.5] * 4, [1.5] * 4)


def train_copy(out, *extra):
    assert cli.main(["train", "--task", "copy", "--nhid", "8", "--batch-size", "4", "--delay", "6", "--max-steps", "1",
                     "--out", str(out), "--quiet", *extra]) == 0
    return out / "last.pt"


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("p")
    return train_copy(tmp / "a"), train_copy(tmp / "b", "--seed", "1", "--nhid", "12")


def test_checkpoint_p_reads_the_weights(two_runs, tmp_path):
    for path in two_runs:
        _, model = restore(path, None, torch.device("cpu"))
        (p,) = plstm.checkpoint_p(path)
        assert p.tolist() == model.rnn.p(0).double().tolist()
    fixed = train_copy(tmp_path / "fixed", "--fixed-p", "0.5")
    assert plstm.checkpoint_p(fixed)[0].tolist() == [0.5] * 8
    with pytest.raises(ValueError, match="both samples of p are constant"):
        plstm.compare_p(fixed, fixed)


def test_analyze_compare_p(two_runs, tmp_path, capsys):
    a, b = two_runs
    assert cli.main(["analyze", str(a), "--compare-p", str(b), "--out", str(tmp_path), "--quiet"]) == 0
    printed = capsys.readouterr().out
    test = json.loads((tmp_path / "summary.json").read_text())["analyses"]["p_ttest"]
    p_a, p_b = (plstm.checkpoint_p(path)[0] for path in two_runs)
    want = scipy.stats.ttest_ind(p_a.numpy(), p_b.numpy())
    (layer,) = test["layers"]
    assert (test["a"], test["b"], layer["layer"]) == (str(a), str(b), 1)
    assert layer["p_a"] == p_a.tolist() and layer["p_b"] == p_b.tolist() and (layer["n_a"], layer["n_b"]) == (8, 12)
    assert layer["t"] == pytest.approx(want.statistic, abs=1e-12) and layer["df"] == 18
    assert layer["p_value"] == pytest.approx(want.pvalue, abs=1e-12)
    assert f"t = {layer['t']:.3f}, df = 18, p = {layer['p_value']:.3g}" in printed
    assert f"mean {layer['mean_a']:.3f} (sd {layer['sd_a']:.3f}, n 8)" in printed
    assert test["figures"] == ["p_compare.png"] and (tmp_path / "p_compare.png").read_bytes()[:4] == b"\x89PNG"


def test_compare_p_errors_are_one_line(two_runs, tmp_path, capsys):
    a, _ = two_runs
    lstm = train_copy(tmp_path / "lstm", "--cell", "lstm")
    for first, second, message in [(a, lstm, f"{lstm} has no pLSTM layer"), (lstm, a, f"{lstm} has no pLSTM layer"),
                                   (a, tmp_path / "missing.pt", "does not exist")]:
        assert cli.main(["analyze", str(first), "--compare-p", str(second), "--out", str(tmp_path / "x")]) == 2
        err = capsys.readouterr().err
        assert err.startswith("tsrnn analyze: error: ") and message in err and err.count("\n") == 1
        assert not (tmp_path / "x").exists()
    lm = tmp_path / "lm"
    assert cli.main(["train", "--task", "lm", "--cell", "plstm", "--emsize", "8", "--nhid", "8,8,8", "--bptt", "20",
                     "--batch-size", "4", "--max-steps", "1", "--out", str(lm), "--quiet"]) == 0
    with pytest.raises(ValueError, match="has 1 pLSTM layers and .* 3: the p t-test pairs layers"):
        plstm.compare_p(a, lm / "last.pt")
