"""``tsrnn train --resume CKPT``: the run goes on with the settings it started with.

The checkpoint's arguments are the resumed run's. A flag given with ``--resume`` either
changes how the run goes on, and is applied (``APPLIED``: the learning rate, how long it trains,
when it validates, logs and saves, where it logs to (--tensorboard, --csv), where it runs, and the data's path, whose vocabulary must be
the checkpoint's), or must equal the checkpoint's value, else the resume is refused naming both
values: the task, the model, the data order and the optimizer (batch size, seed, ...) are what
make the continuation the same run. An option newer than the checkpoint (absent from its
arguments) takes the task's default, as the run was trained, and a value given for it is checked
through the model config and vocabulary it yields; the recipe is not applied again. Without
``--out`` the run goes on in the checkpoint's directory. A run that has finished (all its epochs,
its ``--max-steps``, its early stop) is not resumed unless the flag that ended it is raised.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from tsrnn.lab.training import checkpoint

APPLIED = ("lr", "clip", "epochs", "max_steps", "patience", "stop_accuracy", "valid_every", "log_every", "tensorboard",
           "csv", "save_every", "save_minutes", "device", "backend", "quiet", "data")
THIS_COMMAND = ("command", "resume", "out", "overwrite", "given")  # never taken from the checkpoint


def merged_args(state: dict, args: argparse.Namespace, given: dict) -> argparse.Namespace:
    """The checkpoint's arguments with the APPLIED flags of ``given`` (dest -> flag as typed);
    a CheckpointError if another given flag differs from the checkpoint's value."""
    saved = state["args"]
    for dest, flag in given.items():
        if dest in APPLIED or dest in THIS_COMMAND or dest not in saved:
            continue
        if saved.get(dest) != getattr(args, dest):
            raise checkpoint.CheckpointError(
                f"{flag} {_shown(getattr(args, dest))} differs from the checkpoint's {_shown(saved.get(dest))} "
                f"({args.resume}); a resumed run keeps the settings it started with (`tsrnn train --help` lists "
                "under --resume the flags it may change)")
    merged = {**vars(args), **{k: v for k, v in saved.items() if k not in THIS_COMMAND}}
    merged.update({dest: getattr(args, dest) for dest in given})
    if "out" not in given:
        merged["out"] = str(Path(args.resume).parent)
    return argparse.Namespace(**merged)


def _shown(value) -> str:
    return "(unset)" if value is None else str(value)


def finished_error(state: dict, args: argparse.Namespace) -> str | None:
    """Why the checkpoint's run would not train on under ``args`` (one line), or None."""
    progress, path = state["progress"], args.resume
    if progress["epoch"] >= args.epochs:
        return (f"{path} has finished its run: {progress['epoch']} epochs done and --epochs {args.epochs}; "
                f"give --epochs N > {progress['epoch']} to train on")
    if args.max_steps and progress["step"] >= args.max_steps:
        return (f"{path} has finished its run: {progress['step']} steps done and --max-steps {args.max_steps}; "
                "give a larger --max-steps (0: no limit) to train on")
    if progress["stopped"] == "patience" and args.patience and progress["bad_epochs"] >= args.patience:
        return (f"{path} has finished its run: it stopped early after {progress['bad_epochs']} epochs without a "
                f"better validation loss (--patience {args.patience}); give a larger --patience (0: never) to train on")
    if progress["stopped"] == "solved" and args.stop_accuracy <= state["args"]["stop_accuracy"]:
        return (f"{path} has finished its run: it stopped when the task's stopping rule held (--stop-accuracy "
                f"{args.stop_accuracy}); give a higher --stop-accuracy to train on")
    return None
