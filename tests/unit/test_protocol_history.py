"""Protocols declared before the runs: the campaign counts a protocol as declared only once it is
committed, and ``experiments.history`` finds in the git history a protocol committed, or changed,
after its records' results or after their first run started."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from experiments import campaign, common, history

ROOT = Path(campaign.__file__).resolve().parents[1]


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                   capture_output=True)


def test_a_protocol_counts_as_declared_only_once_committed(tmp_path, monkeypatch):
    _git(tmp_path, "init", "-q")
    protocol = tmp_path / "p.toml"
    protocol.write_text('name = "p"\n')
    monkeypatch.setattr(campaign, "ROOT", tmp_path)
    assert campaign.uncommitted(protocol) == "untracked"
    _git(tmp_path, "add", "p.toml")
    _git(tmp_path, "commit", "-qm", "p")
    assert campaign.uncommitted(protocol) is None
    protocol.write_text('name = "p"\nseeds = [0]\n')
    assert campaign.uncommitted(protocol) == "changed since its last commit"


def _repo_with(tmp_path: Path, order: list[str]) -> Path:
    """A checkout whose commits add, in ``order``, the protocol ("protocol"), the ledger ("runs"),
    the record ("record") or a change to the protocol ("change")."""
    _git(tmp_path, "init", "-q")
    files = {"protocol": ("experiments/protocols/x.toml", 'name = "x"\nbefore_runs = true\n'),
             "runs": ("experiments/results/runs/x/a/finished.json", "{}"),
             "record": ("experiments/results/x.json", "{}"),
             "change": ("experiments/protocols/x.toml", 'name = "x"\nbefore_runs = true\nseeds = [0, 1]\n')}
    for step in order:
        path, text = files[step]
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
        _git(tmp_path, "add", "-A")
        _git(tmp_path, "commit", "-qm", step)
    return tmp_path


@pytest.mark.parametrize("order, problems", [
    (["protocol", "runs", "record"], 0),
    (["protocol", "change", "runs"], 0),  # changed before any result: still declared first
    (["runs", "protocol", "record"], 1),  # results before the protocol
    (["protocol", "runs", "change"], 1),  # the protocol changed after its results
    (["runs"], 1),  # never committed
])
def test_history_finds_a_protocol_committed_after_its_results(tmp_path, order, problems):
    if order == ["runs"]:
        repo = _repo_with(tmp_path, order)
        (repo / "experiments/protocols").mkdir(parents=True)
        (repo / "experiments/protocols/x.toml").write_text('name = "x"\nbefore_runs = true\n')
    else:
        repo = _repo_with(tmp_path, order)
    assert len(history.problems(repo)) == problems, history.problems(repo)


def test_history_follows_the_queue_to_records_run_under_another_protocol(tmp_path):
    repo = _repo_with(tmp_path, ["protocol"])
    (repo / "experiments/campaign.toml").write_text('[[entry]]\nrecord = "x_n1"\nprotocol = "x"\nmodule = "m"\n')
    (repo / "experiments/results/runs/x_n1").mkdir(parents=True)
    (repo / "experiments/results/runs/x_n1/finished.json").write_text("{}")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "x_n1's first run")
    assert history.problems(repo) == []
    (repo / "experiments/protocols/x.toml").write_text('name = "x"\nbefore_runs = true\nseeds = [2]\n')
    _git(repo, "commit", "-qam", "a change after x_n1's results")
    assert len(history.problems(repo)) == 1


def test_history_finds_a_run_started_before_its_protocol_was_committed(tmp_path):
    repo = _repo_with(tmp_path, ["protocol"])
    run = repo / "experiments/results/runs/x/a"
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text(json.dumps({"time": 1000.0, "event": "train"}) + "\n")  # 1970: before
    assert any("after a run of its records started" in line for line in history.problems(repo))
    (run / "metrics.jsonl").write_text(json.dumps({"time": 4e9, "event": "train"}) + "\n")
    assert history.problems(repo) == []
    (repo / "experiments/protocols/x.toml").write_text('name = "x"\nbefore_runs = true\nseeds = [3]\n')
    assert any("not committed as it is" in line for line in history.problems(repo))  # edited while runs go on


def test_a_shallow_clone_is_said_to_lack_the_history(tmp_path):
    (tmp_path / "full").mkdir()
    repo = _repo_with(tmp_path / "full", ["protocol", "runs"])
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{repo}", str(tmp_path / "shallow")], check=True,
                   capture_output=True)
    assert history.shallow(tmp_path / "shallow") and not history.shallow(repo)


@pytest.mark.skipif(subprocess.run(["git", "-C", str(ROOT), "rev-parse"], capture_output=True).returncode != 0
                    or history.shallow(ROOT), reason="needs the whole git history")
def test_this_checkouts_protocols_precede_their_results():
    assert history.problems(ROOT) == []


def test_every_record_with_a_protocol_holds_the_declared_one():
    from experiments import table

    for record in table.load():
        if "protocol" in record:
            assert record["protocol"] == common.protocol(record["protocol"]["name"]), record["name"]


def test_every_queued_entry_has_a_protocol_and_a_script():
    import importlib

    for entry in campaign.entries(campaign.QUEUE):
        declared = common.protocol(entry["protocol"])
        assert declared["name"] == entry["protocol"] and declared["before_runs"] is True
        assert hasattr(importlib.import_module(entry["module"]), "verdict")


