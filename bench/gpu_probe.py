"""A GPU call's first job: where each recurrent step of the tensor-core kernels spends its time.

    python bench/gpu_probe.py [--device cuda|cpu] [--quick] [--out DIR] [--deadline SECONDS]
                              [--parts NAME ...]

The parts run in this order, each in a process of its own with a time limit (LIMITS, cut so that
the whole run ends by --deadline), and --out's three files are rewritten after each, so a call cut
short still returns what was gathered: probe.json (every part's record), probe.md (its summary)
and files.tar.gz (each part's own record, its output, and the files a record names, relative to
the archive's root: the ncu CSVs). The parts write into a scratch folder outside --out, and --out
holds those three files alone: the device tool brings back at most 8 files from a call.

1. ``build``: the probe's build of the two tensor-core kernels (-DTSRNN_PROBE=1: the phase trace
   and the removal ladder of csrc/recurrence/cuda/probe.h; bench/probe/kernels.py), never the
   installed extension; on the CPU the SIMT emulation's probe library (tests/simt).
2. ``trace``: microseconds per phase per step, forward and backward (bench/probe/trace.py).
3. ``ladder``: the kernels timed with one part left out at a time (bench/probe/ladder.py).
4. ``profile``: torch.profiler over torch.nn.LSTM, the cudnn path and the tensor-core kernels
   (bench/probe/profile.py).
5. ``ncu``: Nsight Compute's counters of one launch per kernel and direction, where the machine
   lets it read them (bench/probe/ncu.py).
6. ``micro``: microbenchmarks of the Hopper primitives the next kernels rely on (bench/probe/micro.py).

``--device cpu`` runs the same code without a GPU (the kernels' source under the SIMT emulation,
stand-ins for the profiler and ncu): CI runs ``--quick --device cpu`` so the probe works whenever a
GPU comes. bench/gpu_report.py runs this first, right after its build.
"""
from __future__ import annotations

import argparse
import importlib
import json
import platform
import shutil
import sys
import tarfile
import tempfile
import time
import traceback
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))  # tsrnn from this tree

from probe.context import run_bounded  # noqa: E402

PARTS = ("build", "trace", "ladder", "profile", "ncu", "micro")
# Seconds each part may take on a GPU (the build of both extensions: about a minute and a half
# with 16 cores); the deadline may give less. On the CPU every part is bounded by CPU_LIMIT (the emulation library's first build
# excepted: it is cached, and the tests build it).
LIMITS = {"build": 150, "trace": 40, "ladder": 60, "profile": 55, "ncu": 80, "micro": 60}
CPU_LIMIT = 600
SHORTEST = 10  # seconds: a part left less than this is skipped
# The parts that load what the build part compiles: after a build that failed or was stopped they
# would compile again until their limits (or wait on the lock a stopped build leaves), so they are skipped.
BUILT = ("trace", "ladder", "micro")
ARCHIVE = "files.tar.gz"  # the parts' records, outputs and files, beside probe.json and probe.md


def build_part(ctx) -> dict:
    """The kernels' probe build and the microbenchmarks' (on the CPU: the emulation's probe library,
    which holds both), compiled once here so that the parts after it only load them."""
    from probe import kernels, micro

    started = time.monotonic()
    if ctx.device == "cpu":
        kernels.Probe("cpu")
        return {"status": "ok", "seconds": round(time.monotonic() - started, 1), "emulated": True}
    record = {"status": "ok", "kernels_seconds": round(kernels.build(), 1)}
    micro.build("cuda")
    return {**record, "seconds": round(time.monotonic() - started, 1)}


def run_part(name: str, device: str, quick: bool, out: Path, seconds: float) -> dict:
    """One part in this process: its record."""
    from probe.context import Context, failed

    ctx = Context(device, quick, out, time.monotonic() + seconds, part=name)
    try:
        if name == "build":
            return build_part(ctx)
        if device == "cuda" and name in ("trace", "ladder"):
            from probe import kernels

            kernels.build()  # loads the build the first part made (ninja finds nothing to do)
        return importlib.import_module(f"probe.{name}").run(ctx)
    except Exception as exc:  # noqa: BLE001  (the record says what went wrong; the next part still runs)
        return failed(f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc()[-2000:])


def header(device: str) -> dict:
    import torch

    return {"date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "generation": 2,  # of the tensor-core kernels (bench/cost_model.py)
            "device": torch.cuda.get_device_name() if device == "cuda" else platform.processor() or "cpu",
            "torch": torch.__version__, "python": platform.python_version(), "cuda": torch.version.cuda}


def write(out: Path, probe: dict, work: Path) -> None:
    """probe.json, probe.md (a summary that cannot be made does not stop the probe) and
    files.tar.gz (the parts' scratch folder ``work``), each written whole, then renamed into place."""
    from probe import summary

    try:
        text = summary.markdown(probe)
    except Exception as exc:  # noqa: BLE001  (the JSON holds everything; the summary is a view of it)
        text = f"# GPU probe\n\nprobe.md could not be written ({type(exc).__name__}: {exc}); see probe.json\n"
    for name, content in (("probe.json", json.dumps(probe, indent=1)), ("probe.md", text)):
        (out / f".{name}.tmp").write_text(content)
        (out / f".{name}.tmp").replace(out / name)
    with tarfile.open(out / f".{ARCHIVE}.tmp", "w:gz") as tar:
        for path in sorted(work.rglob("*")):
            if path.is_file():
                tar.add(path, arcname=str(path.relative_to(work)))
    (out / f".{ARCHIVE}.tmp").replace(out / ARCHIVE)


def main(argv=None) -> int:
    started = time.monotonic()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--quick", action="store_true", help="tiny shapes (the CPU smoke run)")
    p.add_argument("--out", default="gpu_probe", help="output folder (probe.json, probe.md, files.tar.gz)")
    p.add_argument("--deadline", type=float, default=420.0, help="seconds from the start by which the probe returns")
    p.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS)
    p.add_argument("--part", help=argparse.SUPPRESS)  # one part, in the process started for it
    p.add_argument("--seconds", type=float, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    out = Path(args.out).resolve()
    if args.part:  # ``out``: the scratch folder of the run that started this process
        record = run_part(args.part, args.device, args.quick, out, args.seconds)
        (out / "parts" / f"{args.part}.json").write_text(json.dumps(record, indent=1))
        return 0
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpu_probe_"))
    (work / "parts").mkdir()
    try:
        return run_parts(args, out, work, started)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_parts(args, out: Path, work: Path, started: float) -> int:
    """Every part of ``args.parts`` in order, each a process writing into ``work``; --out's files
    after each. The exit status: 0 if every part was ok or skipped."""
    probe = {**header(args.device), "deadline_s": args.deadline, "parts": {}, "seconds": {}}
    for name in (n for n in PARTS if n in args.parts):
        left = args.deadline - (time.monotonic() - started)
        limit = min(CPU_LIMIT if args.device == "cpu" else LIMITS[name], left)
        if limit < SHORTEST:
            probe["parts"][name] = {"status": "skipped", "reason": "past the deadline"}
            continue
        if name in BUILT and probe["parts"].get("build", {"status": "ok"})["status"] != "ok":
            probe["parts"][name] = {"status": "skipped", "reason": "the build part did not succeed"}
            continue
        print(f"[{time.strftime('%H:%M:%S')}] probe: {name} (limit {limit:.0f} s)", flush=True)
        part_started = time.monotonic()
        file, partial = work / "parts" / f"{name}.json", work / "parts" / f"{name}.partial.json"
        cmd = [sys.executable, __file__, "--part", name, "--device", args.device, "--out", str(work),
               "--seconds", str(limit - 5)] + (["--quick"] if args.quick else [])
        rc, output = run_bounded(cmd, limit)
        (work / "parts" / f"{name}.log").write_text(output)
        if file.exists():
            record = json.loads(file.read_text())
        elif partial.exists():  # stopped or crashed: what it measured until then
            record = {**json.loads(partial.read_text()), "status": "stopped",
                      "reason": f"stopped at its limit of {limit:.0f} s" if rc is None else f"its process ended with {rc}"}
        else:
            record = {"status": "failed", "output": output[-1500:],
                      "reason": f"stopped at its limit of {limit:.0f} s" if rc is None else f"its process ended with {rc}"}
        probe["parts"][name] = record
        probe["seconds"][name] = round(time.monotonic() - part_started, 1)
        print(f"[{time.strftime('%H:%M:%S')}] probe: {name} {record.get('status')} in {probe['seconds'][name]} s "
              f"{record.get('reason', '')}"[:300], flush=True)
        write(out, probe, work)
    probe["seconds"]["total"] = round(time.monotonic() - started, 1)
    write(out, probe, work)
    print(f"wrote {out / 'probe.json'}, probe.md and {ARCHIVE} in {probe['seconds']['total']} s", flush=True)
    return 0 if all(r.get("status") in ("ok", "skipped") for r in probe["parts"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
