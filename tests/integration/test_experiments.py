"""The reproduction scripts of ``experiments/`` at their toy size (seconds each): each trains its
runs, writes a JSON record with every table column and a figure, and the table of
REPRODUCTION.md is the one the committed records make."""
from __future__ import annotations

import importlib
import json
import os
import re
from importlib import resources

import pytest

from experiments import common, table, training

pytestmark = pytest.mark.slow  # the experiment scripts, trained at toy size

SCRIPTS = {"dyck": [], "copy_task": [], "frequency": [], "frequency_time_scaled": [], "pixels": [],
           "ptb_lm": ["--ptb"], "brown_mlp": ["--brown"], "brown_symmetric": ["--brown"], "brown_sgd": ["--brown"],
           "averaging_lm": ["--ptb"], "char_ptb": ["--ptb"], "averaging_ablations": ["--ptb"]}
ROW = ("claim", "seed", "ours", "verdict", "command", "model", "epochs", "seeds", "train_min", "jobs", "wall_min",
       "machine", "date")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A PTB-layout folder (word and character files) cut from the embedded corpus."""
    text = resources.files("tsrnn.lab.data").joinpath("tiny_shakespeare.txt").read_text()
    lines = [" ".join(line.split()) for line in text.lower().splitlines() if line.strip()]
    folder = tmp_path_factory.mktemp("ptb")
    for split, part in {"train": lines[:1500], "valid": lines[1500:1800], "test": lines[1800:2100]}.items():
        (folder / f"ptb.{split}.txt").write_text("".join(f" {line} \n" for line in part))
        (folder / f"ptb.char.{split}.txt").write_text("".join(" ".join("_".join(line.split())) + "\n" for line in part))
    return str(folder)


@pytest.mark.parametrize("name", SCRIPTS)
def test_script_runs_at_toy_size_and_writes_its_record(name, corpus, tmp_path, capsys):
    script = importlib.import_module(f"experiments.{name}")
    data = [flag for option in SCRIPTS[name] for flag in (option, corpus)]
    argv = ["--size", "toy", "--runs", str(tmp_path / "runs"), *data]
    assert script.main(argv) == 0
    if name == "frequency":  # a finished run is not trained again (one script stands for all: they share experiments/training.py)
        metrics = tmp_path / "runs" / "frequency" / "plstm_async_seed0" / "metrics.jsonl"
        first = metrics.read_text()
        capsys.readouterr()
        assert script.main([*argv, "--jobs", "3"]) == 0
        assert "training" not in capsys.readouterr().out
        assert json.loads((tmp_path / "runs" / "results" / "frequency.json").read_text())["jobs"] == 2  # the training's
        assert metrics.read_text() == first
    out = tmp_path / "runs" / "results"
    record = json.loads((out / f"{name}.json").read_text())
    assert set(ROW) <= set(record) and record["size"] == "toy" and record["results"] and record["verdict"]
    if name == "brown_mlp":  # both unigram baselines, and a curve per context and training seed
        results = record["results"]
        assert results["unigram_ppl"] > 1 and results["unigram_seen_ppl"] > 1 and 0 <= results["unseen_targets"] < 1
        assert {context: len(curves) for context, curves in results["curves_n2"].items()} == {
            "tilt": 2, "buffer": 2, "tilt-buffer": 2}
    assert record["command"].startswith(f"python -m experiments.{name} --size toy")
    assert corpus not in json.dumps(record)  # corpus paths appear as placeholders
    assert (out / f"{name}.png").stat().st_size > 0
    rendered = table.render_all([record])
    assert record["ours"].replace("|", "\\|") in rendered
    assert ("| <100 |" in rendered) == (name == "ptb_lm")  # the frequency-bin table of claim 5
    if name == "copy_task":  # the state at the cap, beside the memoryless baseline
        assert {"valid_loss", "baseline_loss"} <= set(record["results"]) and "memoryless baseline" in record["ours"]
    runs = [path for path in (tmp_path / "runs" / name).iterdir() if path.is_dir()]
    assert runs and all((run / training.DONE).exists() for run in runs)
    if name == "brown_symmetric":  # the one script of two training calls (its grid, then the seeds), whose
        for run in runs:  # seed-0 runs have two names: at a minute a run, the record's time counts each run once
            (run / training.DONE).write_text(json.dumps({**training.finished(run), "wall_s": 60.0}))
        assert script.main(argv) == 0
        assert json.loads((out / f"{name}.json").read_text())["train_min"] == len(runs)


@pytest.mark.parametrize("experiment", [1, 2, 3, 4])
def test_brown_sweep_runs_each_of_seed_004s_experiments_at_toy_size(experiment, corpus, tmp_path):
    from experiments import brown_sweeps

    argv = ["--experiment", str(experiment), "--size", "toy", "--runs", str(tmp_path / "runs"), "--brown", corpus]
    assert brown_sweeps.main(argv) == 0
    record = json.loads((tmp_path / "runs" / "results" / f"brown_experiment{experiment}.json").read_text())
    settings = brown_sweeps.TOY[experiment]
    assert set(ROW) <= set(record) and record["claim"].startswith(f"{8 + experiment}. Brown, seed 004 Experiment")
    assert record["verdict"] == brown_sweeps.verdict(record["results"]) and record["verdict"].startswith(settings[0])
    contexts = brown_sweeps.EXPERIMENTS[experiment]["contexts"]
    assert {c: set(v) for c, v in record["results"]["ppl"].items()} == {c: set(settings) for c in contexts}
    trained = {path.name for path in (tmp_path / "runs" / f"brown_experiment{experiment}").iterdir()}
    assert trained == {f"{c}_{s}_seed0" for c in contexts for s in settings}
    options = json.loads((tmp_path / "runs" / f"brown_experiment{experiment}" / f"{contexts[0]}_{settings[-1]}_seed0"
                          / training.DONE).read_text())["argv"]
    assert all(flag in options for flag in brown_sweeps.EXPERIMENTS[experiment]["settings"][settings[-1]])


TINY = ["--task", "freq", "--freq-size", "64,32", "--batch-size", "8", "--nhid", "4", "--seed", "3",
        "--log-every", "1"]


def test_a_run_cut_off_goes_on_from_its_last_checkpoint(tmp_path, capsys, monkeypatch):
    """A call stopped while a run trains leaves last.pt and started.json but no finished.json: the
    next call resumes the run (training only what is missing) and adds the training times."""
    import signal

    from tsrnn.lab import cli
    from tsrnn.lab.training.tasks import classification

    args = common.arguments("frequency", "doc", ["--size", "toy", "--runs", str(tmp_path)])
    run = tmp_path / "cut" / "r"
    wanted = [*TINY, "--epochs", "2"]
    loss, calls = classification.FrequencyTask.train_loss, []

    def interrupted_at_the_third_step(self, *a):
        calls.append(1)
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGINT)  # the trainer saves last.pt before the next step and stops
        return loss(self, *a)

    with monkeypatch.context() as patch:
        patch.setattr(classification.FrequencyTask, "train_loss", interrupted_at_the_third_step)
        assert cli.main(["train", *wanted, "--out", str(run), "--quiet"]) == 128 + signal.SIGINT
    (run / training.STARTED).write_text(json.dumps({"argv": wanted, "wall_s": 100.0}))
    first = (run / "metrics.jsonl").read_text()
    dirs = training.train("cut", {"r": wanted}, args)
    assert "--resume" in capsys.readouterr().out
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert (run / "metrics.jsonl").read_text().startswith(first)
    assert [r["step"] for r in records if r["event"] == "train"][:3] == [1, 2, 3]
    assert sorted({r["epoch"] for r in records if r["event"] == "valid"}) == [1, 2]
    done = training.finished(dirs["r"])
    assert done["argv"] == wanted and done["wall_s"] > 100.0


def test_a_run_trained_out_before_the_cut_is_only_marked_finished(tmp_path, capsys):
    from tsrnn.lab import cli

    args = common.arguments("frequency", "doc", ["--size", "toy", "--runs", str(tmp_path)])
    run = tmp_path / "cut" / "r"
    wanted = [*TINY, "--epochs", "1"]
    assert cli.main(["train", *wanted, "--out", str(run), "--quiet"]) == 0
    (run / training.STARTED).write_text(json.dumps({"argv": wanted, "wall_s": 7.0}))
    before = (run / "metrics.jsonl").read_text()
    training.train("cut", {"r": wanted}, args)
    assert "training r" not in capsys.readouterr().out
    assert (run / "metrics.jsonl").read_text() == before and training.finished(run)["wall_s"] == 7.0


def test_a_folder_holding_another_run_is_trained_over(tmp_path):
    from tsrnn.lab import cli

    args = common.arguments("frequency", "doc", ["--size", "toy", "--runs", str(tmp_path)])
    run = tmp_path / "other" / "r"
    assert cli.main(["train", *TINY, "--epochs", "1", "--max-steps", "1", "--out", str(run), "--quiet"]) == 0
    training.train("other", {"r": [*TINY, "--epochs", "1"]}, args)
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["event"] == "train"] == list(range(1, 9))  # the old run's record is gone
    assert training.finished(run)["argv"] == [*TINY, "--epochs", "1"]


def test_a_start_that_never_saved_leaves_no_other_runs_checkpoint(tmp_path):
    """A new start deletes what another run left before it records its arguments: if it then fails
    before saving, a later call starts it afresh instead of taking the old run's last.pt for its own."""
    from tsrnn.lab import cli

    args = common.arguments("frequency", "doc", ["--size", "toy", "--runs", str(tmp_path)])
    run = tmp_path / "other" / "r"
    old = [*TINY, "--epochs", "1"]
    assert cli.main(["train", *old, "--out", str(run), "--quiet"]) == 0
    (run / training.STARTED).write_text(json.dumps({"argv": old, "wall_s": 5.0}))
    refused = [*TINY, "--epochs", "1", "--lr", "-1"]
    with pytest.raises(RuntimeError, match="--lr"):
        training.train("other", {"r": refused}, args)
    assert not (run / "last.pt").exists() and json.loads((run / training.STARTED).read_text())["argv"] == refused
    assert training._command(run, refused) == refused  # a fresh start, not the old run marked finished


def test_copy_area_keeps_the_accuracy_that_stopped_a_run():
    from experiments import copy_task

    stopped = [(250, 0.2), (500, 0.6), (750, 0.9), (782, 0.995)]  # solved at the epoch's end, off the grid
    assert copy_task.area(stopped, 1500, 250) == pytest.approx((0.2 + 0.6 + 0.9 + 3 * 0.995) / 6)
    assert copy_task.area([(500, 0.5)], 1000, 250) == pytest.approx((0 + 0.5 + 0.5 + 0.5) / 4)


def _copy_results(reached: dict) -> dict:
    areas = {"plstm": {"0": 0.5, "1": 0.6, "2": 0.55}, "lstm": {"0": 0.4, "1": 0.5, "2": 0.45},
             "chrono": {"0": 0.2, "1": 0.3, "2": 0.25}}
    return {"area": areas, "first_step_at_target": reached, "target": 0.99, "steps": 3000}


def test_copy_verdict_is_not_tested_until_a_run_converges_and_reproduced_only_when_every_run_did():
    from experiments import copy_task

    never = {cell: {seed: None for seed in "012"} for cell in copy_task.CELLS}
    some = {**never, "plstm": {"0": 500, "1": 750, "2": None}}
    every = {cell: {seed: 1000 for seed in "012"} for cell in copy_task.CELLS}
    no_value = "the seed reports no value of this measure"
    assert copy_task.verdict(_copy_results(never), seed_size=True).startswith(
        f"plstm before lstm: not tested (0 of 9 runs reached 0.99 within 3000 steps; {no_value}), area plstm - lstm "
        "+0.100 [")
    assert "chrono before lstm: not tested (0 of 9" in copy_task.verdict(_copy_results(never), seed_size=True)
    assert copy_task.verdict(_copy_results(some), seed_size=True).startswith(
        "plstm before lstm: consistent (2 of 9 runs reached 0.99 within 3000 steps;")
    assert "chrono before lstm: against the claim (2 of 9" in copy_task.verdict(_copy_results(some), seed_size=True)
    full = copy_task.verdict(_copy_results(every), seed_size=True)
    assert full.startswith(f"plstm before lstm: reproduced ({no_value}),") and (
        f"chrono before lstm: reversed ({no_value})," in full)
    assert copy_task.verdict(_copy_results(every)).startswith("plstm before lstm: consistent (not the seed's size;")


def test_frequency_verdict_gives_every_condition_its_half_of_the_claim():
    from experiments import frequency

    ahead = common.interval([0.3, 0.28, 0.31])
    level = common.interval([0.01, -0.01, 0.0])
    paired = {"async": {"lstm": ahead, "chrono": ahead}, "sync1": {"lstm": level, "chrono": ahead}}
    said = frequency.verdict({"paired": paired, "margin": 0.05, "margin_before_runs": True}, seed_size=True)
    assert said.startswith("async (pLSTM ahead): vs lstm: reproduced (the seed's +24.0 points outside the interval), "
                           "plstm - lstm +29.7 [")
    assert "sync1 (alike): vs lstm: reproduced (the 90% interval [" in said
    assert "vs chrono: reversed (the 95% interval beyond the margin +-5.0 points; the seed's +0.0 points outside" \
        in said
    late = frequency.verdict({"paired": paired}, seed_size=True)  # a record made before its margin was declared
    assert "sync1 (alike): vs lstm: consistent (the 90% interval [" in late and (
        "the margin declared after the runs" in late)
    assert late.startswith("async (pLSTM ahead): vs lstm: reproduced (")  # the directional half keeps its word
    scaled = frequency.verdict({"paired": {"async_time_scaled": {"lstm": level, "chrono": level}}, "margin": 0.05,
                                "margin_before_runs": True}, seed_size=True)
    rerun = frequency.verdict({"paired": paired, "margin": 0.05, "margin_before_runs": False}, seed_size=True)
    assert "the margin declared after the runs" in rerun  # a rerun of a record whose margin came late
    assert scaled.startswith("async_time_scaled (alike): vs lstm: consistent (the 90% interval [") and (
        "the time input rescaled (the seed's is raw); the seed's +1.9 points inside the interval" in scaled)


def test_dyck_long_dependency_half_is_not_tested_at_the_floor():
    from experiments import dyck

    def cell(per_seed, long):
        bins = [[0.9, 0.5, 0.2, long, long, long, long, long] for _ in per_seed]
        return {"per_seed": per_seed, "bins": bins, "bin_mean": bins[0]}

    low = {"edges": dyck.EDGES, "mts": cell([0.6, 0.62, 0.58], 0.05), "lstm": cell([0.5, 0.52, 0.49], 0.04)}
    assert "longest dependency >= 75: not tested (neither model gets 10% of any such bin's words right: at most 5.0%" \
        in dyck.verdict(low)
    high = {**low, "mts": cell([0.6, 0.62, 0.58], 0.3)}
    assert "longest dependency >= 75: consistent (not the seed's size" in dyck.verdict(high)
    assert dyck.verdict(high).startswith("whole words: consistent (not the seed's size; shorter training than the "
                                         "seed's; the seed's +2.2 points outside the interval)")


def test_brown_verdict_names_the_unigram_baselines_beside_the_seeds():
    from experiments import brown_mlp

    per_seed = {"tilt": {5: {0: 240.0, 1: 245.0, 2: 250.0}}, "buffer": {5: {0: 260.0, 1: 262.0, 2: 266.0}}}
    unigram = {"unigram_seen_ppl": 806.9, "unigram_ppl": 870.6, "recipe": "seed004-tuned"}
    caveat = f"{brown_mlp.RECIPE_CAVEAT}; unigram 807 to 871 against the seed's 853"
    assert brown_mlp.verdict({"ppl_per_seed": per_seed, **unigram}, seed_size=True).startswith(
        f"n = 5: consistent ({caveat}; the seed's +18 ppl inside the interval), buffer - tilt +18 [")
    reversed_ = {"tilt": per_seed["buffer"], "buffer": per_seed["tilt"]}
    assert brown_mlp.verdict({"ppl_per_seed": reversed_, **unigram}, seed_size=True).startswith(
        f"n = 5: against the claim ({caveat}; the seed's +18 ppl outside the interval), buffer - tilt -18 [")
    one = {context: {5: {0: runs[5][0]}} for context, runs in per_seed.items()}
    assert brown_mlp.verdict({"ppl_per_seed": one, **unigram}, seed_size=True) == (
        f"n = 5: inconclusive (one seed; {caveat}; the seed's +18 ppl: no interval from one seed), buffer - tilt +20 "
        "ppl (one seed)")
    seeds_own = {**unigram, "recipe": "seed004"}  # the seed's stated recipe: the data caveat alone
    assert brown_mlp.verdict({"ppl_per_seed": per_seed, **seeds_own}, seed_size=True).startswith(
        "n = 5: consistent (unigram 807 to 871 against the seed's 853; the seed's +18 ppl inside the interval)")


def test_brown_symmetric_verdict_has_the_claims_three_halves_on_the_held_out_words():
    from experiments import brown_symmetric

    test = {"tilt": {0: 240.0, 1: 245.0, 2: 250.0}, "buffer": {0: 260.0, 1: 262.0, 2: 266.0},
            "tilt-buffer": {0: 250.0, 1: 251.0, 2: 262.0}}
    results = {"n": 5, "test_ppl": test, "unigram_seen_ppl": 672.3, "unigram_ppl": 724.0, "recipe": "seed004-tuned"}
    said = brown_symmetric.verdict(results, seed_size=True)
    assert said.startswith("n = 5, held-out words: TILT below Buffer: consistent (tsrnn's training recipe")
    assert "the seed's +18 ppl inside the interval), buffer - tilt +18 [" in said
    assert "; TILT-Buffer above TILT: consistent (" in said and "; TILT-Buffer below Buffer: inconclusive (" in said
    assert brown_symmetric.verdict({**results, "n": 1}).count("the seed reports no value of this measure") == 3


def test_seeds_option_keeps_the_sizes_order_and_refuses_other_seeds(capsys):
    sizes = {"full": (0, 1, 2), "toy": (0, 1)}
    parse = lambda *argv: common.arguments("brown_mlp", "doc", ["--brown", "b.zip", *argv], "brown",  # noqa: E731
                                           ("full", "toy"), sizes)
    assert parse().seeds == (0, 1, 2) and parse("--seeds", "2", "0").seeds == (0, 2)
    for bad in (["--seeds", "3"], ["--size", "toy", "--seeds", "2"], ["--seeds", "1", "1"]):
        with pytest.raises(SystemExit) as stop:
            parse(*bad)
        assert stop.value.code == 2 and "choose distinct seeds among the --size" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # a script without seeds has no --seeds
        common.arguments("dyck", "doc", ["--seeds", "0"])
    assert "unrecognized arguments: --seeds 0" in capsys.readouterr().err


def test_frequency_detail_shows_every_seed_beside_the_seeds_spread():
    from experiments import frequency

    accuracy = {"async": {"plstm": {"0": 0.95, "1": 0.9}, "lstm": {"0": 0.858, "1": 0.52},
                          "chrono": {"0": 0.7, "1": 0.7}}}
    gaps = {"async": {other: common.paired(accuracy["async"]["plstm"], accuracy["async"][other])
                      for other in ("lstm", "chrono")}}
    learned = {"async": {cell: {"0": {"first_epoch": 3, "largest_fall": 0.0},
                                "1": {"first_epoch": None, "largest_fall": 0.31}} for cell in frequency.CELLS}}
    lines = frequency.detail(accuracy, gaps, learned).splitlines()
    assert "| 68.9 +- 23.9 (85.8, 52.0) |" in lines[2] and lines[2].endswith("92.57 (0.5), 68.59 (1.4), 69.64 (0.8) |")
    assert "| +23.6 [" in lines[2] and "| +22.5 [-9.3, 54.3] |" in lines[2]  # pLSTM - LSTM, - chrono by seed
    assert lines[-1] == "| async |" + " epochs 3, never; falls 0.00, 0.31 |" * 3


def test_frequency_learning_reads_the_plateau_exit_and_the_largest_collapse(tmp_path):
    from experiments import frequency

    lines = [{"event": "train", "step": 1, "epoch": 0, "loss": 0.7}] + [
        {"event": "valid", "step": 10 * e, "epoch": e, "accuracy": a} for e, a in enumerate([0.52, 0.65, 0.4, 0.7, 0.6], 1)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    learned = frequency.learning(tmp_path)
    assert learned["first_epoch"] == 2 and learned["largest_fall"] == pytest.approx(0.25)
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"event": "valid", "step": 10, "epoch": 1, "accuracy": 0.55}) + "\n")
    assert frequency.learning(tmp_path) == {"first_epoch": None, "largest_fall": 0.0}


def test_records_name_both_job_counts_when_calls_differed():
    assert common._jobs([2, 1, 2]) == "1 to 2" and common._jobs([2, 2]) == 2


def test_every_committed_record_has_its_verdict_in_the_table():
    rendered = table.render(table.load())
    assert all(r["verdict"] and r["verdict"] in rendered for r in table.load())


def test_every_committed_verdict_is_the_one_its_script_words_today():
    """A change to a script's verdict rule leaves no record carrying the old wording (``python -m
    experiments.table --reword`` rewrites them)."""
    assert {r["name"]: r["verdict"] for r in table.load()} == {r["name"]: table.verdict(r) for r in table.load()}


def test_reword_rewrites_only_the_verdicts_that_changed(tmp_path):
    records = {r["name"]: r for r in table.load()}
    stale = {**records["char_ptb"], "verdict": "reversed at this size (an old rule)"}
    for record in (stale, records["pixels"]):
        (tmp_path / f"{record['name']}.json").write_text(json.dumps(record))
    assert table.reword(tmp_path) == ["char_ptb"]
    assert json.loads((tmp_path / "char_ptb.json").read_text()) == records["char_ptb"]


def test_each_claims_heading_in_reproduction_names_the_verdicts_of_its_record():
    """The hand-written "What the runs show" opens each claim with the record's verdict words."""
    words = re.compile(r"(?<!not )\breproduced\b|inconclusive|consistent|reversed|against the claim|not tested")
    headings = dict(re.findall(r"^\*\*(\d)\. [^:]*: (.*?)\*\*", table.DOCUMENT.read_text(), flags=re.M | re.S))
    records = {}
    for r in table.load():  # a claim may have several records (claim 3's rescaled time, claim 6's symmetric runs)
        records[r["claim"].split(".")[0]] = records.get(r["claim"].split(".")[0], "") + " " + r["verdict"]
    assert set(headings) == set(records)
    assert {k: set(words.findall(h)) for k, h in headings.items()} == {
        k: set(words.findall(v)) for k, v in records.items()}


def test_docs_count_the_reproduced_claims_as_the_records_do():
    """docs/papers.md and docs/reproduction.md say how many claims are reproduced: the records' count."""
    from pathlib import Path

    reproduced = [r["name"] for r in table.load() if re.search(r"(?<!not )\breproduced\b", r["verdict"])]
    assert reproduced == ["frequency"]
    root = Path(table.__file__).parents[1]
    for doc in ("docs/papers.md", "docs/reproduction.md"):
        text = " ".join((root / doc).read_text().split())
        assert "one claim is reproduced" in text and "headline claims" not in text, doc


def test_a_failed_run_raises_with_its_log(tmp_path):
    args = common.arguments("frequency", "doc", ["--size", "toy", "--runs", str(tmp_path)])
    with pytest.raises(RuntimeError, match="--cell 'nope' is not available"):
        training.train("broken", {"bad": ["--task", "freq", "--cell", "nope"]}, args)


def test_command_line_hides_corpus_paths_and_folders():
    args = common.arguments("ptb_lm", "doc", ["--ptb", "/data/ptb", "--runs=/r", "--out", "/o", "--jobs", "1"], "ptb")
    assert common.command_line(args) == "python -m experiments.ptb_lm --ptb PTB_DIR --jobs 1"
    assert common.arguments("dyck", "doc", []).out == str(common.RESULTS)
    assert common.arguments("dyck", "doc", ["--size", "toy"]).out == "runs/experiments/toy/results"


def test_reproduction_table_is_the_committed_records():
    assert table.main(["--check"]) == 0
    records = table.load()
    sweeps = ({f"brown_experiment{e}" for e in range(1, 5)}
              | {f"brown_symmetric_n{n}" for n in common.protocol("brown_symmetric")["sweep_n"]})
    assert {r["name"] for r in records} <= set(SCRIPTS) | sweeps
    assert all(r["size"] != "toy" for r in records)
    rendered = table.render(records)
    assert all(r["ours"].replace("|", "\\|") in rendered for r in records)


def test_the_table_orders_a_claims_records_by_name_whatever_the_folder_lists_first(tmp_path, monkeypatch):
    for claim, name in (("6. b", "brown_b"), ("6. a", "brown_a"), ("2. c", "copy")):
        (tmp_path / f"{name}.json").write_text(json.dumps({"claim": claim, "name": name}))
    listed = sorted(tmp_path.glob("*.json"), reverse=True)
    monkeypatch.setattr(type(tmp_path), "glob", lambda self, pattern: iter(listed))
    assert [r["name"] for r in table.load(tmp_path)] == ["copy", "brown_a", "brown_b"]


def test_brown_sgd_floor_is_the_asymptote_of_the_curve():
    import math

    from experiments import brown_sgd

    curve = [(t, 420 + 200 * math.exp(-0.2 * t)) for t in range(1, 13)]
    assert brown_sgd.floor(curve, 4) == pytest.approx(420, abs=0.5)
    assert brown_sgd.floor(curve[:5], 4) is None  # two points from epoch 4: too few to fit
    rising = [(t, 600 + 90 * (1 - math.exp(-0.2 * t))) for t in range(1, 13)]
    assert brown_sgd.floor(rising, 4) is None  # a curve that rises has no floor
