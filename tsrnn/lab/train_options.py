"""The options of ``tsrnn train``, grouped by the tasks they apply to, with every default stated.

``GROUPS`` is the one table: each group names the tasks its options apply to (None: every task),
an option may narrow that with its own ``tasks``. The parser (``add_to``) shows one help section a
group, each option's default read from the tasks' own defaults (``Task.defaults`` and
``COMMON_DEFAULTS``) or stated where a task computes it, so the help cannot drift from what runs;
``cli_checks`` refuses an option given for a task outside its list (``tasks_of``).
"""
from __future__ import annotations

import argparse

from tsrnn.lab.training.recipes import RECIPES
from tsrnn.lab.training.resume import APPLIED

TASK_NAMES = ("lm", "averaging-lm", "mlp-lm", "dyck", "copy", "freq", "pixels", "imdb")
TEXT = ("lm", "averaging-lm", "mlp-lm")  # the tasks that read a text corpus


# (title, the tasks of its options or None for every task, description, [(flag, {argparse keywords
# plus "tasks": narrower tasks, "default": the text of a default no table holds})]).
GROUPS = [
    ("run", None, "what runs, where, and from which checkpoint", [
        ("--task", {"choices": TASK_NAMES, "default": "lm, or the --recipe's first task"}),
        ("--recipe", {"choices": sorted(RECIPES), "help": "the seed's training setting (optimizer, schedule, "
                      "sizes) for the options not given; see tsrnn/lab/training/recipes.py"}),
        ("--out", {"help": "directory for the checkpoints and metrics.jsonl", "default": "runs/TASK, or with "
                   "--resume the checkpoint's directory"}),
        ("--resume", {"help": "checkpoint to continue from (bit-identical continuation) with its settings; only "
                      "{APPLIED} may change"}),
        ("--overwrite", {"action": "store_true", "help": "replace the run --out holds (its checkpoints and "
                         "metrics); without it such an --out is refused"}),
        ("--seed", {"type": int}),
        ("--device", {"help": "cpu, cuda, cuda:1", "default": "cuda if available, else cpu"}),
        ("--backend", {"choices": ["auto", "reference", "native", "triton"]}),
        ("--quiet", {"action": "store_true", "help": "no progress bar (there is none off a terminal either)"}),
    ]),
    ("optimization", None, "the optimizer and the schedule", [
        ("--epochs", {"type": int}),
        ("--max-steps", {"type": int, "default": 0, "help": "stop after this many optimizer steps (0: no limit)"}),
        ("--batch-size", {"type": int}),
        ("--lr", {"type": float, "help": "learning rate", "default_extra": {"imdb": "1e-3 (lstm, chrono), 5e-4 "
                                                                                    "(plstm)"}}),
        ("--optimizer", {"choices": ["adam", "sgd", "rmsprop"], "help": "rmsprop: moving average 0.9 (seed 002)"}),
        ("--weight-decay", {"type": float}),
        ("--clip", {"type": float, "help": "gradient norm clip (0: none)"}),
        ("--nonmono", {"type": int, "help": "with --optimizer sgd: switch to averaged SGD when validation is "
                       "worse than the best of the epochs more than N before (AWD-LSTM's NT-ASGD; 0: never)"}),
        ("--lr-decay-after", {"type": int, "help": "divide the lr by --lr-decay-factor each epoch after this one"}),
        ("--lr-decay-factor", {"type": float}),
        ("--patience", {"type": int, "help": "stop after N epochs without a better validation loss (0: never)"}),
    ]),
    ("logging and checkpoints", None, "metrics.jsonl (and a CSV, TensorBoard), last.pt and best.pt in --out", [
        ("--valid-every", {"type": int, "default": 0, "help": "validate every N steps (0: after each epoch only)"}),
        ("--log-every", {"type": int, "default": 10, "help": "write a train metrics line every N steps"}),
        ("--tensorboard", {"metavar": "DIR", "help": "also log every metric as TensorBoard scalars (train/loss, "
                           "train/lr, train/grad_norm, valid/..., epoch/...) at the optimizer step (needs "
                           "tensorboard)", "default": "none"}),
        ("--csv", {"metavar": "FILE", "help": "also write the metrics to a CSV file, one row per value: "
                   "time,event,step,epoch,name,value", "default": "none"}),
        ("--save-every", {"type": int, "default": 0, "help": "write last.pt every N steps (0: only by time, at "
                          "epoch ends and on SIGINT/SIGTERM)"}),
        ("--save-minutes", {"type": float, "default": 10.0, "help": "write last.pt when this many minutes have "
                            "passed since the last write (0: never by time)"}),
    ]),
    ("model and data", None, "options of several tasks; each names its tasks", [
        ("--cell", {"tasks": ("lm", "averaging-lm", "dyck", "copy", "freq", "pixels", "imdb"),
                    "help": "lm: lstm|mts|plstm; averaging-lm: lstm; dyck: lstm|mts; copy, freq, pixels, imdb: "
                            "lstm|chrono|plstm"}),
        ("--nhid", {"help": "hidden size; for lm one per layer, comma-separated (e.g. 1150,1150,400)",
                    "default_extra": {"imdb": "128 (lstm, chrono), 154 (plstm)"}}),
        ("--emsize", {"type": int, "tasks": ("lm", "averaging-lm", "mlp-lm", "imdb"), "help": "embedding size"}),
        ("--dropout", {"type": float, "tasks": ("lm", "averaging-lm", "imdb"), "help": "dropout of the outputs "
                       "(lm: AWD-LSTM's dropout)"}),
        ("--data", {"tasks": (*TEXT, "pixels", "imdb"), "help": "a corpus directory (PTB / WikiText-2 layout), "
                    "brown.zip (mlp-lm), a directory of MNIST's IDX files (pixels), the aclImdb folder (imdb)",
                    "default": "the embedded tiny-shakespeare corpus; pixels: scikit-learn's 8x8 digits; imdb: "
                               "none, required"}),
        ("--level", {"choices": ["word", "char"], "tasks": TEXT, "help": "PTB word or character files",
                     "default": "word"}),
        ("--bptt", {"type": int, "tasks": TEXT, "help": "steps per batch (averaging-lm: the longest sentence, "
                    "or the window with --memory-span stream; mlp-lm: words per document batch)"}),
        ("--mts-alpha", {"type": float, "tasks": ("lm", "dyck"), "help": "inverse-gamma shape of the MTS "
                         "timescales"}),
        ("--freeze", {"choices": ["gates", "all"], "tasks": ("lm", "dyck"), "help": "MTS: fix the i/f gate biases "
                      "(gates) or the whole bias vector, as the authors' code (all)"}),
        ("--loss-norm", {"choices": ["token", "sequence"], "tasks": ("averaging-lm", "mlp-lm"), "help":
                         "training loss averaged over the targets (token) or summed over each batch column's "
                         "targets and averaged over the columns (sequence: seed 001's gradient 'normalized by the "
                         "mini-batch size'; for mlp-lm the SGD step of every word of a window, as Bengio et al.'s)"}),
    ]),
    ("--task lm", ("lm",), "the AWD-LSTM language model (seed 000)", [
        *((f"--{name}", {"type": float, "help": f"AWD-LSTM {name}"})
          for name in ("dropouth", "dropouti", "dropoute", "wdrop", "alpha", "beta")),
        ("--random-bptt", {"action": "store_true", "help": "AWD-LSTM's random window lengths, lr scaled by "
                           "length / bptt"}),
        ("--bptt-std", {"type": float, "help": "with --random-bptt: the window is --bptt (p 0.95) or --bptt / 2, "
                        "plus N(0, this) (5: AWD-LSTM, the seed-000 authors' code; 0: seed 000's text, 70 or 35)"}),
        ("--lstm-init", {"choices": ["sqrt", "inverse"], "help": "recurrent weights and biases ~ U(±1/sqrt(H)) "
                         "(sqrt: PyTorch's, as AWD-LSTM and the seed-000 authors' code) or U(±1/H) (inverse: "
                         "seed 000's text)"}),
    ]),
    ("--task averaging-lm", ("averaging-lm",), "the LSTM LM with an averaging memory (seed 001)", [
        ("--nlayers", {"type": int, "help": "LSTM layers"}),
        ("--order", {"choices": ["shuffled", "corpus"], "help": "training sentences shuffled per epoch or in "
                     "corpus order (seed 001)"}),
        ("--no-memory", {"dest": "memory", "action": "store_false", "default": None, "help": "the same LM "
                         "without the averaging memory (the baseline)"}),
        ("--no-h0", {"dest": "count_h0", "action": "store_false", "default": None, "help": "leave the initial "
                     "state h_0 = 0 out of the memory's average, m_t = mean(h_1 .. h_{t-1}) and m_1 = 0 (the ablation "
                     "of seed 001 §6.3, which counts h_0)"}),
        ("--memory-span", {"choices": ["sentence", "stream"], "help": "the memory restarts at each sentence, one "
                           "per batch column (seed 001), or spans sentences: --batch-size streams read in windows of "
                           "--bptt steps, the LSTM state and the memory carried across them (seed 001 §6's longer "
                           "memory)"}),
    ]),
    ("--task mlp-lm", ("mlp-lm",), "the next-word MLP on a Buffer, TILT or TILT-Buffer context (seed 004)", [
        ("--context", {"choices": ["buffer", "tilt", "tilt-buffer"]}),
        ("--n", {"type": int, "help": "context slots (the MLP's input size)"}),
        ("--ahead", {"type": int, "metavar": "K", "help": "predict the word K steps ahead, y_t = w_{t+K} (seed 004 "
                     "Experiment 2; 1: the next word); validation and eval score the same targets"}),
        ("--drop-taus", {"metavar": "SLOTS", "help": "--context tilt: train without these τ* slots, "
                         "comma-separated indices in 0..n-1 (seed 004 Experiment 4 drops the most recent: 0 / 0,1 / "
                         "0,1,2 / 0,1,2,3 of --n 5); recorded in the checkpoint, so eval scores the same model",
                         "default": "none"}),
        ("--vocab-from", {"choices": ["train", "all"], "help": "on Brown: count words for the vocabulary in "
                          "train or in the whole corpus (seed 004)"}),
        ("--rare-words", {"choices": ["unk", "drop"], "help": "the words outside the vocabulary are <unk> tokens "
                          "(unk) or removed from the text (drop: recipe seed004, the seed's 'only analyzed words "
                          "that appeared more than 5 times')"}),
    ]),
    ("--task dyck", ("dyck",), "Dyck-2 next-bracket prediction (seed 000 §3.1.2)", [
        ("--dyck-size", {"help": "train,valid,test sequence counts"}),
        ("--chunk", {"type": int, "help": "train on chunks of N steps with the state carried (0: whole)"}),
        ("--dyck-loss", {"choices": ["mean", "sum"], "help": "squared error averaged or summed (the authors')"}),
    ]),
    ("--task copy", ("copy",), "the copy task (seed 002 §4.1)", [
        ("--delay", {"type": int, "help": "the delay T"}),
        ("--variable", {"action": "store_true", "help": "the delay drawn per sequence from [--delay-min, "
                        "--delay]"}),
        ("--delay-min", {"type": int, "help": "the variable task's shortest delay", "default": "--delay / 2"}),
        ("--fixed-p", {"type": float, "help": "pLSTM: hold every unit's decay exponent p at this value (seed 002 "
                       "§5.1)", "default": "learned, p ~ U(0, 1)"}),
        ("--copy-size", {"help": "fixed train,valid sequence counts", "default": "fresh batches"}),
        ("--stop-accuracy", {"type": float, "help": "stop when validation symbol and sequence accuracy reach this "
                             "(seed 002: 0.999; 0: never)"}),
    ]),
    ("--task freq", ("freq",), "frequency discrimination of sampled sine waves (seed 002 §5.4)", [
        ("--async", {"dest": "asynchronous", "action": "store_true", "help": "samples at random times (else "
                     "every --resolution)"}),
        ("--resolution", {"type": float, "help": "time between samples when not --async (1 or 0.1)"}),
        ("--time-input", {"action": "store_true", "help": "the sample time as a second input (seed 002's "
                          "'w/ TIME')"}),
        ("--time-scale", {"type": float, "help": "with --time-input, the input is the sample time times this "
                          "(e.g. 0.008 = 1/125 puts it in [0, 1)); the seed feeds the raw time"}),
        ("--freq-size", {"help": "training sequences per epoch and validation sequences"}),
    ]),
    ("--task pixels", ("pixels",), "pixel-by-pixel digit classification (seed 002 §4.2)", [
        ("--permute", {"action": "store_true", "help": "permuted pixel order (pMNIST; one permutation from "
                       "seed 0)"}),
    ]),
    ("--task imdb", ("imdb",), "IMDB sentiment classification (seed 002 §4.4)", [
        ("--embeddings", {"help": "word vectors in GloVe's text format (e.g. glove.6B.100d.txt), frozen",
                          "default": "a trained embedding"}),
    ]),
]


def _options():
    """(flag, argparse keywords, tasks or None, default text or None, {task: default text}) of each option."""
    for _, group_tasks, _, options in GROUPS:
        for flag, spec in options:
            spec = dict(spec)
            tasks = spec.pop("tasks", group_tasks)
            stated = spec.get("default") if isinstance(spec.get("default"), str) else None
            if stated is not None:
                del spec["default"]
            yield flag, spec, tasks, stated, spec.pop("default_extra", {})


def _dest(flag: str, spec: dict) -> str:
    return spec.get("dest", flag[2:].replace("-", "_"))


def tasks_of(dest: str) -> tuple[str, ...] | None:
    """The tasks that read the option ``dest`` (None: every task)."""
    for flag, spec, tasks, _, _ in _options():
        if _dest(flag, spec) == dest:
            return tasks
    raise KeyError(dest)


def _shown(value) -> str:
    return "on" if value is True else "off" if value is False else "none" if value is None else f"{value:g}" \
        if isinstance(value, float) else str(value)


def default_text(dest: str, spec: dict, tasks, stated: str | None, extra: dict) -> str | None:
    """The default of an option as the tasks it applies to set it: one value, or a value a task."""
    from tsrnn.lab.training.tasks import TASKS
    from tsrnn.lab.training.tasks.base import COMMON_DEFAULTS

    if stated is not None:
        return stated
    if spec.get("action") in ("store_true", "store_false"):
        return None
    if "default" in spec and spec["default"] is not None:
        return _shown(spec["default"])
    if dest in COMMON_DEFAULTS:
        return _shown(COMMON_DEFAULTS[dest])
    by_task = {task: _shown(TASKS[task].defaults[dest]) for task in tasks or TASK_NAMES
               if TASKS[task].defaults.get(dest) is not None}
    by_task.update(extra)
    if not by_task:
        return None
    if len(set(by_task.values())) == 1 and len(by_task) == len(tasks or TASK_NAMES):
        return next(iter(by_task.values()))
    return ", ".join(f"{task} {value}" for task, value in by_task.items())


def add_to(parser: argparse.ArgumentParser) -> None:
    """The options of ``tsrnn train`` on ``parser``, one help section a group, each help ending
    with the tasks it applies to (where not all) and its default."""
    specs = {flag: (spec, tasks, stated, extra) for flag, spec, tasks, stated, extra in _options()}
    applied = ", ".join(flag for dest in APPLIED for flag, (spec, *_) in specs.items() if _dest(flag, spec) == dest)
    for title, group_tasks, description, options in GROUPS:
        group = parser.add_argument_group(title, description)
        for flag, _ in options:
            spec, tasks, stated, extra = specs[flag]
            notes = []
            if tasks is not None and tasks != group_tasks:
                notes.append(f"{', '.join(tasks)}")
            default = default_text(_dest(flag, spec), spec, tasks, stated, extra)
            if default is not None:
                notes.append(f"default: {default}")
            text = spec.get("help", "")
            if notes:
                text = f"{text} [{'; '.join(notes)}]" if text else f"[{'; '.join(notes)}]"
            text = text.replace("{APPLIED}", applied)
            group.add_argument(flag, **{**spec, "help": text.replace("%", "%%")})
