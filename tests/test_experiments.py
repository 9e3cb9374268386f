"""The reproduction scripts of ``experiments/`` at their toy size (seconds each): each trains its
runs, writes a JSON record with every table column and a figure, and the table of
REPRODUCTION.md is the one the committed records make."""
from __future__ import annotations

import importlib
import json
from importlib import resources

import pytest

from experiments import common, table

SCRIPTS = {"dyck": [], "copy_task": [], "frequency": [], "pixels": [], "ptb_lm": ["--ptb"],
           "brown_mlp": ["--brown"], "averaging_lm": ["--ptb"], "char_ptb": ["--ptb"]}
ROW = ("claim", "seed", "ours", "command", "model", "epochs", "seeds", "train_min", "jobs", "wall_min", "machine",
       "date")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A PTB-layout folder (word and character files) cut from the embedded corpus."""
    text = resources.files("tsrnn.data").joinpath("tiny_shakespeare.txt").read_text()
    lines = [" ".join(line.split()) for line in text.lower().splitlines() if line.strip()]
    folder = tmp_path_factory.mktemp("ptb")
    for split, part in {"train": lines[:1500], "valid": lines[1500:1800], "test": lines[1800:2100]}.items():
        (folder / f"ptb.{split}.txt").write_text("".join(f" {line} \n" for line in part))
        (folder / f"ptb.char.{split}.txt").write_text("".join(" ".join("_".join(line.split())) + "\n" for line in part))
    return str(folder)


@pytest.mark.parametrize("name", SCRIPTS)
def test_script_runs_at_toy_size_and_writes_its_record(name, corpus, tmp_path):
    script = importlib.import_module(f"experiments.{name}")
    data = [flag for option in SCRIPTS[name] for flag in (option, corpus)]
    assert script.main(["--size", "toy", "--runs", str(tmp_path / "runs"), *data]) == 0
    out = tmp_path / "runs" / "results"
    record = json.loads((out / f"{name}.json").read_text())
    assert set(ROW) <= set(record) and record["size"] == "toy" and record["results"]
    assert record["command"].startswith(f"python -m experiments.{name} --size toy")
    assert corpus not in json.dumps(record)  # corpus paths appear as placeholders
    assert (out / f"{name}.png").stat().st_size > 0
    rendered = table.render_all([record])
    assert record["ours"].replace("|", "\\|") in rendered
    assert ("| <100 |" in rendered) == (name == "ptb_lm")  # the frequency-bin table of claim 5
    runs = [path for path in (tmp_path / "runs" / name).iterdir() if path.is_dir()]
    assert runs and all((run / common.DONE).exists() for run in runs)


def test_a_finished_run_is_not_trained_again(tmp_path, capsys):
    script = importlib.import_module("experiments.frequency")
    argv = ["--size", "toy", "--runs", str(tmp_path)]
    assert script.main(argv) == 0
    first = (tmp_path / "frequency" / "plstm" / "metrics.jsonl").read_text()
    capsys.readouterr()
    assert script.main([*argv, "--jobs", "3"]) == 0
    assert "training" not in capsys.readouterr().out
    record = json.loads((tmp_path / "results" / "frequency.json").read_text())
    assert record["jobs"] == 2  # the training's --jobs, not the re-scoring call's
    assert (tmp_path / "frequency" / "plstm" / "metrics.jsonl").read_text() == first


def test_a_failed_run_raises_with_its_log(tmp_path):
    args = common.arguments("frequency", "doc", ["--size", "toy", "--runs", str(tmp_path)])
    with pytest.raises(RuntimeError, match="--cell 'nope' is not available"):
        common.train("broken", {"bad": ["--task", "freq", "--cell", "nope"]}, args)


def test_command_line_hides_corpus_paths_and_folders():
    args = common.arguments("ptb_lm", "doc", ["--ptb", "/data/ptb", "--runs=/r", "--out", "/o", "--jobs", "1"], "ptb")
    assert common.command_line(args) == "python -m experiments.ptb_lm --ptb PTB_DIR --jobs 1"
    assert common.arguments("dyck", "doc", []).out == str(common.RESULTS)
    assert common.arguments("dyck", "doc", ["--size", "toy"]).out == "runs/experiments/toy/results"


def test_reproduction_table_is_the_committed_records():
    assert table.main(["--check"]) == 0
    records = table.load()
    assert {r["name"] for r in records} <= set(SCRIPTS)
    assert all(r["size"] == "small" for r in records)
    rendered = table.render(records)
    assert all(r["ours"].replace("|", "\\|") in rendered for r in records)
