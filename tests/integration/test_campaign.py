"""The campaign runner (experiments/campaign.py) and the ledger of finished runs: a campaign
killed outright resumes without training a finished run again, a stopped one leaves its runs
saved, a second one on its CPU is refused, two workers share an entry's runs without training one
twice (a run another process holds is left to it), and runs restore from the ledger on a machine without
checkpoints, only where the ledger holds all the script scores."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments import campaign, claims, common, training

pytestmark = pytest.mark.slow  # trains toy runs of a reproduction script
ROOT = Path(campaign.__file__).resolve().parents[1]
CPU = sorted(os.sched_getaffinity(0))[-1]  # a worker's default CPU
RECORD = "frequency_time_scaled"
needs_git = pytest.mark.skipif(
    subprocess.run(["git", "-C", str(ROOT), "rev-parse"], capture_output=True).returncode != 0,
    reason="the campaign refuses protocols it cannot see committed; needs the git checkout")
TINY = ["--task", "freq", "--freq-size", "64,32", "--batch-size", "8", "--nhid", "4", "--seed", "3"]


def _queue(tmp_path: Path) -> Path:
    queue = tmp_path / "queue.toml"
    queue.write_text(f'[[entry]]\nrecord = "{RECORD}"\nmodule = "experiments.{RECORD}"\nargs = ["--size", "toy"]\n')
    return queue


def _campaign(tmp_path: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "experiments.campaign", "--queue", str(_queue(tmp_path)), "--runs",
            str(tmp_path / "runs"), "--results", str(tmp_path / "results"), "--priority", "normal", *extra]
    # in the idle class a campaign under test would wait on whatever else the CPUs run


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@needs_git
def test_a_campaign_killed_outright_resumes_without_training_a_finished_run_again(tmp_path):
    ledger = tmp_path / "results" / "runs" / RECORD
    first = subprocess.Popen(_campaign(tmp_path), cwd=ROOT, start_new_session=True, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 300
    while not list(ledger.glob(f"*/{training.DONE}")):
        assert first.poll() is None and time.time() < deadline, first.communicate()[0]
        time.sleep(0.2)
    os.killpg(first.pid, signal.SIGKILL)  # the campaign dies; the script it started, in a session of its own, does not
    first.wait()
    left = json.loads((tmp_path / "runs" / f"campaign-cpu{CPU}.lock").read_text())["group"]
    finished = {run.parent.name: (run.parent / "metrics.jsonl").read_text() for run in ledger.glob(f"*/{training.DONE}")}
    done = subprocess.run(_campaign(tmp_path), cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "was killed; stopping what it left running" in done.stdout and not _alive(left)
    record = json.loads((tmp_path / "results" / f"{RECORD}.json").read_text())
    assert record["protocol"] == common.protocol(RECORD) and record["size"] == "toy"
    assert len(list(ledger.glob(f"*/{training.DONE}"))) == 6  # 3 cells x 2 toy seeds
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
    finished = training.finished(tmp_path / "runs" / RECORD / "plstm_async_time_scaled_seed0")
    assert set(finished["test"]) == {"best.pt", "last.pt"} and 0 <= finished["test"]["best.pt"]["accuracy"] <= 1


def test_the_ledger_spells_the_corpus_path_and_restores_only_whole_entries_with_test_metrics(tmp_path):
    corpus = tmp_path / "data" / "corpus.txt"
    argv = [*TINY, "--data", str(corpus)]
    ledger = tmp_path / "out" / "runs" / "x" / "r"
    ledger.mkdir(parents=True)
    (ledger / "metrics.jsonl").write_text(json.dumps({"time": 1.0, "event": "valid", "step": 1, "epoch": 1}) + "\n")
    entry = {"argv": [*TINY, "--data", "CORPUS"], "wall_s": 1.0, "jobs": 1, "test": {"best.pt": {"accuracy": 0.5}}}
    (ledger / training.DONE).write_text(json.dumps(entry))
    assert training._restorable(ledger, argv, str(corpus))  # another machine's path, the same run
    assert not training._restorable(ledger, [*argv, "--seed", "4"], str(corpus))
    (ledger / training.DONE).write_text(json.dumps({k: v for k, v in entry.items() if k != "test"}))
    assert not training._restorable(ledger, argv, str(corpus))  # an old entry without its test metrics
    (ledger / training.DONE).write_text(json.dumps(entry))
    (ledger / "metrics.jsonl").unlink()
    assert not training._restorable(ledger, argv, str(corpus))  # half an entry


def test_a_script_that_reads_checkpoints_trains_again_what_only_the_ledger_holds(tmp_path, capsys):
    args = common.arguments("frequency", "doc", ["--size", "toy", "--runs", str(tmp_path / "runs"), "--out",
                                                 str(tmp_path / "out")])
    wanted = {"r": [*TINY, "--epochs", "1"]}
    training.train("x", wanted, args)
    for file in (tmp_path / "runs" / "x" / "r").iterdir():
        file.unlink()
    capsys.readouterr()
    training.train("x", wanted, args, checkpoints=True)
    assert "training r" in capsys.readouterr().out and (tmp_path / "runs" / "x" / "r" / "best.pt").exists()
    for file in (tmp_path / "runs" / "x" / "r").iterdir():
        file.unlink()
    training.train("x", wanted, args)
    assert "training r" not in capsys.readouterr().out



def test_a_second_campaign_is_refused_while_one_runs(tmp_path):
    lock = tmp_path / "campaign.lock"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from pathlib import Path; "
                               "from experiments.campaign import Lock; held = Lock(Path(sys.argv[1])); print('held', flush=True); "
                               "time.sleep(60)", str(lock)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(SystemExit, match=f"a campaign is already running .*\"pid\": {holder.pid}"):
            campaign.Lock(lock)
    finally:
        holder.kill()
        holder.wait()
    campaign.Lock(lock)  # its holder gone (killed outright), the lock is free
    assert json.loads(lock.read_text())["pid"] == os.getpid()


@needs_git
def test_sigterm_stops_the_entrys_runs_at_once_and_the_next_call_finishes_them(tmp_path):
    started = tmp_path / "runs" / RECORD
    first = subprocess.Popen(_campaign(tmp_path), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
    deadline = time.time() + 300
    while not list(started.glob(f"*/{training.STARTED}")):
        assert first.poll() is None and time.time() < deadline, first.communicate()[0]
        time.sleep(0.1)
    group = json.loads((tmp_path / "runs" / f"campaign-cpu{CPU}.lock").read_text())["group"]
    stopping = time.time()
    first.send_signal(signal.SIGTERM)
    out, _ = first.communicate(timeout=100)
    assert first.returncode == 128 + signal.SIGTERM and "stopped;" in out
    assert time.time() - stopping < 90  # the entry's script reaped, not spun on until the kill deadline (120 s)
    with pytest.raises(ProcessLookupError):
        os.killpg(group, 0)
    for run in started.iterdir():  # a run that had trained a step saved a checkpoint or finished (one still
        if (run / "metrics.jsonl").exists():  # starting up when stopped trained nothing and starts afresh)
            assert (run / "last.pt").exists() or (run / training.DONE).exists(), run.name
    assert len(list(started.glob(f"*/{training.DONE}"))) < 6  # stopped, not trained to the end (6 toy runs)
    done = subprocess.run(_campaign(tmp_path), cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and (tmp_path / "results" / f"{RECORD}.json").exists(), done.stdout + done.stderr


def test_train_leaves_a_run_another_process_holds_then_trains_it_once_released(tmp_path, capsys):
    args = common.arguments("frequency", "doc", ["--size", "toy", "--runs", str(tmp_path / "runs"), "--out",
                                                 str(tmp_path / "out"), "--jobs", "1"])
    wanted = {"a": [*TINY, "--epochs", "1"], "b": [*TINY, "--epochs", "1", "--seed", "4"]}
    held = claims.claim(tmp_path / "runs" / "x" / "b")  # another worker's claim (flock: one per open file)
    try:
        with pytest.raises(SystemExit) as left:
            training.train("x", wanted, args)
    finally:
        os.close(held)
    out = capsys.readouterr().out
    assert left.value.code == claims.HELD_ELSEWHERE and "1 run(s) are being trained by another process (b)" in out
    assert "training a" in out and "training b" not in out
    assert (tmp_path / "out" / "runs" / "x" / "a" / training.DONE).exists()
    assert not (tmp_path / "runs" / "x" / "b" / training.DONE).exists()
    dirs = training.train("x", wanted, args)  # released: this call trains it, and only it
    out = capsys.readouterr().out
    assert "training b" in out and "training a" not in out
    assert all((dirs[run] / training.DONE).exists() for run in wanted)


@needs_git
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="two workers, one a CPU")
def test_two_workers_share_an_entry_and_no_run_is_trained_twice(tmp_path):
    workers = [subprocess.Popen(_campaign(tmp_path, "--cpu", str(cpu), "--busy-wait", "1"), cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
               for cpu in sorted(os.sched_getaffinity(0))[:2]]
    outs = [worker.communicate(timeout=600)[0] for worker in workers]
    assert [worker.returncode for worker in workers] == [0, 0], outs
    assert all("every entry is done" in out for out in outs), outs
    logs = (tmp_path / "runs" / "campaign" / f"{RECORD}.log").read_text()  # both workers' scripts append to it
    trained = [line.split()[2].rstrip(":") for line in logs.splitlines() if line.startswith(f"[{RECORD}] training ")]
    assert len(trained) == len(set(trained)) == 6, trained  # 3 cells x 2 toy seeds, each trained by one worker
    record = json.loads((tmp_path / "results" / f"{RECORD}.json").read_text())
    assert record["protocol"] == common.protocol(RECORD)
