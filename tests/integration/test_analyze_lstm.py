"""`tsrnn analyze` of the plain LSTM baseline (seed 000's `--recipe seed000 --cell lstm`; Mahto's
thesis Figures 1 and 4: its timescale distribution and forget-gate maps), and seed 000 Figure 1's
comparison of an LM trained on a corpus with the same LM trained on its Markov version."""
import json
import math

import pytest
import torch

from tsrnn.lab import cli
from tsrnn.memory import timescales as ts
from tsrnn.lab.analysis import passes, timescales
from tsrnn.lab.data import default_corpus
from tsrnn.lab.data.markov import write_markov_corpus
from tsrnn.lab.loading import restore

pytest.importorskip("matplotlib")

CPU = torch.device("cpu")
SIZES = {"train": 6000, "valid": 900, "test": 900}


def train(data, out, *extra):
    assert cli.main(["train", "--recipe", "seed000", "--cell", "lstm", "--data", str(data), "--emsize", "8",
                     "--nhid", "12,16,8", "--batch-size", "4", "--max-steps", "2", "--out", str(out), "--quiet",
                     *extra]) == 0
    return out / "last.pt"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two LSTM baselines: one on a small natural corpus (the embedded one, cut), one on its Markov version."""
    root = tmp_path_factory.mktemp("runs")
    corpus = default_corpus()
    natural = root / "natural"
    natural.mkdir()
    for split, size in SIZES.items():
        words = corpus.vocab.decode(getattr(corpus, split)[:size])
        lines = " ".join(words).split("<eos>")[:-1]
        (natural / f"ptb.{split}.txt").write_text("".join(f"{line}\n" for line in lines))
    write_markov_corpus(natural, root / "markov", seed=0)
    return {"natural": train(natural, root / "lstm"), "markov": train(root / "markov", root / "lstm-markov"),
            "markov_data": root / "markov"}


def analyze(checkpoint, out, *extra):
    return cli.main(["analyze", str(checkpoint), "--out", str(out), "--quiet", "--windows", "3", *extra])


def summary_of(out):
    return json.loads((out / "summary.json").read_text())


def is_png(path):
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_analyze_the_lstm_baseline(runs, tmp_path, capsys):
    assert analyze(runs["natural"], tmp_path) == 0
    printed = capsys.readouterr().out
    assert "skipped assigned_vs_estimated.png: no layer has fixed (assigned) timescales" in printed
    summary = summary_of(tmp_path)
    assert summary["config"]["cell"] == "lstm"
    analyses = summary["analyses"]
    assert list(analyses) == ["timescales", "forget_gates", "word_ablation", "routing"]
    for entry in analyses.values():
        assert entry["figures"] and all(is_png(tmp_path / f) for f in entry["figures"])
    assert not (tmp_path / "assigned_vs_estimated.png").exists()
    assert set(analyses["timescales"]["skipped"]) == {"assigned_vs_estimated.png"}

    # thesis Figure 1: every unit's estimated timescale, per layer, as a direct pass computes them
    task, model = restore(runs["natural"], None, CPU)
    windows = passes.lm_windows(task.split("test"), passes.WINDOW, 3)
    layers = timescales.lm_layer_timescales(model, windows, CPU)
    got = analyses["timescales"]["layers"]
    assert [e["layer"] for e in got] == [1, 2, 3] and all(e["assigned"] is None for e in got)
    for entry, layer in zip(got, layers):
        torch.testing.assert_close(torch.tensor(entry["estimated"], dtype=torch.float64), layer.estimated)
        assert entry["fraction_below_20"] == float((layer.estimated < 20).double().mean())
    assert analyses["timescales"]["all"]["units"] == 12 + 16 + 8

    # thesis Figure 4: the forget gates of every layer over one test window, units sorted by mean
    maps = analyses["forget_gates"]["layers"]
    assert [len(m["map"][0]) for m in maps] == [2, 2, 1] and all(m["group_assigned"] is None for m in maps)
    assert analyses["forget_gates"]["words"] is not None

    assert [len(layer["change"]) for layer in analyses["word_ablation"]["layers"]] == [70, 70, 70]
    assert analyses["routing"]["sorted_by"] == "estimated"
    estimated_l2 = torch.tensor(got[1]["estimated"])
    first = analyses["routing"]["chunks"][0]
    assert first["timescale"] == pytest.approx(float(estimated_l2.max()))  # longest first


def test_summary_fractions_of_short_timescales():
    estimated = torch.tensor([1.0, 5.0, 15.0, 30.0], dtype=torch.float64)
    layer = timescales.LayerTimescales(1, torch.exp(-1 / estimated), estimated, None)
    summary = timescales.summarize([layer])["all"]
    assert (summary["fraction_below_10"], summary["fraction_below_20"]) == (0.5, 0.75)


def test_the_figure_1_comparison(runs, tmp_path, capsys):
    assert analyze(runs["markov"], tmp_path / "markov") == 0
    alone = summary_of(tmp_path / "markov")["analyses"]["timescales"]
    assert analyze(runs["natural"], tmp_path / "both", "--compare-timescales", str(runs["markov"]),
                   "--compare-data", str(runs["markov_data"])) == 0
    assert "timescales of markov: Inverse Gamma α =" in capsys.readouterr().out
    analyses = summary_of(tmp_path / "both")["analyses"]
    comparison = analyses["timescale_comparison"]
    assert comparison["figures"] == ["timescale_comparison.png"]
    assert is_png(tmp_path / "both" / "timescale_comparison.png")
    first, second = comparison["models"]
    assert (first["label"], second["label"]) == ("natural", "markov")
    assert (first["checkpoint"], second["checkpoint"]) == (str(runs["natural"]), str(runs["markov"]))
    for model, single in ((first, analyses["timescales"]), (second, alone)):
        pooled = [t for layer in single["layers"] for t in layer["estimated"]]
        assert model["estimated"] == pooled  # the histogram
        for key, value in single["all"].items():
            assert model[key] == value, key  # the fits and their KS curves
        values = torch.tensor([math.inf if t is None else t for t in pooled], dtype=torch.float64)
        gamma, gauss = ts.fit_inverse_gamma(values), ts.fit_narrow_gaussian(values, sigma=0.1)
        assert model["inverse_gamma"]["alpha"] == gamma.alpha and model["inverse_gamma"]["ks"] == gamma.statistic
        assert model["gaussian"]["mu"] == gauss.mu and model["gaussian"]["ks"] == gauss.statistic
        assert model["inverse_gamma"]["ks"] == min(model["inverse_gamma"]["curve"]["ks"])
        assert model["best_fit"] == ("inverse-gamma" if gamma.statistic <= gauss.statistic else "gaussian")
        assert [e["inverse_gamma"]["alpha"] for e in model["layers"]] == \
            [e["inverse_gamma"]["alpha"] for e in single["layers"]]
    assert first["estimated"] != second["estimated"]


def test_comparison_errors_are_one_line(runs, tmp_path, capsys):
    assert analyze(runs["natural"], tmp_path / "a", "--compare-timescales", str(tmp_path / "missing.pt")) == 2
    assert "missing.pt does not exist" in capsys.readouterr().err
    assert analyze(runs["natural"], tmp_path / "b", "--compare-data", str(runs["markov_data"])) == 2
    assert "--compare-data names the corpus of --compare-timescales" in capsys.readouterr().err
    assert cli.main(["train", "--task", "dyck", "--nhid", "8", "--batch-size", "8", "--dyck-size", "16,8,8",
                     "--max-steps", "1", "--out", str(tmp_path / "dyck"), "--quiet"]) == 0
    assert analyze(runs["natural"], tmp_path / "c", "--compare-timescales", str(tmp_path / "dyck" / "last.pt")) == 2
    err = capsys.readouterr().err
    assert "--compare-timescales compares two lm checkpoints" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "c" / "summary.json").exists()
