"""A training run stopped by SIGINT, SIGTERM or SIGKILL loses at most --save-every steps and
resumes bit for bit; its metrics.jsonl then holds every step once. Real processes, tiny runs."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from tsrnn.lab import cli
from tsrnn.lab.training import checkpoint, interrupts

BASE = ["train", "--task", "lm", "--emsize", "16", "--nhid", "24,16", "--bptt", "8", "--batch-size", "4",
        "--backend", "reference", "--log-every", "1", "--quiet"]


def start(out, *extra):
    """The run in a process of its own, on as many threads as this process runs (the comparison
    runs here): a GEMM's bits may depend on its thread count (MKL's on an Intel Xeon with
    AVX-512 did: 2 threads there and 1 here gave other weights)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TSRNN_") or k == "TSRNN_CACHE_DIR"}
    env["OMP_NUM_THREADS"] = str(torch.get_num_threads())
    return subprocess.Popen([sys.executable, "-m", "tsrnn", *BASE, "--out", str(out), *extra], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def train_steps(out) -> list[int]:
    path = out / "metrics.jsonl"
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    return [r["step"] for r in map(json.loads, (line for line in lines if line.endswith("}"))) if r["event"] == "train"]


def wait_for_step(out, step, process, timeout=240):
    deadline = time.monotonic() + timeout
    while not train_steps(out) or train_steps(out)[-1] < step:
        assert process.poll() is None, process.communicate()[1][-4000:]
        assert time.monotonic() < deadline, "the run did not reach its step in time"
        time.sleep(0.02)


def assert_same_weights(a, b):
    for name, value in a["model"].items():
        assert torch.equal(value, b["model"][name]), name


def straight(tmp_path, steps):
    assert cli.main([*BASE, "--max-steps", str(steps), "--out", str(tmp_path / "straight")]) == 0
    return checkpoint.load(tmp_path / "straight" / "last.pt")


@pytest.mark.slow  # a training script in its own process
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_saves_after_the_step_and_the_run_resumes_bit_identically(tmp_path, capsys, signum):
    run = tmp_path / "run"
    process = start(run, "--max-steps", "1000000")
    wait_for_step(run, 3, process)
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 128 + signum
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    saved = checkpoint.load(run / "last.pt")
    stopped = saved["progress"]["step"]
    assert stopped >= 3 and train_steps(run)[-1] == stopped  # every step it took is in the checkpoint
    name = signal.Signals(signum).name
    assert lines[0] == (f"tsrnn train: interrupted by {name} after step {stopped} (epoch 1, batch {stopped}); saved "
                        f"{run / 'last.pt'}; continue with --resume {run / 'last.pt'}")
    total = stopped + 4
    assert cli.main(["train", "--resume", str(run / "last.pt"), "--max-steps", str(total)]) == 0
    assert_same_weights(straight(tmp_path, total), checkpoint.load(run / "last.pt"))
    assert train_steps(run) == list(range(1, total + 1))


@pytest.mark.slow  # a training script in its own process
def test_sigkill_loses_at_most_save_every_steps_and_leaves_nothing_behind(tmp_path):
    run, every = tmp_path / "run", 4
    process = start(run, "--max-steps", "1000000", "--save-every", str(every))
    wait_for_step(run, 2 * every + 3, process)
    process.kill()
    process.communicate(timeout=60)
    reached = train_steps(run)[-1]
    saved = checkpoint.load(run / "last.pt")["progress"]["step"]
    assert saved % every == 0 and reached - every <= saved <= reached
    orphan = run / ".last.pt.0badf00d.tmp"  # what a kill inside checkpoint.save leaves
    orphan.write_bytes(b"half a checkpoint")
    total = reached + 3
    assert cli.main(["train", "--resume", str(run / "last.pt"), "--max-steps", str(total)]) == 0
    assert not orphan.exists()
    assert_same_weights(straight(tmp_path, total), checkpoint.load(run / "last.pt"))
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    keys = [(r["event"], r["step"]) for r in records]
    assert len(keys) == len(set(keys)), "a record written twice"
    assert train_steps(run) == list(range(1, total + 1))


@pytest.mark.parametrize("before", [signal.default_int_handler, signal.SIG_IGN], ids=["default", "ignored"])
def test_a_second_signal_stops_at_once(before):
    """SIGINT's handler before the block comes back after it: Python's default, or SIG_IGN where
    the process started with SIGINT ignored (a background job: ``nohup ... &``)."""
    outer = signal.signal(signal.SIGINT, before)
    try:
        with interrupts.deferred() as signals:
            os.kill(os.getpid(), signal.SIGINT)
            assert signals.signal == signal.SIGINT  # recorded, nothing raised
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is before
    finally:
        signal.signal(signal.SIGINT, outer)


def test_an_interrupt_outside_training_is_one_line(monkeypatch, capsys, tmp_path):
    from tsrnn.lab.training import commands

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(commands, "train", interrupted)
    assert cli.main([*BASE, "--out", str(tmp_path / "run")]) == 130
    err = capsys.readouterr().err.strip()
    assert err == "tsrnn train: interrupted; stopped without saving (a checkpoint written before is intact)"


@pytest.mark.slow  # a training script in its own process
def test_torchrun_forwards_the_signal_and_every_rank_stops_at_the_same_step(tmp_path):
    """torchrun passes SIGINT on to its workers; they agree on the step to stop after (an all-reduce),
    rank 0 saves and reports. The launcher's own traceback is torch's."""
    run = tmp_path / "ddp"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "tsrnn",
               *BASE, "--device", "cpu", "--max-steps", "1000000", "--out", str(run)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        wait_for_step(run, 3, process)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    stopped = checkpoint.load(run / "last.pt")["progress"]["step"]
    assert stopped >= 3 and train_steps(run)[-1] == stopped
    reports = [line for line in stderr.splitlines() if line.startswith("tsrnn train: interrupted by SIGINT")]
    assert reports == [f"tsrnn train: interrupted by SIGINT after step {stopped} (epoch 1, batch {stopped}); saved "
                       f"{run / 'last.pt'}; continue with --resume {run / 'last.pt'}"]
