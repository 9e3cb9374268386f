"""Seed 002 §5.2's t-test of the learned p (tsrnn.lab.analysis.plstm.p_ttest): against scipy and the
formulas written out on fixed numbers, then `tsrnn analyze A.pt --compare-p B.pt` on tiny pLSTM
checkpoints; `--fixed-p` (every unit's p held at given values) and `--ablate-units` (seed 002
§5.3 beyond the copy task) on tiny copy, pixels and freq checkpoints."""
import json
import math

import numpy as np
import pytest
import scipy.stats
import torch

import tsrnn
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


@pytest.fixture(scope="module")
def plstm_lm(tmp_path_factory):
    lm = tmp_path_factory.mktemp("lm")
    assert cli.main(["train", "--task", "lm", "--cell", "plstm", "--emsize", "8", "--nhid", "8,8,8", "--bptt", "20",
                     "--batch-size", "4", "--max-steps", "1", "--out", str(lm), "--quiet"]) == 0
    return lm / "last.pt"


def test_compare_p_errors_are_one_line(two_runs, plstm_lm, tmp_path, capsys):
    a, _ = two_runs
    lstm = train_copy(tmp_path / "lstm", "--cell", "lstm")
    for first, second, message in [(a, lstm, f"{lstm} has no pLSTM layer"), (lstm, a, f"{lstm} has no pLSTM layer"),
                                   (a, tmp_path / "missing.pt", "does not exist")]:
        assert cli.main(["analyze", str(first), "--compare-p", str(second), "--out", str(tmp_path / "x")]) == 2
        err = capsys.readouterr().err
        assert err.startswith("tsrnn analyze: error: ") and message in err and err.count("\n") == 1
        assert not (tmp_path / "x").exists()
    with pytest.raises(ValueError, match="has 1 pLSTM layers and .* 3: the p t-test pairs layers"):
        plstm.compare_p(a, plstm_lm)
    for path, extra, message in [
            (plstm_lm, ["--ablate-units"], "--ablate-units silences units of a single-layer recurrent classifier"),
            (a, ["--ablate-units"], "a copy checkpoint's copy analysis ablates units already); "),
            (lstm, ["--fixed-p", "0.5"], f"--fixed-p holds the pLSTM's decay exponent p; {lstm} is a 'copy' "
                                         "checkpoint with cell 'lstm', which has no p"),
            (a, ["--fixed-p", "0.5,0"], "--fixed-p expects finite decay exponents p > 0 separated by commas")]:
        assert cli.main(["analyze", str(path), *extra, "--out", str(tmp_path / "x")]) == 2
        err = capsys.readouterr().err
        assert err.startswith("tsrnn analyze: error: ") and message in err and err.count("\n") == 1
        assert not (tmp_path / "x").exists()


# -- p held at fixed values (a trained model's sensitivity to p) and unit ablation beyond copy --------

def test_held_p_holds_every_layer_and_restores_it():
    torch.manual_seed(0)
    learned = tsrnn.PowerLawLSTM(3, 5, num_layers=2, backend="reference").double()
    fixed = tsrnn.PowerLawLSTM(3, 5, num_layers=2, fixed_p=1.5, backend="reference").double()
    fixed.load_state_dict({k: v for k, v in learned.state_dict().items() if "p_logit" not in k}, strict=False)
    x = torch.randn(7, 2, 3, dtype=torch.float64)
    saved = {k: v.clone() for k, v in learned.state_dict().items()}
    before = learned(x)[0]
    with plstm.HeldP(learned, 1.5):  # p >= 1: out of σ(p_logit)'s reach
        assert learned.p(0).tolist() == learned.p(1).tolist() == [1.5] * 5
        torch.testing.assert_close(learned(x)[0], fixed(x)[0], rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="stop"), plstm.HeldP(fixed, 0.25):
        assert fixed.p(1).tolist() == [0.25] * 5
        raise RuntimeError("stop")
    assert fixed.p(1).tolist() == [1.5] * 5 and "_p" not in vars(fixed) and "_p" not in vars(learned)
    assert torch.equal(learned(x)[0], before)
    assert all(torch.equal(v, saved[k]) for k, v in learned.state_dict().items())
    with pytest.raises(ValueError, match="no pLSTM layer"):
        plstm.HeldP(tsrnn.LSTM(3, 4), 0.5)


@pytest.mark.parametrize("text", ["0,1", "0.5,-1", "nan", "inf", "x", "", "0.5,,1"])
def test_bad_p_values_are_named(text):
    with pytest.raises(ValueError, match="--fixed-p expects finite decay exponents p > 0") as err:
        plstm.parse_p_values(text)
    assert repr(text) in str(err.value)
    assert plstm.parse_p_values(" 0.25,1,1.5") == (0.25, 1.0, 1.5)


def sensitivity(out):
    return json.loads((out / "summary.json").read_text())["analyses"]["p_sensitivity"]


def test_analyze_fixed_p_of_a_learned_and_a_fixed_p_copy_model(two_runs, tmp_path, capsys):
    a, _ = two_runs
    assert cli.main(["analyze", str(a), "--fixed-p", "0.5,1.5", "--only", "p_sensitivity", "--out",
                     str(tmp_path / "a"), "--quiet"]) == 0
    printed = capsys.readouterr().out
    result = sensitivity(tmp_path / "a")
    task, model = restore(a, None, torch.device("cpu"))
    p = model.rnn.p(0).detach().clone()
    assert [row["p"] for row in result["rows"]] == ["trained", 0.5, 1.5] and result["split"] == "test"
    assert result["rows"][0]["metrics"] == task.evaluate(model, "test")      # the trained p: the plain metrics
    assert result["rows"][0]["mean_p"] == pytest.approx(p.double().mean().item())
    assert set(result["rows"][0]["metrics"]) == {"loss", "accuracy", "sequence_accuracy", "baseline_loss"}
    with plstm.HeldP(model, 1.5):
        assert result["rows"][2]["metrics"] == task.evaluate(model, "test")
    assert torch.equal(model.rnn.p(0), p)
    assert plstm.p_sensitivity(task, model, (0.5,))["rows"] == result["rows"][:2]
    assert torch.equal(model.rnn.p(0), p)                                     # restored after the analysis
    assert result["figures"] == ["p_sensitivity.png"] and (tmp_path / "a" / "p_sensitivity.png").read_bytes()[:4] == \
        b"\x89PNG"
    assert f"p = 1.5: loss {result['rows'][2]['metrics']['loss']:.4g}" in printed

    fixed = train_copy(tmp_path / "fixed", "--fixed-p", "0.5")
    assert cli.main(["analyze", str(fixed), "--fixed-p", "0.5,2", "--out", str(tmp_path / "f"), "--quiet"]) == 0
    summary = json.loads((tmp_path / "f" / "summary.json").read_text())
    rows = summary["analyses"]["p_sensitivity"]["rows"]
    assert list(summary["analyses"]) == ["copy", "learned_p", "p_sensitivity"]
    task, model = restore(fixed, None, torch.device("cpu"))
    assert rows[0]["mean_p"] == 0.5 and rows[0]["metrics"] == rows[1]["metrics"] == task.evaluate(model, "test")
    assert rows[2]["metrics"] != rows[0]["metrics"]


def test_fixed_p_holds_every_layer_of_a_plstm_lm(plstm_lm, tmp_path):
    assert cli.main(["analyze", str(plstm_lm), "--fixed-p", "1.5", "--only", "p_sensitivity", "--out", str(tmp_path),
                     "--quiet"]) == 0
    rows = sensitivity(tmp_path)["rows"]
    task, model = restore(plstm_lm, None, torch.device("cpu"))
    assert rows[0]["metrics"] == task.evaluate(model, "test") and set(rows[0]["metrics"]) == {"loss", "ppl"}
    with plstm.HeldP(model, 1.5):
        assert all(layer["p"] == [1.5] * 8 for layer in plstm.learned_p(model))  # all 3 layers
        assert rows[1]["metrics"] == task.evaluate(model, "test") != rows[0]["metrics"]


def test_unit_ablation_and_fixed_p_of_classifiers(tmp_path, capsys):
    pixels = tmp_path / "pixels"
    assert cli.main(["train", "--task", "pixels", "--nhid", "12", "--batch-size", "16", "--max-steps", "2", "--seed",
                     "3", "--out", str(pixels), "--quiet"]) == 0
    assert cli.main(["analyze", str(pixels / "last.pt"), "--ablate-units", "--fixed-p", "1", "--out",
                     str(tmp_path / "a"), "--quiet"]) == 0
    analyses = json.loads((tmp_path / "a" / "summary.json").read_text())["analyses"]
    assert list(analyses) == ["unit_ablation", "learned_p", "p_sensitivity"]
    ablation = analyses["unit_ablation"]
    task, model = restore(pixels / "last.pt", None, torch.device("cpu"))
    plain = task.evaluate(model, "test")
    assert ablation["ablated"] == [0, 5, 10] and list(ablation["orders"]) == ["random"]  # no later-reset units here
    assert ablation["seed"] == 3 and ablation["chance"] == 0.1
    order = ablation["orders"]["random"]["order"]
    assert order == torch.randperm(12, generator=torch.Generator().manual_seed(3)).tolist()
    assert ablation["orders"]["random"]["accuracy"][0] == plain["accuracy"]
    with plstm.AblatedUnits(model.rnn, torch.tensor(order[:5])):
        assert ablation["orders"]["random"]["accuracy"][1] == task.evaluate(model, "test")["accuracy"]
    assert analyses["p_sensitivity"]["rows"][0]["metrics"] == plain
    assert set(plain) == {"loss", "accuracy", "majority"}
    assert {f for e in analyses.values() for f in e["figures"]} == {"unit_ablation.png", "learned_p.png",
                                                                    "p_sensitivity.png"}
    assert all((tmp_path / "a" / f).read_bytes()[:4] == b"\x89PNG" for f in ("unit_ablation.png", "p_sensitivity.png"))

    freq = tmp_path / "freq"  # an LSTM: no analysis of its own, unit ablation on request
    assert cli.main(["train", "--task", "freq", "--cell", "lstm", "--nhid", "6", "--freq-size", "64,32", "--max-steps",
                     "1", "--out", str(freq), "--quiet"]) == 0
    assert cli.main(["analyze", str(freq / "last.pt"), "--ablate-units", "--only", "unit_ablation", "--out",
                     str(tmp_path / "f"), "--quiet"]) == 0
    ablation = json.loads((tmp_path / "f" / "summary.json").read_text())["analyses"]["unit_ablation"]
    assert ablation["ablated"] == [0, 5] and ablation["chance"] == 0.5
    capsys.readouterr()
    for extra, message in [([], "with --ablate-units freq, pixels checkpoints of every cell"),
                           (["--ablate-units", "--only", "p_sensitivity"],
                            "--only p_sensitivity: p_sensitivity is not an analysis of this checkpoint; it has "
                            "unit_ablation")]:
        assert cli.main(["analyze", str(freq / "last.pt"), "--out", str(tmp_path / "x"), *extra]) == 2
        err = capsys.readouterr().err
        assert err.startswith("tsrnn analyze: error: ") and message in err and err.count("\n") == 1
    assert not (tmp_path / "x").exists()
