"""A run directory is never overwritten unasked; --resume continues the same run or says why not;
a checkpoint that was altered, diverged or is not a training checkpoint is refused in one line."""
import json
import os
import stat

import pytest
import torch

from tsrnn.lab import cli, cli_checks
from tsrnn.lab.training import checkpoint, run_dir, trainer
from tsrnn.lab.training.tasks import TASKS

from test_interrupts import assert_same_weights

COPY = ["train", "--task", "copy", "--nhid", "8", "--batch-size", "8", "--delay", "6", "--copy-size", "16,8",
        "--quiet", "--log-every", "1"]


def train(out, *extra):
    return cli.main([*COPY, "--out", str(out), *extra])


def one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def resave(path, **changes):
    """The checkpoint at ``path`` written again through checkpoint.save (a valid checksum) with ``changes``."""
    state = checkpoint.load(path)
    for key in ("format", "tsrnn_version", "checksum"):
        del state[key]
    checkpoint.save(path, {**state, **changes})


def test_an_out_holding_a_run_is_refused_unless_resumed_or_overwritten(tmp_path, capsys):
    run = tmp_path / "run"
    assert train(run, "--max-steps", "3") == 0
    before = {name: (run / name).read_bytes() for name in run_dir.RUN_FILES}
    assert train(run, "--max-steps", "2") == 2
    line = one_line(capsys)
    assert f"--out {run} holds another run (last.pt, best.pt, metrics.jsonl)" in line
    assert f"--resume {run / 'last.pt'}" in line and "--overwrite" in line
    assert {name: (run / name).read_bytes() for name in run_dir.RUN_FILES} == before  # untouched
    other = tmp_path / "other"
    assert train(other, "--max-steps", "1") == 0
    assert cli.main(["train", "--resume", str(run / "last.pt"), "--out", str(other), "--max-steps", "4"]) == 2
    assert f"--out {other} holds another run" in one_line(capsys)
    assert train(run, "--max-steps", "2", "--overwrite", "--seed", "5") == 0
    state = checkpoint.load(run / "last.pt")
    assert state["progress"]["step"] == 2 and state["args"]["seed"] == 5
    assert checkpoint.load(run / "best.pt")["args"]["seed"] == 5  # the old run's best.pt is gone
    steps = [r["step"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
             if r["event"] == "train"]
    assert steps == [1, 2]


def test_resume_continues_in_the_checkpoint_directory_with_its_settings(tmp_path):
    run = tmp_path / "run"
    assert train(run, "--max-steps", "1", "--seed", "3") == 0
    assert cli.main(["train", "--resume", str(run / "last.pt"), "--max-steps", "2", "--quiet"]) == 0
    state = checkpoint.load(run / "last.pt")
    assert state["progress"]["step"] == 2 and state["args"]["seed"] == 3 and state["args"]["delay"] == 6


def test_resume_applies_a_new_learning_rate(tmp_path):
    run = tmp_path / "run"
    assert train(run, "--max-steps", "1") == 0
    assert checkpoint.load(run / "last.pt")["optimizer"]["param_groups"][0]["lr"] != 0.5
    assert train(run, "--resume", str(run / "last.pt"), "--max-steps", "2", "--lr", "0.5") == 0
    state = checkpoint.load(run / "last.pt")
    assert state["optimizer"]["param_groups"][0]["lr"] == 0.5 and state["args"]["lr"] == 0.5


@pytest.mark.parametrize("flag,value,saved", [("--batch-size", "4", "8"), ("--seed", "7", "0"),
                                              ("--cell", "lstm", "plstm"), ("--task", "dyck", "copy"),
                                              ("--optimizer", "sgd", "adam")])
def test_resume_refuses_a_flag_that_changes_the_run(tmp_path, capsys, flag, value, saved):
    run = tmp_path / "run"
    assert train(run, "--max-steps", "1") == 0
    capsys.readouterr()
    argv = ["train", "--resume", str(run / "last.pt"), "--max-steps", "2", flag, value]
    assert cli.main(argv) == 2
    line = one_line(capsys)
    assert f"{flag} {value} differs from the checkpoint's {saved}" in line
    assert checkpoint.load(run / "last.pt")["progress"]["step"] == 1
    assert train(run, "--resume", str(run / "last.pt"), "--max-steps", "2", "--batch-size", "8") == 0  # the same value


def test_resuming_a_finished_run_says_so(tmp_path, capsys):
    run = tmp_path / "run"
    assert train(run, "--epochs", "1") == 0
    capsys.readouterr()
    assert cli.main(["train", "--resume", str(run / "last.pt")]) == 2
    assert "has finished its run: 1 epochs done and --epochs 1; give --epochs N > 1" in one_line(capsys)
    assert cli.main(["train", "--resume", str(run / "last.pt"), "--epochs", "2", "--quiet"]) == 0
    assert checkpoint.load(run / "last.pt")["progress"]["epoch"] == 2
    steps = tmp_path / "steps"
    assert train(steps, "--max-steps", "1") == 0
    capsys.readouterr()
    assert cli.main(["train", "--resume", str(steps / "last.pt")]) == 2
    assert "1 steps done and --max-steps 1; give a larger --max-steps (0: no limit)" in one_line(capsys)


def test_resuming_a_run_stopped_by_patience_needs_more_patience(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(TASKS["copy"], "evaluate", lambda self, model, split: {"loss": 1.0})  # never better
    run = tmp_path / "run"
    assert train(run, "--epochs", "5", "--patience", "1") == 0
    assert checkpoint.load(run / "last.pt")["progress"]["stopped"] == "patience"
    capsys.readouterr()
    assert cli.main(["train", "--resume", str(run / "last.pt")]) == 2
    assert "stopped early after 1 epochs without a better validation loss (--patience 1)" in one_line(capsys)
    assert cli.main(["train", "--resume", str(run / "last.pt"), "--patience", "3", "--quiet"]) == 0
    progress = checkpoint.load(run / "last.pt")["progress"]  # the count of bad epochs goes on: 2, 3
    assert progress["epoch"] == 4 and progress["bad_epochs"] == 3 and progress["stopped"] == "patience"


def test_an_edited_or_corrupted_checkpoint_is_refused(tmp_path, capsys):
    run = tmp_path / "run"
    assert train(run, "--max-steps", "1") == 0
    path = run / "last.pt"
    state = torch.load(path, weights_only=True)
    name = next(iter(state["model"]))
    state["model"][name].view(-1)[0] += 1.0
    torch.save(state, tmp_path / "edited.pt")
    with pytest.raises(checkpoint.CheckpointError, match="is corrupt: its contents do not match the checksum"):
        checkpoint.load(tmp_path / "edited.pt")
    data = bytearray(path.read_bytes())
    weight = checkpoint.load(path)["model"][name].numpy().tobytes()
    at = data.find(weight)
    assert at > 0
    data[at + len(weight) // 2] ^= 0x10  # one flipped bit inside the weight
    (tmp_path / "flipped.pt").write_bytes(bytes(data))
    with pytest.raises(checkpoint.CheckpointError, match="is corrupt|cannot be read"):
        checkpoint.load(tmp_path / "flipped.pt")
    capsys.readouterr()
    assert cli.main(["eval", str(tmp_path / "flipped.pt")]) == 2
    one_line(capsys)


def test_a_non_finite_weight_is_refused(tmp_path, capsys):
    run = tmp_path / "run"
    assert train(run, "--max-steps", "1") == 0
    model = checkpoint.load(run / "last.pt")["model"]
    name = next(n for n, t in model.items() if t.is_floating_point())
    model[name].view(-1)[:2] = torch.tensor([float("nan"), float("inf")])
    resave(run / "last.pt", model=model)
    capsys.readouterr()
    assert cli.main(["train", "--resume", str(run / "last.pt"), "--max-steps", "2"]) == 2
    assert f"weight {name!r} holds 2 non-finite values (NaN or inf); refused" in one_line(capsys)


def test_a_checkpoint_without_the_run_state_is_refused(tmp_path, capsys):
    checkpoint.save(tmp_path / "bare.pt", {"task": "copy", "model": {}})
    assert cli.main(["train", "--resume", str(tmp_path / "bare.pt"), "--out", str(tmp_path / "run")]) == 2
    assert "lacks 'config', 'args', 'optimizer'" in one_line(capsys)


def test_a_broken_rng_state_is_one_line(tmp_path, capsys):
    run = tmp_path / "run"
    assert train(run, "--max-steps", "1") == 0
    rng = checkpoint.load(run / "last.pt")["rng"]
    resave(run / "last.pt", rng={**rng, "torch": torch.zeros(3, dtype=torch.uint8)})
    capsys.readouterr()
    assert cli.main(["train", "--resume", str(run / "last.pt"), "--max-steps", "2"]) == 2
    assert "its random-number generator state is not valid" in one_line(capsys)


def test_a_format_2_checkpoint_names_the_upgrade(tmp_path):
    run = tmp_path / "run"
    assert train(run, "--max-steps", "1") == 0
    state = checkpoint.load(run / "last.pt")
    state["format"] = 2
    del state["checksum"], state["metrics_records"]
    torch.save(state, run / "old.pt")
    with pytest.raises(checkpoint.CheckpointError, match=r"format 2, not 3; tsrnn\.lab\.training\.checkpoint\.upgrade"):
        checkpoint.load(run / "old.pt")
    checkpoint.upgrade(run / "old.pt")
    upgraded = checkpoint.load(run / "old.pt")
    assert upgraded["metrics_records"] == len((run / "metrics.jsonl").read_text().splitlines())
    assert upgraded["model"].keys() == state["model"].keys()
    assert_same_weights(upgraded, state)


def test_every_file_of_a_run_gets_the_same_mode(tmp_path):
    old = os.umask(0o027)
    try:
        assert train(tmp_path / "run", "--max-steps", "2") == 0
    finally:
        os.umask(old)
    modes = {name: stat.S_IMODE((tmp_path / "run" / name).stat().st_mode) for name in run_dir.RUN_FILES}
    assert set(modes.values()) == {0o640}, modes


def test_prepare_cuts_metrics_back_to_the_checkpoint(tmp_path):
    lines = [json.dumps({"event": "train", "step": s}) for s in range(1, 6)]
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + "\n" + '{"event": "tra')  # a kill mid-line
    run_dir.prepare(tmp_path, 3, overwrite=False)
    assert (tmp_path / "metrics.jsonl").read_text() == "\n".join(lines[:3]) + "\n"
    assert run_dir.Metrics(tmp_path / "metrics.jsonl").records == 3
    run_dir.prepare(tmp_path, None, overwrite=False)
    assert not (tmp_path / "metrics.jsonl").exists()


def test_save_every_and_save_minutes(tmp_path, monkeypatch):
    saved = []
    real_save = checkpoint.save

    def recording(path, payload):
        saved.append((path.name, payload["progress"]["step"]))
        return real_save(path, payload)

    monkeypatch.setattr(checkpoint, "save", recording)
    assert train(tmp_path / "a", "--max-steps", "5", "--save-every", "2", "--save-minutes", "0") == 0
    assert [step for name, step in saved if name == "last.pt"] == [2, 4, 5]
    saved.clear()
    ticks = iter(range(0, 10**6, 50))  # 50 s per reading of the clock
    monkeypatch.setattr(trainer, "clock", lambda: next(ticks))
    assert train(tmp_path / "b", "--max-steps", "5", "--save-minutes", "2") == 0
    assert [step for name, step in saved if name == "last.pt"] == [2, 4, 5]


def test_a_non_finite_loss_stops_the_run_before_its_step(tmp_path, capsys, monkeypatch):
    real = TASKS["copy"].train_loss
    calls = []

    def poisoned(self, model, batch, carry):
        loss, carry, n = real(self, model, batch, carry)
        calls.append(1)
        return (loss * float("nan") if len(calls) == 3 else loss), carry, n

    monkeypatch.setattr(TASKS["copy"], "train_loss", poisoned)
    assert train(tmp_path / "run", "--max-steps", "5", "--save-every", "1") == 1
    line = one_line(capsys)
    assert line.startswith("tsrnn train: error: the training loss is nan at step 3 (epoch 2); stopped before")
    state = checkpoint.load(tmp_path / "run" / "last.pt")
    assert state["progress"]["step"] == 2


def test_an_overflowing_step_is_one_line(tmp_path, capsys):
    assert train(tmp_path / "run", "--max-steps", "3", "--lr", "1e38") == 1
    assert "overflowed" in one_line(capsys)


def test_a_full_disk_is_one_line_and_leaves_no_temporary_file(tmp_path, capsys, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", full)
    assert train(tmp_path / "run", "--max-steps", "1") == 2
    assert "No space left on device" in one_line(capsys)
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["metrics.jsonl"]


def test_sizes_past_memory_that_the_size_check_lets_through_are_one_line(tmp_path, capsys, monkeypatch):
    """The allocator's refusal (the size check of cli_checks told that memory is endless: its
    estimate is a lower bound, so a run just under it may still run out)."""
    monkeypatch.setattr(cli_checks, "available_memory", lambda device: (2 ** 80, "endless memory"))
    assert train(tmp_path / "run", "--nhid", str(10**9), "--max-steps", "1") == 1
    line = one_line(capsys)
    assert line.startswith("tsrnn train: error: out of memory (") and line.endswith("; use smaller sizes")
