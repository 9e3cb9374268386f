// Persistent CUDA recurrence: the host side of csrc/recurrence/cuda/recurrence.cu, free of torch headers so
// that the .cu file compiles in seconds. All tensors are float32, contiguous, on one device.
// Every function takes the cell type C of csrc/recurrence/cells.h as its template parameter; recurrence.cu
// instantiates them for LSTMCell, PowerLawCell<true> and PowerLawCell<false>.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "recurrence/cells.h"

namespace tsrnn {
namespace cuda {

// Most hidden units one block owns (each warp keeps G x kMaxUnits partial sums in registers).
constexpr int kMaxUnits = 16;

// How the hidden units are split over thread blocks: block k owns units
// [k * units, min(H, (k + 1) * units)), units = ceil(H / #SMs), and keeps their rows of W_hh
// (forward) or columns of W_hh (backward) in shared memory: G * units * H floats. blocks == 0:
// the shape does not fit on the current device (units > kMaxUnits, shared memory, cooperative
// residency), or the device cannot launch cooperatively.
struct Plan {
  int blocks = 0;
  int units = 0;
  std::size_t shared_bytes = 0;
};

// The plan for `hidden` units of cell C on the current device.
template <class C>
cudaError_t plan(int hidden, Plan* out);

// Rows of a step. Padded (offsets null): step t runs all B rows, row t*B + b of xg, dt, h_all,
// grad_h, saved and dz, which are [T, B, ...]. Packed (offsets non-null: a device copy of the
// int64 [T+1] offsets of csrc/recurrence/op.h's Steps, torch's PackedSequence layout, the batch
// sorted by length): step t runs the rows b < rows(t) = offsets[t+1] - offsets[t] only, row
// offsets[t] + b of xg [N, G*H], dt [N], h_all and grad_h [N, H], saved [N, K*H] and dz
// [N, G*H] (N = offsets[T]); h_{t-1} of row b is packed row offsets[t-1] + b (h0[b] at t = 0).
// state_all keeps its full-B stride [T, S, B, H], rows b >= rows(t) of step t not written by the
// kernels (zero: recurrence_op.h allocates them so); h0, dh [B, H] and state0, dstate [S, B, H]
// keep all B rows (a row's dh and dstate are left alone at the steps it does not run).
struct ForwardArgs {
  const float* xg;      // [T, B, G*H] (packed: [N, G*H]) input projection plus bias
  const float* w_hh;    // [G*H, H]
  const float* h0;      // [B, H]
  const float* state0;  // [S, B, H]
  const float* p;       // [H] (pLSTM) or null
  const float* dt;      // [T, B] (packed: [N]) (pLSTM) or null for dt = 1
  const std::int64_t* offsets;  // [T+1] first packed row of each step, or null (padded)
  float* h_all;         // [T, B, H] (packed: [N, H]) out
  float* state_all;     // [T, S, B, H] out (packed: rows b >= rows(t) of step t left as allocated, zero)
  float* saved;         // [T, B, K*H] (packed: [N, K*H]) out, or null (no backward)
  int T, B, H;
  float eps;
};

struct BackwardArgs {
  const float* grad_h;     // [T, B, H] (packed: [N, H]) or null
  const float* w_hh;       // [G*H, H]
  const float* state0;     // [S, B, H]
  const float* state_all;  // [T, S, B, H]
  const float* saved;      // [T, B, K*H] (packed: [N, K*H])
  const float* p;          // [H] or null
  const float* dt;         // [T, B] (packed: [N]) or null
  const std::int64_t* offsets;  // [T+1] first packed row of each step, or null (padded)
  float* dz;               // [T, B, G*H] (packed: [N, G*H]) out: dL/dxg
  float* dh;               // [B, H] in: zeros, out: dL/dh0 (zero for rows of no step)
  float* dstate;           // [S, B, H] in: dL/dstate_n (or zeros), out: dL/dstate0
  float* dp;               // [B, H] in: zeros, out: dL/dp per batch row (pLSTM)
  int T, B, H;
  float eps;
};

// Cooperative launches on `stream` with a plan from plan<C>(); they return the launch's error.
template <class C>
cudaError_t forward(const Plan& plan, const ForwardArgs& args, cudaStream_t stream);
template <class C>
cudaError_t backward(const Plan& plan, const BackwardArgs& args, cudaStream_t stream);

}  // namespace cuda
}  // namespace tsrnn
