"""The ``tsrnn`` command line: ``train`` (the main job), ``eval``, ``analyze`` and ``selftest``."""
from __future__ import annotations

import argparse
import sys

import torch

from tsrnn.lab import cli_checks, train_options


CHECKPOINT_HELP = "a checkpoint file, or a run folder of tsrnn train (its best.pt, else last.pt, as tsrnn.load)"
CHECKPOINT_ARGUMENTS = {"eval": ("checkpoint", "baseline"), "analyze": ("checkpoint", "compare_p", "compare_timescales")}
"""The arguments of each command that take a checkpoint file or run folder."""


def _train_parser(commands):
    p = commands.add_parser("train", usage="tsrnn train [--task TASK] [--recipe RECIPE] [options]", help="train one of the seeds' models (default: a multi-timescale LSTM LM "
                                          "on the embedded corpus)",
                            description="Train one of the seeds' models. The options are grouped by the tasks "
                                        "they apply to; an option of another task is refused.")
    train_options.add_to(p)


def _eval_parser(commands):
    p = commands.add_parser("eval", help="test perplexity overall and by word frequency with bootstrap intervals, "
                                         "as seed 000's authors compute them (paired against a baseline "
                                         "checkpoint if given)")
    p.add_argument("checkpoint", help=CHECKPOINT_HELP)
    p.add_argument("baseline", nargs="?", help="a second checkpoint or run folder: report baseline - model with a "
                                               "paired CI")
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
    p.add_argument("checkpoint", help=CHECKPOINT_HELP)
    p.add_argument("--out", help="directory for the figures and summary.json (default: analysis/ beside the "
                                 "checkpoint)")
    p.add_argument("--data", help="the corpus the checkpoint was trained on (default: as recorded)")
    p.add_argument("--split", default="test", choices=["valid", "test"])
    p.add_argument("--only", metavar="NAMES", help="run only these analyses, comma-separated: lm timescales, "
                   "forget_gates, word_ablation, routing; copy copy; mlp-lm receptive_fields; imdb by_length; a pLSTM's "
                   "learned_p; unit_ablation with --ablate-units, p_sensitivity with --fixed-p, p_ttest with "
                   "--compare-p, timescale_comparison with --compare-timescales (default: all of the checkpoint's)")
    p.add_argument("--windows", type=int, help="lm: score only the first N windows of 70 tokens of --split in every "
                   "analysis (timescales, forget gates, word ablation, routing, the timescale comparison; default: all, "
                   "as the authors); refused for other tasks, whose analyses read no windows")
    p.add_argument("--length-bins", help="imdb: review-length bin boundaries in tokens, comma-separated (default "
                   "50,100,150,200,250,300,350,400: bins 0-49, ..., 350-399, 400+)")
    p.add_argument("--ablate-units", action="store_true", help="freq, pixels, imdb (every cell): seed 002 §5.3's "
                   "unit ablation, test accuracy as 5 units at a time are silenced up to 100, in a random order seeded "
                   "with the checkpoint's --seed (unit_ablation.png; a copy checkpoint's copy analysis runs it already, "
                   "also with the later-reset units first)")
    p.add_argument("--fixed-p", dest="held_p", metavar="P1,P2,...", help="pLSTM: the task's metrics on --split with "
                   "every unit's p held at each of these values (comma-separated, > 0), after the trained p "
                   "(p_sensitivity.png): a trained model's sensitivity to p, not seed 002's Figure A.3, which trains "
                   "one model per fixed p (tsrnn train --fixed-p P)")
    p.add_argument("--compare-p", metavar="CHECKPOINT", help="pLSTM: two-sample t-test of this checkpoint's learned p "
                   "against another pLSTM checkpoint's (a file or run folder), layer by layer (seed 002 §5.2)")
    p.add_argument("--compare-timescales", metavar="CHECKPOINT", help="lm: seed 000 Figure 1, this LM's unit "
                   "timescale distribution and its Inverse-Gamma / narrow-Gaussian KS fits beside another lm "
                   "checkpoint's (a file or run folder; e.g. the same model trained on Markov-PTB: python -m tsrnn.lab.data.markov), each on "
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
    parser = argparse.ArgumentParser(prog="tsrnn", formatter_class=argparse.RawDescriptionHelpFormatter,
                                     description="Fused timescale-aware RNN kernels, models and training.")
    parser.add_argument("--version", action="version", version=_version())
    commands = parser.add_subparsers(dest="command")
    for add in (_train_parser, _eval_parser, _analyze_parser, _selftest_parser):
        add(commands)
    if not defaults:
        for command in commands.choices.values():
            for action in command._actions:
                action.default = argparse.SUPPRESS
    return parser, commands.choices


def _version() -> str:
    """``tsrnn --version``: tsrnn's, torch's and Python's versions, and whether the extensions load."""
    import platform

    import tsrnn

    loaded = {name: "loaded" if error is None else "not loaded"
              for name, error in (("tsrnn._C", tsrnn.backend.LOAD_ERROR), ("tsrnn._cuda", tsrnn.backend.CUDA_LOAD_ERROR))}
    return (f"tsrnn {tsrnn.__version__} (torch {torch.__version__}, Python {platform.python_version()}; "
            + ", ".join(f"{name} {state}" for name, state in loaded.items()) + ")")


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
    if args.command == "train":
        args.given = _given(argv, "train")
    problem = _run_folder_problem(args) or cli_checks.problem(args)
    if problem is not None:
        print(f"tsrnn {args.command}: error: {problem}", file=sys.stderr)
        return 2
    from tsrnn.lab.training import commands as run
    from tsrnn.lab.training.trainer import Diverged

    try:
        if args.command == "selftest":  # sizes past memory were refused above; this catches the ones near it
            from tsrnn.lab import selftest

            return selftest.run(args.steps, args.batch, args.hidden, args.repeats)
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


def _run_folder_problem(args) -> str | None:
    """Replace each run folder given as a checkpoint (``CHECKPOINT_ARGUMENTS``) by the checkpoint
    ``tsrnn.load`` reads there; the problem as one line (a folder holding neither), or None."""
    given = [dest for dest in CHECKPOINT_ARGUMENTS.get(args.command, ()) if getattr(args, dest) is not None]
    if not given:
        return None
    from tsrnn.lab.loading import checkpoint_file
    from tsrnn.lab.training.checkpoint import CheckpointError

    try:
        for dest in given:
            setattr(args, dest, str(checkpoint_file(getattr(args, dest))))
    except CheckpointError as exc:
        return str(exc)
    return None


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


if __name__ == "__main__":
    sys.exit(main())
