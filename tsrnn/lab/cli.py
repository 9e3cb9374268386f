"""The ``tsrnn`` command line: ``train`` (the main job), ``eval``, ``analyze`` and ``selftest``."""
from __future__ import annotations

import argparse
import sys

import torch

from tsrnn.lab import cli_checks
from tsrnn.lab.training import resume
from tsrnn.lab.training.recipes import RECIPES


def _train_parser(commands):
    p = commands.add_parser("train", help="train one of the seeds' models (default: a multi-timescale LSTM LM "
                                          "on the embedded corpus)")
    p.add_argument("--task", choices=["lm", "averaging-lm", "mlp-lm", "dyck", "copy", "freq", "pixels", "imdb"],
                   help="default: lm, or the recipe's first task")
    p.add_argument("--recipe", choices=sorted(RECIPES), help="the seed's training setting (optimizer, schedule, "
                   "sizes) for options not given; see tsrnn/lab/training/recipes.py")
    p.add_argument("--cell", help="lm: lstm|mts|plstm (mts); averaging-lm: lstm; dyck: lstm|mts (mts); "
                                  "copy, freq, pixels, imdb: lstm|chrono|plstm (plstm)")
    p.add_argument("--data", help="corpus directory (PTB / WikiText-2 layout), brown.zip (mlp-lm) or an MNIST "
                                  "directory of IDX files (pixels), the aclImdb folder (imdb); default: the embedded tiny-shakespeare "
                                  "corpus, scikit-learn's 8x8 digits for pixels")
    p.add_argument("--level", choices=["word", "char"], help="PTB word or character files (default word)")
    p.add_argument("--out", help="directory for checkpoints and metrics.jsonl (default runs/TASK)")
    p.add_argument("--resume", help="checkpoint to continue from (bit-identical continuation), with its settings; "
                   f"only {', '.join(cli_checks.flag(dest) for dest in resume.APPLIED)} may change (default --out: "
                   "the checkpoint's directory)")
    p.add_argument("--overwrite", action="store_true", help="replace the run --out holds (its checkpoints and "
                   "metrics); without it such an --out is refused")
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
    p.add_argument("--bptt-std", type=float, help="lm with --random-bptt: the window is --bptt (p 0.95) or --bptt / 2, "
                   "plus N(0, this) (default 5: AWD-LSTM, the seed-000 authors' code; 0: seed 000's text, 70 or 35)")
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
    p.add_argument("--lstm-init", choices=["sqrt", "inverse"], help="lm: recurrent weights and biases ~ "
                   "U(±1/sqrt(H)) (sqrt, default: PyTorch's, as AWD-LSTM and the seed-000 authors' code) or "
                   "U(±1/H) (inverse: seed 000's text)")
    p.add_argument("--order", choices=["shuffled", "corpus"], help="averaging-lm: training sentences shuffled per "
                   "epoch or in corpus order (seed 001)")
    p.add_argument("--no-memory", dest="memory", action="store_false", default=None, help="averaging-lm: the "
                   "same LM without the averaging memory (the baseline)")
    p.add_argument("--loss-norm", choices=["token", "sequence"], help="averaging-lm, mlp-lm: training loss "
                   "averaged over the targets (token, default) or summed over each batch column's targets and "
                   "averaged over the columns (sequence: seed 001's gradient 'normalized by the mini-batch size', "
                   "one sentence a column; for mlp-lm the SGD step of every word of a window, as Bengio et al.'s)")
    p.add_argument("--vocab-from", choices=["train", "all"], help="mlp-lm on Brown: count words for the vocabulary "
                   "in train or in the whole corpus (seed 004)")
    p.add_argument("--rare-words", choices=["unk", "drop"], help="mlp-lm: the words outside the vocabulary are "
                   "<unk> tokens (unk, default) or removed from the text (drop: recipe seed004, the seed's 'only "
                   "analyzed words that appeared more than 5 times')")
    p.add_argument("--context", choices=["buffer", "tilt", "tilt-buffer"], help="mlp-lm context")
    p.add_argument("--n", type=int, help="mlp-lm context slots (input size)")
    p.add_argument("--ahead", type=int, metavar="K", help="mlp-lm: predict the word K steps ahead, y_t = w_{t+K} "
                   "(seed 004 Experiment 2; default 1, the next word); validation and eval score the same targets")
    p.add_argument("--drop-taus", metavar="SLOTS", help="mlp-lm --context tilt: train without these τ* slots, "
                   "comma-separated indices in 0..n-1 (seed 004 Experiment 4 drops the most recent: 0 / 0,1 / "
                   "0,1,2 / 0,1,2,3 of --n 5); recorded in the checkpoint, so eval scores the same model")
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
    p.add_argument("--tensorboard", metavar="DIR", help="also log every metric as TensorBoard scalars (train/loss, "
                   "train/lr, train/grad_norm, valid/..., epoch/...) at the optimizer step (needs tensorboard)")
    p.add_argument("--csv", metavar="FILE", help="also write the metrics to a CSV file, one row per value: "
                   "time,event,step,epoch,name,value")
    p.add_argument("--save-every", type=int, default=0, help="write last.pt every N steps (0: only by time, at "
                   "epoch ends and on SIGINT/SIGTERM)")
    p.add_argument("--save-minutes", type=float, default=10.0, help="write last.pt when this many minutes have "
                   "passed since the last write (0: never by time; default 10)")
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
    p.add_argument("--length-bins", help="imdb: review-length bin boundaries in tokens, comma-separated (default "
                   "50,100,150,200,250,300,350,400: bins 0-49, ..., 350-399, 400+)")
    p.add_argument("--compare-p", metavar="CHECKPOINT", help="pLSTM: two-sample t-test of this checkpoint's learned p "
                   "against another pLSTM checkpoint's, layer by layer (seed 002 §5.2)")
    p.add_argument("--compare-timescales", metavar="CHECKPOINT", help="lm: seed 000 Figure 1, this LM's unit "
                   "timescale distribution and its Inverse-Gamma / narrow-Gaussian KS fits beside another lm "
                   "checkpoint's (e.g. the same model trained on Markov-PTB: python -m tsrnn.lab.data.markov), each on "
                   "its own corpus (timescale_comparison.png)")
    p.add_argument("--compare-data", metavar="DIR", help="the corpus of the --compare-timescales checkpoint "
                   "(default: as recorded)")
    p.add_argument("--device")
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def _selftest_parser(commands):
    p = commands.add_parser("selftest", help="check every fused op against its reference and time both")
    p.add_argument("--steps", type=int, default=70, help="sequence length T (default 70)")
    p.add_argument("--batch", type=int, default=20, help="batch size B (default 20)")
    p.add_argument("--hidden", type=int, default=256, help="input and hidden size (default 256)")
    p.add_argument("--repeats", type=int, default=3, help="timed repeats (default 3)")


def _parser(defaults: bool = True) -> tuple[argparse.ArgumentParser, dict]:
    """The ``tsrnn`` parser and its commands' parsers by name; ``defaults=False``: a parser whose
    namespace holds only the options given."""
    parser = argparse.ArgumentParser(prog="tsrnn",
                                     description="Fused timescale-aware RNN kernels, models and training.")
    commands = parser.add_subparsers(dest="command")
    for add in (_train_parser, _eval_parser, _analyze_parser, _selftest_parser):
        add(commands)
    if not defaults:
        for command in commands.choices.values():
            for action in command._actions:
                action.default = argparse.SUPPRESS
    return parser, commands.choices


def _given(argv, command: str) -> dict:
    """The options ``argv`` gives, dest -> its flag (e.g. ``batch_size`` -> ``--batch-size``)."""
    parser, commands = _parser(defaults=False)
    flags = {action.dest: action.option_strings[-1] for action in commands[command]._actions if action.option_strings}
    return {dest: flags[dest] for dest in vars(parser.parse_args(argv)) if dest in flags}


def main(argv=None) -> int:
    argv = (["train"] if len(sys.argv) == 1 else sys.argv[1:]) if argv is None else list(argv)
    parser = _parser()[0]
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    problem = cli_checks.problem(args)
    if problem is not None:
        print(f"tsrnn {args.command}: error: {problem}", file=sys.stderr)
        return 2
    if args.command == "selftest":
        from tsrnn.lab import selftest

        return selftest.run(args.steps, args.batch, args.hidden, args.repeats)
    if args.command == "train":
        args.given = _given(argv, "train")
    from tsrnn.lab.training import commands as run
    from tsrnn.lab.training.trainer import Diverged

    try:
        if args.command == "analyze":
            from tsrnn.lab.analysis import command

            return command.run(args)
        return run.train(args) if args.command == "train" else run.evaluate(args)
    except (OSError, ValueError) as exc:  # bad data, checkpoint, option, or a file that cannot be written
        print(f"tsrnn {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except Diverged as exc:
        print(f"tsrnn {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except (MemoryError, RuntimeError) as exc:  # torch.OutOfMemoryError (a RuntimeError), or the CPU allocator's
        if not isinstance(exc, (MemoryError, torch.OutOfMemoryError)) and "can't allocate memory" not in str(exc):
            raise
        print(f"tsrnn {args.command}: error: out of memory ({_one_line(exc)}); use smaller sizes", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"tsrnn {args.command}: interrupted; stopped without saving (a checkpoint written before is intact)",
              file=sys.stderr)
        return 130


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


if __name__ == "__main__":
    sys.exit(main())
