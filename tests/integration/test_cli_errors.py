"""A mistyped `tsrnn train` / `tsrnn eval` option is one line `tsrnn <command>: error: ...` and exit
code 2, found before any data is read or model built (no traceback, no wasted time)."""
import pytest
import torch

from tsrnn.lab import cli
from tsrnn.lab.training import commands, distributed

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")


@pytest.fixture(autouse=True)
def nothing_runs(monkeypatch):
    """The commands themselves must never be reached: every error here comes from main()'s checks."""
    def forbidden(args):
        raise AssertionError(f"tsrnn {args.command} ran despite a bad argument")

    monkeypatch.setattr(commands, "train", forbidden)
    monkeypatch.setattr(commands, "evaluate", forbidden)


def error(capsys, *argv):
    assert cli.main(list(argv)) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    assert lines[0].startswith(f"tsrnn {argv[0]}: error: "), lines[0]
    return lines[0]


@no_cuda
def test_cuda_device_without_cuda(tmp_path, capsys):
    line = error(capsys, "train", "--device", "cuda", "--out", str(tmp_path / "run"))
    assert "CUDA is not available" in line and torch.__version__ in line
    if torch.version.cuda is None:
        assert "CPU-only build" in line
    line = error(capsys, "train", "--device", "cuda:5", "--out", str(tmp_path / "run"))
    assert "CUDA is not available" in line
    assert "CUDA is not available" in error(capsys, "eval", str(tmp_path / "x.pt"), "--device", "cuda")


def test_cuda_index_beyond_the_gpus(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    line = error(capsys, "train", "--device", "cuda:5", "--out", str(tmp_path / "run"))
    assert "--device cuda:5" in line and "2 GPUs" in line and "cuda:1" in line


def test_not_a_device(tmp_path, capsys):
    line = error(capsys, "train", "--device", "banana", "--out", str(tmp_path / "run"))
    assert "'banana' is not a device" in line
    assert "is not a device" in error(capsys, "eval", str(tmp_path / "x.pt"), "--device", "cuda:x")


def test_cpu_device_does_not_touch_cuda(monkeypatch):
    def touched():
        raise AssertionError("--device cpu queried CUDA")

    monkeypatch.setattr(torch.cuda, "is_available", touched)
    monkeypatch.setattr(torch.cuda, "device_count", touched)
    assert distributed.check_device("cpu") == torch.device("cpu")
    assert distributed.check_device(None) is None


def test_out_is_a_file(tmp_path, capsys):
    existing = tmp_path / "results.txt"
    existing.write_text("not a directory")
    line = error(capsys, "train", "--out", str(existing))
    assert f"--out {existing} is an existing file" in line and "must be a directory" in line
    line = error(capsys, "train", "--out", str(existing / "run"))
    assert "must be a directory" in line


def test_default_out_root_is_a_file(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").write_text("not a directory")
    line = error(capsys, "train")
    assert "--out runs/lm (the default) is inside runs, an existing file" in line


@pytest.mark.parametrize("value", ["abc", "1150,,400", "1150,0", "-5", "12.5", ""])
def test_nhid_format(tmp_path, capsys, value):
    line = error(capsys, "train", "--nhid", value, "--out", str(tmp_path / "run"))
    assert "--nhid expects comma-separated positive integers, e.g. 1150,1150,400" in line


@pytest.mark.parametrize("value", ["5000", "5000,0", "a,b", "1,2,3"])
def test_freq_size_format(tmp_path, capsys, value):
    line = error(capsys, "train", "--task", "freq", "--freq-size", value, "--out", str(tmp_path / "run"))
    assert "--freq-size expects two comma-separated positive integers" in line


@pytest.mark.parametrize("value", ["0", "-2", "nan", "inf"])
def test_fixed_p_must_be_positive(tmp_path, capsys, value):
    line = error(capsys, "train", "--task", "copy", "--fixed-p", value, "--out", str(tmp_path / "run"))
    assert "--fixed-p must be a finite exponent > 0" in line


def test_delays_format(tmp_path, capsys):
    (tmp_path / "ckpt.pt").write_bytes(b"")
    line = error(capsys, "eval", str(tmp_path / "ckpt.pt"), "--delays", "50,x")
    assert "--delays expects comma-separated delays" in line


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_resolution_must_be_a_positive_time(tmp_path, capsys, value):
    line = error(capsys, "train", "--task", "freq", "--resolution", value, "--out", str(tmp_path / "run"))
    assert "--resolution must be a finite time > 0" in line


@pytest.mark.parametrize("argv", [["--task", "copy"], ["--task", "dyck"], ["--recipe", "seed001"]])
def test_nhid_list_outside_lm(tmp_path, capsys, argv):
    line = error(capsys, "train", *argv, "--nhid", "128,128", "--out", str(tmp_path / "run"))
    assert "takes one --nhid size, got '128,128'" in line


@pytest.mark.parametrize("value", ["abc", "10,20", "10,20,30,40", "10,0,5"])
def test_dyck_size_format(tmp_path, capsys, value):
    line = error(capsys, "train", "--task", "dyck", "--dyck-size", value, "--out", str(tmp_path / "run"))
    assert "--dyck-size expects three comma-separated positive integers" in line and "10000,2000,5000" in line


def test_a_run_folder_without_checkpoints_names_both_files(tmp_path, capsys):
    """eval and analyze read a run folder's best.pt, else last.pt, as tsrnn.load does; --resume takes a file."""
    run = tmp_path / "run"
    run.mkdir()
    checkpoint = tmp_path / "ckpt.pt"
    checkpoint.write_bytes(b"")
    for argv in (["eval", str(run)], ["eval", str(checkpoint), str(run)], ["analyze", str(run)],
                 ["analyze", str(checkpoint), "--compare-p", str(run)]):
        assert f"run folder {run} holds no best.pt or last.pt" in error(capsys, *argv)
    line = error(capsys, "train", "--resume", str(run), "--out", str(tmp_path / "next"))
    assert f"{run} is a directory" in line and "did you mean" not in line
    (run / "last.pt").write_bytes(b"")
    line = error(capsys, "train", "--resume", str(run), "--out", str(tmp_path / "next"))
    assert f"{run} is a directory" in line and str(run / "last.pt") in line


def test_missing_checkpoint(tmp_path, capsys):
    assert "does not exist" in error(capsys, "eval", str(tmp_path / "nope.pt"))
    assert "does not exist" in error(capsys, "train", "--resume", str(tmp_path / "nope.pt"),
                                     "--out", str(tmp_path / "run"))



BAD_VALUES = [
    (["--task", "lm", "--loss-norm", "sequence"], "--loss-norm is an option of --task averaging-lm / mlp-lm, not of "
                                                  "--task lm"),
    (["--task", "copy", "--lstm-init", "inverse"], "--lstm-init is an option of --task lm, not of --task copy"),
    (["--task", "mlp-lm", "--bptt-std", "0"], "--bptt-std is an option of --task lm, not of --task mlp-lm"),
    (["--task", "lm", "--no-memory"], "--no-memory is an option of --task averaging-lm, not of --task lm"),
    (["--task", "dyck", "--order", "corpus"], "--order is an option of --task averaging-lm, not of --task dyck"),
    (["--task", "copy", "--level", "char"], "--level is an option of --task lm / averaging-lm / mlp-lm, not of "
                                            "--task copy"),
    (["--task", "lm", "--vocab-from", "all"], "--vocab-from is an option of --task mlp-lm, not of --task lm"),
    (["--task", "mlp-lm", "--vocab-from", "all"], "--vocab-from counts the words of Brown's documents (--data "
                                                  "brown.zip or a brown/ directory); the vocabulary of --data "
                                                  "(the embedded default) is its training text's"),
    (["--task", "mlp-lm", "--data", "ptb", "--vocab-from", "train"], "the vocabulary of --data ptb is its "
                                                                     "training text's"),
    (["--task", "lm", "--bptt-std", "5"], "--bptt-std sets the jitter of --random-bptt windows; give --random-bptt"),
    (["--task", "freq", "--time-scale", "0.008"], "--time-scale scales the time that --time-input feeds; give "
                                                  "--time-input too"),
    (["--task", "freq", "--time-input", "--time-scale", "0"], "--time-scale must be a finite number > 0, got 0.0"),
    (["--task", "lm", "--time-scale", "1"], "--time-scale is an option of --task freq, not of --task lm"),
    (["--clip", "-1"], "--clip must be a finite number >= 0, got -1.0"),
    (["--clip", "nan"], "--clip must be a finite number >= 0, got nan"),
    (["--max-steps", "-1"], "--max-steps must be >= 0, got -1"),
    (["--valid-every", "-1"], "--valid-every must be >= 0, got -1"),
    (["--patience", "-1"], "--patience must be >= 0, got -1"),
    (["--task", "copy", "--stop-accuracy", "-1"], "--stop-accuracy must be a finite number in (0, 1], got -1.0"),
    (["--task", "copy", "--stop-accuracy", "nan"], "--stop-accuracy must be a finite number in (0, 1], got nan"),
    (["--lr", "inf"], "--lr must be a finite number > 0, got inf"),
    (["--lr", "0"], "--lr must be a finite number > 0, got 0.0"),
    (["--lr-decay-factor", "0"], "--lr-decay-factor must be a finite number (the lr is divided by it each epoch) "
                                 ">= 1, got 0.0"),
    (["--lr-decay-factor", "-2"], "--lr-decay-factor must be a finite number (the lr is divided by it each epoch) "
                                  ">= 1, got -2.0"),
    (["--task", "dyck", "--chunk", "-1"], "--chunk must be >= 0, got -1"),
    (["--nonmono", "-2"], "--nonmono must be >= 0, got -2"),
    (["--seed", str(10**25)], f"--seed must be in [0, 4294967295], got {10**25}"),
    (["--seed", "-1"], "--seed must be in [0, 4294967295], got -1"),
    (["--task", "copy", "--copy-size", "64"], "--copy-size expects two comma-separated positive integers"),
    (["--task", "copy", "--copy-size", "a,b"], "--copy-size expects two comma-separated positive integers"),
    (["--task", "copy", "--copy-size", "0,0"], "--copy-size expects two comma-separated positive integers"),
    (["--dropout", "1.5"], "--dropout must be a finite number in [0, 1), got 1.5"),
    (["--weight-decay", "-0.1"], "--weight-decay must be a finite number >= 0, got -0.1"),
    (["--mts-alpha", "0"], "--mts-alpha must be a finite number > 0, got 0.0"),
    (["--save-every", "-3"], "--save-every must be >= 0, got -3"),
    (["--save-minutes", "inf"], "--save-minutes must be a finite number of minutes >= 0, got inf"),
    (["--epochs", "0"], "--epochs must be >= 1, got 0"),
    (["--log-every", "0"], "--log-every must be >= 1, got 0"),
    (["--task", "copy", "--delay", "10", "--delay-min", "20"], "--delay-min 20 is larger than --delay 10"),
    (["--backend", "triton", "--device", "cpu"], "--backend triton runs on CUDA GPUs; this run is on the CPU"),
]


@pytest.mark.parametrize("argv,message", BAD_VALUES, ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_every_bad_train_value_is_one_line_naming_it(tmp_path, capsys, argv, message):
    line = error(capsys, "train", *argv, "--out", str(tmp_path / "run"))
    assert message in line


@pytest.mark.parametrize("argv,message", [
    (["--block", "0"], "--block must be >= 1, got 0"), (["--resamples", "-5"], "--resamples must be >= 1, got -5"),
    (["--seed", "-1"], "--seed must be in [0, 4294967295], got -1"),
])
def test_every_bad_eval_value_is_one_line_naming_it(tmp_path, capsys, argv, message):
    (tmp_path / "ckpt.pt").write_bytes(b"")
    assert message in error(capsys, "eval", str(tmp_path / "ckpt.pt"), *argv)


def test_out_that_cannot_be_written(tmp_path, capsys, monkeypatch):
    """Checked with os.access (tests may run as root, who may write anywhere)."""
    from tsrnn.lab.training import run_dir

    monkeypatch.setattr(run_dir.os, "access", lambda path, mode: False)
    line = error(capsys, "train", "--out", str(tmp_path / "a" / "run"))
    assert f"--out {tmp_path / 'a' / 'run'}: {tmp_path} is not writable (it would be created in {tmp_path})" in line


@pytest.mark.parametrize("recipe,task,sets", [("seed004", "copy", "mlp-lm"), ("seed001", "lm", "averaging-lm")])
def test_recipe_without_a_setting_for_the_task(tmp_path, capsys, recipe, task, sets):
    line = error(capsys, "train", "--recipe", recipe, "--task", task, "--out", str(tmp_path / "run"))
    assert line.endswith(f"--recipe {recipe} has no setting for --task {task}; it sets --task {sets}"), line


PETABYTES = "100000000000"  # a size no machine's memory holds


@pytest.mark.parametrize("argv,named", [
    (["selftest", "--steps", PETABYTES], f"--steps {PETABYTES}, --batch 20, --hidden 256: at least "),
    (["selftest", "--batch", PETABYTES], f"--batch {PETABYTES}"),
    (["selftest", "--hidden", "100000000"], "--hidden 100000000"),
    (["train", "--nhid", "100000000"], "--nhid 100000000, --emsize 64: at least "),
    (["train", "--task", "lm", "--emsize", PETABYTES], f"--emsize {PETABYTES}"),
    (["train", "--task", "averaging-lm", "--nlayers", "100000000"], "--nlayers 100000000, --nhid 128"),
    (["train", "--task", "mlp-lm", "--n", PETABYTES], f"--n {PETABYTES}, --nhid 100, --emsize 30"),
    (["train", "--task", "copy", "--delay", PETABYTES], f"--delay {PETABYTES}, --nhid 128, --batch-size 32"),
    (["train", "--task", "copy", "--batch-size", PETABYTES], f"--batch-size {PETABYTES}, --nhid 128, --delay 20"),
    (["train", "--task", "copy", "--copy-size", f"{PETABYTES},10"], f"--copy-size {PETABYTES},10"),
    (["train", "--task", "dyck", "--dyck-size", f"{PETABYTES}00,1,1"], f"--dyck-size {PETABYTES}00,1,1"),
    (["train", "--recipe", "seed002", "--task", "imdb", "--emsize", PETABYTES], f"--emsize {PETABYTES}"),
    (["eval", "CKPT", "--resamples", f"{PETABYTES}0"], f"--resamples {PETABYTES}0: at least "),
    (["eval", "CKPT", "--delays", f"50,{PETABYTES}"], f"--delays {PETABYTES}: at least "),
], ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_sizes_past_memory_are_one_line_naming_them(tmp_path, capsys, monkeypatch, argv, named):
    from tsrnn.lab import selftest

    monkeypatch.setattr(selftest, "run", lambda *args: pytest.fail("tsrnn selftest ran despite its sizes"))
    (tmp_path / "ckpt.pt").write_bytes(b"")
    argv = [str(tmp_path / "ckpt.pt") if a == "CKPT" else a for a in argv]
    line = error(capsys, *argv, *(["--out", str(tmp_path / "run")] if argv[0] == "train" else []))
    assert named in line and "use smaller sizes" in line, line
    assert "of RAM" in line or "free on cuda" in line, line


def test_the_size_check_compares_with_the_machines_ram(capsys, monkeypatch):
    """--hidden 1000: the reference's weights and T B H values, 8 (6 * 70 * 20 * 1000 + 8 * 1000^2)
    bytes = 131,200,000: refused with 100 MB of RAM, run with 200 MB."""
    from tsrnn.lab import cli_checks, selftest

    ran = []
    monkeypatch.setattr(selftest, "run", lambda *args: ran.append(args) or 0)
    monkeypatch.setattr(selftest, "devices", lambda: ["cpu"])
    pages = {"SC_PAGE_SIZE": 4096}
    monkeypatch.setattr(cli_checks.os, "sysconf", lambda name: pages[name])
    pages["SC_PHYS_PAGES"] = 100_000_000 // 4096
    line = error(capsys, "selftest", "--hidden", "1000")
    assert line == ("tsrnn selftest: error: --steps 70, --batch 20, --hidden 1000: at least 125.1 MiB (the float64 "
                    "reference's input, output and gates of every step, and its weights), more than this machine's "
                    "95.4 MiB of RAM; use smaller sizes")
    assert ran == []
    pages["SC_PHYS_PAGES"] = 200_000_000 // 4096
    assert cli.main(["selftest", "--hidden", "1000"]) == 0 and ran == [(70, 20, 1000, 3)]


def test_on_cuda_the_size_check_compares_with_the_gpus_free_memory(tmp_path, capsys, monkeypatch):
    """One LSTM layer of 10,000 units on 64 inputs: 4 (2 * 4 * 10,000 * 10,064) bytes = 3.0 GiB."""
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (2**30, 80 * 2**30))
    line = error(capsys, "train", "--device", "cuda", "--nhid", "10000", "--out", str(tmp_path / "run"))
    assert line.endswith("--nhid 10000, --emsize 64: at least 3.0 GiB (the weights and their gradients), more than "
                         "the 1.0 GiB free on cuda; use smaller sizes"), line


@pytest.mark.parametrize("argv", [["selftest", "--steps", "0"], ["selftest", "--batch", "-1"],
                                  ["selftest", "--hidden", "0"], ["train", "--batch-size", "0"],
                                  ["train", "--bptt", "0"], ["train", "--emsize", "-3"], ["train", "--nhid", "0"],
                                  ["train", "--task", "mlp-lm", "--n", "0"],
                                  ["train", "--task", "copy", "--delay", "0"],
                                  ["train", "--task", "averaging-lm", "--nlayers", "0"],
                                  ["eval", "CKPT", "--delays", "0"], ["eval", "CKPT", "--resamples", "0"]],
                         ids=" ".join)
def test_non_positive_sizes_are_refused(tmp_path, capsys, argv):
    (tmp_path / "ckpt.pt").write_bytes(b"")
    argv = [str(tmp_path / "ckpt.pt") if a == "CKPT" else a for a in argv]
    error(capsys, *argv, *(["--out", str(tmp_path / "run")] if argv[0] == "train" else []))
