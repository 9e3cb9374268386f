"""The campaign runner (experiments/campaign.py), the ledger of finished runs, and protocols
declared before the runs (experiments/history.py): a campaign killed outright resumes without
training a finished run again, runs restore from the ledger on a machine without checkpoints,
an uncommitted protocol is refused, and the git history puts every protocol before its results."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments import campaign, common, history

pytestmark = pytest.mark.slow  # trains toy runs of a reproduction script
ROOT = Path(campaign.__file__).resolve().parents[1]
RECORD = "frequency_time_scaled"


def _queue(tmp_path: Path) -> Path:
    queue = tmp_path / "queue.toml"
    queue.write_text(f'[[entry]]\nrecord = "{RECORD}"\nmodule = "experiments.{RECORD}"\nargs = ["--size", "toy"]\n')
    return queue


def _campaign(tmp_path: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "experiments.campaign", "--queue", str(_queue(tmp_path)), "--runs",
            str(tmp_path / "runs"), "--results", str(tmp_path / "results"), *extra]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.skipif(subprocess.run(["git", "-C", str(ROOT), "rev-parse"], capture_output=True).returncode != 0,
                    reason="the campaign refuses protocols it cannot see committed; needs the git checkout")
def test_a_campaign_killed_outright_resumes_without_training_a_finished_run_again(tmp_path):
    ledger = tmp_path / "results" / "runs" / RECORD
    first = subprocess.Popen(_campaign(tmp_path), cwd=ROOT, start_new_session=True, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 300
    while not list(ledger.glob(f"*/{common.DONE}")):
        assert first.poll() is None and time.time() < deadline, first.communicate()[0]
        time.sleep(0.2)
    os.killpg(first.pid, signal.SIGKILL)  # the campaign dies; the script it started, in a session of its own, does not
    first.wait()
    left = json.loads((tmp_path / "runs" / "campaign.lock").read_text())["group"]
    finished = {run.parent.name: (run.parent / "metrics.jsonl").read_text() for run in ledger.glob(f"*/{common.DONE}")}
    done = subprocess.run(_campaign(tmp_path), cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "was killed; interrupting what it left running" in done.stdout and not _alive(left)
    record = json.loads((tmp_path / "results" / f"{RECORD}.json").read_text())
    assert record["protocol"] == common.protocol(RECORD) and record["size"] == "toy"
    assert len(list(ledger.glob(f"*/{common.DONE}"))) == 6  # 3 cells x 2 toy seeds
    for run, metrics in finished.items():  # a run finished before the kill was not trained again
        assert (ledger / run / "metrics.jsonl").read_text() == metrics
    again = subprocess.run(_campaign(tmp_path), cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "every entry is done" in again.stdout and "training" not in again.stdout
    status = subprocess.run(_campaign(tmp_path, "--status"), cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert status.stdout.strip() == f"{RECORD}: done (--size toy)"


def test_runs_the_ledger_holds_are_restored_not_trained_again(tmp_path, capsys):
    from experiments import frequency_time_scaled

    argv = ["--size", "toy", "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out")]
    assert frequency_time_scaled.main(argv) == 0
    record = json.loads((tmp_path / "out" / f"{RECORD}.json").read_text())
    for run in (tmp_path / "runs" / RECORD).iterdir():  # another machine: the checkpoints are gone
        for file in run.iterdir():
            file.unlink()
    capsys.readouterr()
    assert frequency_time_scaled.main(argv) == 0
    assert "training" not in capsys.readouterr().out
    again = json.loads((tmp_path / "out" / f"{RECORD}.json").read_text())
    assert again["results"]["test_accuracy"] == record["results"]["test_accuracy"]  # from the stored test metrics
    finished = common.finished(tmp_path / "runs" / RECORD / f"plstm_async_time_scaled_seed0")
    assert set(finished["test"]) == {"best.pt", "last.pt"} and 0 <= finished["test"]["best.pt"]["accuracy"] <= 1


def test_a_second_campaign_is_refused_while_one_runs(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        lock = tmp_path / "campaign.lock"
        lock.write_text(json.dumps({"pid": holder.pid, "group": None}))
        with pytest.raises(SystemExit, match=f"a campaign is already running \\(pid {holder.pid}"):
            campaign.take_lock(lock)
    finally:
        holder.kill()
        holder.wait()
    campaign.take_lock(lock)  # its holder gone, the lock is taken over
    assert json.loads(lock.read_text()) == {"pid": os.getpid(), "group": None}


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


@pytest.mark.skipif(subprocess.run(["git", "-C", str(ROOT), "rev-parse"], capture_output=True).returncode != 0,
                    reason="needs the git history")
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


@pytest.mark.skipif(subprocess.run(["git", "-C", str(ROOT), "rev-parse"], capture_output=True).returncode != 0,
                    reason="the campaign refuses protocols it cannot see committed; needs the git checkout")
def test_sigterm_stops_the_entrys_runs_at_once_and_the_next_call_finishes_them(tmp_path):
    started = tmp_path / "runs" / RECORD
    first = subprocess.Popen(_campaign(tmp_path), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
    deadline = time.time() + 300
    while not list(started.glob(f"*/{common.STARTED}")):
        assert first.poll() is None and time.time() < deadline, first.communicate()[0]
        time.sleep(0.1)
    group = json.loads((tmp_path / "runs" / "campaign.lock").read_text())["group"]
    stopping = time.time()
    first.send_signal(signal.SIGTERM)
    out, _ = first.communicate(timeout=100)
    assert first.returncode == 128 + signal.SIGTERM and "stopped;" in out
    assert time.time() - stopping < 30  # the entry's script reaped, not waited on until the kill deadline
    with pytest.raises(ProcessLookupError):
        os.killpg(group, 0)
    done = subprocess.run(_campaign(tmp_path), cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and (tmp_path / "results" / f"{RECORD}.json").exists(), done.stdout + done.stderr
