"""`tsrnn train` / `tsrnn eval` end to end at tiny sizes: every task trains from the CLI, resume is
bit-identical, eval reports frequency bins with bootstrap intervals, bad input fails cleanly."""
import json
import math
import os
import signal
import subprocess
import sys

import pytest
import torch

from tsrnn.backend import choice, timing
from tsrnn.lab.data import copy as copy_data, dyck
from tsrnn.lab import cli
from tsrnn.lab.training import checkpoint
from tsrnn.lab.training.recipes import RECIPES
from tsrnn.lab.training.tasks import TASKS
from conftest import corpus_folder

from test_interrupts import assert_same_weights

TINY = {
    "lm": ["--emsize", "16", "--nhid", "24,16", "--bptt", "8", "--batch-size", "4"],
    "averaging-lm": ["--emsize", "16", "--nhid", "24", "--batch-size", "8", "--bptt", "12"],
    "mlp-lm": ["--emsize", "8", "--nhid", "16", "--batch-size", "4", "--bptt", "16", "--n", "3"],
    "dyck": ["--nhid", "16", "--batch-size", "8", "--dyck-size", "64,16,16"],
    "copy": ["--nhid", "16", "--batch-size", "8", "--delay", "12"],
    "freq": ["--nhid", "8", "--batch-size", "8", "--freq-size", "24,12", "--async"],
    "pixels": ["--nhid", "8", "--batch-size", "64"],
}
CASES = [("lm", "lstm"), ("lm", "mts"), ("lm", "plstm"), ("averaging-lm", None), ("dyck", "lstm"),
         ("dyck", "mts"), ("copy", "lstm"), ("copy", "chrono"), ("copy", "plstm"),
         ("freq", "lstm"), ("freq", "chrono"), ("freq", "plstm"), ("pixels", "lstm"), ("pixels", "chrono"),
         ("pixels", "plstm")]
CONTEXTS = ["buffer", "tilt", "tilt-buffer"]


def train(tmp_path, task, *extra, steps=3, out="run"):
    argv = ["train", "--task", task, *TINY[task], "--max-steps", str(steps), "--out", str(tmp_path / out),
            "--quiet", "--log-every", "1", *extra]
    return cli.main(argv)


def metrics(tmp_path, out="run"):
    return [json.loads(line) for line in (tmp_path / out / "metrics.jsonl").read_text().splitlines()]


def assert_trained(tmp_path, steps=3):
    records = metrics(tmp_path)
    assert [r["step"] for r in records if r["event"] == "train"] == list(range(1, steps + 1))
    valid = [r for r in records if r["event"] == "valid"]
    assert valid and all(v["loss"] == v["loss"] and v["loss"] < 1e4 for v in valid)  # finite
    state = checkpoint.load(tmp_path / "run" / "last.pt")
    assert state["progress"]["step"] == steps


@pytest.mark.parametrize("task,cell", CASES, ids=lambda v: str(v))
def test_task_trains_from_the_cli(tmp_path, task, cell):
    if task == "pixels":
        pytest.importorskip("sklearn")  # its default digits
    assert train(tmp_path, task, *(["--cell", cell] if cell else [])) == 0
    assert_trained(tmp_path)


@pytest.mark.parametrize("cell", ["lstm", "plstm"])
def test_freq_task_sync_with_time_input(tmp_path, cell):
    """The synchronous condition at a finer resolution, time as a second input: accuracy and the
    majority-class rate reported; the fixed validation set is the same for every run."""
    argv = ["--cell", cell, "--resolution", "2.5", "--time-input"]
    assert train(tmp_path, "freq", *argv) == 0
    assert_trained(tmp_path)
    valid = [r for r in metrics(tmp_path) if r["event"] == "valid"][-1]
    assert 0 <= valid["accuracy"] <= 1 and 0.5 <= valid["majority"] <= 1
    state = checkpoint.load(tmp_path / "run" / "last.pt")
    assert state["config"]["time_input"] is True and state["config"]["resolution"] == 2.5


def test_pixels_task_reads_mnist_files_permuted(tmp_path):
    """--data DIR takes MNIST's IDX files (here tiny 2x2 images the test writes), --permute the
    permuted order; the sequence length (4 steps) is part of the model's config."""
    from test_digits import fake_mnist

    assert train(tmp_path, "pixels", "--data", str(fake_mnist(tmp_path / "mnist")), "--permute") == 0
    assert_trained(tmp_path)
    config = checkpoint.load(tmp_path / "run" / "last.pt")["config"]
    assert config["steps"] == 4 and config["permute"] is True


@pytest.mark.parametrize("context", CONTEXTS)
def test_mlp_lm_trains_with_each_context(tmp_path, context):
    assert train(tmp_path, "mlp-lm", "--context", context) == 0
    assert_trained(tmp_path)


def test_resume_is_bit_identical(tmp_path):
    extra = ["--cell", "mts", "--valid-every", "2"]
    assert train(tmp_path, "lm", *extra, steps=6, out="straight") == 0
    assert train(tmp_path, "lm", *extra, steps=3, out="split") == 0
    assert train(tmp_path, "lm", *extra, "--resume", str(tmp_path / "split" / "last.pt"), steps=6, out="split") == 0
    straight = checkpoint.load(tmp_path / "straight" / "last.pt")
    resumed = checkpoint.load(tmp_path / "split" / "last.pt")
    for name, value in straight["model"].items():
        assert torch.equal(value, resumed["model"][name]), name
    assert straight["progress"] == resumed["progress"]
    train_losses = lambda out: [r["loss"] for r in metrics(tmp_path, out) if r["event"] == "train"]
    assert train_losses("straight") == train_losses("split")


# One `tsrnn train` in a fresh process whose autotuner (tsrnn.backend.timing.fastest) always picks the
# candidate at index sys.argv[1]: two processes whose timings came out differently.
TUNED_RUN = """
import sys
from tsrnn.backend import timing
from tsrnn.lab import cli
timing.fastest = lambda paths, call, run: paths[int(sys.argv[1])]
sys.exit(cli.main(sys.argv[2:]))
"""


@pytest.mark.slow  # a training script in its own process
def test_resume_in_a_fresh_process_reuses_the_kernels(tmp_path):
    """The checkpoint records the kernels "auto" chose; a resumed process whose own timings would
    pick others (here: the first candidate, onednn, where the run had the last, cpu) reuses them,
    and continues bit for bit. Each process has a disk cache of its own (TSRNN_CACHE_DIR), else the
    resumed one would read the choices there."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TSRNN_")}
    base = ["train", "--task", "lm", *TINY["lm"], "--cell", "lstm", "--quiet", "--valid-every", "2"]

    def run(pick, steps, out, *extra):
        argv = [sys.executable, "-c", TUNED_RUN, str(pick), *base, "--max-steps", str(steps),
                "--out", str(tmp_path / out), *extra]
        subprocess.run(argv, env={**env, "TSRNN_CACHE_DIR": str(tmp_path / f"cache {out} {steps}")}, check=True,
                       capture_output=True)
        return checkpoint.load(tmp_path / out / "last.pt")

    straight = run(-1, 6, "straight")
    assert straight["backend_choices"] and set(straight["backend_choices"].values()) == {"cpu"}
    run(-1, 3, "split")
    resumed = run(0, 6, "split", "--resume", str(tmp_path / "split" / "last.pt"))
    for name, value in straight["model"].items():
        assert torch.equal(value, resumed["model"][name]), name
    assert resumed["backend_choices"] == straight["backend_choices"]


def five_batch_corpus(folder):
    """A WikiText-2-layout corpus of a few lines: an epoch of 5 batches at CARRIED["lm"]'s sizes."""
    words = [f"w{i}" for i in range(12)]
    for split, lines in (("train", 8), ("valid", 6), ("test", 2)):
        text = "\n".join(" ".join(words[(3 * n + 5 * k) % 12] for k in range(19)) for n in range(lines))
        (folder / f"{split}.txt").write_text(text + "\n")
    return folder


# task, its arguments, the steps of the whole run, of one epoch, and a step inside the first epoch
CARRIED = {"lm": (["--cell", "mts", "--emsize", "16", "--nhid", "24,16", "--bptt", "8", "--batch-size", "4"], 7, 5, 2),
           "dyck": (["--cell", "mts", "--nhid", "8", "--batch-size", "8", "--dyck-size", "24,8,8", "--chunk", "8"],
                    30, 24, 10)}


@pytest.mark.slow  # a training script in its own process
@pytest.mark.parametrize("task", CARRIED)
def test_a_resumed_process_chooses_as_the_uninterrupted_run_for_shapes_met_after_the_checkpoint(
        tmp_path, monkeypatch, clean_backend_state, task):
    """The MTS LM and Dyck with its state carried between chunks, the autotuner on, stopped at an
    epoch's end and inside an epoch, resumed in a fresh process whose own timings would pick other
    kernels (TUNED_RUN: the first candidate, where this process's pick the last): the shapes met
    after the checkpoint (Dyck's chunks of other lengths and batch sizes) take the choices the
    uninterrupted run measured, from the disk cache (TSRNN_CACHE_DIR, shared), and the weights
    come out bit for bit."""
    arguments, steps, epoch, inside = CARRIED[task]
    if task == "lm":
        arguments = [*arguments, "--data", str(five_batch_corpus(tmp_path))]
    base = ["train", "--task", task, *arguments, "--quiet", "--valid-every", "3"]
    monkeypatch.setattr(timing, "fastest", lambda paths, call, run: paths[-1])
    assert cli.main([*base, "--max-steps", str(steps), "--out", str(tmp_path / "straight")]) == 0
    straight = checkpoint.load(tmp_path / "straight" / "last.pt")
    assert [r["step"] for r in metrics(tmp_path, "straight") if r["event"] == "epoch"][0] == epoch
    env = {k: v for k, v in os.environ.items() if not k.startswith("TSRNN_") or k == "TSRNN_CACHE_DIR"}
    env["OMP_NUM_THREADS"] = str(torch.get_num_threads())
    for stop in (epoch, inside):
        out = tmp_path / f"split{stop}"
        choice._tuned.clear()  # a run of its own: its checkpoint records its own choices only
        choice.MEMO.clear()
        assert cli.main([*base, "--max-steps", str(stop), "--out", str(out)]) == 0
        before = checkpoint.load(out / "last.pt")["backend_choices"]
        subprocess.run([sys.executable, "-c", TUNED_RUN, "0", "train", "--resume", str(out / "last.pt"),
                        "--max-steps", str(steps), "--quiet"], env=env, check=True, capture_output=True)
        resumed = checkpoint.load(out / "last.pt")
        assert_same_weights(straight, resumed)
        assert resumed["backend_choices"].items() <= straight["backend_choices"].items()
        if stop == inside and task == "dyck":  # the LM's split run met its shapes by its final validation
            assert set(resumed["backend_choices"]) - set(before), "no shape first met after the checkpoint"


class _Planted:
    """A pickle payload that writes a file when unpickled."""

    def __init__(self, target):
        self.target = str(target)

    def __reduce__(self):
        return exec, (f"open({self.target!r}, 'w').write('ran')",)


@pytest.mark.parametrize("command", ["eval", "analyze", "resume"])
def test_a_checkpoint_holding_code_is_refused_unread(tmp_path, capsys, command):
    """Checkpoints are read with torch.load(weights_only=True): a planted payload never runs."""
    target = tmp_path / "written_by_the_payload"
    planted = tmp_path / "planted.pt"
    torch.save({"format": 2, "task": "lm", "model": {}, "payload": _Planted(target)}, planted)
    argv = {"eval": ["eval", str(planted)], "analyze": ["analyze", str(planted), "--out", str(tmp_path / "a")],
            "resume": ["train", "--resume", str(planted), "--out", str(tmp_path / "run")]}[command]
    assert cli.main(argv) == 2
    line = capsys.readouterr().err.strip()
    assert "Traceback" not in line and len(line.splitlines()) == 1
    assert "holds an object other than tensors and plain values (exec)" in line and "refused" in line
    assert not target.exists()


def test_a_format_1_checkpoint_is_refused_with_the_way_to_upgrade_it(tmp_path):
    """Format 1 stored numpy's RNG state as an array, which weights_only loading refuses."""
    import numpy as np

    assert train(tmp_path, "lm", steps=1) == 0
    path = tmp_path / "run" / "last.pt"
    state = checkpoint.load(path)
    np.random.seed(7)
    state["format"], state["rng"]["numpy"] = 1, np.random.get_state()
    torch.save(state, path)
    with pytest.raises(checkpoint.CheckpointError, match=r"format 1 .*checkpoint\.upgrade\("):
        checkpoint.load(path)
    checkpoint.upgrade(path)
    upgraded = checkpoint.load(path)
    assert upgraded["format"] == checkpoint.FORMAT and upgraded["progress"] == state["progress"]
    expected = np.random.rand(3)
    np.random.seed(0)
    checkpoint.set_rng_state(upgraded["rng"])
    assert np.array_equal(np.random.rand(3), expected)


def test_eval_reports_frequency_bins_and_paired_interval(tmp_path, capsys):
    assert train(tmp_path, "lm", "--cell", "lstm", steps=4, out="model") == 0
    assert train(tmp_path, "lm", "--cell", "lstm", steps=1, out="baseline") == 0
    capsys.readouterr()
    assert cli.main(["eval", str(tmp_path / "model" / "last.pt"), "--resamples", "200"]) == 0
    text = capsys.readouterr().out
    for label in ("all", ">=10K", "1K-10K", "100-1K", "<100", "99.9% (authors)", "95%", "batch size 1",
                  "train+valid+test"):
        assert label in text
    assert cli.main(["eval", str(tmp_path / "model" / "last.pt"), "--resamples", "200", "--counts", "train"]) == 0
    assert "bins by word counts over train;" in capsys.readouterr().out
    assert cli.main(["eval", str(tmp_path / "model" / "last.pt"), str(tmp_path / "baseline" / "last.pt"),
                     "--resamples", "200"]) == 0
    assert "base - model" in capsys.readouterr().out


def test_errors_are_one_clear_line(tmp_path, capsys):
    assert train(tmp_path, "lm", "--data", str(tmp_path / "missing")) == 2
    assert "error" in capsys.readouterr().err
    bad = tmp_path / "bad"
    bad.mkdir()
    for split in ("train", "valid", "test"):
        (bad / f"{split}.txt").write_bytes(b"\xff\xfe\x00 not text")
    assert train(tmp_path, "lm", "--data", str(bad)) == 2
    assert "error" in capsys.readouterr().err
    assert train(tmp_path, "lm", "--cell", "gru") == 2
    assert "--cell 'gru'" in capsys.readouterr().err
    assert train(tmp_path, "averaging-lm", steps=1, out="avg") == 0
    assert train(tmp_path, "lm", "--resume", str(tmp_path / "avg" / "last.pt")) == 2
    assert "--task lm differs from the checkpoint's averaging-lm" in capsys.readouterr().err
    assert train(tmp_path, "lm", "--nhid", "32,16", "--resume", str(tmp_path / "avg" / "last.pt")) == 2
    (tmp_path / "broken.pt").write_bytes(b"not a checkpoint")
    assert cli.main(["eval", str(tmp_path / "broken.pt")]) == 2
    assert "cannot be read" in capsys.readouterr().err


def test_resume_rejects_another_model(tmp_path, capsys):
    assert train(tmp_path, "lm", steps=1, out="a") == 0
    argv = ["--nhid", "32,16", "--resume", str(tmp_path / "a" / "last.pt")]
    assert cli.main(["train", "--task", "lm", "--emsize", "16", "--bptt", "8", "--batch-size", "4", "--max-steps", "2",
                     "--out", str(tmp_path / "a"), "--quiet", *argv]) == 2
    assert "--nhid 32,16 differs from the checkpoint's 24,16" in capsys.readouterr().err


def test_checkpoint_save_is_atomic(tmp_path, monkeypatch):
    target = tmp_path / "ckpt.pt"
    payload = {**dict.fromkeys(checkpoint.KEYS), "model": {}, "optimizer": {}, "task": "x"}
    checkpoint.save(target, {**payload, "value": 1})

    def explode(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", explode)
    with pytest.raises(OSError):
        checkpoint.save(target, {**payload, "value": 2})
    assert checkpoint.load(target)["value"] == 1  # the old checkpoint is intact
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]  # no temporary file left


@pytest.mark.slow  # a training script in its own process
def test_default_command_runs_in_a_fresh_process(tmp_path):
    result = subprocess.run([sys.executable, "-m", "tsrnn", "train", "--max-steps", "2", "--quiet",
                             "--out", str(tmp_path / "default")], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "tiny-shakespeare" in result.stdout or "final validation" in result.stdout


@pytest.mark.slow  # a training script in its own process
def test_torchrun_two_processes(tmp_path):
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "tsrnn",
               "train", *TINY["lm"], "--max-steps", "2", "--quiet", "--device", "cpu", "--out", str(tmp_path / "ddp")]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # the launcher and both workers
        raise
    assert process.returncode == 0, stderr[-8000:]  # the workers' own errors precede the launcher's
    assert "2 process(es)" in stdout
    state = checkpoint.load(tmp_path / "ddp" / "last.pt")
    assert state["progress"]["step"] == 2


def test_character_level_reports_bits_per_character(tmp_path, capsys):
    data = corpus_folder(tmp_path / "ptb-char", "a _ c a t _ s a t\nt h e _ d o g _ r a n _ f a s t\n" * 40,
                         name="ptb.char.{split}.txt")
    assert train(tmp_path, "lm", "--data", str(data), "--level", "char", steps=2, out="char") == 0
    valid = [r for r in metrics(tmp_path, "char") if r["event"] == "valid"][-1]
    assert valid["bpc"] == pytest.approx(valid["loss"] / math.log(2))
    capsys.readouterr()
    assert cli.main(["eval", str(tmp_path / "char" / "last.pt"), "--resamples", "50"]) == 0
    assert "bits per character" in capsys.readouterr().out
    assert train(tmp_path, "lm", steps=1, out="word") == 0
    assert all("bpc" not in r for r in metrics(tmp_path, "word"))  # word level: perplexity only


RECIPE_SMOKE = {  # each recipe's schedule at a size a test runs (the recipe's own sizes are for a GPU)
    ("seed000", "lm"): ["--emsize", "16", "--nhid", "24,16", "--batch-size", "4", "--bptt", "12", "--max-steps", "4"],
    ("seed000", "dyck"): ["--nhid", "16", "--dyck-size", "64,16,16", "--chunk", "8", "--epochs", "1"],
    ("seed001", "averaging-lm"): ["--emsize", "16", "--nhid", "16", "--max-steps", "3"],
    ("seed002", "copy"): ["--nhid", "16", "--delay", "10", "--copy-size", "256,128", "--epochs", "1"],
    ("seed002", "freq"): ["--nhid", "8", "--freq-size", "64,32", "--epochs", "1"],
    ("seed002", "pixels"): ["--nhid", "8", "--max-steps", "2"],
    ("seed004", "mlp-lm"): ["--emsize", "8", "--nhid", "16", "--max-steps", "3"],
    ("seed004-tuned", "mlp-lm"): ["--emsize", "8", "--nhid", "16", "--max-steps", "3"],
}


@pytest.mark.parametrize("recipe, task", list(RECIPE_SMOKE))
def test_each_recipe_runs_a_short_epoch(tmp_path, recipe, task):
    assert cli.main(["train", "--recipe", recipe, "--task", task, *RECIPE_SMOKE[recipe, task], "--quiet",
                     "--out", str(tmp_path / "run")]) == 0
    state = checkpoint.load(tmp_path / "run" / "last.pt")
    for key, value in RECIPES[recipe][task].items():
        if f"--{key.replace('_', '-')}" not in RECIPE_SMOKE[recipe, task]:
            assert state["args"][key] == value, key  # the recipe's value reached the run


def tiny_corpus(tmp_path):
    return corpus_folder(tmp_path / "tiny", "the cat sat on the mat\nthe dog ran to the cat\n" * 20)


def scripted_validation(monkeypatch, losses):
    """The lm task's validation returns ``losses`` in turn (a schedule's input, made exact)."""
    script = iter(losses)
    monkeypatch.setattr(TASKS["lm"], "evaluate", lambda self, model, split: self.loss_metrics(next(script)))


def test_patience_stops_a_run_that_no_longer_improves(tmp_path, monkeypatch):
    scripted_validation(monkeypatch, [3.0, 2.0, 2.0, 2.5, 1.0, 1.0])
    assert train(tmp_path, "lm", "--data", tiny_corpus(tmp_path), "--patience", "2", "--epochs", "6", steps=0) == 0
    assert [r["epoch"] for r in metrics(tmp_path) if r["event"] == "valid"] == [1, 2, 3, 4]


def test_nt_asgd_switches_on_the_rule_and_resumes_averaging(tmp_path, monkeypatch):
    scripted_validation(monkeypatch, [2.0, 2.5, 3.0, 3.0, 3.0])
    args = ["--data", tiny_corpus(tmp_path), "--optimizer", "sgd", "--lr", "1", "--nonmono", "1"]
    assert train(tmp_path, "lm", *args, "--epochs", "4", steps=0) == 0
    switches = [r for r in metrics(tmp_path) if r["event"] == "switch"]
    assert [(r["epoch"], r["optimizer"]) for r in switches] == [(3, "asgd")]  # 3.0 > min(history[:-1]) = 2.0
    state = checkpoint.load(tmp_path / "run" / "last.pt")
    assert state["progress"]["averaging"] and "ax" in next(iter(state["optimizer"]["state"].values()))
    assert train(tmp_path, "lm", *args, "--epochs", "5", "--resume", str(tmp_path / "run" / "last.pt"),
                 steps=0) == 0  # the averaged optimizer comes back with its averages


def test_each_epoch_reports_its_training_time(tmp_path, capsys):
    """An "epoch" record per epoch with its training seconds (validation not counted) and rate,
    and the time on the per-epoch line."""
    assert train(tmp_path, "dyck", "--epochs", "2", "--valid-every", "3", steps=0) == 0
    epochs = [r for r in metrics(tmp_path) if r["event"] == "epoch"]
    assert [(r["epoch"], r["step"]) for r in epochs] == [(1, 8), (2, 16)]  # 64 words in batches of 8
    assert all(r["epoch_s"] > 0 and r["seq_per_s"] == pytest.approx(64 / r["epoch_s"], rel=0.1) for r in epochs)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("epoch ")]
    assert [line.split(" s training: valid loss ")[0].rsplit(", ", 1)[0] for line in lines] == \
        ["epoch 1, step 8", "epoch 2, step 16"]


def test_pixels_without_the_mnist_directory_is_one_line(tmp_path, capsys):
    code = cli.main(["train", "--task", "pixels", "--data", str(tmp_path / "nowhere"), "--out", str(tmp_path / "run"),
                     "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "MNIST directory" in err[0] and "does not exist" in err[0]


def test_copy_fixed_p_and_generalization_to_other_delays(tmp_path, capsys):
    """--fixed-p trains a pLSTM with p held (seed 002 §5.1); tsrnn eval --delays scores the
    checkpoint at delays it was not trained with (A.4)."""
    assert train(tmp_path, "copy", "--fixed-p", "1.5") == 0
    state = checkpoint.load(tmp_path / "run" / "last.pt")
    assert state["config"]["fixed_p"] == 1.5 and torch.equal(state["model"]["rnn.p_l0"], torch.full((16,), 1.5))
    capsys.readouterr()
    assert cli.main(["eval", str(tmp_path / "run" / "last.pt"), "--delays", "5,30"]) == 0
    out = capsys.readouterr().out
    assert "trained at T = 12" in out
    for delay in (5, 30):
        line = next(line for line in out.splitlines() if line.startswith(f"T = {delay}:"))
        assert "sequence_accuracy" in line and f"baseline_loss {copy_data.copy_baseline_loss(delay):.4g}" in line


def test_fixed_p_needs_the_plstm_and_delays_need_a_copy_model(tmp_path, capsys):
    assert train(tmp_path, "copy", "--cell", "lstm", "--fixed-p", "0.5") == 2
    assert "fixed_p is the pLSTM's decay exponent" in capsys.readouterr().err
    assert train(tmp_path, "dyck", steps=1) == 0
    assert cli.main(["eval", str(tmp_path / "run" / "last.pt"), "--delays", "50"]) == 2
    assert "--delays evaluates copy-task checkpoints" in capsys.readouterr().err


def test_dyck_sequences_correct_marks_each_word_in_split_order():
    import argparse

    task = TASKS["dyck"](argparse.Namespace(cell="lstm", nhid="6", dyck_size="40,40,70", backend="reference"),
                         torch.device("cpu"))

    class Oracle(torch.nn.Module):
        """Right on every step of words of at most 10 symbols; one wrong step in longer ones."""

        def forward(self, tokens, lengths=None):
            words = ["".join(dyck.DYCK_SYMBOLS[i] for i in column if i != dyck.DYCK_PAD)
                     for column in tokens.T.tolist()]
            split = dyck.encode_dyck(words)
            pred = torch.zeros(tokens.shape[0], tokens.shape[1], 2)
            pred[:split.labels.shape[0]] = split.labels
            pred[0, split.lengths > 10] = 1 - pred[0, split.lengths > 10]
            return pred

    right = task.sequences_correct(Oracle(), "test")
    lengths = task.data.test.lengths
    assert right.shape == (70,) and 0 < int(right.sum()) < 70
    assert torch.equal(right, lengths <= 10)
    assert right.double().mean().item() == pytest.approx(task.evaluate(Oracle(), "test")["accuracy"])


def test_eval_baseline_of_another_task_is_one_line(tmp_path, capsys):
    assert train(tmp_path, "lm", "--cell", "lstm", steps=1, out="lm") == 0
    assert train(tmp_path, "copy", "--cell", "lstm", steps=1, out="copy") == 0
    lm, copy = str(tmp_path / "lm" / "last.pt"), str(tmp_path / "copy" / "last.pt")
    capsys.readouterr()
    assert cli.main(["eval", lm, copy]) == 2
    assert f"the baseline {copy} is a copy model and {lm} a lm model" in capsys.readouterr().err
    assert cli.main(["eval", copy, lm]) == 2
    assert f"a baseline is compared by token perplexity, for language models; {copy} is a copy model" in \
        capsys.readouterr().err
