"""One call on a GPU machine: build, check every kernel, time everything, record it.

    python bench/gpu_report.py [--wheels DIR] [--build] [--json gpu_report.json] [--device cuda] [--quick]
                               [--no-flashrnn]

1. Installs what ``--wheels DIR`` holds (``pip install --no-index --find-links DIR``, e.g. the
   flashrnn and triton wheels), since the GPU machine has no network; with ``--build``, builds
   tsrnn with its CUDA extension (``TSRNN_CUDA=1 pip install --no-build-isolation -e .``).
2. Runs the GPU tests (``GPU_TESTS``: tests/test_cuda.py, the Triton tests), ``tsrnn selftest`` and
   the CUDA tests again under compute-sanitizer (memcheck, racecheck), recording each summary line.
3. Checks every path of ``tsrnn.backend`` that runs on the device against the float64 reference
   through the harness of ``tsrnn.testing`` (the tests' table of cells x shapes and the timed
   shapes, float32 and bf16, forward and backward; with each of its ``LENGTH_CASES``), and the Triton linear scan on the tests'
   scan shapes and a long one; every shape comes from ``tsrnn.testing``'s tables.
4. Times forward+backward (CUDA events, median of ``--repeats`` after warm-up) at the target
   shapes (T=70, B in {20, 80}, H in {400, 1150}; T=1000, B=128, H=128) in float32 and bf16:
   torch.nn.LSTM (cuDNN, as users run it: TF32 per torch's default), tsrnn.LSTM with MTS timescales and tsrnn.PowerLawLSTM on "auto" (recording the path it
   measured fastest) and on every GPU path of the registry by name (``tsrnn.backend.paths_on``), their reference loops, and FlashRNN's fused LSTM
   when it imports; the Triton linear scan against the device's measured copy bandwidth; and
   ``lengths=`` against the same batch padded on every path (bench/lengths_vs_padded.py).
5. Prints a table and writes JSON with the device, versions and every number.

``--quick --device cpu`` runs the same code on tiny shapes (Triton through its interpreter): the
test suite does that so this script keeps working between GPU sessions.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The pytest runs of step 2 (tests/test_gpu_report.py checks that every file exists and that each
# run collects tests, so the list cannot name a deleted file): the GPU tests, then the CUDA ones
# that compute-sanitizer repeats (its tools slow a kernel ~100x: a few shapes).
GPU_TESTS = ["tests/test_cuda.py", "tests/test_paths.py", "tests/test_triton_kernels.py", "tests/test_triton_scan.py",
             "tests/test_backend.py", "tests/test_lengths.py", "tests/test_autocast.py"]
SANITIZED_TESTS = ["tests/test_cuda.py", "-k", "forward_without_save or (cuda_coop_matches_the_reference and 400)"]


def install(wheels: str) -> None:
    files = [os.path.join(wheels, f) for f in sorted(os.listdir(wheels)) if f.endswith(".whl")]
    if files:
        subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--find-links", wheels, *files],
                       check=True)


def build() -> None:
    """Editable install with the CUDA extension; --no-deps and --no-index: the GPU machine has
    torch, numpy, scipy and tqdm already and no package index."""
    env = dict(os.environ, TSRNN_CUDA="1")
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--no-index", "-e",
                    ROOT], check=True, env=env)


def run_tests(quick: bool) -> list[dict]:
    """The GPU test files, ``tsrnn selftest`` (what the README asks GPU users to run first), then
    the CUDA tests under compute-sanitizer; one summary line each."""
    import shutil

    pytest_cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    runs = [("pytest", pytest_cmd + GPU_TESTS), ("tsrnn selftest", [sys.executable, "-m", "tsrnn", "selftest"])]
    sanitizer = shutil.which("compute-sanitizer") or os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"),
                                                                  "bin", "compute-sanitizer")
    for tool in ("memcheck", "racecheck"):
        runs.append((f"compute-sanitizer {tool}", [sanitizer, "--tool", tool, "--error-exitcode", "1"] + pytest_cmd
                     + SANITIZED_TESTS))
    rows = []
    for name, cmd in runs[:1] if quick else runs:
        if not os.path.exists(cmd[0]) and not shutil.which(cmd[0]):
            rows.append({"run": name, "ok": False, "summary": f"{cmd[0]} not found"})
            continue
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        lines = (done.stdout + done.stderr).strip().splitlines()
        rows.append({"run": name, "ok": done.returncode == 0, "summary": " | ".join(lines[-3:])[-500:]})
    return rows


def timer(device):
    import torch

    def measure(fn, repeats: int) -> float:
        """Median milliseconds of fn() after two warm-up calls."""
        fn(), fn()
        times = []
        for _ in range(repeats):
            if device.type == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(end))
            else:
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)

    return measure


def check_scan(device, shapes) -> list[dict]:
    """The GPU linear scans (the Triton one) against their reference, forward and backward (float32)."""
    import torch

    from tsrnn import backend, testing

    rows = []
    for path in backend.paths_on("cuda", "linear_scan"):
        for shape in shapes:
            result = testing.compare_scan(path, shape, torch.float32, device)
            rows.append({"kernel": f"linear_scan {path}", "shape": list(shape), "dtype": "float32",
                         "worst": max(result.worst(False), result.worst(True)), "ok": result.ok,
                         "failures": result.failures()})
    return rows


def check_recurrences(device, shapes, dtypes, lengths=(None,)) -> list[dict]:
    """Every recurrence path that runs on the device, against the float64 reference (tsrnn.testing),
    padded or with each case of ``lengths`` (tsrnn.testing.LENGTH_CASES)."""
    from tsrnn import cells, testing

    rows = []
    for path in testing.LAYER_PATHS:
        for cell in cells.CELLS:
            for shape, dtype, case in itertools.product(shapes, dtypes, lengths):
                if testing.why_not(path, cell, shape, dtype, device):
                    continue
                row = {"kernel": f"{cell} {path}" + (f" lengths {case}" if case else ""), "shape": list(shape),
                       "dtype": str(dtype).replace("torch.", "")}
                try:
                    result = testing.compare(path, cell, shape, dtype, device, dt=cells.get(cell).has_p, lengths=case)
                except Exception as exc:  # noqa: BLE001  (a failing path is reported, not fatal)
                    rows.append({**row, "worst": None, "ok": False, "failures": f"{type(exc).__name__}: {exc}"[:300]})
                    continue
                rows.append({**row, "worst": max(result.worst(False), result.worst(True)), "ok": result.ok,
                             "failures": result.failures()})
    return rows


def flashrnn_step(B, T, H, dtype, device):
    """A fwd+bwd closure of FlashRNN's fused LSTM (one head of size H), or the reason it cannot run."""
    try:
        import torch
        from flashrnn import flashrnn

        Wx = torch.randn(B, T, 4, 1, H, device=device, dtype=dtype, requires_grad=True)
        R = (torch.randn(4, 1, H, H, device=device, dtype=dtype) / H ** 0.5).requires_grad_()
        b = torch.zeros(4, 1, H, device=device, dtype=dtype, requires_grad=True)
        name = {torch.float32: "float32", torch.bfloat16: "bfloat16"}[dtype]

        def step():
            h, _ = flashrnn(Wx, R, b, function="lstm", backend="cuda_fused", dtype=name)
            h.float().sum().backward()

        step()
        return step, None
    except Exception as exc:  # not installed, no CUDA, unsupported shape: recorded, not fatal
        return None, f"{type(exc).__name__}: {exc}"[:200]


def time_recurrences(device, shapes, dtypes, repeats, flashrnn=True) -> list[dict]:
    import torch

    import tsrnn

    measure = timer(device)
    rows = []
    for (T, B, H) in shapes:
        for dtype in dtypes:
            x = torch.randn(T, B, H, device=device, dtype=dtype)
            torch.manual_seed(0)
            mts = [tsrnn.timescales.inverse_gamma_quantiles(H, 0.56)]
            models = {"torch.nn.LSTM": torch.nn.LSTM(H, H)}
            for path in ["auto", *tsrnn.backend.paths_on("cuda", "recurrence"), "reference"]:  # by name
                models[f"MTS-LSTM {path}"] = tsrnn.LSTM(H, H, timescales=mts, backend=path)
                if path not in tsrnn.backend.REGISTRY or tsrnn.backend.REGISTRY[path].runs != "torch_lstm":
                    models[f"pLSTM {path}"] = tsrnn.PowerLawLSTM(H, H, backend=path)
            row = {"T": T, "B": B, "H": H, "dtype": str(dtype).replace("torch.", "")}
            for name, model in models.items():
                model = model.to(device=device, dtype=dtype)
                before = set(tsrnn.backend.tuned_choices())

                def step(model=model, x=x):
                    model(x)[0].float().sum().backward()

                try:
                    row[name] = measure(step, repeats)
                except (RuntimeError, ValueError) as exc:  # a path this shape or build cannot take: recorded
                    row[name] = None
                    row.setdefault("errors", {})[name] = str(exc)[:200]
                chosen = {k: v for k, v in tsrnn.backend.tuned_choices().items() if k not in before}
                if chosen:
                    row.setdefault("auto chose", {})[name] = sorted(set(chosen.values()))
            step, error = flashrnn_step(B, T, H, dtype, device) if flashrnn else (None, "skipped (--no-flashrnn)")
            row["FlashRNN fused LSTM"] = measure(step, repeats) if step else None
            if error:
                row["FlashRNN error"] = error
            rows.append(row)
    return rows


def scan_bandwidth(device, size, repeats) -> dict:
    """Triton linear scan (fwd) bytes moved per second against a device copy of the same bytes."""
    import torch

    from tsrnn import functional

    measure = timer(device)
    T, N = size
    a, u = torch.rand(T, N, device=device), torch.randn(T, N, device=device)
    scan_ms = measure(lambda: functional.linear_scan(a, u, backend="triton"), repeats)
    src = torch.empty(3 * T * N, device=device)
    copy_ms = measure(lambda: src.clone(), repeats)
    moved = 3 * T * N * 4  # read a, u; write x
    return {"T": T, "N": N, "scan_ms": scan_ms, "copy_ms": copy_ms, "scan_GBps": moved / scan_ms / 1e6,
            "copy_GBps": 2 * moved / copy_ms / 1e6, "fraction_of_copy": (moved / scan_ms) / (2 * moved / copy_ms)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--wheels", help="directory of wheels to install first (flashrnn, triton, ...)")
    p.add_argument("--build", action="store_true", help="build tsrnn with its CUDA extension first")
    p.add_argument("--json", default="gpu_report.json")
    p.add_argument("--device", default="cuda")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--quick", action="store_true", help="tiny shapes (a smoke test of this script)")
    p.add_argument("--no-flashrnn", action="store_true",
                   help="skip FlashRNN (its first call per shape compiles CUDA code: minutes)")
    args = p.parse_args(argv)
    if args.wheels:
        install(args.wheels)
    if args.build:
        build()
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernels import
    import torch

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import lengths_vs_padded  # bench/, beside this script

    import tsrnn
    from tsrnn import testing

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("gpu_report: no CUDA device; run with --device cpu --quick for a smoke test", file=sys.stderr)
        return 2
    shapes = [(5, 2, 8)] if args.quick else [(70, 20, 400), (70, 80, 400), (70, 20, 1150), (70, 80, 1150),
                                              (1000, 128, 128)]
    dtypes = [torch.float32] if args.quick else [torch.float32, torch.bfloat16]
    repeats = 2 if args.quick else args.repeats
    report = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "versions": {"torch": torch.__version__, "tsrnn": tsrnn.__version__, "python": platform.python_version(),
                     "cuda": torch.version.cuda},
        "extensions": {"tsrnn._C": tsrnn.backend.LOAD_ERROR or "loaded",
                       "tsrnn._cuda": tsrnn.backend.CUDA_LOAD_ERROR or "loaded"},
        "tests": run_tests(args.quick) if device.type == "cuda" else [],
        "checks": check_scan(device, testing.QUICK_SCAN_SHAPES if args.quick else
                             testing.SCAN_SHAPES + testing.TRITON_SCAN_SHAPES + testing.GPU_SCAN_SHAPES)
        + check_recurrences(device, testing.QUICK_SHAPES if args.quick else testing.SHAPES + testing.TARGET_SHAPES,
                            [torch.float32] if args.quick else [torch.float32, torch.bfloat16])
        + check_recurrences(device, testing.QUICK_SHAPES if args.quick else testing.LENGTH_SHAPES,
                            [torch.float32], testing.LENGTH_CASES[:1] if args.quick else testing.LENGTH_CASES),
        "recurrences_fwd_bwd_ms": time_recurrences(device, shapes, dtypes, repeats, not args.no_flashrnn),
        "linear_scan": scan_bandwidth(device, (64, 256) if args.quick else (4096, 65536), repeats),
        "lengths_vs_padded": lengths_vs_padded.measure(
            device, ["auto", *tsrnn.backend.paths_on(device.type, "recurrence")], repeats,
            {"quick T=6 B=3 I=2 H=4": (6, 3, 2, 4, 2)} if args.quick else lengths_vs_padded.SHAPES),
    }
    report["auto_choices"] = tsrnn.backend.tuned_choices()  # per call key
    report["auto_verdicts"] = tsrnn.backend.verdicts()  # each candidate checked against the trusted path
    with open(args.json, "w") as f:
        json.dump(report, f, indent=2)
    print(f"{report['device']}, torch {torch.__version__}")
    print(f"extensions: {report['extensions']}")
    for row in report["tests"]:
        print(f"{row['run']}: {'ok' if row['ok'] else 'FAILED'}: {row['summary']}")
    for row in report["checks"]:
        err = "n/a" if row["worst"] is None else f"{row['worst']:.2f}"
        print(f"check {row['kernel']} {row['shape']} {row['dtype']}: worst error / tolerance {err} "
              f"{'ok' if row['ok'] else 'MISMATCH ' + row['failures']}")
    skip = ("T", "B", "H", "dtype", "FlashRNN error", "errors", "auto chose")
    names = [k for k in report["recurrences_fwd_bwd_ms"][0] if k not in skip]
    for row in report["recurrences_fwd_bwd_ms"]:  # one block per shape: a row per path, in ms
        print(f"T={row['T']} B={row['B']} H={row['H']} {row['dtype']}: fwd+bwd ms")
        for n in names:
            print(f"  {n:<28}" + (f"{row[n]:10.3f}" if row[n] is not None else "       n/a")
                  + (f"  (chose {', '.join(row['auto chose'][n])})" if n in row.get("auto chose", {}) else ""))
    scan = report["linear_scan"]
    print(f"linear_scan T={scan['T']} N={scan['N']}: {scan['scan_GBps']:.1f} GB/s, "
          f"{100 * scan['fraction_of_copy']:.0f}% of copy ({scan['copy_GBps']:.1f} GB/s)")
    for r in report["lengths_vs_padded"]:
        print(f"lengths vs padded {r['shape']} {r['cell']} {r['path']}: padded {r['padded_ms']:.2f} ms, lengths "
              f"{r['lengths_ms']:.2f} ms, speed-up {r['speedup']:.2f} (target {r['target']:.2f}, real steps "
              f"{r['real_fraction']:.3f})")
    dropped = {key: verdict for key, verdict in report["auto_verdicts"].items() if verdict != "agrees"}
    print(f"auto verified {len(report['auto_verdicts'])} (shape, path) pairs; dropped {len(dropped)}")
    for key, verdict in dropped.items():
        print(f"  DROPPED {key}: {verdict}")
    print(f"wrote {args.json}")
    return 0 if all(r["ok"] for r in report["checks"] + report["tests"]) else 1


if __name__ == "__main__":
    sys.exit(main())
