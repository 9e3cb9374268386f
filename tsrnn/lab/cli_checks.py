"""The checks of ``tsrnn`` command-line values, made before any data is read or model built.

``problem(args)`` returns the first problem as one line naming the flag and the value (None if
there is none): the --recipe has a setting for the --task, counts and sizes are integers in range, rates and probabilities finite numbers
in range, lists of counts well formed, the device usable, the checkpoints files, the run
directory writable and holding no other run (``tsrnn.training.run_dir``), TensorBoard installed
for --tensorboard; --csv and --tensorboard destinations are checked once a resume's arguments are
known (``tsrnn.training.loggers.destination_error``).
"""
from __future__ import annotations

import math
from pathlib import Path

# dest: (smallest, largest or None): integers. Seeds: numpy's legacy seeding takes < 2**32.
INTEGERS = {
    "steps": (1, None), "batch": (1, None), "hidden": (1, None), "repeats": (1, None), "epochs": (1, None),
    "max_steps": (0, None), "batch_size": (1, None), "bptt": (1, None), "nonmono": (0, None),
    "lr_decay_after": (0, None), "patience": (0, None), "emsize": (1, None), "nlayers": (1, None), "n": (1, None),
    "delay": (1, None), "delay_min": (1, None), "chunk": (0, None), "valid_every": (0, None),
    "log_every": (1, None), "save_every": (0, None), "block": (1, None), "resamples": (1, None),
    "windows": (1, None), "seed": (0, 2**32 - 1), "ahead": (1, None),
}
# dest: (lower, upper, lower included, upper included): finite real numbers.
REALS = {
    "lr": (0, math.inf, False, False), "weight_decay": (0, math.inf, True, False),
    "clip": (0, math.inf, True, False), "lr_decay_factor": (1, math.inf, True, False),
    **{name: (0, 1, True, False) for name in ("dropout", "dropouth", "dropouti", "dropoute", "wdrop")},
    "alpha": (0, math.inf, True, False), "beta": (0, math.inf, True, False), "mts_alpha": (0, math.inf, False, False),
    "fixed_p": (0, math.inf, False, False), "stop_accuracy": (0, 1, False, True),
    "resolution": (0, math.inf, False, False), "save_minutes": (0, math.inf, True, False),
    "bptt_std": (0, math.inf, True, False), "time_scale": (0, math.inf, False, False),
}
REAL_MEANING = {"fixed_p": "exponent", "resolution": "time", "save_minutes": "number of minutes",
                "bptt_std": "standard deviation",
                "lr_decay_factor": "number (the lr is divided by it each epoch)"}


FLAGS = {"memory": "--no-memory", "count_h0": "--no-h0", "asynchronous": "--async"}  # dests whose option is not their name


def flag(dest: str) -> str:
    """The option of an argument's dest (``batch_size`` -> ``--batch-size``)."""
    return FLAGS.get(dest, "--" + dest.replace("_", "-"))


def _range_problem(args) -> str | None:
    for dest, (low, high) in INTEGERS.items():
        value = getattr(args, dest, None)
        if value is not None and not (low <= value and (high is None or value <= high)):
            bound = f">= {low}" if high is None else f"in [{low}, {high}]"
            return f"{flag(dest)} must be {bound}, got {value}"
    for dest, (low, high, low_in, high_in) in REALS.items():
        value = getattr(args, dest, None)
        if value is None:
            continue
        above = value >= low if low_in else value > low
        below = value <= high if high_in else value < high
        if not (math.isfinite(value) and above and below):
            meaning = REAL_MEANING.get(dest, "number")
            bound = (f"{'>=' if low_in else '>'} {low}" if high == math.inf else
                     f"in {'[' if low_in else '('}{low}, {high}{']' if high_in else ')'}")
            return f"{flag(dest)} must be a finite {meaning} {bound}, got {value}"
    delay, delay_min = getattr(args, "delay", None), getattr(args, "delay_min", None)
    if delay is not None and delay_min is not None and delay_min > delay:
        return f"--delay-min {delay_min} is larger than --delay {delay}"
    return None


def _counts(flag, value, expect, example, n=None):
    """A one-line error if ``value`` is not comma-separated positive integers (``n`` of them if given)."""
    parts = [part.strip() for part in str(value).split(",")]
    if len(parts) == (n or len(parts)) and all(p.isascii() and p.isdigit() and int(p) > 0 for p in parts):
        return None
    return f"{flag} expects {expect}, e.g. {example} (got {value!r})"


COUNT_LISTS = {  # dest: (what it expects, an example, how many)
    "nhid": ("comma-separated positive integers", "1150,1150,400", None),
    "freq_size": ("two comma-separated positive integers (training sequences per epoch, validation sequences)",
                  "5000,500", 2),
    "dyck_size": ("three comma-separated positive integers (train,valid,test sequence counts)", "10000,2000,5000", 3),
    "copy_size": ("two comma-separated positive integers (training and validation sequence counts)",
                  "100000,10000", 2),
    "delays": ("comma-separated delays T >= 1", "50,200,1000", None),
}


def _list_problem(args) -> str | None:
    for dest, (expect, example, n) in COUNT_LISTS.items():
        value = getattr(args, dest, None)
        problem = None if value is None else _counts(flag(dest), value, expect, example, n)
        if problem:
            return problem
    return None


def _recipe_problem(args) -> str | None:
    """--recipe with a --task it has no setting for (``recipes.task``'s refusal, as one line)."""
    from tsrnn.lab.training import recipes

    if args.command != "train" or not args.recipe:
        return None
    try:
        recipes.task(args)
    except ValueError as exc:
        return str(exc)
    return None


def _foreign_option_problem(args) -> str | None:
    """An option given (``args.given``) that the task of a fresh run does not read
    (``train_options.tasks_of``), whatever its value: refused rather than ignored."""
    from tsrnn.lab import train_options
    from tsrnn.lab.training import recipes

    if args.command != "train" or args.resume is not None:
        return None
    task = recipes.task(args)
    for dest, typed in getattr(args, "given", {}).items():
        tasks = train_options.tasks_of(dest)
        if tasks is not None and task not in tasks:
            return f"{typed} is an option of --task {' / '.join(tasks)}, not of --task {task}"
    return None


def _task_option_problem(args) -> str | None:
    """--bptt-std without the random windows it shapes, --time-scale without the --time-input it
    scales, --nonmono without the SGD it switches from, --vocab-from on a corpus other than Brown,
    --no-h0 without the memory it changes, or --order shuffled with --memory-span stream, which
    reads the windows in order: refused rather than ignored."""
    from tsrnn.lab.data.brown import is_brown_path
    from tsrnn.lab.training import recipes

    task = recipes.task(args)
    if getattr(args, "vocab_from", None) is not None and not is_brown_path(args.data):
        return (f"--vocab-from counts the words of Brown's documents (--data brown.zip or a brown/ directory); "
                f"the vocabulary of --data {args.data or '(the embedded default)'} is its training text's")
    preset = recipes.RECIPES.get(args.recipe, {}).get(task, {}) if getattr(args, "recipe", None) else {}
    if getattr(args, "bptt_std", None) is not None and not (args.random_bptt or preset.get("random_bptt")):
        return "--bptt-std sets the jitter of --random-bptt windows; give --random-bptt too"
    if getattr(args, "time_scale", None) is not None and not getattr(args, "time_input", False):
        return "--time-scale scales the time that --time-input feeds; give --time-input too"
    if getattr(args, "count_h0", None) is False and getattr(args, "memory", None) is False:
        return "--no-h0 changes the averaging memory that --no-memory removes; give one of them"
    if getattr(args, "memory_span", None) == "stream" and getattr(args, "order", None) == "shuffled":
        return ("--order shuffled shuffles the sentences of --memory-span sentence; --memory-span stream reads each "
                "stream's windows in order (leave --order out)")
    optimizer = getattr(args, "optimizer", None) or preset.get("optimizer")
    if getattr(args, "nonmono", None) and optimizer != "sgd":
        return (f"--nonmono switches SGD to averaged SGD (NT-ASGD); this run's optimizer is {optimizer or 'adam'}: "
                "give --optimizer sgd")
    return None


def _mlp_lm_problem(args) -> str | None:
    """--drop-taus names distinct τ* slots of --context tilt in 0..n-1, not all of them (n and the
    context as given, else the recipe's or the task's), and is rewritten sorted (``0,1``) so that a
    checkpoint records one spelling."""
    from tsrnn.lab.training import recipes
    from tsrnn.lab.training.tasks import TASKS

    task = recipes.task(args)
    if task != "mlp-lm" or args.drop_taus is None:
        return None
    preset = {**TASKS[task].defaults, **(recipes.RECIPES[args.recipe][task] if args.recipe else {})}
    context, n = args.context or preset["context"], args.n or preset["n"]
    if context != "tilt":
        return (f"--drop-taus removes τ* slots of --context tilt (seed 004 Experiment 4); --context {context} "
                "has no τ* to drop")
    parts = [part.strip() for part in args.drop_taus.split(",")]
    if not all(part.isascii() and part.isdigit() for part in parts):
        return f"--drop-taus expects comma-separated slot indices in 0..{n - 1}, e.g. 0,1 (got {args.drop_taus!r})"
    drop = [int(part) for part in parts]
    if max(drop) >= n:
        return f"--drop-taus {args.drop_taus}: slot {max(drop)} is outside 0..{n - 1} (--n {n})"
    if len(set(drop)) < len(drop):
        return f"--drop-taus {args.drop_taus} names a slot twice"
    if len(drop) == n:
        return f"--drop-taus {args.drop_taus} drops all {n} slots of --n {n}; keep at least one"
    args.drop_taus = ",".join(str(i) for i in sorted(drop))
    return None


def _out_problem(args) -> str | None:
    """Resolve the default --out (the resumed checkpoint's directory, else runs/TASK) and check it."""
    from tsrnn.lab.training import recipes, run_dir

    given = args.out is not None
    if not given:
        args.out = str(Path(args.resume).parent) if args.resume else f"runs/{recipes.task(args)}"
    problem = run_dir.writable_error(args.out) or run_dir.claim_error(args.out, args.resume, args.overwrite)
    if problem and not given:
        return problem.replace(f"--out {args.out}", f"--out {args.out} (the default)", 1)
    return problem


def problem(args) -> str | None:
    """The first problem with ``args`` of any command as one line, or None."""
    from tsrnn.lab.training import checkpoint, distributed, loggers, recipes, run_dir

    found = _recipe_problem(args) or _foreign_option_problem(args) or _range_problem(args) or _list_problem(args)
    if found or args.command == "selftest":
        return found
    try:
        distributed.check_device(args.device)
        if args.command == "analyze":
            checkpoint.check_file(args.checkpoint)
            args.out = args.out or str(Path(args.checkpoint).parent / "analysis")
            return run_dir.writable_error(args.out)
        if args.command == "eval":
            for path in (args.checkpoint, args.baseline):
                if path is not None:
                    checkpoint.check_file(path)
            return None
        if args.resume is not None:
            checkpoint.check_file(args.resume)
        if args.tensorboard is not None and not loggers.tensorboard_installed():
            return loggers.TENSORBOARD_MISSING
        if args.backend == "triton" and (args.device or "cpu").split(":")[0] != "cuda":
            import torch

            if args.device is not None or not torch.cuda.is_available():  # no --device: cuda if available
                return "--backend triton runs on CUDA GPUs; this run is on the CPU (use --backend auto or native)"
        fresh = args.resume is None
        found = (fresh and (_task_option_problem(args) or _mlp_lm_problem(args))) or _out_problem(args) or \
            (loggers.destination_error(args) if fresh else None)
        if found is None and args.nhid is not None and "," in args.nhid and recipes.task(args) != "lm":
            found = (f"--task {recipes.task(args)} takes one --nhid size, got {args.nhid!r} (per-layer sizes are "
                     "for --task lm)")
    except ValueError as exc:
        return str(exc)
    return found
