"""The ``tsrnn`` command line: ``train`` (the main job), ``eval``, ``analyze`` and ``selftest``."""
from __future__ import annotations

import argparse
import sys

from tsrnn.training.recipes import RECIPES


def _train_parser(commands):
    p = commands.add_parser("train", help="train one of the seeds' models (default: a multi-timescale LSTM LM "
                                          "on the embedded corpus)")
    p.add_argument("--task", choices=["lm", "averaging-lm", "mlp-lm", "dyck", "copy", "freq", "pixels", "imdb"],
                   help="default: lm, or the recipe's first task")
    p.add_argument("--recipe", choices=sorted(RECIPES), help="the seed's training setting (optimizer, schedule, "
                   "sizes) for options not given; see tsrnn/training/recipes.py")
    p.add_argument("--cell", help="lm: lstm|mts|plstm (mts); averaging-lm: lstm; dyck: lstm|mts (mts); "
                                  "copy, freq, pixels, imdb: lstm|chrono|plstm (plstm)")
    p.add_argument("--data", help="corpus directory (PTB / WikiText-2 layout), brown.zip (mlp-lm) or an MNIST "
                                  "directory of IDX files (pixels), the aclImdb folder (imdb); default: the embedded tiny-shakespeare "
                                  "corpus, scikit-learn's 8x8 digits for pixels")
    p.add_argument("--level", default="word", choices=["word", "char"], help="PTB word or character files")
    p.add_argument("--out", help="directory for checkpoints and metrics.jsonl (default runs/TASK)")
    p.add_argument("--resume", help="checkpoint to continue from (bit-identical continuation)")
    p.add_argument("--seed", type=int, help="default 0")
    p.add_argument("--epochs", type=int)
    p.add_argument("--max-steps", type=int, default=0, help="stop after this many optimizer steps (0: no limit)")
    p.add_argument("--batch-size", type=int)
    p.add_argument("--bptt", type=int, help="steps per batch (sentence length for averaging-lm)")
    p.add_argument("--lr", type=float)
    p.add_argument("--optimizer", choices=["adam", "sgd", "rmsprop"], help="rmsprop: moving average 0.9 (seed 002)")
    p.add_argument("--weight-decay", type=float)
    p.add_argument("--clip", type=float, help="gradient norm clip (0: none)")
    p.add_argument("--nonmono", type=int, help="with --optimizer sgd: switch to averaged SGD when validation is worse "
                   "than the best of the epochs more than N before (AWD-LSTM's NT-ASGD; 0: never)")
    p.add_argument("--random-bptt", action="store_true", help="lm: AWD-LSTM's random window lengths, lr scaled by "
                   "length / bptt")
    p.add_argument("--lr-decay-after", type=int, help="divide the lr by --lr-decay-factor each epoch after this one")
    p.add_argument("--lr-decay-factor", type=float)
    p.add_argument("--patience", type=int, help="stop after N epochs without a better validation loss (0: never)")
    p.add_argument("--emsize", type=int, help="embedding size")
    p.add_argument("--nhid", help="hidden size(s), comma-separated per layer for lm (e.g. 1150,1150,400)")
    p.add_argument("--nlayers", type=int, help="averaging-lm LSTM layers")
    for name in ("dropout", "dropouth", "dropouti", "dropoute", "wdrop", "alpha", "beta"):
        p.add_argument(f"--{name}", type=float, help=f"AWD-LSTM {name}")
    p.add_argument("--mts-alpha", type=float, help="inverse-gamma shape of the MTS timescales (lm 0.56, dyck 1.5)")
    p.add_argument("--freeze", choices=["gates", "all"], help="MTS: fix the i/f gate biases (gates) or the whole "
                   "bias vector, as the authors' code (all)")
    p.add_argument("--order", choices=["shuffled", "corpus"], help="averaging-lm: training sentences shuffled per "
                   "epoch or in corpus order (seed 001)")
    p.add_argument("--no-memory", dest="memory", action="store_false", default=None, help="averaging-lm: the "
                   "same LM without the averaging memory (the baseline)")
    p.add_argument("--vocab-from", choices=["train", "all"], help="mlp-lm on Brown: count words for the vocabulary "
                   "in train or in the whole corpus (seed 004)")
    p.add_argument("--context", choices=["buffer", "tilt", "tilt-buffer"], help="mlp-lm context")
    p.add_argument("--n", type=int, help="mlp-lm context slots (input size)")
    p.add_argument("--delay", type=int, help="copy task delay T")
    p.add_argument("--variable", action="store_true", help="copy task: delay drawn per sequence from "
                   "[--delay-min, --delay]")
    p.add_argument("--delay-min", type=int, help="variable copy task's shortest delay (default --delay / 2)")
    p.add_argument("--fixed-p", type=float, help="copy task, pLSTM: hold every unit's decay exponent p at this "
                   "value (seed 002 §5.1; default: learned, p ~ U(0, 1))")
    p.add_argument("--copy-size", help="copy task: fixed train,valid sequence counts (default: fresh batches)")
    p.add_argument("--stop-accuracy", type=float, help="copy task: stop when validation symbol and sequence "
                   "accuracy reach this (seed 002: 0.999)")
    p.add_argument("--dyck-size", help="dyck train,valid,test sequence counts (default 10000,2000,5000)")
    p.add_argument("--chunk", type=int, help="dyck: train on chunks of N steps with the state carried (0: whole)")
    p.add_argument("--dyck-loss", choices=["mean", "sum"], help="dyck: squared error averaged or summed (the "
                   "authors')")
    p.add_argument("--async", dest="asynchronous", action="store_true", help="freq: samples at random times "
                   "(default: every --resolution)")
    p.add_argument("--resolution", type=float, help="freq: time between samples when not --async (1 or 0.1; "
                   "default 1)")
    p.add_argument("--time-input", action="store_true", help="freq: the sample time as a second input (seed "
                   "002's 'w/ TIME')")
    p.add_argument("--freq-size", help="freq: training sequences per epoch and validation sequences (default "
                   "5000,500)")
    p.add_argument("--permute", action="store_true", help="pixels: permuted pixel order (pMNIST; one "
                   "permutation from seed 0)")
    p.add_argument("--embeddings", help="imdb: word vectors in GloVe's text format (e.g. glove.6B.100d.txt), "
                   "frozen (default: a trained embedding)")
    p.add_argument("--valid-every", type=int, default=0, help="validate every N steps (and after each epoch)")
    p.add_argument("--log-every", type=int, default=10, help="write a train metrics line every N steps")
    p.add_argument("--device", help="cpu, cuda, cuda:1 (default: cuda if available)")
    p.add_argument("--backend", choices=["auto", "reference", "native", "triton"])
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _eval_parser(commands):
    p = commands.add_parser("eval", help="test perplexity overall and by word frequency with bootstrap intervals, "
                                         "as seed 000's authors compute them (paired against a baseline "
                                         "checkpoint if given)")
    p.add_argument("checkpoint")
    p.add_argument("baseline", nargs="?", help="a second checkpoint: report baseline - model with a paired CI")
    p.add_argument("--data", help="the corpus the checkpoint was trained on (default: as recorded)")
    p.add_argument("--split", default="test", choices=["valid", "test"])
    p.add_argument("--counts", default="all", choices=["all", "train"],
                   help="frequency bins by word counts over all splits (the authors', default) or train only")
    p.add_argument("--block", type=int, default=100, help="targets per bootstrap block")
    p.add_argument("--resamples", type=int, default=10_000, help="bootstrap draws (the identity draw is added)")
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap draws")
    p.add_argument("--delays", help="copy checkpoints: accuracy at these delays T instead (comma-separated, "
                   "e.g. 50,200,1000; seed 002 A.4)")
    p.add_argument("--device")


def _analyze_parser(commands):
    p = commands.add_parser("analyze", help="the seeds' interpretability analyses of a checkpoint: figures (PNG) "
                                            "and summary.json (timescales, forget gates, word ablation, routing; "
                                            "pLSTM resets, p and unit ablation; TILT receptive fields)")
    p.add_argument("checkpoint")
    p.add_argument("--out", help="directory for the figures and summary.json (default: analysis/ beside the "
                                 "checkpoint)")
    p.add_argument("--data", help="the corpus the checkpoint was trained on (default: as recorded)")
    p.add_argument("--split", default="test", choices=["valid", "test"])
    p.add_argument("--windows", type=int, help="lm: use the first N test windows of 70 tokens for the timescales, "
                   "forget gates and word ablation (default: all, as the authors)")
    p.add_argument("--device")
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def _selftest_parser(commands):
    p = commands.add_parser("selftest", help="check every fused op against its reference and time both")
    p.add_argument("--steps", type=int, default=70, help="sequence length T (default 70)")
    p.add_argument("--batch", type=int, default=20, help="batch size B (default 20)")
    p.add_argument("--hidden", type=int, default=256, help="input and hidden size (default 256)")
    p.add_argument("--repeats", type=int, default=3, help="timed repeats (default 3)")


def _positive(parser, args, names):
    for name in names:
        value = getattr(args, name, None)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")


def _counts(flag, value, expect, example, n=None):
    """A one-line error if ``value`` is not comma-separated positive integers (``n`` of them if given)."""
    parts = [part.strip() for part in str(value).split(",")]
    if len(parts) == (n or len(parts)) and all(p.isascii() and p.isdigit() and int(p) > 0 for p in parts):
        return None
    return f"{flag} expects {expect}, e.g. {example} (got {value!r})"


def _out_error(out):
    """A one-line error if ``out`` cannot be the run directory (it, or a parent of it, is not a directory)."""
    from pathlib import Path

    path = Path(out)
    for existing in (path, *path.parents):
        if existing.exists():
            if existing.is_dir():
                return None
            what = "is an existing file" if existing == path else f"is inside {existing}, an existing file"
            return f"--out {out} {what}; --out must be a directory (it is created if missing)"
    return None


def _check_args(args):
    """The first problem with train / eval arguments as one line (None if none), found before any data
    is read or model built, so that a typo costs no time and prints no traceback."""
    from pathlib import Path

    from tsrnn.training import checkpoint, distributed, recipes

    try:
        distributed.check_device(args.device)
        if args.command == "analyze":
            checkpoint.check_file(args.checkpoint)
            args.out = args.out or str(Path(args.checkpoint).parent / "analysis")
            return _out_error(args.out)
        if args.command == "eval":
            for path in (args.checkpoint, args.baseline):
                if path is not None:
                    checkpoint.check_file(path)
            if args.delays is not None:
                return _counts("--delays", args.delays, "comma-separated delays T >= 1", "50,200,1000")
            return None
        if args.resume is not None:
            checkpoint.check_file(args.resume)
    except ValueError as exc:
        return str(exc)
    if args.out is not None:
        problem = _out_error(args.out)
    else:  # the default runs/TASK (the task may come from --recipe later)
        runs = Path("runs")
        problem = None if runs.is_dir() or not runs.exists() else \
            "runs is an existing file, so the default --out runs/TASK cannot be created; give --out DIR"
    if problem is None and args.nhid is not None:
        problem = _counts("--nhid", args.nhid, "comma-separated positive integers", "1150,1150,400")
    if problem is None and args.nhid is not None and "," in args.nhid:
        try:
            task = recipes.task(args)
        except ValueError as exc:
            return str(exc)
        if task != "lm":
            problem = f"--task {task} takes one --nhid size, got {args.nhid!r} (per-layer sizes are for --task lm)"
    if problem is None and args.freq_size is not None:
        problem = _counts("--freq-size", args.freq_size, "two comma-separated positive integers (training "
                          "sequences per epoch, validation sequences)", "5000,500", n=2)
    if problem is None and args.fixed_p is not None and not 0 < args.fixed_p < float("inf"):
        problem = f"--fixed-p must be a finite exponent > 0, got {args.fixed_p}"
    if problem is None and args.resolution is not None and not 0 < args.resolution < float("inf"):
        problem = f"--resolution must be a finite time > 0, got {args.resolution}"
    if problem is None and args.dyck_size is not None:
        problem = _counts("--dyck-size", args.dyck_size, "three comma-separated positive integers "
                          "(train,valid,test sequence counts)", "10000,2000,5000", n=3)
    return problem


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="tsrnn", description="Fused timescale-aware RNN kernels, models and training.")
    commands = parser.add_subparsers(dest="command")
    _train_parser(commands)
    _eval_parser(commands)
    _analyze_parser(commands)
    _selftest_parser(commands)
    args = parser.parse_args(["train"] if argv is None and len(sys.argv) == 1 else argv)
    if args.command is None:
        parser.print_help()
        return 2
    _positive(parser, args, ("steps", "batch", "hidden", "repeats", "epochs", "batch_size", "bptt", "block",
                             "resamples", "log_every", "windows"))
    if args.command == "selftest":
        from tsrnn import selftest

        return selftest.run(args.steps, args.batch, args.hidden, args.repeats)
    problem = _check_args(args)
    if problem is not None:
        print(f"tsrnn {args.command}: error: {problem}", file=sys.stderr)
        return 2
    from tsrnn.training import commands as run

    try:
        if args.command == "analyze":
            from tsrnn.analysis import command

            return command.run(args)
        return run.train(args) if args.command == "train" else run.evaluate(args)
    except (FileNotFoundError, ValueError) as exc:  # bad data, checkpoint or option: one clear line
        print(f"tsrnn {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
