"""One call on a GPU machine: check every kernel, time everything, record it (SPEC §7).

    python bench/gpu_report.py [--wheels DIR] [--json gpu_report.json] [--device cuda] [--quick]

1. Installs what ``--wheels DIR`` holds (``pip install --no-index --find-links DIR``, e.g. the
   flashrnn and triton wheels), since the GPU machine has no network.
2. Checks every Triton kernel against its reference on the device, forward and backward.
3. Times forward+backward (CUDA events, median of ``--repeats`` after warm-up) at the SPEC §7
   shapes in float32 and bf16: torch.nn.LSTM (cuDNN), tsrnn.LSTM with MTS timescales and
   tsrnn.PowerLawLSTM (backend "auto": the fastest correct path the build has), their reference
   loops, and FlashRNN's fused LSTM when it imports; and the Triton linear scan against the
   device's measured copy bandwidth.
4. Prints a table and writes JSON with the device, versions and every number.

``--quick --device cpu`` runs the same code on tiny shapes (Triton through its interpreter): the
test suite does that so this script keeps working between GPU sessions.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time


def install(wheels: str) -> None:
    files = [os.path.join(wheels, f) for f in sorted(os.listdir(wheels)) if f.endswith(".whl")]
    if files:
        subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--find-links", wheels, *files],
                       check=True)


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


def check_triton(device, shapes) -> list[dict]:
    """Every Triton kernel against its reference, forward and backward."""
    import torch

    from tsrnn import functional, reference

    rows = []
    for T, N in shapes:
        g = torch.Generator().manual_seed(T)
        a, u = torch.rand(T, N, generator=g), torch.randn(T, N, generator=g)
        fa, fu = a.to(device).clone().requires_grad_(), u.to(device).clone().requires_grad_()
        ra, ru = a.detach().double().requires_grad_(), u.detach().double().requires_grad_()
        x, x_ref = functional.linear_scan(fa, fu, backend="triton"), reference.linear_scan(ra, ru)
        (x.double() ** 2).sum().backward()
        (x_ref ** 2).sum().backward()
        err = max((x.double().cpu() - x_ref).abs().max().item(), (fa.grad.double().cpu() - ra.grad).abs().max().item(),
                  (fu.grad.double().cpu() - ru.grad).abs().max().item())
        rows.append({"kernel": "linear_scan", "T": T, "N": N, "max_abs_err": err, "ok": err < 1e-3})
    if device.type == "cuda":  # the recurrence kernels serve the compiled ops on CUDA tensors only
        rows += check_recurrences(device)
    return rows


def check_recurrences(device, T=70, B=20, H=400) -> list[dict]:
    """The fused recurrences (backend "auto" on CUDA) against the reference loops, fwd and bwd."""
    import torch

    from tsrnn import functional, reference
    from tsrnn.selftest import layer_args

    rows = []
    for cell in ("lstm", "plstm_coupled", "plstm_separate"):
        args = layer_args(cell, T, B, H, H, dt=cell != "lstm")
        fn, ref = (functional.lstm, reference.lstm) if cell == "lstm" else (functional.plstm, reference.plstm)
        names = [k for k, v in args.items() if isinstance(v, torch.Tensor) and k != "dt"]
        fast = {k: (v.to(device, torch.float32).requires_grad_() if k in names else
                    v.to(device, torch.float32) if isinstance(v, torch.Tensor) else v) for k, v in args.items()}
        slow = {k: (v.clone().requires_grad_() if k in names else v) for k, v in args.items()}
        out, _ = fn(**fast)
        out_ref = ref(**slow)[0]
        out.double().sum().backward()
        out_ref.sum().backward()
        scale = out_ref.abs().max().item()
        err = max([(out.double().cpu() - out_ref).abs().max().item() / scale] +
                  [(fast[k].grad.double().cpu() - slow[k].grad).abs().max().item() /
                   max(1.0, slow[k].grad.abs().max().item()) for k in names])
        rows.append({"kernel": f"recurrence {cell}", "T": T, "N": H, "max_abs_err": err, "ok": err < 1e-3})
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


def time_recurrences(device, shapes, dtypes, repeats) -> list[dict]:
    import torch

    import tsrnn

    measure = timer(device)
    rows = []
    for (T, B, H) in shapes:
        for dtype in dtypes:
            x = torch.randn(T, B, H, device=device, dtype=dtype)
            torch.manual_seed(0)
            mts = [tsrnn.timescales.inverse_gamma_quantiles(H, 0.56)]
            models = {
                "torch.nn.LSTM": torch.nn.LSTM(H, H),
                "tsrnn MTS-LSTM (auto)": tsrnn.LSTM(H, H, timescales=mts),
                "tsrnn pLSTM (auto)": tsrnn.PowerLawLSTM(H, H),
                "MTS-LSTM reference loop": tsrnn.LSTM(H, H, timescales=mts, backend="reference"),
                "pLSTM reference loop": tsrnn.PowerLawLSTM(H, H, backend="reference"),
            }
            row = {"T": T, "B": B, "H": H, "dtype": str(dtype).replace("torch.", "")}
            for name, model in models.items():
                model = model.to(device=device, dtype=dtype)

                def step(model=model):
                    model(x)[0].float().sum().backward()

                row[name] = measure(step, repeats)
            step, error = flashrnn_step(B, T, H, dtype, device)
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
    p.add_argument("--json", default="gpu_report.json")
    p.add_argument("--device", default="cuda")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--quick", action="store_true", help="tiny shapes (a smoke test of this script)")
    args = p.parse_args(argv)
    if args.wheels:
        install(args.wheels)
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernels import
    import torch

    import tsrnn

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
        "triton_checks": check_triton(device, [(1, 7), (37, 70)] + ([] if args.quick else [(1000, 513)])),
        "recurrences_fwd_bwd_ms": time_recurrences(device, shapes, dtypes, repeats),
        "linear_scan": scan_bandwidth(device, (64, 256) if args.quick else (4096, 65536), repeats),
    }
    with open(args.json, "w") as f:
        json.dump(report, f, indent=2)
    print(f"{report['device']}, torch {torch.__version__}")
    for row in report["triton_checks"]:
        print(f"check {row['kernel']} T={row['T']} N={row['N']}: max err {row['max_abs_err']:.1e} "
              f"{'ok' if row['ok'] else 'MISMATCH'}")
    names = [k for k in report["recurrences_fwd_bwd_ms"][0] if k not in ("T", "B", "H", "dtype", "FlashRNN error")]
    print(f"{'T':>5}{'B':>5}{'H':>6}{'dtype':>10}" + "".join(f"{n:>25}" for n in names))
    for row in report["recurrences_fwd_bwd_ms"]:
        cells = "".join(f"{row[n]:>23.3f}ms" if row[n] is not None else f"{'n/a':>25}" for n in names)
        print(f"{row['T']:>5}{row['B']:>5}{row['H']:>6}{row['dtype']:>10}{cells}")
    scan = report["linear_scan"]
    print(f"linear_scan T={scan['T']} N={scan['N']}: {scan['scan_GBps']:.1f} GB/s, "
          f"{100 * scan['fraction_of_copy']:.0f}% of copy ({scan['copy_GBps']:.1f} GB/s)")
    print(f"wrote {args.json}")
    return 0 if all(r["ok"] for r in report["triton_checks"]) else 1


if __name__ == "__main__":
    sys.exit(main())
