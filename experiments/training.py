"""The training runs of a reproduction script and their ledger.

``train`` runs a script's runs (run name -> ``tsrnn train`` arguments) as ``python -m tsrnn
train`` processes, ``--jobs`` at a time, each claimed (``experiments.claims``) so that several
campaign workers can share one folder; it skips a run that already finished with the same
arguments, resumes one that was cut off from its ``last.pt``, and restores one from the ledger
``experiments/results/runs`` (the committed record of every finished run) on a machine that never
trained it. The readers below (``finished``, ``metrics``, ``curve``, ``restore``,
``test_metrics``) are what a script scores a finished run with.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from experiments import claims

DONE = "finished.json"  # written into a run's directory when its training ended without error
STARTED = "started.json"  # the run's arguments and its training seconds so far, kept up to date while it trains


def _finished(run_dir: Path, argv: list[str]) -> bool:
    try:
        return finished(run_dir)["argv"] == argv
    except (OSError, ValueError, KeyError):
        return False


def _started(run_dir: Path) -> dict:
    """What ``train`` recorded when it started the run: its arguments and the seconds trained so far."""
    try:
        return json.loads((run_dir / STARTED).read_text())
    except (OSError, ValueError):
        return {}


def _trained_out(last: Path) -> bool:
    """Whether the checkpoint's run has ended (its epochs, steps or stopping rule), so that only
    ``finished.json`` was missing when the call that trained it was cut off."""
    from tsrnn.lab.training import checkpoint, resume

    state = checkpoint.load(last)
    return resume.finished_error(state, argparse.Namespace(**{**state["args"], "resume": str(last)})) is not None


def _command(run_dir: Path, argv: list[str]) -> list[str] | None:
    """The ``tsrnn train`` arguments that train the run in ``run_dir``: ``--resume`` its
    ``last.pt`` when an earlier call with the same arguments was cut off; None when that run has
    trained out already; else a fresh start, after deleting what another run (or a start that
    never saved) left in the folder, so that a later call never takes it for this run's."""
    last = run_dir / "last.pt"
    if _started(run_dir).get("argv") == argv and last.exists():
        return None if _trained_out(last) else [*argv, "--resume", str(last)]
    from tsrnn.lab.training.run_dir import RUN_FILES

    for name in (*RUN_FILES, STARTED, DONE):
        (run_dir / name).unlink(missing_ok=True)
    return argv


def _write_json(path: Path, value: dict) -> None:
    """Write ``value`` to ``path`` atomically: a kill mid-write leaves the old file, not half a new one."""
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(value))
    os.replace(temporary, path)


def _record_time(run_dir: Path, argv: list[str], seconds: float, jobs: int) -> None:
    _write_json(run_dir / STARTED, {"argv": argv, "wall_s": round(seconds, 1), "jobs": jobs})


def train(name: str, runs: dict[str, list[str]], args, checkpoints: bool = False) -> dict[str, Path]:
    """Train every run of ``runs`` (run name -> ``tsrnn train`` arguments) into
    ``args.runs/name/RUN``, ``args.jobs`` at a time; return each run's directory. A run that
    already finished with the same arguments is not trained again, and one whose training was
    cut off (the script killed, the machine stopped) goes on from its ``last.pt``: the runs save
    every few minutes, so a long experiment can be spread over several calls. The training time
    recorded is the sum over the calls (with the minutes after a run's last save, which its
    resume trains again). Raises RuntimeError, with the end of its log, if a run fails; the other
    runs are interrupted and save their last.pt.

    A finished run's test metrics go into its ``finished.json`` and the run's record of it (that
    file and ``metrics.jsonl`` without its per-step training lines, the corpus path spelled
    CORPUS) into the ledger ``args.out/runs/NAME/RUN``, which is committed with the results. On
    another machine, or after the checkpoints are gone, a run the ledger holds with the same
    arguments and its test metrics is restored from it instead of trained again, unless the
    script scores more than the test metrics (``checkpoints``: it reads the checkpoints).

    Several processes (the campaign's workers, one per CPU) may train the runs of one folder: each
    run is claimed before it is touched (``experiments.claims``), a run another process holds is
    left to it, and when only such runs are left unfinished this call exits with
    ``claims.HELD_ELSEWHERE``: the process that finishes the last run
    goes on to the record."""
    root, ledger = Path(args.runs) / name, Path(args.out) / "runs" / name
    corpus = getattr(args, "corpus", None)
    dirs = {run: root / run for run in runs}
    for run in runs:
        with claims.claimed(dirs[run]) as mine:
            if not mine:
                continue
            if _finished(dirs[run], runs[run]):
                if not (ledger / run / DONE).exists():  # a call killed between the two
                    _to_ledger(dirs[run], ledger / run, corpus)
            elif not checkpoints and _restorable(ledger / run, runs[run], corpus):
                shutil.copyfile(ledger / run / "metrics.jsonl", dirs[run] / "metrics.jsonl")
                _write_json(dirs[run] / DONE, {**finished(ledger / run), "argv": runs[run]})
    pending = [run for run in runs if not _finished(dirs[run], runs[run])]
    elsewhere: list[str] = []  # runs another process held when this one came to them
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    active: dict[str, tuple[subprocess.Popen, float, float, int]] = {}  # run -> (process, started, seconds before, claim)
    recorded = time.time()
    while pending or active or elsewhere:
        while pending and len(active) < max(1, args.jobs):
            run = pending.pop(0)
            held = claims.claim(dirs[run])
            if held is None:
                elsewhere.append(run)
                continue
            if _finished(dirs[run], runs[run]):  # by another process since this call looked
                os.close(held)
                continue
            argv = _command(dirs[run], runs[run])
            earlier = _started(dirs[run])  # cleared by _command for a fresh start
            before, jobs = earlier.get("wall_s", 0.0), earlier.get("jobs", args.jobs)
            if argv is None:
                _finish(name, run, dirs[run], runs[run], before, jobs, ledger, corpus)
                os.close(held)
                continue
            _record_time(dirs[run], runs[run], before, args.jobs)
            command = [sys.executable, "-m", "tsrnn", "train", *argv, "--out", str(dirs[run]), "--quiet"]
            with (dirs[run] / "train.log").open("a" if "--resume" in argv else "w") as log:
                process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, pass_fds=(held,))
            active[run] = process, time.time(), before, held
            print(f"[{name}] training {run}: tsrnn train {shlex.join(argv)}", flush=True)
        if not pending and not active:  # only runs held elsewhere are left: take back any released unfinished
            elsewhere = [run for run in elsewhere if not _finished(dirs[run], runs[run])]
            pending = [run for run in elsewhere if not claims.held(dirs[run])]
            if elsewhere and not pending:
                claims.leave(name, elsewhere)
            elsewhere = [run for run in elsewhere if run not in pending]
            continue
        time.sleep(0.5)
        keep_time = time.time() - recorded > 30  # the training seconds so far, saved twice a minute
        if keep_time:
            recorded = time.time()
        for run, (process, started, before, held) in list(active.items()):
            if process.poll() is None:
                if keep_time:
                    _record_time(dirs[run], runs[run], before + time.time() - started, args.jobs)
                continue
            del active[run]
            if process.returncode != 0:
                os.close(held)
                _stop([other for other, *_ in active.values()])
                tail = (dirs[run] / "train.log").read_text().splitlines()[-15:]
                raise RuntimeError(f"[{name}] run {run} failed (exit {process.returncode}):\n" + "\n".join(tail))
            _finish(name, run, dirs[run], runs[run], before + time.time() - started, args.jobs, ledger, corpus)
            os.close(held)
    return dirs


def _stop(processes: list[subprocess.Popen]) -> None:
    """Interrupt the other runs: each saves its last.pt (the trainer's SIGINT) and a later call resumes it."""
    for process in processes:
        process.send_signal(signal.SIGINT)
    for process in processes:
        try:
            process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            process.kill()


def _finish(name: str, run: str, run_dir: Path, argv: list[str], seconds: float, jobs: int, ledger: Path,
            corpus: str | None) -> None:
    """Mark the run finished, with its test metrics (``_scores``), and copy its record to the ledger."""
    _record_time(run_dir, argv, seconds, jobs)
    _write_json(run_dir / DONE, {"argv": argv, "wall_s": round(seconds, 1), "jobs": jobs, "test": _scores(run_dir)})
    _to_ledger(run_dir, ledger / run, corpus)
    print(f"[{name}] {run} finished after {seconds:.0f} s of training", flush=True)


def _spelled(argv: list[str], corpus: str | None) -> list[str]:
    """``argv`` with the corpus path as CORPUS: the ledger's spelling, the same on every machine."""
    return [("CORPUS" if corpus is not None and word == corpus else word) for word in argv]


def _to_ledger(run_dir: Path, entry: Path, corpus: str | None) -> None:
    """The finished run's metrics (its first line, which dates the run's start, and every event but
    the per-step training lines), then its ``finished.json``: an entry with a ``finished.json`` is
    whole."""
    entry.mkdir(parents=True, exist_ok=True)
    with (run_dir / "metrics.jsonl").open() as lines:
        kept = [line for k, line in enumerate(lines) if k == 0 or json.loads(line)["event"] != "train"]
    temporary = entry / ".metrics.jsonl.tmp"
    temporary.write_text("".join(kept))
    os.replace(temporary, entry / "metrics.jsonl")
    done = finished(run_dir)
    _write_json(entry / DONE, {**done, "argv": _spelled(done["argv"], corpus)})


def _restorable(entry: Path, argv: list[str], corpus: str | None) -> bool:
    """Whether the ledger's entry is this run (its arguments, the corpus spelled CORPUS), whole and
    with its test metrics."""
    try:
        done = finished(entry)
    except (OSError, ValueError):
        return False
    return (done.get("argv") == _spelled(argv, corpus) and "test" in done
            and (entry / "metrics.jsonl").exists())


CHECKPOINTS = ("best.pt", "last.pt")  # the checkpoints a script scores


def _scores(run_dir: Path) -> dict:
    """The task's test-split metrics of each of the run's checkpoints."""
    return {name: _evaluate(run_dir, name) for name in CHECKPOINTS if (run_dir / name).exists()}


def _evaluate(run_dir: Path, checkpoint: str) -> dict:
    task, model = restore(run_dir, checkpoint)
    return task.evaluate(model, "test")


def finished(run_dir: Path) -> dict:
    """What ``train`` recorded of a finished run: its arguments, wall time and ``--jobs``."""
    return json.loads((run_dir / DONE).read_text())


def metrics(run_dir: Path, event: str = "valid") -> list[dict]:
    """The run's metrics.jsonl records of one event ("valid", "train")."""
    with (run_dir / "metrics.jsonl").open() as f:
        return [r for r in map(json.loads, f) if r["event"] == event]


def curve(run_dir: Path, key: str) -> list[tuple[int, float]]:
    """(optimizer step, value) of a validation metric over a run."""
    return [(r["step"], r[key]) for r in metrics(run_dir)]


def first_step(points: list[tuple[int, float]], threshold: float) -> int | None:
    """The first step at which a curve reaches ``threshold`` (None if it never does)."""
    return next((step for step, value in points if value >= threshold), None)


def restore(run_dir: Path, checkpoint: str = "best.pt"):
    """(task, model) of a run's checkpoint, on the CPU, in eval mode."""
    from tsrnn.lab.loading import restore as restore_checkpoint

    return restore_checkpoint(str(run_dir / checkpoint), None, torch.device("cpu"))


def test_metrics(run_dir: Path, checkpoint: str = "best.pt") -> dict:
    """The task's own test-split metrics of a run's checkpoint (best validation loss by default):
    those ``train`` recorded when the run finished, else evaluated from the checkpoint."""
    try:
        return finished(run_dir)["test"][checkpoint]
    except (OSError, ValueError, KeyError):
        return _evaluate(run_dir, checkpoint)
