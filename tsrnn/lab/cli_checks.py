"""The checks of ``tsrnn`` command-line values, made before any data is read or model built.

``problem(args)`` returns the first problem as one line naming the flag and the value (None if
there is none): the --recipe has a setting for the --task, counts and sizes are integers in
range, rates and probabilities finite numbers in range, lists of counts well formed, the device
usable, the checkpoints files, the run directory writable and holding no other run
(``tsrnn.lab.training.run_dir``), TensorBoard installed for --tensorboard, and the sizes a command allocates within the memory they would take
(``train_memory_problem``, ``eval_memory_problem``, ``selftest_memory_problem``: lower bounds
against the RAM or the CUDA device's free memory); --csv and --tensorboard destinations are
checked once a resume's arguments are known (``tsrnn.lab.training.loggers.destination_error``).
"""
from __future__ import annotations

import math
import os
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


# --- sizes past memory -----------------------------------------------------------------------
# Lower bounds of what a command allocates, from its size arguments alone (the data, read later,
# only adds): a size whose lower bound exceeds the memory it would be allocated in is refused in
# one line, before anything is built, instead of ending in an allocator's traceback.
FLOAT32, FLOAT64, INT64 = 4, 8, 8
TEXT_TASKS = ("lm", "averaging-lm", "mlp-lm")
COPY_MARKS = 20  # a copy sequence holds its 10 symbols twice besides the delay (tsrnn.lab.data.copy)


def available_memory(device) -> tuple[int, str]:
    """The bytes a command's tensors on ``device`` can take, and what they are: the free memory of
    a CUDA device (``torch.cuda.mem_get_info``), else the machine's RAM."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free, f"the {_size(free)} free on {device}"
    ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return ram, f"this machine's {_size(ram)} of RAM"


def _size(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if n < 1024 or unit == "EiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024


def _memory_problem(needed: int, sizes: str, what: str, device) -> str | None:
    """One line if ``needed`` bytes (a lower bound) exceed the memory of ``device``, else None."""
    available, where = available_memory(device)
    if needed <= available:
        return None
    return f"{sizes}: at least {_size(needed)} ({what}), more than {where}; use smaller sizes"


def selftest_memory_problem(steps: int, batch: int, hidden: int, devices=("cpu",)) -> str | None:
    """`tsrnn selftest`'s sizes refused where they cannot fit: each path is compared with the
    float64 reference at T, B, I = H = (``steps``, ``batch``, ``hidden``), whose autograd graph
    keeps at least the input, the output and the four gates of every step and row (6 T B H
    float64 values), beside W_ih and W_hh (8 H^2); checked on each of ``devices`` (the self-test
    runs on CUDA too where a GPU is visible)."""
    needed = FLOAT64 * (6 * steps * batch * hidden + 8 * hidden * hidden)
    sizes = f"--steps {steps}, --batch {batch}, --hidden {hidden}"
    for device in devices:
        found = _memory_problem(needed, sizes, "the float64 reference's input, output and gates of every step, "
                                "and its weights", device)
        if found:
            return found
    return None


def _resolved(args, dests: tuple[str, ...]) -> dict:
    """Each of ``dests`` as the run will have it: given, else the recipe's (``recipes.apply`` on a
    copy of ``args``), else the task's default."""
    import copy

    from tsrnn.lab.training import recipes
    from tsrnn.lab.training.tasks import TASKS

    run = copy.copy(args)
    recipes.apply(run)
    return {dest: getattr(run, dest, None) if getattr(run, dest, None) is not None
            else TASKS[run.task].defaults.get(dest) for dest in dests}


def train_memory_problem(args) -> str | None:
    """A fresh `tsrnn train`'s sizes refused where they cannot fit on its device: the weights and
    their gradients (--nhid, --emsize, --nlayers, --n), and for the tasks that generate their
    sequences at the length asked: the copy task's batch of --delay + 20 steps (its inputs and the
    four gates of each unit, step and row) and its fixed sequences (--copy-size), Dyck-2's
    sequences (--dyck-size, at least one symbol each). A lower bound: what the data adds (the
    vocabulary's embedding) is left out, and so are --bptt and --batch-size of the text tasks,
    whose windows the corpus cuts to its length."""
    import torch

    from tsrnn.lab.training import recipes

    task = recipes.task(args)
    value = _resolved(args, ("batch_size", "nhid", "emsize", "nlayers", "n", "delay", "copy_size", "dyck_size"))
    hidden = [int(h) for h in str(value["nhid"] or 1).split(",")]  # imdb's default depends on --cell: >= 1
    used = ["nhid"] if value["nhid"] else []
    if task == "averaging-lm":
        hidden *= value["nlayers"]
        used.append("nlayers")
    inputs = value["emsize"] if task in (*TEXT_TASKS, "imdb") and value["emsize"] else 1
    used += ["emsize"] if inputs > 1 else []
    if task == "mlp-lm":  # the MLP on n context slots of emsize features
        floats = 2 * value["n"] * inputs * hidden[0]
        used.append("n")
    else:
        floats = 2 * sum(4 * h * (i + h) for i, h in zip([inputs] + hidden[:-1], hidden))
    needed = FLOAT32 * floats
    if task == "copy":
        steps = value["delay"] + COPY_MARKS
        needed += FLOAT32 * value["batch_size"] * steps * (1 + 4 * sum(hidden))
        used += ["delay", "batch_size"]
        if value["copy_size"]:
            needed += 2 * INT64 * sum(int(n) for n in str(value["copy_size"]).split(",")) * steps
            used.append("copy_size")
    if task == "dyck":
        needed += INT64 * sum(int(n) for n in str(value["dyck_size"]).split(","))
        used.append("dyck_size")
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda" and int(os.environ.get("WORLD_SIZE", "1")) > 1:  # torchrun: this process's GPU
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    given = getattr(args, "given", {})
    sizes = ", ".join(f"{flag(dest)} {value[dest]}" for dest in sorted(used, key=lambda dest: dest not in given))
    what = "the weights and their gradients" + \
        {"copy": ", one batch's sequences and gates", "dyck": ", the sequences"}.get(task, "") + \
        (", the fixed sequences" if "copy_size" in used else "")
    return _memory_problem(needed, sizes, what, device)


def eval_memory_problem(args) -> str | None:
    """`tsrnn eval`'s sizes refused where they cannot fit: the bootstrap draws at least
    ``--resamples`` + 1 block indices (int64), and each of ``--delays`` one copy sequence of
    T + 20 symbols (int64) and the four gates of each of its steps (float32)."""
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    found = _memory_problem(INT64 * (args.resamples + 1), f"--resamples {args.resamples}",
                            "the bootstrap's block indices", "cpu")
    for delay in (int(d) for d in (args.delays or "").split(",") if d.strip()):
        found = found or _memory_problem((INT64 + 4 * FLOAT32) * (delay + COPY_MARKS), f"--delays {delay}",
                                         "a copy sequence of that delay and its gates", device)
    return found


def problem(args) -> str | None:
    """The first problem with ``args`` of any command as one line, or None."""
    from tsrnn.lab.training import checkpoint, distributed, loggers, recipes, run_dir

    found = _recipe_problem(args) or _foreign_option_problem(args) or _range_problem(args) or _list_problem(args)
    if found:
        return found
    if args.command == "selftest":
        from tsrnn.lab import selftest

        return selftest_memory_problem(args.steps, args.batch, args.hidden, selftest.devices())
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
            return eval_memory_problem(args)
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
        if found is None and fresh:
            found = train_memory_problem(args)
    except ValueError as exc:
        return str(exc)
    return found
