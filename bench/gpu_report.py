"""One call on a GPU machine: build, check every kernel, time everything, record it.

    python bench/gpu_report.py [--wheels DIR] [--build] [--keep-build DIR] [--json gpu_report.json]
                               [--device cuda] [--quick] [--deadline SECONDS] [--skip JOB ...]
                               [--only JOB ...] [--repeats N]

1. Installs what ``--wheels DIR`` holds (``pip install --no-index --find-links DIR``, e.g. the
   flashrnn wheel), since the GPU machine has no network; with ``--build``, builds tsrnn with its
   CUDA extension (``TSRNN_CUDA=1 pip install --no-build-isolation -e .``, every core).
2. Runs the GPU probe first (bench/gpu_probe.py: the tensor-core kernels' phase trace and removal
   ladder, torch.profiler, ncu, microbenchmarks) into ``probe/`` beside the JSON, within the job
   limit LIMITS["probe"], so a call cut short still brings back where a step's time goes.
   Then times forward+backward (CUDA events, median of ``--repeats`` after warm-up) at the target
   shapes (T=70, B in {20, 80}, H in {400, 1150}; T=1000, B=128, H=128) in float32 and bf16:
   torch.nn.LSTM (cuDNN, as users run it: TF32 per torch's default; and in float32 with TF32
   off, as tsrnn's cudnn path runs), tsrnn.LSTM with MTS timescales and tsrnn.PowerLawLSTM on "auto" (recording the path it
   measured fastest) and on every GPU path of the registry by name (``tsrnn.backend.paths_on``),
   and their reference loops; the Triton linear scan against the device's measured copy
   bandwidth; ``lengths=`` against the same batch padded on every path
   (bench/lengths_vs_padded.py); FlashRNN's fused LSTM, with the input projection as a
   torch.nn.Linear in front so that it does the work of the others, beside cuDNN in the same job;
   whole training steps captured as CUDA graphs on every CUDA path at (70, 20, 400), each replay
   checked against eager steps and timed beside them (bench/cuda_graphs.py);
   the tensor-core kernels' sweep (bench/tensor_core_sweep.py: every configuration x TF32 / bf16
   their plans accept, the cluster-resident kernel at H = 400 and 128, the grid-resident one at
   H = 1150, for the LSTM and the pLSTM, each checked against float64 before it is timed, beside
   cuDNN in the same job, with the cost model's prediction and the plan's own choice); the flag
   barrier's stress job (bench/flag_barrier_stress.py: repeated launches of the grid kernel, each
   bit-compared with the first, the first checked against float64).
3. Runs the GPU tests (``GPU_TESTS``, with pytest-xdist on ``PYTEST_WORKERS`` workers where it is installed), then
   one job per GPU path that checks it against the float64 reference through ``tsrnn.testing``
   (the tests' table of cells x shapes and the timed shapes, float32 and bf16, forward and
   backward; with each of its ``LENGTH_CASES``) and the Triton linear scan on the tests' scan
   shapes and a long one, ``tsrnn selftest``, and the CUDA tests again under compute-sanitizer
   (memcheck, racecheck, and synccheck for the tensor-core kernels' block and cluster barriers). ``plan`` gives the order: what the last GPU run left to learn first
   (bench/RESULTS.md), then the timings and the rest.
4. Prints a table and writes JSON with the device, versions and every number; the JSON and the
   jobs' log (``<json>.log``) are rewritten after every job.

Every job is a process of its own with a time limit (a CUDA fault in one path ends that job, not
the others), run one at a time, and ``--deadline`` bounds the whole run: a job that would start
past it is recorded as skipped. ``--quick --device cpu`` runs the same code on tiny shapes (Triton through its
interpreter): the test suite does that so this script keeps working between GPU sessions.
"""
from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import timer  # noqa: E402  (bench/, beside this script)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # tsrnn from this tree: an editable install made by --build is not on this process's path
SCRIPT = os.path.abspath(__file__)
# The pytest runs of step 3 (tests/integration/test_gpu_report.py checks that every file exists and that each
# run collects tests, so the list cannot name a deleted file): the GPU tests, then the CUDA ones
# that compute-sanitizer repeats (its tools slow a kernel ~100x: a few shapes).
RECURRENCE = "tests/kernels/recurrence"
GPU_TESTS = [f"{RECURRENCE}/test_cuda.py", f"{RECURRENCE}/test_paths.py", f"{RECURRENCE}/test_triton_kernels.py",
             "tests/kernels/linear_scan/test_triton_scan.py", "tests/unit/test_backend.py", f"{RECURRENCE}/test_lengths.py",
             f"{RECURRENCE}/test_autocast.py", f"{RECURRENCE}/test_double_backward.py", f"{RECURRENCE}/test_cudnn_tf32.py",
             "tests/unit/test_modules.py::test_device_and_dtype_place_every_parameter_and_buffer",
             "tests/kernels/gemm/test_tensor_core_gemm.py", f"{RECURRENCE}/test_cuda_graphs.py"]
# The GPU tests are small launches and Python: on the first GPU run 4 workers took 211 s with 12 of
# the machine's 16 cores idle.
PYTEST_WORKERS = 12
SANITIZED_TESTS = [f"{RECURRENCE}/test_cuda.py", "-k",
                   "forward_without_save or (tensor_core and 37)"]
# (T, B, H) timed on a GPU, FlashRNN's in this order (its first call of a shape compiles for minutes).
TIMED_SHAPES = [(70, 20, 400), (70, 80, 400), (70, 20, 1150), (70, 80, 1150), (1000, 128, 128)]
FLASHRNN_SHAPES = [(1000, 128, 128), (70, 20, 400), (70, 80, 400), (70, 20, 1150), (70, 80, 1150)]
QUICK_SHAPE = (5, 2, 8)
# Seconds each job may take at most (the deadline may give it less).
LIMITS = {"probe": 390, "throw": 150, "checks": 300, "pytest": 300, "selftest": 120, "memcheck": 300, "racecheck": 300, "timings": 90,
          "scan": 60, "lengths": 150, "flashrnn": 300, "sweep": 300, "stress": 240, "synccheck": 300,
          "graphs": 150}
SHORTEST_JOB = 5  # seconds: a job left less than this by the deadlines is skipped


def install(wheels: str) -> None:
    """The wheels in ``wheels``, without dependencies; a failed install is reported, not fatal (the
    jobs that need a wheel record why they could not run)."""
    if not os.path.isdir(wheels):  # a folder left behind must not end the call its machine was started for
        print(f"gpu_report: --wheels {wheels} is not a folder: nothing installed", flush=True)
        return
    files = [os.path.join(wheels, f) for f in sorted(os.listdir(wheels)) if f.endswith(".whl")]
    if files and subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--find-links",
                                 wheels, *files]).returncode:
        print(f"gpu_report: installing {files} failed", flush=True)


def build() -> str:
    """Editable install with the CUDA extension, on every core; --no-deps and --no-index: the GPU
    machine has torch, numpy, scipy and tqdm already and no package index. Returns how it went: a
    failed build still leaves the Triton paths and the reference to check."""
    started = time.monotonic()
    env = dict(os.environ, TSRNN_CUDA="1", MAX_JOBS=str(os.cpu_count() or 1))
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--no-index",
                           "-e", ROOT], env=env)
    outcome = f"{'built' if done.returncode == 0 else f'FAILED (pip exit {done.returncode})'} in " \
              f"{time.monotonic() - started:.0f} s"
    print(f"[{time.strftime('%H:%M:%S')}] {outcome}", flush=True)
    return outcome


def check_scan(device, shapes) -> list[dict]:
    """The GPU linear scans (the Triton one) against their reference, forward and backward (float32)."""
    import torch

    from tsrnn import backend, testing

    rows = []
    for path in backend.paths_on("cuda", "linear_scan"):
        for shape in shapes:
            rows.append(_checked({"kernel": f"linear_scan {path}", "shape": list(shape), "dtype": "float32"},
                                 lambda: testing.compare_scan(path, shape, torch.float32, device)))
    return rows


def check_recurrences(device, paths, shapes, dtypes, lengths=(None,), rows=None, progress=lambda rows: None):
    """Each of ``paths`` that runs on the device, against the float64 reference (tsrnn.testing),
    padded or with each case of ``lengths`` (tsrnn.testing.LENGTH_CASES): a row each, appended to
    ``rows`` (returned), ``progress(rows)`` after each."""
    from tsrnn import testing
    from tsrnn.ops.recurrence import cells

    rows = [] if rows is None else rows
    for path in paths:
        for cell in cells.CELLS:
            for shape, dtype, case in itertools.product(shapes, dtypes, lengths):
                if testing.why_not(path, cell, shape, dtype, device):
                    continue
                row = {"kernel": f"{cell} {path}" + (f" lengths {case}" if case else ""), "shape": list(shape),
                       "dtype": str(dtype).replace("torch.", "")}
                rows.append(_checked(row, lambda: testing.compare(path, cell, shape, dtype, device,
                                                                  dt=cells.get(cell).step_input is not None, lengths=case)))
                progress(rows)
    return rows


def _checked(row, compare):
    """``row`` with the result of ``compare()`` (a tsrnn.testing.Comparison): its worst error as a
    fraction of its bound, whether it passed and its failures; an exception makes a failing row (a
    failing path is reported, not fatal)."""
    try:
        result = compare()
        return {**row, "worst": max(result.worst(False), result.worst(True)), "ok": result.ok,
                "failures": result.failures()}
    except Exception as exc:  # noqa: BLE001
        return {**row, "worst": None, "ok": False, "failures": f"{type(exc).__name__}: {exc}"[:300]}


def check_modules(device, paths, shapes, dtypes, rows, progress=lambda rows: None):
    """Each of ``paths`` on whole modules with torch.nn.LSTM's options (tsrnn.testing.MODULE_CASES:
    bidirectional, proj_size, lengths, packed) against the module on the reference loops: a row
    each, appended to ``rows`` (returned)."""
    from tsrnn import testing

    for path in paths:
        for (kind, bidirectional, proj, layout), shape, dtype in itertools.product(testing.MODULE_CASES, shapes,
                                                                                  dtypes):
            if testing.module_why_not(path, kind, shape, proj, dtype, device):
                continue
            row = {"kernel": f"module {kind}{' bidirectional' if bidirectional else ''}"
                             f"{f' proj {proj}' if proj else ''} {layout} {path}",
                   "shape": list(shape), "dtype": str(dtype).replace("torch.", "")}
            rows.append(_checked(row, lambda: testing.compare_module(path, kind, shape, dtype, bidirectional, proj,
                                                                     layout, device)))
            progress(rows)
    return rows


def flashrnn_step(x, H, dtype):
    """A fwd+bwd closure of FlashRNN's fused LSTM (one head of size H) behind the input projection
    x W^T (a torch.nn.Linear, as torch.nn.LSTM and tsrnn compute it inside), or the reason it
    cannot run."""
    try:
        import torch
        from flashrnn import flashrnn

        T, B, _ = x.shape
        projection = torch.nn.Linear(x.shape[-1], 4 * H, bias=False).to(x.device, dtype)
        R = (torch.randn(4, 1, H, H, device=x.device, dtype=dtype) / H ** 0.5).requires_grad_()
        b = torch.zeros(4, 1, H, device=x.device, dtype=dtype, requires_grad=True)
        name = {torch.float32: "float32", torch.bfloat16: "bfloat16"}[dtype]

        def step():
            Wx = projection(x.transpose(0, 1)).view(B, T, 4, 1, H)  # FlashRNN takes (B, T, gates, heads, D)
            h, _ = flashrnn(Wx, R, b, function="lstm", backend="cuda_fused", dtype=name)
            h.float().sum().backward()

        step()
        return step, None
    except Exception as exc:  # noqa: BLE001  (not installed, no CUDA, unsupported shape: recorded, not fatal)
        return None, f"{type(exc).__name__}: {exc}"[:300]


def predictions(device, shape, dtype) -> dict:
    """The tensor-core paths' plans at (T, B, H) and ``dtype`` on ``device`` and bench/cost_model.py's
    forward+backward milliseconds for them (None where the plan takes no configuration), by the
    timing row's names: {"MTS-LSTM cuda_grid": {"config": [...], "ms": ...}, ...}. On the CPU the
    plans are the SIMT emulation's (tests/simt) of the same source, on its emulated SM counts."""
    import torch

    from tsrnn.precision import products

    sys.path.insert(0, os.path.dirname(SCRIPT))
    import tensor_core_sweep as sweep  # bench/, beside this script: the sweep's plan and prediction

    T, B, H = shape
    precision = products(dtype, torch.device("cuda"))  # as a CUDA layer of this dtype runs
    out = {}
    for kernel, path in sweep.PATHS.items():
        for model, cell in (("MTS-LSTM", "lstm"), ("pLSTM", "plstm_coupled")):
            try:
                target = sweep.Target(torch.device(device), kernel)
                with sweep.forced(0, 0, kernel):  # the plan's own choice, as the timed layer makes it
                    config = target.config(cell, H, B, precision)
                out[f"{model} {path}"] = {"config": config, "ms": target.predicted_ms(T, B, H, cell, config, precision)
                                          if config[0] else None}
            except Exception as exc:  # noqa: BLE001  (no extension, no plan: said, and the timings go on)
                out[f"{model} {path}"] = {"config": None, "ms": None, "error": f"{type(exc).__name__}: {exc}"[:200]}
    return out


def time_recurrences(device, shape, dtypes, repeats, progress=lambda rows: None) -> list[dict]:
    """fwd+bwd ms of cuDNN, tsrnn on "auto" and on each GPU path, and the reference loops at one
    (T, B, H), with the cost model's prediction for each tensor-core path (``predictions``);
    ``progress(rows)`` after each model, so that a job stopped at its limit keeps what it measured."""
    import torch

    import tsrnn

    measure = timer(device)
    T, B, H = shape
    rows = []
    for dtype in dtypes:
        x = torch.randn(T, B, H, device=device, dtype=dtype)
        torch.manual_seed(0)
        mts = [tsrnn.memory.timescales.inverse_gamma_quantiles(H, 0.56)]
        models = {"torch.nn.LSTM": torch.nn.LSTM(H, H)}
        if dtype == torch.float32:  # like-for-like with tsrnn's cudnn path, which runs float32 with TF32 off
            models["torch.nn.LSTM TF32 off"] = torch.nn.LSTM(H, H)
        for path in ["auto", *tsrnn.backend.paths_on("cuda", "recurrence"), "reference"]:  # by name
            models[f"MTS-LSTM {path}"] = tsrnn.LSTM(H, H, timescales=mts, backend=path)
            if path not in tsrnn.backend.REGISTRY or tsrnn.backend.REGISTRY[path].kind != "torch_lstm":
                models[f"pLSTM {path}"] = tsrnn.PowerLawLSTM(H, H, backend=path)
        row = {"T": T, "B": B, "H": H, "dtype": str(dtype).replace("torch.", ""),
               "predicted": predictions(device, shape, dtype)}
        rows.append(row)
        for name, model in models.items():
            model = model.to(device=device, dtype=dtype)
            before = set(tsrnn.backend.tuned_choices())

            def step(model=model, x=x, tf32=not name.endswith("TF32 off")):
                with torch.backends.cudnn.flags(enabled=True, allow_tf32=tf32):
                    model(x)[0].float().sum().backward()

            try:
                row[name] = measure(step, repeats)
            except (RuntimeError, ValueError) as exc:  # a path this shape or build cannot take: recorded
                row[name] = None
                row.setdefault("errors", {})[name] = str(exc)[:200]
            chosen = {k: v for k, v in tsrnn.backend.tuned_choices().items() if k not in before}
            if chosen:
                row.setdefault("auto chose", {})[name] = sorted(set(chosen.values()))
            progress(rows)
    return rows


def time_flashrnn(device, shape, dtypes, repeats) -> list[dict]:
    """fwd+bwd ms of FlashRNN's fused LSTM (behind its input projection) and of cuDNN in the same job."""
    import torch

    measure = timer(device)
    T, B, H = shape
    rows = []
    for dtype in dtypes:
        x = torch.randn(T, B, H, device=device, dtype=dtype)
        lstm = torch.nn.LSTM(H, H).to(device, dtype)
        row = {"T": T, "B": B, "H": H, "dtype": str(dtype).replace("torch.", ""),
               "torch.nn.LSTM": measure(lambda: lstm(x)[0].float().sum().backward(), repeats)}
        started = time.perf_counter()
        step, error = flashrnn_step(x, H, dtype)
        row["FlashRNN first call s"] = round(time.perf_counter() - started, 1)  # its compile, when it compiles
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


def write_json(path: str, data) -> None:
    """``data`` to ``path`` whole or not at all (a job killed while writing leaves the last version)."""
    with open(path + ".tmp", "w") as f:
        json.dump(data, f, indent=2)
    os.replace(path + ".tmp", path)


def run_job(name: str, device_name: str, quick: bool, repeats: int, path: str) -> None:
    """One job of the report in this process: writes its part of the report to ``path``."""
    if device_name == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernels import
    import torch

    import tsrnn
    from tsrnn import testing

    device = torch.device(device_name)
    stage, _, part = name.partition(":")
    dtypes = [torch.float32] if quick else [torch.float32, torch.bfloat16]
    repeats = 2 if quick else repeats

    def saver(key):
        """A progress callback writing the rows so far: a job stopped at its limit keeps them."""
        return lambda rows: write_json(path, {key: rows, "auto_choices": tsrnn.backend.tuned_choices(),
                                              "auto_verdicts": tsrnn.backend.verdicts()})

    if stage == "checks" and part == "linear_scan":
        out = {"checks": check_scan(device, testing.QUICK_SCAN_SHAPES if quick else
                                    testing.SCAN_SHAPES + testing.TRITON_SCAN_SHAPES + testing.GPU_SCAN_SHAPES)}
    elif stage == "checks":
        paths = [part] if part else testing.LAYER_PATHS
        rows = check_recurrences(device, paths, testing.QUICK_SHAPES if quick else
                                 testing.SHAPES + testing.TARGET_SHAPES, dtypes, progress=saver("checks"))
        rows = check_recurrences(device, paths, testing.QUICK_SHAPES if quick else testing.LENGTH_SHAPES,
                                 [torch.float32], testing.LENGTH_CASES[:1] if quick else testing.LENGTH_CASES, rows,
                                 saver("checks"))
        out = {"checks": check_modules(device, paths, testing.MODULE_SHAPES[1:] if quick else testing.MODULE_SHAPES,
                                       dtypes, rows, saver("checks"))}
    elif stage == "timings":
        out = {"recurrences_fwd_bwd_ms": time_recurrences(device, tuple(map(int, part.split(","))), dtypes, repeats,
                                                          saver("recurrences_fwd_bwd_ms"))}
    elif stage == "flashrnn":
        out = {"flashrnn_fwd_bwd_ms": time_flashrnn(device, tuple(map(int, part.split(","))), dtypes[::-1], repeats)}
    elif stage == "sweep":
        sys.path.insert(0, os.path.dirname(SCRIPT))
        import tensor_core_sweep as sweep  # bench/, beside this script

        shapes, configs = (sweep.QUICK_SHAPES, sweep.QUICK_CONFIGS) if quick else (sweep.SHAPES, sweep.CONFIGS)
        rows = []
        for kernel in (part,) if part else ("grid", "cluster"):
            sweep.sweep(device, kernel, shapes[kernel], configs[kernel], ("tf32", "bf16"), timer(device), repeats, rows,
                        saver("tensor_core_sweep"))
        out = {"tensor_core_sweep": rows}
    elif stage == "stress":
        sys.path.insert(0, os.path.dirname(SCRIPT))
        import flag_barrier_stress  # bench/, beside this script

        out = {"flag_barrier_stress": flag_barrier_stress.stress(device, quick, saver("flag_barrier_stress"))}
    elif stage == "graphs":
        sys.path.insert(0, os.path.dirname(SCRIPT))
        import cuda_graphs  # bench/, beside this script

        out = {"cuda_graphs": cuda_graphs.run(device, QUICK_SHAPE if quick else cuda_graphs.SHAPE, repeats,
                                              progress=saver("cuda_graphs"))}
    elif stage == "scan":
        out = {"linear_scan": scan_bandwidth(device, (64, 256) if quick else (4096, 65536), repeats)}
    elif stage == "lengths":
        sys.path.insert(0, os.path.dirname(SCRIPT))
        import lengths_vs_padded  # bench/, beside this script

        out = {"lengths_vs_padded": lengths_vs_padded.measure(
            device, ["auto", *tsrnn.backend.paths_on(device.type, "recurrence")], repeats,
            {"quick T=6 B=3 I=2 H=4": (6, 3, 2, 4, 2)} if quick else lengths_vs_padded.SHAPES)}
    else:
        raise SystemExit(f"gpu_report: unknown job {name!r}")
    out["auto_choices"] = tsrnn.backend.tuned_choices()  # per call key
    out["auto_verdicts"] = tsrnn.backend.verdicts()  # each candidate checked against the trusted path
    write_json(path, out)


def probe_command(device_type: str, quick: bool, folder: str) -> list[str]:
    """bench/gpu_probe.py into ``folder`` (the runner adds the deadline its job's limit leaves)."""
    return [sys.executable, os.path.join(ROOT, "bench", "gpu_probe.py"), "--device", device_type, "--out", folder] + (
        ["--quick"] if quick else [])


def plan(device_type: str, quick: bool, tests: list[str] | None = None,
         probe_folder: str = "gpu_probe") -> list[tuple[str, list[str] | None]]:
    """The jobs in the order they run, one at a time: (name, command, or None for a job of this
    script), the probe (bench/gpu_probe.py, into ``probe_folder``) first: where a step's time goes
    is what the last GPU run left to learn. CUDA processes side by side share the GPU by time slices: on the first GPU run
    (bench/RESULTS.md) six of them slowed each other's small launches so much that no job
    finished, so nothing runs beside a job. The order: ``throw`` (the second run found there why
    the compiled operators' errors crashed the process, a static libstdc++; it stays first as a
    check of each machine's toolchain, 10-20 s), the GPU tests, the timings (with the TF32-off
    baseline), FlashRNN at one shape, the per-path checks, the rest. ``tests`` replaces GPU_TESTS
    in the pytest job (what an earlier call left failing)."""
    from tsrnn import backend, testing

    shapes = [QUICK_SHAPE] if quick else TIMED_SHAPES
    probe = [("probe", probe_command(device_type, quick, probe_folder))]
    timed = ([(f"timings:{','.join(map(str, s))}", None) for s in shapes] + [("graphs", None)]
             + [("sweep:grid", None), ("stress", None), ("sweep:cluster", None), ("scan", None)])
    if device_type == "cpu":  # one check job for every path: nothing here can fault a CUDA context
        return probe + [("checks", None)] + timed + [("lengths", None)]
    pytest_cmd = [sys.executable, "-m", "pytest", "-v", "-rfE", "--tb=short", "-p", "no:cacheprovider"]  # -v: each
    # test's name and outcome as it ends, also if the run is stopped at its limit
    if importlib.util.find_spec("xdist"):
        pytest_cmd += ["-n", str(PYTEST_WORKERS)]
    cuda_bin = os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin")
    flashrnn = [(f"flashrnn:{','.join(map(str, s))}", None) for s in ([QUICK_SHAPE] if quick else FLASHRNN_SHAPES)]
    return (probe + [("throw", throw_command(cuda_bin)), ("pytest", pytest_cmd + (tests or GPU_TESTS))] + timed + flashrnn[:1]
            + [(f"checks:{p}", None) for p in testing.LAYER_PATHS if p in backend.paths_on("cuda", "recurrence")]
            + [("checks:linear_scan", None), ("lengths", None), ("selftest", [sys.executable, "-m", "tsrnn", "selftest"])]
            + [(tool, [os.path.join(cuda_bin, "compute-sanitizer"), "--tool", tool, "--error-exitcode", "1",
                       sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *SANITIZED_TESTS])
               for tool in ("memcheck", "racecheck", "synccheck")]
            + flashrnn[1:])


# Argument checks of the compiled CPU and CUDA operators that fail. On the first GPU run every
# such error whose message formats a number crashed the process (segfault) and those of plain text
# raised: here torch's own error with numbers first (is it the process, or the extension?), then a
# plain-text one of tsrnn's (p missing) and one with numbers (state0 of a wrong shape). The C++
# runtime libraries mapped into the process are printed before the first call: a numeric message
# is built by the extension's inline stream code (c10::str) and handed to libc10 as a std::string,
# a plain one is not.
THROW = """
import os, torch, tsrnn
print({k: v for k, v in os.environ.items() if k.startswith(('LC_', 'LANG', 'LD_'))}, flush=True)
with open('/proc/self/maps') as maps:
    print('mapped:', sorted({l.split()[-1] for l in maps if any(n in l for n in ('libstdc++', 'libgcc_s', 'gomp'))}),
          flush=True)
try:
    torch.zeros(2, 3).view(4)
except RuntimeError as exc:
    print('torch raised:', exc, flush=True)
for device in ('cpu', 'cuda'):
    h0 = torch.zeros(2, 5, device=device)
    for cell, G, state0 in (('plstm_coupled', 3, torch.zeros(2, 2, 5, device=device)), ('lstm', 4, h0[None][:, :1])):
        xg, w = torch.zeros(2, 2, 5 * G, device=device), torch.zeros(5 * G, 5, device=device)
        try:
            torch.ops.tsrnn.recurrence_forward(cell, xg, w, h0, state0, None, None, [], False)
        except RuntimeError as exc:
            print(device, cell, 'raised:', str(exc).splitlines()[0], flush=True)
print('THROW finished', flush=True)
"""


def throw_command(cuda_bin: str) -> list[str]:
    """The compilers (``c++ --version``, $CXX's text where it is a script, and the one each
    extension records in its .comment) and the C++ runtime libraries the extensions link to, then
    ``THROW`` with the dynamic linker's bindings of the extensions' symbols outside torch (which
    library their C++ stream and locale calls bind to) and faulthandler. Only where it crashes (a
    crash costs device time, a clean run needs no more): ``THROW`` again with the compiler's own
    libstdc++ preloaded (does a library mismatch explain it?), a test that crashed there with
    pytest's plugins and without, and under cuda-gdb for the native stack where cuda-gdb is
    installed."""
    gdb = os.path.join(cuda_bin, "cuda-gdb")
    run = f'{gdb} -batch -ex "set startup-with-shell off" -ex run -ex bt --args' if os.path.exists(gdb) else ""
    crashed = "tests/kernels/recurrence/test_lengths.py::test_bad_batch_sizes_are_refused_by_the_operator"  # a worker died there
    python = f'"{sys.executable}"'
    script = (f'c++ --version | head -1; echo "CC=$CC CXX=$CXX LDFLAGS=$LDFLAGS"; '
              f'if [ "$(head -c 2 "${{CXX:-/dev/null}}")" = "#!" ]; then cat "$CXX"; fi; '  # a wrapper script's flags
              f'readelf -p .comment tsrnn/*.so | sort -u; '
              f'ldd tsrnn/*.so | grep -E "stdc|gcc_s|gomp|c10.so" | sort -u; '
              f'LD_DEBUG=bindings {python} -c "$THROW" 2>&1 | grep -E "binding file [^ ]*tsrnn" > /tmp/bindings; '
              f'echo "libraries the extensions bind to:"; grep -o " to [^ ]*" /tmp/bindings | sort | uniq -c; '
              f'grep -E "(ostream|ostringstream|locale|num_put|numpunct|_M_insert|torchCheckFail)" /tmp/bindings '
              f'| sed "s/^ *[0-9]*://" | sort -u | head -40; '
              f'{python} -X faulthandler -c "$THROW"; rc=$?; echo "THROW exit status $rc"; '
              f'if [ $rc -ne 0 ]; then '
              f'echo "again with the compiler libstdc++ preloaded: $(c++ -print-file-name=libstdc++.so.6)"; '
              f'LD_PRELOAD=$(c++ -print-file-name=libstdc++.so.6) {python} -X faulthandler -c "$THROW"; '
              f'echo "exit status $?"; '
              f'for plugins in "" PYTEST_DISABLE_PLUGIN_AUTOLOAD=1; do echo "pytest, ${{plugins:-plugins autoloaded}}:"; '
              f'env $plugins {python} -m pytest -q -p no:cacheprovider {crashed} 2>&1 | tail -3; done; '
              f'{run} {python} -X faulthandler -c "$THROW"; fi; exit $rc')
    return ["env", f"THROW={THROW}", "bash", "-c", script]


def keep_extensions(folder: str) -> None:
    """Copies the compiled extensions and their build record into ``folder``: a second call on a
    fresh GPU machine can carry them back into tsrnn/ instead of building again (40-50 s)."""
    import shutil

    os.makedirs(folder, exist_ok=True)
    package = os.path.join(ROOT, "tsrnn")
    for name in os.listdir(package):
        if name.endswith(".so") or name == "_built_with.py":
            shutil.copy2(os.path.join(package, name), folder)


class Runner:
    """Runs the jobs one at a time as processes with their time limits, under the run's deadline,
    and keeps their results, output and exit states."""

    def __init__(self, args, deadline: float | None):
        self.args, self.deadline = args, deadline
        self.parts, self.runs, self.jobs = [], [], []
        self.log_path = args.json + ".log"
        self.scratch = tempfile.mkdtemp(prefix="gpu_report_")
        open(self.log_path, "w").close()

    def run(self, name: str, cmd: list[str] | None) -> None:
        limit = LIMITS[name.partition(":")[0]]
        if self.deadline is not None:
            limit = min(limit, self.deadline - time.monotonic())
        if limit < SHORTEST_JOB:
            self.jobs.append({"job": name, "skipped": "past the deadline"})
            return
        part = os.path.join(self.scratch, name.replace(":", "_").replace(",", "_") + ".json")
        own = cmd is None
        if name == "probe":  # the probe returns what it gathered before the limit this job is given
            cmd = cmd + ["--deadline", str(max(SHORTEST_JOB, limit - 15))]
        if own:
            cmd = [sys.executable, SCRIPT, "--job", name, "--json", part, "--device", self.args.device,
                   "--repeats", str(self.args.repeats)] + (["--quick"] if self.args.quick else [])
        print(f"[{time.strftime('%H:%M:%S')}] start {name} (limit {limit:.0f} s)", flush=True)
        started = time.monotonic()
        with open(part + ".log", "w+", errors="replace") as log:
            try:
                proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            except OSError as exc:  # the command is missing (compute-sanitizer, cuda-gdb): this job fails alone
                log.write(f"gpu_report: could not start {cmd[0]}: {exc}\n")
                proc = None
            try:
                rc, timed_out = (127 if proc is None else proc.wait(timeout=limit)), False
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                rc, timed_out = proc.wait(), True
            log.seek(0)
            output = log.read()
        elapsed = time.monotonic() - started
        with open(self.log_path, "a") as log:
            log.write(f"===== {name}: rc {rc}, {elapsed:.0f} s{', stopped at its limit' if timed_out else ''}\n")
            log.write(output)
        self.jobs.append({"job": name, "rc": rc, "seconds": round(elapsed, 1), "timed_out": timed_out})
        print(f"[{time.strftime('%H:%M:%S')}] done {name}: rc {rc}, {elapsed:.0f} s"
              + (" (stopped at its limit)" if timed_out else ""), flush=True)
        if own and os.path.exists(part):  # whole (write_json); a stopped job leaves what it had measured
            with open(part) as f:
                self.parts.append(json.load(f))
        elif not own:
            lines = output.strip().splitlines()
            self.runs.append({"run": name, "ok": rc == 0 and not timed_out,
                              "summary": ("stopped at its limit | " if timed_out else "") + " | ".join(lines[-3:])[-500:]})


def merge(report: dict, parts: list[dict]) -> None:
    for key in ("checks", "recurrences_fwd_bwd_ms", "flashrnn_fwd_bwd_ms", "lengths_vs_padded", "tensor_core_sweep",
                "flag_barrier_stress", "cuda_graphs"):
        report[key] = [row for part in parts for row in part.get(key, [])]
    for key in ("auto_choices", "auto_verdicts"):
        report[key] = {k: v for part in parts for k, v in part.get(key, {}).items()}
    report["linear_scan"] = next((part["linear_scan"] for part in parts if "linear_scan" in part), None)


def print_summary(report: dict) -> None:
    print(f"{report['device']}, torch {report['versions']['torch']}")
    print(f"build: {report['build']}; extensions: {report['extensions']}")
    if "probe" in report:
        print(f"probe ({report['probe']['folder']}/probe.md): {report['probe']['parts']}")
    for row in report["jobs"]:
        if row.get("skipped") or row.get("rc") or row.get("timed_out"):
            print(f"job {row['job']}: {row}")
    for row in report["tests"]:
        print(f"{row['run']}: {'ok' if row['ok'] else 'FAILED'}: {row['summary']}")
    bad = [row for row in report["checks"] if not row["ok"]]
    print(f"checks: {len(report['checks']) - len(bad)} of {len(report['checks'])} within tolerance")
    for row in bad:
        err = "n/a" if row["worst"] is None else f"{row['worst']:.2f}"
        print(f"  MISMATCH {row['kernel']} {row['shape']} {row['dtype']}: worst error / tolerance {err} {row['failures']}")
    skip = ("T", "B", "H", "dtype", "errors", "auto chose", "FlashRNN error", "predicted")
    for row in report["recurrences_fwd_bwd_ms"] + report["flashrnn_fwd_bwd_ms"]:  # a block per shape, ms
        print(f"T={row['T']} B={row['B']} H={row['H']} {row['dtype']}: fwd+bwd ms")
        for n in (k for k in row if k not in skip):
            chose, predicted = row.get("auto chose", {}).get(n), row.get("predicted", {}).get(n)
            print(f"  {n:<28}" + (f"{row[n]:10.3f}" if row[n] is not None else "       n/a")
                  + (f"  (chose {', '.join(chose)})" if chose else "")
                  + (f"  (predicted {predicted['ms']:.3f}, plan {predicted['config']})" if predicted and predicted["ms"]
                     else "")
                  + (f"  {row['errors'][n][:100]}" if n in row.get("errors", {}) else ""))
        if row.get("FlashRNN error"):
            print(f"  FlashRNN: {row['FlashRNN error'][:200]}")
    for r in report["tensor_core_sweep"]:
        print(f"{r['kernel']} sweep T={r['T']} B={r['B']} H={r['H']} {r['cell']} {r['precision']}: torch.nn.LSTM "
              f"{r['torch.nn.LSTM ms']:.3f} ms; plan [cluster, tile|chunk, clusters, units, bytes fwd, bwd, (grid: the "
              f"backward's cluster, chunk, clusters, units)] {r['plan']}")
        for v in r["variants"]:
            timed = f"{v['ms']:.3f} ms = {v['vs_cudnn']:.2f}x cuDNN" if "ms" in v else v.get("failures", "not timed")
            print(f"  c={v['cluster']} tile|chunk={v['tile']}: {'ok' if v.get('ok') else 'MISMATCH'} {timed} "
                  f"(predicted {v['predicted_ms']:.3f} ms)")
    for r in report["flag_barrier_stress"]:
        print(f"flag barrier stress {r['cell']} T={r['T']} B={r['B']} H={r['H']} {r['precision']}: {r['launches']} "
              f"launches, {r['differing']} differ from the first, check {'ok' if r['ok'] else 'FAILED'}")
    for r in report["cuda_graphs"]:
        shown = {k: v for k, v in r.items() if k not in ("model", "path", "T", "B", "H")}
        print(f"CUDA graph {r['model']} {r['path']} T={r['T']} B={r['B']} H={r['H']}: {shown}")
    scan = report["linear_scan"]
    if scan:
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


def selected(jobs: list[tuple[str, list[str] | None]], skip: list[str], only: list[str] | None):
    """The jobs of ``jobs`` (``plan``'s) that ``--skip`` leaves: all of them in the plan's order, or
    with ``--only`` those it names in its order (a stage's jobs in the plan's). A name is a job's
    (``checks:cuda_grid``) or a stage's (``checks``); one that is neither is refused: a mistyped
    name would otherwise select nothing, or skip nothing, on the GPU."""
    stage = lambda name: name.partition(":")[0]  # noqa: E731
    unknown = sorted(n for n in {*skip, *(only or ())} if all(n not in (name, stage(name)) for name, _ in jobs))
    if unknown:
        raise SystemExit(f"gpu_report: no job or stage is named {', '.join(unknown)}; the plan's: "
                         + ", ".join(name for name, _ in jobs))
    left = [(name, cmd) for name, cmd in jobs if name not in skip and stage(name) not in skip]
    if only is None:
        return left
    chosen = [job for wanted in only for job in left if wanted in (job[0], stage(job[0]))]
    return list({name: (name, cmd) for name, cmd in chosen}.values())  # a job named twice runs once


def arguments(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--wheels", help="directory of wheels to install first (flashrnn, ...)")
    p.add_argument("--build", action="store_true", help="build tsrnn with its CUDA extension first")
    p.add_argument("--json", default="gpu_report.json")
    p.add_argument("--device", default="cuda")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--quick", action="store_true", help="tiny shapes (a smoke test of this script)")
    p.add_argument("--deadline", type=float, help="seconds from the start after which no job starts or runs on")
    p.add_argument("--skip", nargs="+", default=[], metavar="JOB",
                   help="jobs to leave out, by name or stage (pytest, memcheck, checks, timings, flashrnn, ...)")
    p.add_argument("--only", nargs="+", metavar="JOB", help="run these jobs alone, by name or stage (checks:cuda_grid, "
                   "memcheck, ...), in the order given; --skip still leaves out what it names")
    p.add_argument("--keep-build", metavar="DIR", help="copy the built extensions here (to carry to a later call)")
    p.add_argument("--tests", nargs="+", metavar="NODE", help="the pytest job runs these in place of GPU_TESTS "
                   "(what an earlier call left failing)")
    p.add_argument("--job", help=argparse.SUPPRESS)  # one job, in the process the report started for it
    args = p.parse_args(argv)
    stages = sorted({name for name in args.skip + (args.only or []) if name.partition(":")[0] not in LIMITS})
    if stages:  # refused before the build (``selected`` checks whole job names against the plan after it)
        p.error(f"no stage of the plan is named {', '.join(stages)}; the stages: {', '.join(LIMITS)}")
    return args


def main(argv=None) -> int:
    started = time.monotonic()
    args = arguments(argv)
    args.json = os.path.abspath(args.json)
    if args.job:
        run_job(args.job, args.device, args.quick, args.repeats, args.json)
        return 0
    os.makedirs(os.path.dirname(args.json), exist_ok=True)  # the JSON, its log and probe/ beside it
    if args.wheels:
        install(args.wheels)
    built = build() if args.build else "not asked (--build)"
    if args.keep_build:
        keep_extensions(args.keep_build)
    import torch

    import tsrnn

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("gpu_report: no CUDA device; run with --device cpu --quick for a smoke test", file=sys.stderr)
        return 2
    report = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "generation": 2,  # of the tensor-core kernels (bench/cost_model.py fits each measurement with its own)
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "versions": {"torch": torch.__version__, "tsrnn": tsrnn.__version__, "python": platform.python_version(),
                     "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
                     "triton": getattr(importlib.import_module("triton"), "__version__", None)
                     if importlib.util.find_spec("triton") else None},
        "build": built,
        "extensions": {"tsrnn._C": tsrnn.backend.LOAD_ERROR or "loaded",
                       "tsrnn._cuda": tsrnn.backend.CUDA_LOAD_ERROR or "loaded"},
    }
    probe_folder = os.path.join(os.path.dirname(args.json), "probe")
    jobs = selected(plan(device.type, args.quick, args.tests, probe_folder), args.skip, args.only)
    runner = Runner(args, None if args.deadline is None else started + args.deadline)

    def save():
        merge(report, runner.parts)
        probe_json = os.path.join(probe_folder, "probe.json")
        if os.path.exists(probe_json):
            with open(probe_json) as f:
                report["probe"] = {"folder": probe_folder,
                                   "parts": {k: v.get("status") for k, v in json.load(f)["parts"].items()}}
        report["tests"], report["jobs"] = runner.runs, runner.jobs
        write_json(args.json, report)

    for name, cmd in jobs:
        runner.run(name, cmd)
        save()
    print_summary(report)
    print(f"wrote {args.json} and {runner.log_path} in {time.monotonic() - started:.0f} s")
    failed = [j for j in runner.jobs if j.get("rc") or j.get("timed_out")]
    return 0 if not failed and all(r["ok"] for r in report["checks"] + report["tests"]) else 1


if __name__ == "__main__":
    sys.exit(main())
