"""IMDB accuracy by review length (tsrnn.lab.analysis.by_length, seed 002 Figure 4): the Wilson
interval and the binning against hand computations and scipy, then `tsrnn analyze` of a tiny
IMDB checkpoint trained on an aclImdb-layout folder the test writes."""
import json
import math

import pytest
import scipy.stats
import torch

from tsrnn.lab import cli
from tsrnn.lab.analysis import by_length
from tsrnn.lab.data import imdb
from tsrnn.lab.loading import restore

pytest.importorskip("matplotlib")

CPU = torch.device("cpu")


def test_wilson_interval_by_hand_and_against_scipy():
    z = by_length.Z95
    assert z == pytest.approx(scipy.stats.norm.ppf(0.975), abs=1e-15)
    p, n = 0.8, 10                                            # 8 of 10: centre and half-width written out
    centre = (p + z * z / 20) / (1 + z * z / 10)
    half = z * math.sqrt(p * 0.2 / 10 + z * z / 400) / (1 + z * z / 10)
    assert by_length.wilson_interval(8, 10) == pytest.approx((centre - half, centre + half), abs=1e-15)
    assert by_length.wilson_interval(8, 10) == pytest.approx((0.4901624715366418, 0.9433178485456248), abs=1e-12)
    assert by_length.wilson_interval(0, 5) == pytest.approx((0.0, z * z / (5 + z * z)), abs=1e-15)
    assert by_length.wilson_interval(5, 5) == pytest.approx((5 / (5 + z * z), 1.0), abs=1e-15)
    for k, n in [(0, 1), (1, 1), (3, 7), (120, 130), (4999, 10_000)]:
        ci = scipy.stats.binomtest(k, n).proportion_ci(method="wilson")
        assert by_length.wilson_interval(k, n) == pytest.approx((ci.low, ci.high), abs=1e-12)
    assert all(math.isnan(v) for v in by_length.wilson_interval(0, 0))


def test_bins_counts_and_errors_by_hand():
    lengths = [5, 49, 50, 99, 100, 399, 400, 2789]
    correct = [True, False, True, True, False, True, False, True]
    assert by_length.bin_of(lengths).tolist() == [0, 0, 1, 1, 2, 7, 8, 8]
    out = by_length.accuracy_by_length(lengths, correct)
    bins = out["bins"]
    assert [b["label"] for b in bins] == ["0-49", "50-99", "100-149", "150-199", "200-249", "250-299", "300-349",
                                          "350-399", "400+"]
    assert [b["count"] for b in bins] == [2, 2, 1, 0, 0, 0, 0, 1, 2]
    assert [b["correct"] for b in bins] == [1, 2, 0, 0, 0, 0, 0, 1, 1]
    assert (bins[0]["low"], bins[0]["high"], bins[-1]["low"], bins[-1]["high"]) == (0, 50, 400, None)
    assert bins[0]["accuracy"] == 0.5 and bins[0]["standard_error"] == pytest.approx(math.sqrt(0.25 / 2))
    assert bins[1]["accuracy"] == 1.0 and bins[1]["standard_error"] == 0.0
    assert (bins[1]["wilson_low"], bins[1]["wilson_high"]) == by_length.wilson_interval(2, 2)
    assert math.isnan(bins[3]["accuracy"]) and math.isnan(bins[3]["wilson_low"])
    assert out["reviews"] == 8 and out["accuracy"] == 5 / 8
    coarse = by_length.accuracy_by_length(lengths, correct, (100, 400))
    assert [b["label"] for b in coarse["bins"]] == ["0-99", "100-399", "400+"]
    assert [b["count"] for b in coarse["bins"]] == [4, 2, 2] and [b["correct"] for b in coarse["bins"]] == [3, 1, 1]
    with pytest.raises(ValueError, match="two vectors of one length"):
        by_length.accuracy_by_length(lengths, correct[:-1])


def test_pool_adds_the_counts_of_every_seed():
    a = by_length.accuracy_by_length([10, 60, 60], [True, False, True], (50,))
    b = by_length.accuracy_by_length([10, 20, 70], [False, False, True], (50,))
    pooled = by_length.pool([a, b])
    assert [x["count"] for x in pooled["bins"]] == [3, 3] and [x["correct"] for x in pooled["bins"]] == [1, 2]
    assert pooled["accuracy"] == 0.5
    assert pooled == by_length.accuracy_by_length([10, 60, 60, 10, 20, 70], [1, 0, 1, 0, 0, 1], (50,))
    with pytest.raises(ValueError, match="same length bins"):
        by_length.pool([a, by_length.accuracy_by_length([10], [True], (40,))])


@pytest.mark.parametrize("text", ["", "0,50", "50,50", "100,50", "50,x", "50;100"])
def test_bad_boundaries_are_named(text):
    with pytest.raises(ValueError, match="--length-bins must be increasing positive integers") as err:
        by_length.parse_boundaries(text)
    assert repr(text) in str(err.value)


LENGTHS = {"train": [3, 8, 30, 60, 120, 420], "test": [4, 20, 55, 90, 130, 160, 450]}


def write_aclimdb(root):
    """Reviews of known word counts (no punctuation, so one token per word), positive ones made of
    positive words."""
    for split, lengths in LENGTHS.items():
        for polarity, words in (("pos", ("great", "loved", "fun")), ("neg", ("awful", "boring", "bad"))):
            folder = root / split / polarity
            folder.mkdir(parents=True)
            for i, n in enumerate(lengths):
                (folder / f"{i}.txt").write_text(" ".join(words[j % 3] for j in range(n)))
    return root


def test_reviews_keep_their_length_before_the_cut(tmp_path):
    data = imdb.load_imdb(write_aclimdb(tmp_path / "aclImdb"), max_length=50)
    assert data.test.lengths.tolist() == LENGTHS["test"] * 2           # pos/ then neg/, sorted names
    assert [len(t) for t in data.test.tokens] == [min(n, 50) for n in LENGTHS["test"] * 2]
    assert sorted(data.train.lengths.tolist() + data.valid.lengths.tolist()) == sorted(LENGTHS["train"] * 2)


@pytest.fixture(scope="module")
def imdb_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("imdb")
    root = write_aclimdb(tmp / "aclImdb")
    assert cli.main(["train", "--task", "imdb", "--data", str(root), "--nhid", "6", "--emsize", "4", "--batch-size",
                     "4", "--max-steps", "2", "--quiet", "--out", str(tmp / "run")]) == 0
    return tmp / "run" / "last.pt"


def test_analyze_an_imdb_checkpoint(imdb_run, tmp_path, capsys):
    out = tmp_path / "analysis"
    assert cli.main(["analyze", str(imdb_run), "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "accuracy by review length: 0-49 " in printed and "accuracy_by_length.png" in printed
    analyses = json.loads((out / "summary.json").read_text())["analyses"]
    assert list(analyses) == ["by_length", "learned_p"]                # the default cell is the pLSTM
    result = analyses["by_length"]
    assert result["split"] == "test" and result["boundaries"] == list(by_length.BOUNDARIES)
    want = [2 * by_length.bin_of(LENGTHS["test"]).tolist().count(i) for i in range(9)]   # pos/ and neg/
    assert [b["count"] for b in result["bins"]] == want == [4, 4, 2, 2, 0, 0, 0, 0, 2]
    task, model = restore(imdb_run, None, CPU)
    _, correct = by_length.review_outcomes(task, model)
    assert result["accuracy"] == pytest.approx(task.evaluate(model, "test")["accuracy"])
    assert sum(b["correct"] for b in result["bins"]) == int(correct.sum())
    first = result["bins"][0]                                        # 4 and 20 words, positive and negative
    assert first["correct"] == int(correct[[0, 1, 7, 8]].sum())
    low, high = by_length.wilson_interval(first["correct"], 4)
    assert (first["wilson_low"], first["wilson_high"]) == (pytest.approx(low), pytest.approx(high))
    assert result["bins"][4]["accuracy"] is None                     # an empty bin: null in strict JSON
    assert (out / "accuracy_by_length.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert result["figures"] == ["accuracy_by_length.png"]


def test_length_bins_option_and_its_errors(imdb_run, tmp_path, capsys):
    assert cli.main(["analyze", str(imdb_run), "--out", str(tmp_path / "a"), "--quiet", "--length-bins",
                     "100,400", "--split", "valid"]) == 0
    result = json.loads((tmp_path / "a" / "summary.json").read_text())["analyses"]["by_length"]
    assert [b["label"] for b in result["bins"]] == ["0-99", "100-399", "400+"] and result["split"] == "valid"
    assert result["reviews"] == 1                                     # round(10% of 12 training reviews)
    capsys.readouterr()
    assert cli.main(["analyze", str(imdb_run), "--out", str(tmp_path / "b"), "--length-bins", "100,50"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tsrnn analyze: error: --length-bins must be increasing") and err.count("\n") == 1
    assert not (tmp_path / "b").exists()                              # found before any work
    assert cli.main(["train", "--task", "copy", "--nhid", "8", "--batch-size", "4", "--delay", "5", "--max-steps",
                     "1", "--out", str(tmp_path / "copy"), "--quiet"]) == 0
    assert cli.main(["analyze", str(tmp_path / "copy" / "last.pt"), "--length-bins", "50"]) == 2
    assert "--length-bins applies to imdb checkpoints" in capsys.readouterr().err


def test_unit_ablation_of_an_imdb_checkpoint(imdb_run, tmp_path):
    out = tmp_path / "a"
    assert cli.main(["analyze", str(imdb_run), "--ablate-units", "--only", "unit_ablation", "--out", str(out),
                     "--quiet"]) == 0
    ablation = json.loads((out / "summary.json").read_text())["analyses"]["unit_ablation"]
    task, model = restore(imdb_run, None, CPU)
    assert ablation["ablated"] == [0, 5] and ablation["chance"] == 0.5 and list(ablation["orders"]) == ["random"]
    assert ablation["orders"]["random"]["accuracy"][0] == task.evaluate(model, "test")["accuracy"]
    assert (out / "unit_ablation.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_an_lstm_imdb_checkpoint_is_analyzed_too(tmp_path):
    root = write_aclimdb(tmp_path / "aclImdb")
    assert cli.main(["train", "--task", "imdb", "--cell", "lstm", "--data", str(root), "--nhid", "4", "--emsize", "4",
                     "--max-steps", "1", "--quiet", "--out", str(tmp_path / "run")]) == 0
    assert cli.main(["analyze", str(tmp_path / "run" / "last.pt"), "--quiet"]) == 0
    summary = json.loads((tmp_path / "run" / "analysis" / "summary.json").read_text())
    assert list(summary["analyses"]) == ["by_length"] and summary["analyses"]["by_length"]["reviews"] == 14
