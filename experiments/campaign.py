"""Run the committed queue of long experiments (``experiments/campaign.toml``) on an idle core:
``python -m experiments.campaign`` (``--status``: what is done and what is next).

Each entry is a record's script, run with ``--jobs 1 --threads 1`` in Linux's idle scheduling
class (``--priority idle``: it runs only when a CPU has nothing else to do) and pinned to one CPU
(``--cpu``, default the last). That is not free for work beside it that runs torch on both CPUs:
the README's main job took about 1 s an epoch with the campaign stopped, 12 to 19 s beside it in
the idle class and 95 s beside it at niceness 19 (2-core Intel Xeon, 2026-12-06). Stop the
campaign (Ctrl-C or SIGTERM; the next call resumes) while timing anything or running the tests. The scripts train through ``training.train``: a run stopped anywhere goes on from
its last checkpoint, and every finished run is copied, with its test metrics, into the ledger
``results/runs/RECORD/`` (committed with the results), so a later call, on this machine or a
fresh one, trains only what is missing. An entry whose protocol (``protocols/PROTOCOL.toml``) is
not committed is refused: the protocol comes before the runs. An entry is done when
``results/RECORD.json`` holds its protocol; the campaign then goes on to the next one, and ends
when every entry is done.

Workers: a campaign is one worker on one CPU. A day with both CPUs idle may start a second,
``--cpu 0`` beside the default: the workers share the runs folder, each run claimed by the
process that trains it (``experiments.claims``), so no run is trained twice. A worker whose entry
has only runs held by the other left goes on to the next entry (the other writes the record),
and waits (``--busy-wait`` seconds) when every unfinished run is held.

Stopping: Ctrl-C or SIGTERM stops the entry's runs, which save their checkpoints. A worker holds
an ``flock`` on ``RUNS/campaign-cpuN.lock`` while it lives, so a second campaign on its CPU is
refused; the file names the entry's process group, so the next call on that CPU after a campaign
killed outright (SIGKILL) stops whatever that campaign left running, then resumes. A machine
stopped loses nothing the checkpoints and the ledger hold.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

from experiments import claims, common, training

ROOT = Path(__file__).resolve().parents[1]
QUEUE = Path(__file__).parent / "campaign.toml"


def idle() -> None:
    """Run this process and its children in Linux's SCHED_IDLE class, else at niceness 19 (which
    costs work beside it more: see the module's docstring)."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        os.nice(19 - os.nice(0))


def entries(queue: Path) -> list[dict]:
    """The queue's entries in order, each with its ``protocol`` name (default: its record's)."""
    listed = tomllib.loads(queue.read_text()).get("entry", [])
    for entry in listed:
        missing = {"record", "module"} - set(entry)
        if missing:
            raise ValueError(f"{queue}: an entry lacks {sorted(missing)}: {entry}")
        entry.setdefault("protocol", entry["record"])
        entry.setdefault("args", [])
    return listed


def done(entry: dict, results: Path) -> bool:
    """Whether ``results/RECORD.json`` exists and holds the entry's protocol as committed now."""
    try:
        record = json.loads((results / f"{entry['record']}.json").read_text())
    except (OSError, ValueError):
        return False
    return record.get("protocol") == common.protocol(entry["protocol"])


def uncommitted(path: Path) -> str | None:
    """Why ``path`` is not committed as it is (untracked or changed), None if it is; None with a
    warning outside a git checkout, where nothing can be checked."""
    try:
        status = subprocess.run(["git", "status", "--porcelain", "--", str(path)], cwd=ROOT, capture_output=True,
                                text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        print(f"[campaign] warning: not a git checkout, cannot check that {path.name} is committed", flush=True)
        return None
    if not status:
        return None
    return "untracked" if status.startswith("??") else "changed since its last commit"


def command(entry: dict, args) -> list[str]:
    """The entry's script call: its arguments with ``{data}`` filled in, one run at a time on one
    thread, into the campaign's folders."""
    given = [arg.replace("{data}", str(Path(args.data).resolve())) for arg in entry["args"]]
    return [sys.executable, "-m", entry["module"], *given, "--jobs", "1", "--threads", "1", "--runs", args.runs,
            "--out", args.results]


def _boot() -> str:
    """This boot's id: a process group recorded under another boot is not the one left behind."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _await(group: int, wait: float = 120.0) -> None:
    """Wait until no process of ``group`` is left (its training runs saving), SIGKILL at ``wait`` s."""
    deadline = time.time() + wait
    while time.time() < deadline:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    try:
        os.killpg(group, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _stop(group: int) -> None:
    """SIGTERM to a process group: the script ends and its training runs save their checkpoints
    (the trainer's SIGTERM, a signal no background start leaves ignored)."""
    try:
        os.killpg(group, signal.SIGTERM)
    except ProcessLookupError:
        pass


class Lock:
    """A worker's lock: an ``flock`` on ``RUNS/campaign-cpuN.lock``, held while this process lives
    (a second campaign on CPU N is refused; a killed one releases it), and in the file the process group of
    the entry's script under this boot, so that the next campaign stops what a killed one left."""

    def __init__(self, path: Path):
        import fcntl

        path.parent.mkdir(parents=True, exist_ok=True)
        self.path, self.file = path, open(path, "a+")
        try:
            fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.file.seek(0)
            raise SystemExit(f"a campaign is already running ({path}: {self.file.read().strip()}); stop it first")
        self.file.seek(0)
        try:
            held = json.loads(self.file.read())
        except ValueError:
            held = {}
        if held.get("group") and held.get("boot") == _boot():
            print(f"[campaign] the campaign of pid {held['pid']} was killed; stopping what it left running",
                  flush=True)
            _stop(held["group"])
            _await(held["group"])
        self.write(None)

    def write(self, group: int | None) -> None:
        self.file.seek(0)
        self.file.truncate()
        self.file.write(json.dumps({"pid": os.getpid(), "group": group, "boot": _boot()}))
        self.file.flush()
        os.fsync(self.file.fileno())


def status(queue: list[dict], args) -> str:
    """One line an entry: done, or how many of its runs the ledger holds finished."""
    lines = []
    for entry in queue:
        ledger = Path(args.results) / "runs" / entry["record"]
        finished = len(list(ledger.glob(f"*/{training.DONE}"))) if ledger.is_dir() else 0
        state = "done" if done(entry, Path(args.results)) else f"{finished} run(s) finished"
        lines.append(f"{entry['record']}: {state} ({' '.join(entry['args']) or 'no options'})")
    return "\n".join(lines)


def run_entry(entry: dict, args, lock: Lock) -> int:
    """Run one entry's script to its end (or until this process is told to stop); its exit code."""
    why = uncommitted(common.PROTOCOLS / f"{entry['protocol']}.toml")
    if why:
        print(f"[campaign] {entry['record']}: its protocol protocols/{entry['protocol']}.toml is {why}; commit it "
              "before its runs start", file=sys.stderr, flush=True)
        return 2
    log = Path(args.runs) / "campaign" / f"{entry['record']}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    call = command(entry, args)
    print(f"[campaign] {entry['record']}: {' '.join(call[1:])} (log {log})", flush=True)
    stop, process = [], None

    def interrupted(signum, frame):  # the runs save their checkpoints; the rest is awaited below
        stop.append(signum)
        if process is not None:
            _stop(process.pid)

    # handlers first, so that a stop during the start is not lost (a signal mask would pass to the
    # script and its runs, which then could not be stopped)
    handlers = {s: signal.signal(s, interrupted) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with log.open("a") as out:
            process = subprocess.Popen(call, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)
        lock.write(process.pid)
        if stop:
            _stop(process.pid)
        code = process.wait()
        if stop:
            _await(process.pid)  # what is left of the entry's group: its training runs, saving
    finally:
        for s, handler in handlers.items():
            signal.signal(s, handler)
    lock.write(None)
    if stop:
        print(f"[campaign] stopped; {entry['record']}'s runs saved their checkpoints and resume on the next call",
              flush=True)
        return 128 + stop[0]
    if code == claims.HELD_ELSEWHERE:
        print(f"[campaign] {entry['record']}: its unfinished runs are being trained by another worker, which writes "
              "its record; going on to the next entry", flush=True)
        return code
    if code != 0:
        tail = "\n".join(log.read_text().splitlines()[-15:])
        print(f"[campaign] {entry['record']} failed (exit {code}):\n{tail}", file=sys.stderr, flush=True)
        return code
    if not done(entry, Path(args.results)):
        print(f"[campaign] {entry['record']}: the script ended without writing results/{entry['record']}.json with "
              f"its protocol", file=sys.stderr, flush=True)
        return 1
    print(f"[campaign] {entry['record']} done", flush=True)
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.campaign", description=__doc__.splitlines()[0])
    p.add_argument("--queue", default=str(QUEUE), help="the queue (default: experiments/campaign.toml)")
    p.add_argument("--data", default=str(ROOT.parent / "shared" / "data"),
                   help="the corpora's folder, {data} in the queue (default: ../shared/data)")
    p.add_argument("--runs", default="runs/experiments", help="checkpoints and logs (default: runs/experiments)")
    p.add_argument("--results", default=str(common.RESULTS), help="records and ledger (default: experiments/results)")
    p.add_argument("--cpu", type=int, help="the CPU to run on (default: the last this process may use)")
    p.add_argument("--priority", choices=("idle", "normal"), default="idle",
                   help="idle (default): Linux's SCHED_IDLE, run only when a CPU has nothing else to do; normal: "
                        "as started")
    p.add_argument("--busy-wait", type=float, default=300.0, metavar="SECONDS",
                   help="how long a worker waits when other workers hold every unfinished run (default: 300)")
    p.add_argument("--status", action="store_true", help="print what is done and what is next, run nothing")
    args = p.parse_args(argv)
    args.runs, args.results = str(Path(args.runs).resolve()), str(Path(args.results).resolve())
    if args.status:
        print(status(entries(Path(args.queue)), args))
        return 0
    allowed = sorted(os.sched_getaffinity(0))
    cpu = allowed[-1] if args.cpu is None else args.cpu
    if cpu not in allowed:
        p.error(f"--cpu {cpu}: this process may use CPUs {allowed}")
    os.sched_setaffinity(0, {cpu})
    if args.priority == "idle":
        idle()
    lock = Lock(Path(args.runs) / f"campaign-cpu{cpu}.lock")
    busy: set[str] = set()  # entries whose unfinished runs other workers hold
    while True:
        queue = entries(Path(args.queue))  # read again after each entry: a commit may have added to it
        pending = [entry for entry in queue if not done(entry, Path(args.results))]
        if not pending:
            print("[campaign] every entry is done", flush=True)
            return 0
        free = [entry for entry in pending if entry["record"] not in busy]
        if not free:
            print(f"[campaign] other workers hold every unfinished run; looking again in {args.busy_wait:g} s", flush=True)
            try:
                time.sleep(args.busy_wait)
            except KeyboardInterrupt:
                return 128 + signal.SIGINT
            busy.clear()
            continue
        code = run_entry(free[0], args, lock)
        if code == claims.HELD_ELSEWHERE:
            busy.add(free[0]["record"])
        elif code != 0:
            return code
        else:
            busy.clear()  # what another worker held may have been released since


if __name__ == "__main__":
    raise SystemExit(main())
