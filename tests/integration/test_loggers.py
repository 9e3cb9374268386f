"""The run's records (tsrnn.lab.training.loggers): "train" records carry the step's learning rate
and gradient norm; --csv and --tensorboard hold the same records as metrics.jsonl, also across a
resume; off a terminal the output is one line per epoch, never a progress bar."""
import csv
import json
import shutil
import subprocess
import sys

import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from tsrnn.lab import cli
from tsrnn.lab.training import checkpoint, loggers

COPY = ["train", "--task", "copy", "--nhid", "8", "--batch-size", "8", "--delay", "6", "--copy-size", "16,8",
        "--log-every", "1", "--lr", "0.02"]  # 2 steps an epoch
LM = ["train", "--task", "lm", "--emsize", "16", "--nhid", "24,16", "--bptt", "8", "--batch-size", "4",
      "--log-every", "1"]


def train(out, *extra, base=COPY, quiet=True):
    return cli.main([*base, "--out", str(out), *(["--quiet"] if quiet else []), *extra])


def records(out, event=None):
    lines = (out / "metrics.jsonl").read_text().splitlines()
    found = [json.loads(line, parse_constant=lambda name: pytest.fail(f"{name} in metrics.jsonl")) for line in lines]
    return [r for r in found if event is None or r["event"] == event]


@pytest.fixture
def steps_seen():
    """What each optimizer.step() of the test saw: param group 0's learning rate and the 2-norm of
    the gradients it applies."""
    seen = []

    def hook(optimizer, args, kwargs):
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        norm = torch.sqrt(sum((g.double() ** 2).sum() for g in grads)).item()
        seen.append((optimizer.param_groups[0]["lr"], norm))

    handle = register_optimizer_step_pre_hook(hook)
    yield seen
    handle.remove()


def test_train_records_hold_the_lr_and_gradient_norm_each_step_used(tmp_path, steps_seen):
    """--clip 0: the gradients optimizer.step() applies are the step's own, whose norm is recorded;
    the learning rate follows --lr-decay-after (halved after epoch 1, again after epoch 2)."""
    assert train(tmp_path / "run", "--epochs", "3", "--clip", "0", "--lr-decay-after", "1",
                 "--lr-decay-factor", "2") == 0
    train_records = records(tmp_path / "run", "train")
    assert [r["step"] for r in train_records] == [1, 2, 3, 4, 5, 6]
    assert [r["lr"] for r in train_records] == [0.02, 0.02, 0.01, 0.01, 0.005, 0.005]
    assert [r["lr"] for r in train_records] == [lr for lr, _ in steps_seen]
    for record, (_, norm) in zip(train_records, steps_seen):
        assert record["grad_norm"] == pytest.approx(norm, rel=1e-5)


def test_the_lr_is_the_scaled_rate_of_random_bptt_windows(tmp_path, steps_seen):
    """The lm task's --random-bptt scales each step's rate by its window's length / --bptt: the
    record has the rate the step used, not --lr."""
    assert train(tmp_path / "run", "--max-steps", "6", "--random-bptt", "--lr", "1", "--optimizer", "sgd",
                 "--clip", "0", base=LM) == 0
    recorded = [r["lr"] for r in records(tmp_path / "run", "train")]
    assert recorded == [lr for lr, _ in steps_seen] and len(set(recorded)) > 1


def test_the_gradient_norm_is_taken_before_clipping(tmp_path, steps_seen):
    """With --clip 1e-3 the step applies gradients of norm 1e-3; the record holds the norm before
    clipping, which on step 1 (the same weights and batch) is the unclipped run's."""
    assert train(tmp_path / "free", "--max-steps", "1", "--clip", "0") == 0
    assert train(tmp_path / "clipped", "--max-steps", "1", "--clip", "1e-3") == 0
    free, clipped = records(tmp_path / "free", "train")[0], records(tmp_path / "clipped", "train")[0]
    assert clipped["grad_norm"] == pytest.approx(free["grad_norm"], rel=1e-6) and clipped["grad_norm"] > 1e-2
    assert steps_seen[1][1] == pytest.approx(1e-3, rel=1e-4)  # what the clipped step applied


def test_a_non_finite_number_is_null_in_json_and_an_empty_cell_in_the_csv(tmp_path):
    args = type("Args", (), {"csv": str(tmp_path / "m.csv"), "tensorboard": None})()
    log = loggers.Loggers(tmp_path, args)
    log.write(event="train", step=1, epoch=0, loss=2.5, lr=0.1, grad_norm=float("nan"))
    log.write(event="train", step=2, epoch=0, loss=2.4, lr=0.1, grad_norm=float("inf"))
    log.close()
    assert [r["grad_norm"] for r in records(tmp_path)] == [None, None] and log.records == 2
    rows = list(csv.DictReader((tmp_path / "m.csv").open(newline="")))
    assert [(r["step"], r["value"]) for r in rows if r["name"] == "grad_norm"] == [("1", ""), ("2", "")]


def csv_records(path):
    """The CSV's rows gathered back into records (one per time, event, step and epoch)."""
    gathered = {}
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames) == loggers.CSV_HEADER
        for row in reader:
            key = (float(row["time"]), row["event"], int(row["step"]), int(row["epoch"]))
            record = gathered.setdefault(key, dict(zip(("time", "event", "step", "epoch"), key)))
            value = row["value"]
            try:
                record[row["name"]] = float(value) if value else None
            except ValueError:
                record[row["name"]] = value  # the "switch" record's optimizer
    return list(gathered.values())


def test_the_csv_holds_the_records_of_metrics_jsonl(tmp_path):
    assert train(tmp_path / "run", "--epochs", "2", "--valid-every", "3", "--csv", str(tmp_path / "m.csv")) == 0
    expected = records(tmp_path / "run")
    assert {r["event"] for r in expected} == {"train", "valid", "epoch"}
    assert csv_records(tmp_path / "m.csv") == expected


def scalars(folder, tag):
    """(step, value) of a TensorBoard scalar as TensorBoard reads it (purged steps left out)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(folder))
    accumulator.Reload()
    return [(event.step, event.value) for event in accumulator.Scalars(tag)]


def test_tensorboard_holds_every_number_at_its_step(tmp_path):
    pytest.importorskip("tensorboard")
    assert train(tmp_path / "run", "--epochs", "2", "--tensorboard", str(tmp_path / "tb")) == 0
    expected = records(tmp_path / "run")
    for event, name in (("train", "loss"), ("train", "lr"), ("train", "grad_norm"), ("valid", "accuracy"),
                        ("epoch", "epoch_s")):
        logged = scalars(tmp_path / "tb", f"{event}/{name}")
        assert [step for step, _ in logged] == [r["step"] for r in expected if r["event"] == event]
        assert [value for _, value in logged] == pytest.approx([r[name] for r in expected if r["event"] == event],
                                                               rel=1e-6)
    assert [step for step, _ in scalars(tmp_path / "tb", "train/loss")] == [1, 2, 3, 4]


TIMED = ("time", "epoch_s", "seq_per_s")  # what differs between two runs of the same steps


def untimed(found):
    return [{k: v for k, v in r.items() if k not in TIMED} for r in found]


def test_a_resume_continues_the_csv_and_tensorboard_without_duplicates(tmp_path, monkeypatch):
    """A run stopped after step 3, resumed from its checkpoint of step 2 (the steps 3 logged before
    are trained again): the CSV and TensorBoard hold each step once, as the uninterrupted run's; a
    new --csv given on resume gets the records from the start."""
    pytest.importorskip("tensorboard")
    run, straight = tmp_path / "run", tmp_path / "straight"
    views = lambda where: ["--csv", str(where / "m.csv"), "--tensorboard", str(where / "tb")]
    assert train(straight, "--max-steps", "6", "--valid-every", "2", *views(straight)) == 0
    real_save = checkpoint.save

    def keeping_step_2(path, payload):
        real_save(path, payload)
        if path.name == "last.pt" and payload["progress"]["step"] == 2:
            shutil.copy(path, run / "step2.pt")

    monkeypatch.setattr(checkpoint, "save", keeping_step_2)
    assert train(run, "--max-steps", "3", "--valid-every", "2", "--save-every", "2", *views(run)) == 0
    assert [r["step"] for r in csv_records(run / "m.csv") if r["event"] == "train"] == [1, 2, 3]
    monkeypatch.setattr(checkpoint, "save", real_save)
    assert cli.main(["train", "--resume", str(run / "step2.pt"), "--max-steps", "6", "--quiet"]) == 0
    assert untimed(records(run)) == untimed(records(straight))
    assert untimed(csv_records(run / "m.csv")) == untimed(records(run))
    with open(run / "m.csv") as f:
        assert sum(line.startswith("time,") for line in f) == 1  # the header once
    resumed, uninterrupted = scalars(run / "tb", "train/loss"), scalars(straight / "tb", "train/loss")
    assert [step for step, _ in resumed] == [1, 2, 3, 4, 5, 6]
    assert resumed == uninterrupted  # the same losses (float32 in the event file)
    assert train(run, "--resume", str(run / "last.pt"), "--max-steps", "7", "--csv", str(tmp_path / "new.csv")) == 0
    assert csv_records(tmp_path / "new.csv") == records(run)  # given on resume: every record, from step 1


def test_a_fresh_run_does_not_write_over_another_runs_csv_or_events(tmp_path, capsys):
    pytest.importorskip("tensorboard")
    assert train(tmp_path / "a", "--max-steps", "1", "--csv", str(tmp_path / "m.csv"), "--tensorboard",
                 str(tmp_path / "tb")) == 0
    capsys.readouterr()
    for flag, path in (("--csv", tmp_path / "m.csv"), ("--tensorboard", tmp_path / "tb")):
        assert train(tmp_path / "b", "--max-steps", "1", flag, str(path)) == 2
        err = capsys.readouterr().err.strip()
        assert err == f"tsrnn train: error: {flag} {path} holds another run's " + \
            ("records; replace it" if flag == "--csv" else "event files; replace them") + \
            f" with --overwrite or choose another {flag}"
    assert train(tmp_path / "b", "--max-steps", "2", "--csv", str(tmp_path / "m.csv"), "--tensorboard",
                 str(tmp_path / "tb"), "--overwrite") == 0
    assert [r["step"] for r in csv_records(tmp_path / "m.csv") if r["event"] == "train"] == [1, 2]
    assert [step for step, _ in scalars(tmp_path / "tb", "train/loss")] == [1, 2]


def test_tensorboard_not_installed_is_one_line_up_front(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(loggers, "tensorboard_installed", lambda: False)
    assert train(tmp_path / "c", "--tensorboard", str(tmp_path / "tb2")) == 2
    assert capsys.readouterr().err.strip() == \
        "tsrnn train: error: --tensorboard needs the tensorboard package: pip install tensorboard"
    assert not (tmp_path / "c").exists()


def test_off_a_terminal_the_output_is_one_line_per_epoch(tmp_path, capfd):
    """stdout and stderr captured to files (not terminals) without --quiet: the start line, one line
    per epoch, the two end lines, and no progress bar (no carriage return)."""
    assert train(tmp_path / "run", "--epochs", "3", quiet=False) == 0
    out, err = capfd.readouterr()
    assert "\r" not in out + err and err == ""
    lines = out.splitlines()
    assert len(lines) == 1 + 3 + 2 and [line.split(",")[0] for line in lines[1:4]] == ["epoch 1", "epoch 2", "epoch 3"]


def test_on_a_terminal_the_progress_bar_shows(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert train(tmp_path / "run", "--epochs", "1", quiet=False) == 0
    err = capsys.readouterr().err
    assert "\r" in err and "epoch 1/1" in err
    assert train(tmp_path / "quiet", "--epochs", "1") == 0  # --quiet: none on a terminal either
    assert "\r" not in capsys.readouterr().err


@pytest.mark.slow  # a training script in its own process
def test_a_process_writing_to_a_file_prints_no_progress_bar(tmp_path):
    with open(tmp_path / "log.txt", "w") as log:
        subprocess.run([sys.executable, "-m", "tsrnn", *COPY, "--epochs", "2", "--out", str(tmp_path / "run")],
                       stdout=log, stderr=subprocess.STDOUT, check=True, timeout=300)
    text = (tmp_path / "log.txt").read_text()
    assert "\r" not in text and len(text.splitlines()) == 1 + 2 + 2, text
