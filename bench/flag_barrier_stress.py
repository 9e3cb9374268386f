"""The grid-resident kernel's flag barrier under load: many launches, each compared bit for bit.

The SIMT emulation of tests/simt runs the kernel's source with sequentially consistent memory, so a
missing fence (a release or acquire the barrier gets wrong) cannot show there; this job is where
it would. For each shape, cell and precision, the layer on the path "cuda_grid" is first checked
against the float64 reference (tsrnn.testing.compare), then run forward+backward ``launches``
times on the same inputs: the kernel is deterministic (fixed reduction order, no atomics on data),
so every launch's output and gradients must equal the first's bit for bit; a launch that reads a
value before its writer published it differs (or holds NaN). The shapes make single blocks late:
H = 1150 at the plan's choice, a batch in several chunks (cluster barriers between them) and
uneven units and K slices (H = 37, B = 17), and packed rows whose count changes every step.
bench/gpu_report.py runs ``stress`` as its job "stress".

On the CPU (``--quick --device cpu``, in CI) the same code runs the emulated kernel (4 SMs) on one
tiny shape, a few launches: it keeps this script working; it proves nothing about fences.
"""
from __future__ import annotations

import os
import sys
import time

import torch

from tsrnn import testing

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

# (cell, T, B, H, lengths or None) on a GPU; launches each.
SHAPES = [("plstm_coupled", 70, 80, 1150, None), ("lstm", 70, 20, 1150, None), ("plstm_separate", 50, 17, 37, None),
          ("lstm", 40, 6, 300, "unsorted")]
QUICK_SHAPES = [("lstm", 3, 5, 6, None)]
LAUNCHES, QUICK_LAUNCHES = 100, 3


def _run(cell: str, args: dict, path: str) -> list[torch.Tensor]:
    """The output, final states and every input's gradient of one forward+backward of the layer
    (tsrnn.testing's layer and loss) on ``path``."""
    names = testing.differentiable(args)
    ours = {k: (v.detach().requires_grad_(True) if k in names else v) for k, v in args.items()}
    out, state = testing.run_layer(cell, ours, path)
    grads = torch.autograd.grad(testing.loss_of(out, state), [ours[k] for k in names])
    return [out.detach(), *(s.detach() for s in state), *grads]


def stress(device: str, quick: bool, progress=lambda rows: None) -> list[dict]:
    """A row per (shape, precision): the check, the launches and how many differed from the first."""
    device = torch.device(device)
    rows = []
    with _path(device) as (path, precisions):
        for (cell, T, B, H, lengths_case), precision in ((s, p) for s in (QUICK_SHAPES if quick else SHAPES)
                                                        for p in precisions):
            dtype = torch.bfloat16 if precision == "bf16" and device.type == "cuda" else torch.float32
            row = {"cell": cell, "T": T, "B": B, "H": H, "lengths": lengths_case, "precision": precision}
            rows.append(row)
            try:
                check = testing.compare(path, cell, (T, B, H, H), dtype, device, dt=cell != "lstm",
                                        lengths=lengths_case, products=precision)
                row.update(ok=check.ok, worst=max(check.worst(False), check.worst(True)))
                args = testing.layer_args(cell, T, B, H, H, dt=cell != "lstm")
                if lengths_case:
                    args["lengths"] = testing.lengths_for(lengths_case, T, B)
                names = testing.differentiable(args)
                args = {k: (v.to(device, dtype) if k in names else v.to(device) if isinstance(v, torch.Tensor) else v)
                        for k, v in args.items()}
                first, differing, started = _run(cell, args, path), 0, time.perf_counter()
                launches = QUICK_LAUNCHES if quick else LAUNCHES
                for _ in range(launches):
                    again = _run(cell, args, path)
                    differing += any(not torch.equal(a, b) for a, b in zip(first, again))
                row.update(launches=launches, differing=differing, seconds=time.perf_counter() - started,
                           nan=any(bool(t.isnan().any()) for t in first))
                row["ok"] = row["ok"] and differing == 0 and not row["nan"]
            except Exception as exc:  # noqa: BLE001  (reported in the row, not fatal to the job)
                row.update(ok=False, launches=0, differing=0, failures=f"{type(exc).__name__}: {exc}"[:300])
            progress(rows)
    return rows


class _path:
    """The path and precisions: on a GPU "cuda_grid" in TF32 (torch's default) and bf16; on the CPU
    the emulated kernel of tests/simt (TF32 products) on 4 SMs."""

    def __init__(self, device: torch.device):
        self.device, self.registered = device, None

    def __enter__(self):
        if self.device.type == "cuda":
            return "cuda_grid", ("tf32", "bf16")
        from simt import build, cluster, emulation

        emulation.load(build.library())
        emulation.emulate(4, 0)
        self.registered = cluster.registered("tf32", "grid")
        return self.registered.__enter__(), ("tf32",)

    def __exit__(self, *exc):
        if self.registered is not None:
            self.registered.__exit__(*exc)
