// The arguments of the CUDA recurrence kernels (csrc/recurrence/cuda/cluster_recurrence.cu,
// grid_recurrence.cu), free of torch headers so that the .cu files compile in seconds: the tensors
// of a call, float32, contiguous, on one device, as the binding's policies pack them
// (cuda_recurrence.h's forward_args and backward_args).
#pragma once

#include <cstdint>

#include "recurrence/cells/list.h"

namespace tsrnn {
namespace cuda {

// A call's cell constants (csrc/recurrence/cells/list.h: a cell reads its first kConstants), by
// value in the kernels' arguments.
struct Constants {
  float value[kMaxConstants];
};

// Rows of a step. Padded (offsets null): step t runs all B rows, row t*B + b of xg, steps, h_all,
// grad_h, saved and dz, which are [T, B, ...]. Packed (offsets non-null: a device copy of the
// int64 [T+1] offsets of csrc/recurrence/op.h's Steps, torch's PackedSequence layout, the batch
// sorted by length): step t runs the rows b < rows(t) = offsets[t+1] - offsets[t] only, row
// offsets[t] + b of xg [N, G*H], steps [N], h_all and grad_h [N, H], saved [N, K*H] and dz
// [N, G*H] (N = offsets[T]); h_{t-1} of row b is packed row offsets[t-1] + b (h0[b] at t = 0).
// state_all keeps its full-B stride [T, S, B, H], rows b >= rows(t) of step t not written by the
// kernels (zero: recurrence_op.h allocates them so); h0, dh [B, H] and state0, dstate [S, B, H]
// keep all B rows (a row's dh and dstate are left alone at the steps it does not run).
struct ForwardArgs {
  const float* xg;      // [T, B, G*H] (packed: [N, G*H]) input projection plus bias
  const float* w_hh;    // [G*H, H]
  const float* h0;      // [B, H]
  const float* state0;  // [S, B, H]
  const float* params;  // [P, H] the cell's per-unit parameters, or null (P = 0)
  const float* steps;   // [T, B] (packed: [N]) the cell's step input, or null (Δt = 1)
  const std::int64_t* offsets;  // [T+1] first packed row of each step, or null (padded)
  float* h_all;         // [T, B, H] (packed: [N, H]) out
  float* state_all;     // [T, S, B, H] out (packed: rows b >= rows(t) of step t left as allocated, zero)
  float* saved;         // [T, B, K*H] (packed: [N, K*H]) out, or null (no backward)
  int T, B, H;
  Constants constants;
};

struct BackwardArgs {
  const float* grad_h;     // [T, B, H] (packed: [N, H]) or null
  const float* w_hh;       // [G*H, H]
  const float* state0;     // [S, B, H]
  const float* state_all;  // [T, S, B, H]
  const float* saved;      // [T, B, K*H] (packed: [N, K*H])
  const float* params;     // [P, H] or null (P = 0)
  const float* steps;      // [T, B] (packed: [N]) or null (Δt = 1)
  const std::int64_t* offsets;  // [T+1] first packed row of each step, or null (padded)
  float* dz;               // [T, B, G*H] (packed: [N, G*H]) out: dL/dxg
  float* dh;               // [B, H] in: zeros, out: dL/dh0 (zero for rows of no step)
  float* dstate;           // [S, B, H] in: dL/dstate_n (or zeros), out: dL/dstate0
  float* dparams;          // [P, B, H] in: zeros, out: dL/dparams per batch row, or null (P = 0)
  int T, B, H;
  Constants constants;
};

}  // namespace cuda
}  // namespace tsrnn
