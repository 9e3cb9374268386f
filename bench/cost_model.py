"""The fitted cost model of the tensor-core kernels' configurations, and the command that refits it.

Both kernels (csrc/recurrence/cuda/cluster_recurrence.cu, grid_recurrence.cu) pick their launch
configuration by this model: ``predict_ms`` here (the GPU report's sweep prints it beside each
measured time, bench/tensor_core_sweep.py) and the generated header csrc/recurrence/cuda/cost_model.h
(the plans) evaluate the same features with the same coefficients, kept in bench/cost_model.json.

The model of one forward+backward call of one layer, in microseconds::

    t = T * waves * (a_S * S + a_pairs * pairs + a_bar * barriers)   # the recurrent steps
      + T * a_L2 * L2                                                 # the grid kernel's L2 loads
      + a_gemm[precision] * T * B * G * H^2 + a_call                  # the GEMMs and the host

with every coefficient >= 0 and, per fwd+bwd step (both directions) of one block:

- ``S``: shared-memory wavefronts of the operand loads, bank conflicts included. The second
  generation of the kernels (``generation`` 2, since 2026-12-07) reads its operands with
  ``ldmatrix``: 8 x 16-byte rows a matrix, as many wavefronts as the most of its rows in one group
  of 4 banks (gcd(row pitch / 16 bytes, 8)). The grid kernel walks each warp's fragment stream
  (tensor_core.h's Stream: warp w the m-tiles w, w + 8, ..., each over the whole of K, the batch in
  groups of up to 4 n8 tiles): a fragment reads 2 matrices of B for each n8 tile of the group
  (rows padded by 16 bytes) and, unless it is among the warp's first 24 (held in registers for the
  whole sequence), 4 of A from its 512-byte slot (one wavefront a matrix). The cluster kernel pads its
  rows by 16 bytes (one wavefront a matrix) and cuts each product into segments (an m-tile of 16 of
  A's rows over one of ``parts`` parts of K, recurrence_config's last two numbers) dealt to the 8
  warps in turn (tensor_core.h's Split): a k-step of a segment reads 2 matrices of B for each n8
  tile of the batch tile, and 4 of A unless the warp holds them in registers (the first 8 k-steps
  of a warp's first 3 segments, loaded once before the time loop). A is row-major (the cluster
  backward keeps W^T). The first generation, measured on
  2026-11-28, used wmma: each ``load_matrix_sync`` of a 16 x 8-word fragment compiled to four
  scalar 32-bit loads a thread reading 8 rows of 4 consecutive words at the row pitch (a
  column-major A: 4 columns of 8 words, or for bf16 4 columns at twice the pitch of 4 words), as
  many wavefronts as the most distinct words one of the 32 banks holds. Each measurement is fitted
  with the generation it ran (the report's ``generation``, 1 where it has none); the header prices
  generation 2. S = sum over the step's products of m-tiles x n-tiles x k-steps x 4 x (wavefronts of
  an A load + of a B load).
- ``pairs``: the (unit, batch row) pairs one thread runs one after another in the cell, each
  waiting on its own global loads.
- ``barriers``: cluster barriers a step: in the grid kernel 2 (2 chunks - 1) in generation 1 (two
  per batch chunk and direction, but the first chunk's first) and 4 chunks in generation 2 (one
  more a direction: the cluster's barrier before its one flag arrival); in the cluster kernel 4 in
  generation 1 (two phases
  each direction) and none in generation 2, whose exchange is st.async pushes completing on
  mbarriers with relaxed handshakes: their cost has no term (nothing has measured it yet), so the
  model's sync cost of the cluster kernel is a lower bound until a GPU run refits it.
- ``L2`` (grid kernel): the serialized ``__ldcg`` loads a thread waits on reading its chunks of h
  and dz, per direction and chunk: in generation 1 one element a load, each consumed before the
  next issues, ceil(padded chunk rows x block width / 256 threads); in generation 2 vectors of V
  floats (4 where the row pitch, H or G H, is a multiple of 4, 2 where it is even, else 1) issued
  LOAD_BATCH at a time (slice_load.h), each batch priced as one serialized load:
  ceil(ceil(padded chunk rows x block width / V / 256) / LOAD_BATCH). That a batch of loads in
  flight costs what one load did is the model's assumption until a GPU run refits it.
- ``waves``: ceil(clusters / resident clusters) of the cluster kernel (1 for the grid kernel,
  whose launch is cooperative): the device's resident clusters of that size
  (cudaOccupancyMaxActiveClusters in the plan; here the H200's, read off the report's grid plans,
  which take as many clusters as are resident).
- The per-call terms (the input projection and weight-gradient GEMMs, 4 of 2 T B G H^2 flops,
  and the host's work) are the same for every configuration of a shape: they set the predicted
  times, not the plans' choice. bf16 GEMMs run on the tensor cores (``gemm_bf16``); TF32 ones ran
  as FP32 SIMT GEMMs on pre-rounded operands in generation 1 (``gemm_tf32``) and run as cuBLAS's
  TF32 tensor-core GEMMs in generation 2 (csrc/gemm/cuda/tensor_core_gemm.h), priced as bf16's at
  half the rate (twice the ``gemm_bf16`` units: Hopper's dense TF32 peak is half its bf16 peak),
  an assumption until a GPU run measures them.

The fit: nonnegative least squares (scipy.optimize.nnls) of the relative error, each row's
features divided by its measured time against a target of ones, i.e. minimizing the sum of
squared relative errors, so the short and the long calls weigh the same. The scalar float32 loop
(products "ieee") has no measurements: the plans rank it as TF32.

``python bench/cost_model.py --refit PATH/TO/gpu_report.json [MORE.json ...] [--write]`` fits the
model to the sweep rows of the reports (their "tensor_core_sweep") and to the kernel-alone rows of
any GPU probe's phase trace among them (bench/gpu_probe.py's probe.json), prints the median and worst
relative error (overall, per kernel, leaving each shape out in turn) and a per-row table;
``--write`` rewrites bench/cost_model.json and csrc/recurrence/cuda/cost_model.h.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JSON_PATH = Path("bench") / "cost_model.json"
HEADER_PATH = Path("csrc") / "recurrence" / "cuda" / "cost_model.h"
THREADS = 256  # threads of a block in both kernels (kThreads)
BANKS = 32
SMS = 132  # the H200's (and the H100 SXM's) multiprocessors
# The coefficients, in microseconds per unit of their feature (names as in the JSON).
STEP_TERMS = ("shared_wavefronts", "pairs", "barriers")  # times T x waves
TERMS = STEP_TERMS + ("l2_loads", "gemm_tf32", "gemm_bf16", "call")


def round_up(x: int, to: int) -> int:
    return -(-x // to) * to


def wavefronts(pitch: int, lines: int, width: int) -> int:
    """Wavefronts of one warp-wide load of ``lines`` runs of ``width`` consecutive 32-bit words,
    ``pitch`` words apart: the most distinct words one of the 32 banks holds."""
    banks: dict[int, set[int]] = {}
    for line in range(lines):
        for word in range(width):
            address = line * pitch + word
            banks.setdefault(address % BANKS, set()).add(address)
    return max(len(words) for words in banks.values())


def ldmatrix_wavefronts(pitch_bytes: int) -> int:
    """Wavefronts of one 8 x 8 matrix of an ldmatrix whose 8 rows of 16 bytes lie ``pitch_bytes``
    apart (a multiple of 16): the most rows in one group of 4 banks (16 bytes; 8 groups of the 32
    banks), i.e. gcd(pitch / 16, 8)."""
    return math.gcd(pitch_bytes // 16, 8)


GENERATIONS = (1, 2)  # of the tensor-core kernels: 1 as measured on 2026-11-28, 2 since 2026-12-07
WARPS, HELD_SEGMENTS, HELD_STEPS = 8, 3, 8  # tensor_core.h: warps a block, kHeldSegments, kHeldSteps
LOAD_BATCH = 8  # slice_load.h's kBatch: the grid kernel's loads a thread issues before it uses the first


def vector_floats(pitch: int) -> int:
    """Floats of one of the grid kernel's loads of a slice whose rows are ``pitch`` floats apart
    (slice_load.h's vector_width, the tensors' addresses 16-byte aligned)."""
    return 4 if pitch % 4 == 0 else 2 if pitch % 2 == 0 else 1


def segment_wavefronts(m_tiles: int, n_tiles: int, k_steps: int, parts: int, pitch_a: int, pitch_b: int,
                       item: int) -> int:
    """Shared-memory wavefronts of one block's product of [16 m_tiles][k_steps k-steps] x [k-steps]
    [8 n_tiles] in segments (the cluster kernel, generation 2): K cut into ``parts`` parts of
    ceil(k_steps / parts) k-steps (tensor_core.h's split()), segment s (m-tile s % m_tiles, part
    s // m_tiles) on warp s % 8; each k-step of a segment loads B's 2 n_tiles matrices and, unless
    held (the first HELD_STEPS k-steps of a warp's first HELD_SEGMENTS segments), A's 4."""
    length = -(-k_steps // parts)
    parts = -(-k_steps // length)
    a, b = ldmatrix_wavefronts(pitch_a * item), ldmatrix_wavefronts(pitch_b * item)
    total = 0
    for s in range(m_tiles * parts):
        first = s // m_tiles * length
        steps = min(k_steps, first + length) - first
        held = min(steps, HELD_STEPS) if s // WARPS < HELD_SEGMENTS else 0
        total += (steps - held) * 4 * a + steps * 2 * n_tiles * b
    return total


def product_wavefronts(m_tiles: int, n_tiles: int, inner: int, pitch_a: int, pitch_b: int, item: int,
                       transposed_a: bool) -> int:
    """Shared-memory wavefronts of one block's product of [16 m_tiles][inner] x [inner][16 n_tiles]
    in the first generation (wmma loads): A at row pitch ``pitch_a`` elements (column-major where
    ``transposed_a``), B column-major at ``pitch_b``, elements of ``item`` bytes (4: TF32, 2: bf16)."""
    k_step = 8 if item == 4 else 16  # elements of a k-step: 32 bytes of a row either way
    words_a, words_b = pitch_a * item // 4, pitch_b * item // 4
    if not transposed_a:
        load_a = wavefronts(words_a, 8, 4)
    elif item == 4:
        load_a = wavefronts(words_a, 4, 8)
    else:
        load_a = wavefronts(2 * words_a, 4, 4)
    load_b = wavefronts(words_b, 8, 4)
    return m_tiles * n_tiles * (inner // k_step) * 4 * (load_a + load_b)


def stream_wavefronts(m_tiles: int, k_steps: int, n_tiles: int, pitch_b: int) -> int:
    """Shared-memory wavefronts of one block's product by fragment streams (the grid kernel's second
    generation, tensor_core.h's stream_product): A [16 m_tiles][k_steps k-steps] over ``n_tiles`` n8
    tiles of B whose rows lie ``pitch_b`` bytes apart, in groups of up to 4 n8 tiles; each fragment
    2 matrices of B an n8 tile, and 4 of A beyond the warp's held ones."""
    b = ldmatrix_wavefronts(pitch_b)
    total = 0
    for warp in range(WARPS):
        length = (-(-(m_tiles - warp) // WARPS) if warp < m_tiles else 0) * k_steps
        unheld = length - min(length, HELD_SEGMENTS * HELD_STEPS)
        for first in range(0, n_tiles, 4):
            total += unheld * 4 + length * 2 * min(4, n_tiles - first) * b
    return total


def chunk_rows(batch: int, chunk: int) -> list[int]:
    """The grid kernel's chunks of the batch: rows of each."""
    return [min(chunk, batch - first) for first in range(0, batch, chunk)]


def grid_first_generation(B: int, H: int, gates: int, item: int, cluster: int, chunk: int, units: int) -> tuple:
    """(S, pairs, barriers, L2, chunks) of a first-generation grid step: one configuration for both
    directions, wmma loads, one element a serialized L2 load."""
    forward = (round_up(gates * units, 16), round_up(math.ceil(H / cluster), 16))  # (rows, width)
    backward = (round_up(units, 16), round_up(math.ceil(gates * H / cluster), 16))
    rows_of = chunk_rows(B, chunk)
    n_tiles = sum(math.ceil(rows / 16) for rows in rows_of)
    S = sum(product_wavefronts(rows // 16, n_tiles, width, width, width, item, False) for rows, width in (forward, backward))
    l2 = sum(math.ceil(round_up(rows, 16) * width / THREADS) for rows in rows_of for _, width in (forward, backward))
    return S, math.ceil(units * B / (cluster * THREADS)), 2 * (2 * len(rows_of) - 1), l2, len(rows_of)


def grid_direction(B: int, H: int, gates: int, item: int, forward: bool, config) -> dict:
    """One direction of a second-generation grid step on its configuration ``config`` [cluster,
    chunk, clusters, units] (the header's grid_direction_us): per chunk its fragment streams over the
    chunk's n8 tiles (the forward's W [G U][H / c], the backward's W^T [U][G H / c]; B's rows padded
    by 16 bytes), its batches of LOAD_BATCH vector loads, two cluster barriers; half the pairs (a
    thread runs its pairs once a direction, the pairs term prices both)."""
    cluster, chunk, _, units = (int(x) for x in config[:4])
    inner = H if forward else gates * H
    rows, width = round_up(gates * units if forward else units, 16), round_up(math.ceil(inner / cluster), 16)
    vector, k_step = vector_floats(inner), 8 if item == 4 else 16
    rows_of = chunk_rows(B, chunk)
    return {"S": sum(stream_wavefronts(rows // 16, width // k_step, math.ceil(n / 8), width * item + 16) for n in rows_of),
            "l2": sum(math.ceil(math.ceil(round_up(n, 16) * width / vector / THREADS) / LOAD_BATCH) for n in rows_of),
            "pairs": math.ceil(units * B / (cluster * THREADS)) / 2, "barriers": 2 * len(rows_of),
            "chunks": len(rows_of)}


def features(T: int, B: int, H: int, gates: int, precision: str, kernel: str, config, resident=None,
             generation: int = 2) -> dict:
    """The model's features of one call on configuration ``config`` ([cluster, tile or chunk,
    clusters, units, ...], as recurrence_config gives it): per step (S, pairs, barriers, L2,
    chunks, waves) and per call (each term's multiplier, keyed as the coefficients).
    ``resident``: resident clusters by cluster size (default: the fitted device's); ``generation``:
    the kernels' (GENERATIONS)."""
    cluster, tile, clusters, units = (int(x) for x in config[:4])
    item = 2 if precision == "bf16" else 4
    if generation not in GENERATIONS:
        raise ValueError(f"unknown kernel generation {generation!r}")
    if kernel == "cluster":
        rows, width = round_up(gates * units, 16), round_up(H, 16)
        if generation == 2:  # rows padded by 16 bytes (tensor_core.h's kPad); P = W^T dz with W^T [width][rows]
            pad, k_step = 16 // item, 8 if item == 4 else 16
            # the plan's parts of each product's K (a configuration without them: as many as keep a
            # segment within HELD_STEPS k-steps, what the plan takes where shared memory holds them)
            forward_parts, backward_parts = ((int(config[6]), int(config[7])) if len(config) >= 8 else
                                             (-(-width // k_step // HELD_STEPS), -(-rows // k_step // HELD_STEPS)))
            S = (segment_wavefronts(rows // 16, tile // 8, width // k_step, forward_parts, width + pad, width + pad, item)
                 + segment_wavefronts(width // 16, tile // 8, rows // k_step, backward_parts, rows + pad, rows + pad,
                                      item))
        else:  # z = W h; P = W^T dz reading W [rows][width] transposed
            S = (product_wavefronts(rows // 16, tile // 16, width, width, width, item, False)
                 + product_wavefronts(width // 16, tile // 16, rows, width, rows, item, True))
        pairs = math.ceil(units * tile / THREADS)
        barriers, l2, chunks = (4 if generation == 1 else 0), 0, 1
        resident = resident if resident is not None else load()["resident_clusters"]
        waves = math.ceil(clusters / {int(c): int(n) for c, n in resident.items()}[cluster])
    elif kernel == "grid":
        if generation == 1:
            S, pairs, barriers, l2, chunks = grid_first_generation(B, H, gates, item, cluster, tile, units)
        else:  # each direction its own configuration: the backward's is config[6:10] (else the forward's)
            directions = [grid_direction(B, H, gates, item, True, config[:4]),
                          grid_direction(B, H, gates, item, False, config[6:10] if len(config) >= 10 else config[:4])]
            S, pairs, barriers, l2 = (sum(d[k] for d in directions) for k in ("S", "pairs", "barriers", "l2"))
            chunks = max(d["chunks"] for d in directions)
        waves = 1
    else:
        raise ValueError(f"unknown kernel {kernel!r}")
    gemm = T * B * gates * H * H
    # TF32 GEMMs: FP32 SIMT GEMMs of rounded operands in generation 1, cuBLAS's TF32 tensor-core GEMMs in
    # generation 2, priced at twice the bf16 GEMMs' fitted cost (Hopper's dense TF32 rate is half its bf16 rate)
    tf32_simt = gemm if item == 4 and generation == 1 else 0
    tensor_flops = gemm * (1 if item == 2 else 2 if generation == 2 else 0)
    return {"S": S, "pairs_per_thread": pairs, "barriers_per_step": barriers, "L2_per_step": l2, "chunks": chunks,
            "waves": waves,
            "terms": {"shared_wavefronts": T * waves * S, "pairs": T * waves * pairs, "barriers": T * waves * barriers,
                      "l2_loads": T * l2, "gemm_tf32": tf32_simt, "gemm_bf16": tensor_flops,
                      "call": 1}}


def predict_ms(T: int, B: int, H: int, gates: int, precision: str, kernel: str, config, coefficients=None,
               resident=None, generation: int = 2) -> float:
    """The model's forward+backward milliseconds of one call (``coefficients``: microseconds per
    unit of each term, default bench/cost_model.json's; ``generation``: the kernels')."""
    model = load() if coefficients is None or resident is None else None
    coefficients = coefficients if coefficients is not None else model["coefficients_us"]
    resident = resident if resident is not None else model["resident_clusters"]
    terms = features(T, B, H, gates, precision, kernel, config, resident, generation)["terms"]
    return sum(coefficients[name] * terms[name] for name in TERMS) / 1e3


_loaded: dict | None = None


def load() -> dict:
    """bench/cost_model.json (read once)."""
    global _loaded
    if _loaded is None:
        _loaded = json.loads((ROOT / JSON_PATH).read_text())
    return _loaded


# -- the fit ---------------------------------------------------------------------------------------

def measured_rows(reports) -> list[dict]:
    """Every timed configuration of the reports' sweeps: kernel, T, B, H, cell, precision, config, ms;
    and of a GPU probe's phase trace (bench/gpu_probe.py's probe.json, not emulated): the kernels
    alone, forward plus backward from the global timer, marked ``kernel_alone`` (no GEMM, no call
    overhead in them)."""
    rows = []
    for report in reports:
        for row in report.get("tensor_core_sweep", []):
            for variant in row["variants"]:
                if "ms" in variant:
                    rows.append({key: row[key] for key in ("kernel", "T", "B", "H", "cell", "precision")}
                                | {"config": variant["config"], "ms": variant["ms"],
                                   "generation": report.get("generation", 1)})
        rows += traced_rows(report)
    return rows


def traced_rows(probe: dict) -> list[dict]:
    """The rows of a GPU probe's phase trace (bench/probe/trace.py): T steps forward and T + 1
    backward at each traced site's configuration."""
    trace = probe.get("parts", {}).get("trace", {})
    if trace.get("status") != "ok" or trace.get("emulated"):
        return []
    rows = []
    for record in trace["sites"].values():
        if record.get("status") != "ok":
            continue
        T, B, H = record["shape"]
        us = record["forward"]["wall_us_per_step"] * T + record["backward"]["wall_us_per_step"] * (T + 1)
        rows.append({"kernel": record["kernel"], "T": T, "B": B, "H": H, "cell": "lstm", "precision": record["precision"],
                     "config": record["config"], "ms": us / 1e3, "kernel_alone": True,
                     "generation": probe.get("generation", 1)})
    return rows


def resident_clusters(reports) -> dict[str, int]:
    """Resident clusters by cluster size on the reports' device: the most clusters a grid plan of
    that size took (it takes as many as are resident); one block an SM without one."""
    resident = {str(c): SMS // c for c in (1, 2, 4, 8, 16)}
    seen: dict[str, int] = {}
    for report in reports:
        for row in report.get("tensor_core_sweep", []):
            if row["kernel"] == "grid":
                for variant in row["variants"]:
                    config = variant["config"]
                    for c, clusters in ((config[0], config[2]),) + (((config[6], config[8]),) if len(config) >= 10 else ()):
                        seen[str(c)] = max(seen.get(str(c), 0), clusters)
    return resident | seen


def gates_of(cell: str) -> int:
    return 4 if cell == "lstm" else 3


def design(rows, resident):
    import numpy as np

    outside = ("gemm_tf32", "gemm_bf16", "call")  # what a kernel-alone row does not hold
    return np.array([[0.0 if r.get("kernel_alone") and name in outside else
                      features(r["T"], r["B"], r["H"], gates_of(r["cell"]), r["precision"], r["kernel"], r["config"],
                               resident, r["generation"])["terms"][name] for name in TERMS] for r in rows], dtype=float)


def solve(X, ms):
    """Nonnegative coefficients (us per unit) minimizing the squared relative errors."""
    import numpy as np
    from scipy.optimize import nnls

    A = X / (ms[:, None] * 1e3)
    scale = np.where(A.max(axis=0) > 0, A.max(axis=0), 1.0)  # columns of comparable size for nnls
    coef, _ = nnls(A / scale, np.ones(len(ms)))
    return coef / scale


def errors(X, coef, ms):
    return abs(X @ coef / 1e3 / ms - 1)


def summary(err) -> dict:
    import numpy as np

    return {"median": float(np.median(err)), "worst": float(err.max()), "rows": int(len(err))}


def fit(reports, sources) -> dict:
    """The model fitted to the reports' sweeps: coefficients, errors in and out of sample, rows."""
    import numpy as np  # the fit's only (numpy, scipy): predict_ms needs neither

    rows = measured_rows(reports)
    if not rows:
        raise SystemExit("no timed configuration in the reports' tensor_core_sweep")
    resident = resident_clusters(reports)
    X, ms = design(rows, resident), np.array([r["ms"] for r in rows])
    coef = solve(X, ms)
    err = errors(X, coef, ms)
    shapes = sorted({(r["kernel"], r["T"], r["B"], r["H"]) for r in rows})
    held_out_ms = np.zeros(len(rows))
    for shape in shapes:  # leave one shape out: fit the others, predict it
        out = np.array([(r["kernel"], r["T"], r["B"], r["H"]) == shape for r in rows])
        held_out_ms[out] = X[out] @ solve(X[~out], ms[~out]) / 1e3
    held_out = np.abs(held_out_ms / ms - 1)
    kernels = np.array([r["kernel"] for r in rows])
    return {
        "generated_by": "python bench/cost_model.py --refit " + " ".join(sources) + " --write",
        "date": datetime.date.today().isoformat(),
        "fitted_to": list(sources),
        "device": sorted({str(report.get("device", "?")) for report in reports}),
        "method": "scipy.optimize.nnls of the relative error (features / measured time against ones)",
        "coefficients_us": {name: float(c) for name, c in zip(TERMS, coef)},
        "resident_clusters": resident,
        "errors": {"in_sample": summary(err),
                   "in_sample_by_kernel": {k: summary(err[kernels == k]) for k in sorted(set(kernels))},
                   "leave_one_shape_out": summary(held_out),
                   "leave_one_shape_out_by_kernel": {k: summary(held_out[kernels == k]) for k in sorted(set(kernels))}},
        "rows": [r | {"predicted_ms": float(p), "held_out_predicted_ms": float(q)}
                 for r, p, q in zip(rows, X @ coef / 1e3, held_out_ms)],
    }


# -- the generated header ----------------------------------------------------------------------------

HEADER = """\
// Generated by bench/cost_model.py --refit ...; do not edit. Regenerate with
//   {command}
// (the coefficients, their fit and the rows they were fitted to: bench/cost_model.json; the terms:
// bench/cost_model.py).
//
// The fitted cost model of the tensor-core kernels' configurations: microseconds a forward+backward
// step (both directions; the grid kernel's one direction at a time) of one layer, waves x (shared-memory wavefronts of the ldmatrix operand
// loads x kSharedWavefront + (unit, row) pairs a thread runs x kPair + cluster barriers x kBarrier) +
// serialized L2 loads a thread waits on x kL2Load (the grid kernel). bench/cost_model.py's predict_ms is T
// such steps plus the per-call terms (the GEMMs and the host), which are the same for every
// configuration of a shape and left out here: the plans (cluster_recurrence.cu, grid_recurrence.cu)
// take the configuration with the lowest step cost. Products: item = 4 (TF32, and the scalar
// float32 loop, which has no measurements and is ranked as TF32) or 2 (bf16). The coefficients
// were fitted to the first generation of the kernels (wmma loads, four cluster barriers a step in
// the cluster kernel); this header prices the second (bench/cost_model.py: ldmatrix wavefronts at
// the same price; the cluster kernel's mbarrier handshakes at none, no measurement having priced
// them; the grid kernel's batch of {load_batch} vector loads in flight as one serialized load): a
// prediction until a GPU measures the second generation.
// Fitted to {rows} configurations: median relative error {median:.1%}, worst {worst:.1%} (in sample).
#pragma once

namespace tsrnn {{
namespace cuda {{
namespace cost_model {{

constexpr double kSharedWavefront = {shared_wavefronts!r};  // us per shared-memory wavefront
constexpr double kPair = {pairs!r};  // us per (unit, row) pair a thread runs a step
constexpr double kBarrier = {barriers!r};  // us per cluster barrier
constexpr double kL2Load = {l2_loads!r};  // us per serialized L2 load of a thread (grid kernel)
constexpr int kBlockThreads = {threads};  // threads of a block in both kernels
constexpr int kLoadBatch = {load_batch};  // the grid kernel's loads a thread issues together (slice_load.h's kBatch)

inline int ceil_div(int x, int y) {{ return (x + y - 1) / y; }}
inline int round_up16(int x) {{ return ceil_div(x, 16) * 16; }}

// Wavefronts of one 8 x 8 matrix of an ldmatrix whose 8 rows of 16 bytes lie `pitch_bytes` apart (a
// multiple of 16): the most rows in one group of 4 banks, gcd(pitch / 16, 8).
inline int ldmatrix_wavefronts(int pitch_bytes) {{
  int a = pitch_bytes / 16, b = 8;
  while (b != 0) {{
    const int r = a % b;
    a = b;
    b = r;
  }}
  return a;
}}

// Wavefronts of one block's product by fragment streams (tensor_core.h's stream_product): A
// [16 m_tiles][k_steps k-steps], warp w the m-tiles w, w + {warps}, ... over the whole of K, over
// `n_tiles` n8 tiles of B (rows `pitch_b` bytes apart) in groups of up to 4; a fragment loads B's 2
// matrices an n8 tile and, past the warp's first {held} (held), A's 4 from its slot.
inline double stream_wavefronts(int m_tiles, int k_steps, int n_tiles, int pitch_b) {{
  const int b = ldmatrix_wavefronts(pitch_b);
  double total = 0.0;
  for (int warp = 0; warp < {warps}; ++warp) {{
    const int length = (warp < m_tiles ? ceil_div(m_tiles - warp, {warps}) : 0) * k_steps;
    const int unheld = length - (length < {held} ? length : {held});
    for (int first = 0; first < n_tiles; first += 4) {{
      total += unheld * 4.0 + length * 2.0 * (n_tiles - first < 4 ? n_tiles - first : 4) * b;
    }}
  }}
  return total;
}}

// Wavefronts of one block's product [16 m_tiles][k_steps] x [k_steps][8 n_tiles] in segments
// (tensor_core.h's Split: K in `parts` parts of ceil(k_steps / parts) k-steps, segment s on warp
// s % {warps}): a k-step of a segment loads B's 2 n_tiles matrices and, unless the warp holds it (the
// first {held_steps} k-steps of its first {held_segments} segments), A's 4.
inline double segment_wavefronts(int m_tiles, int n_tiles, int k_steps, int parts, int pitch_a, int pitch_b, int item) {{
  const int length = ceil_div(k_steps, parts);
  const int a = ldmatrix_wavefronts(pitch_a * item), b = ldmatrix_wavefronts(pitch_b * item);
  double total = 0.0;
  for (int s = 0; s < m_tiles * ceil_div(k_steps, length); ++s) {{
    const int first = s / m_tiles * length;
    const int steps = (k_steps < first + length ? k_steps : first + length) - first;
    const int held = s / {warps} < {held_segments} ? (steps < {held_steps} ? steps : {held_steps}) : 0;
    total += (steps - held) * 4.0 * a + steps * 2.0 * n_tiles * b;
  }}
  return total;
}}

// The cluster kernel, blocks of `units` units in `clusters` clusters over batch tiles of `tile`
// rows, `resident` clusters at once, K of the products in `forward_parts` and `backward_parts`: per
// step z = W_r h (W_r [rows][width] row-major, h [tile][width]) and P = W_r^T dz (W_r^T
// [width][rows], dz [tile][rows]), every row padded by 16 bytes, and the pairs; times the waves.
inline double cluster_step_us(int item, int hidden, int gates, int tile, int clusters, int units, int resident,
                              int forward_parts, int backward_parts) {{
  const int rows = round_up16(gates * units), width = round_up16(hidden);
  const int pad = 16 / item, k_step = item == 4 ? 8 : 16;
  const double shared =
      segment_wavefronts(rows / 16, tile / 8, width / k_step, forward_parts, width + pad, width + pad, item) +
      segment_wavefronts(width / 16, tile / 8, rows / k_step, backward_parts, rows + pad, rows + pad, item);
  const int pairs = ceil_div(units * tile, kBlockThreads);  // no cluster barrier in its loops
  const int waves = ceil_div(clusters, resident);
  return waves * (kSharedWavefront * shared + kPair * pairs);
}}

// Floats of one of the grid kernel's slice loads, rows `pitch` floats apart (slice_load.h).
inline int vector_floats(int pitch) {{ return pitch % 4 == 0 ? 4 : pitch % 2 == 0 ? 2 : 1; }}

// One direction of the grid kernel, clusters of `cluster` blocks of `units` units each, the batch of
// `batch` rows in chunks of `chunk`: per step and chunk the direction's product (the forward's W
// [rows G U][width H/c], the backward's W^T [rows U][width G H/c], fragment streams), each chunk's h
// or dz read from L2 (rows `pitch` floats apart) by every block in batches of kLoadBatch vector
// loads, two cluster barriers per chunk (the product's, and the next chunk's or the flag
// arrival's), and half the pairs' price (a thread runs its pairs once a direction; kPair prices
// both). A step of the call is the forward's plus the backward's, each with its own configuration.
inline double grid_direction_us(int item, int batch, int cluster, int chunk, int units, int rows, int width, int vector) {{
  const int k_step = item == 4 ? 8 : 16;
  int chunks = 0, l2 = 0;
  double shared = 0.0;
  for (int first = 0; first < batch; first += chunk) {{
    const int n = batch - first < chunk ? batch - first : chunk;
    chunks += 1;
    l2 += ceil_div(ceil_div(round_up16(n) * width / vector, kBlockThreads), kLoadBatch);
    shared += stream_wavefronts(rows / 16, width / k_step, ceil_div(n, 8), width * item + 16);
  }}
  const int pairs = ceil_div(units * batch, cluster * kBlockThreads), barriers = 2 * chunks;
  return kSharedWavefront * shared + 0.5 * kPair * pairs + kBarrier * barriers + kL2Load * l2;
}}

}}  // namespace cost_model
}}  // namespace cuda
}}  // namespace tsrnn
"""


def header(model: dict) -> str:
    """csrc/recurrence/cuda/cost_model.h of a fitted model."""
    errors_in = model["errors"]["in_sample"]
    return HEADER.format(command=model["generated_by"], rows=errors_in["rows"], median=errors_in["median"],
                         worst=errors_in["worst"], threads=THREADS, warps=WARPS, held_segments=HELD_SEGMENTS,
                         held_steps=HELD_STEPS, held=HELD_SEGMENTS * HELD_STEPS, load_batch=LOAD_BATCH,
                         **model["coefficients_us"])


def direction_us(H: int, B: int, gates: int, precision: str, forward: bool, config, coefficients) -> float:
    """What the grid kernel's plan ranks for one direction (the header's grid_direction_us), ``config``
    [cluster, chunk, clusters, units]: microseconds a step."""
    d = grid_direction(B, H, gates, 2 if precision == "bf16" else 4, forward, config)
    return (coefficients["shared_wavefronts"] * d["S"] + coefficients["pairs"] * d["pairs"]
            + coefficients["barriers"] * d["barriers"] + coefficients["l2_loads"] * d["l2"])


def step_us(H: int, B: int, gates: int, precision: str, kernel: str, config, coefficients, resident) -> float:
    """What the plans rank: the header's step cost (microseconds a fwd+bwd step, waves included)."""
    terms = features(1, B, H, gates, precision, kernel, config, resident)["terms"]
    return sum(coefficients[name] * terms[name] for name in ("shared_wavefronts", "pairs", "barriers", "l2_loads"))


def table(model: dict) -> str:
    lines = [f"{'kernel':8} {'T,B,H':>13} {'cell':14} {'prec':4} {'config':>18} {'ms':>7} {'model':>7} {'err':>6}"
             f" {'held-out':>8} {'err':>6}"]
    for r in model["rows"]:
        shape, config = f"{r['T']},{r['B']},{r['H']}", ",".join(map(str, r["config"]))
        lines.append(f"{r['kernel']:8} {shape:>13} {r['cell']:14} {r['precision']:4} {config:>18} {r['ms']:7.2f}"
                     f" {r['predicted_ms']:7.2f} {r['predicted_ms'] / r['ms'] - 1:+6.1%}"
                     f" {r['held_out_predicted_ms']:8.2f} {r['held_out_predicted_ms'] / r['ms'] - 1:+6.1%}")
    return "\n".join(lines)


def report_errors(model: dict) -> str:
    e = model["errors"]
    def line(name, s):
        return f"{name}: median {s['median']:.1%}, worst {s['worst']:.1%} ({s['rows']} rows)"
    out = [line("in sample", e["in_sample"])]
    out += [line(f"  {k}", s) for k, s in e["in_sample_by_kernel"].items()]
    out += [line("leaving each shape out", e["leave_one_shape_out"])]
    out += [line(f"  {k}", s) for k, s in e["leave_one_shape_out_by_kernel"].items()]
    out += ["coefficients (us per unit): " + ", ".join(f"{k} {v:.4g}" for k, v in model["coefficients_us"].items())]
    return "\n".join(out)


def relative(path: str) -> str:
    resolved = Path(path).resolve()
    return str(resolved.relative_to(ROOT)) if resolved.is_relative_to(ROOT) else str(path)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--refit", nargs="+", required=True, metavar="REPORT.json",
                        help="GPU report JSONs with a tensor-core sweep (bench/gpu_report.py's job 'sweep')")
    parser.add_argument("--write", action="store_true", help="rewrite bench/cost_model.json and the C++ header")
    parser.add_argument("--root", default=str(ROOT), help="where to write them (default: this checkout)")
    args = parser.parse_args(argv)
    reports = [json.loads(Path(p).read_text()) for p in args.refit]
    model = fit(reports, [relative(p) for p in args.refit])
    print(table(model))
    print(report_errors(model))
    if args.write:
        root = Path(args.root)
        (root / JSON_PATH).parent.mkdir(parents=True, exist_ok=True)
        (root / HEADER_PATH).parent.mkdir(parents=True, exist_ok=True)
        (root / JSON_PATH).write_text(json.dumps(model, indent=1) + "\n")
        (root / HEADER_PATH).write_text(header(model))
        print(f"wrote {root / JSON_PATH} and {root / HEADER_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
