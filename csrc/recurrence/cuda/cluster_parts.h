// The device-side pieces the cluster kernels of cluster_recurrence.cu are built from (included by
// it only, before its kernels): the names they take from tensor_core.h, the padding of a product's
// parts, the kernels' Shape, the cp.async prefetch of the cell's operands a step ahead (Prefetch,
// prefetch_forward, prefetch_backward), the load of a block's rows of W_hh (load_weights) and the
// sizes of the forward's st.async exchange (slice_words, exchange_bytes).
#pragma once

#include "recurrence/cuda/cluster_recurrence.h"
#include "recurrence/cuda/device_common.h"
#include "recurrence/cuda/probe.h"
#include "recurrence/cuda/ptx.h"
#include "recurrence/cuda/tensor_core.h"
#include "recurrence/products.h"

namespace tsrnn {
namespace cuda {
namespace cluster {
namespace {

using tensor_core::Cluster;
using tensor_core::kPad;
using tensor_core::Operand;
using tensor_core::Pair;
using tensor_core::pair;
using tensor_core::operand_bytes;
using tensor_core::round_up;
using tensor_core::this_cluster;
using tensor_core::Split;

constexpr int kWarps = kThreads / 32;
// Floats a row of a product's parts (z's, P_r's) is longer than its data: 4 banks, so that the
// accumulators' stores of a warp (8 rows x 4 column pairs) fall in 32 different banks.
constexpr int kPartPad = 4;

// What the kernels need of the plan (and, in the probe's build, where to record the phase trace).
struct Shape {
  int units, rows, width, tile;
  int parts;      // of the product's K (tensor_core.h's Split), summed in shared memory
  int pairs;      // (unit, row) pairs a thread: ceil(units x tile / kThreads)
  bool prefetch;  // the cell's operands copied a step ahead into shared memory (Prefetch)
#ifdef TSRNN_PROBE
  probe::Trace trace;
#endif
};

// The cell's step-independent operands of a thread's pairs (forward: xg; backward: the saved
// activations, the states before and after the step, grad_h), copied with cp.async one step ahead
// into shared memory: slots [2][pairs][operands][kThreads], step t's in buffer t % 2, a warp's 32
// accesses of one slot in 32 banks. Each thread reads its own slots only, after cp_async_wait.
struct Prefetch {
  float* slots;
  int pairs, operands;
  __device__ float* at(int step, int i, int o) const {
    return slots + ((step % 2 * pairs + i) * operands + o) * kThreads + threadIdx.x;
  }
};

// Forward: the G values of xg of each pair active at step u (none past the sequence), one commit group.
template <int G>
__device__ inline void prefetch_forward(const Prefetch& pf, const ForwardArgs& a, const Pair* pairs, int u, int b0, int j0) {
  if (u < a.T) {
    const StepRows step = step_rows(a.offsets, u, a.B);
#pragma unroll
    for (int i = 0; i < kMaxPairs; ++i) {
      if (i >= pf.pairs || !pairs[i].valid || b0 + pairs[i].n >= step.rows) continue;
      const long long row = step.first + b0 + pairs[i].n;
#pragma unroll
      for (int g = 0; g < G; ++g) ptx::cp_async<4>(pf.at(u, i, g), a.xg + row * G * a.H + g * a.H + j0 + pairs[i].u);
    }
  }
  ptx::cp_async_commit();
}

// Backward: operands [0, K) the saved activations, [K, K + S) the states before step u, [K + S,
// K + 2 S) after it, K + 2 S grad_h (if given), of each pair active at step u (none before the
// sequence), one commit group.
template <int K, int S>
__device__ inline void prefetch_backward(const Prefetch& pf, const BackwardArgs& a, const Pair* pairs, int u, int b0, int j0) {
  if (u >= 0) {
    const StepRows step = step_rows(a.offsets, u, a.B);
    const long long BH = static_cast<long long>(a.B) * a.H;
    const float* const prev = u == 0 ? a.state0 : a.state_all + (u - 1) * (S * BH);
    const float* const next = a.state_all + u * (S * BH);
#pragma unroll
    for (int i = 0; i < kMaxPairs; ++i) {
      if (i >= pf.pairs || !pairs[i].valid || b0 + pairs[i].n >= step.rows) continue;
      const int j = j0 + pairs[i].u;
      const long long row = step.first + b0 + pairs[i].n, n = static_cast<long long>(b0 + pairs[i].n) * a.H + j;
#pragma unroll
      for (int k = 0; k < K; ++k) ptx::cp_async<4>(pf.at(u, i, k), a.saved + row * K * a.H + k * a.H + j);
#pragma unroll
      for (int k = 0; k < S; ++k) {
        ptx::cp_async<4>(pf.at(u, i, K + k), prev + k * BH + n);
        ptx::cp_async<4>(pf.at(u, i, K + S + k), next + k * BH + n);
      }
      if (a.grad_h) ptx::cp_async<4>(pf.at(u, i, K + 2 * S), a.grad_h + row * a.H + j);
    }
  }
  ptx::cp_async_commit();
}

// Loads block r's rows of W_hh into w [rows][width + kPad] (the forward's W_r) or, Transposed, into
// w [width][rows + kPad] (the backward's W_r^T, so that both products read a row-major A), rounded,
// zero where no unit or column is (the padding is never read).
template <class C, Products P, bool Transposed>
__device__ inline void load_weights(typename Operand<P>::T* w, const float* w_hh, int H, int j0, int nj,
                                    const Shape& s) {
  const int pitch = (Transposed ? s.rows : s.width) + kPad<P>;
  for (int idx = threadIdx.x; idx < s.rows * s.width; idx += blockDim.x) {
    const int m = Transposed ? idx % s.rows : idx / s.width, k = Transposed ? idx / s.rows : idx % s.width;
    const int g = m / s.units, u = m % s.units;
    const bool real = g < C::kGates && u < nj && k < H;
    w[Transposed ? k * pitch + m : m * pitch + k] = Operand<P>::round(real ? w_hh[static_cast<long long>(g * H + j0 + u) * H + k] : 0.f);
  }
}

// The forward's exchange: 32-bit words of block q's h_t slice, slice_words(q) a batch row, pushed by
// st.async into every block's h tile, whose mbarrier `full` expects exchange_bytes() a step.
__device__ inline int slice_words(int q, int units, int H, int item) {
  return (max(0, min(units, H - q * units)) * item + 3) / 4;
}
__device__ inline unsigned exchange_bytes(int c, int units, int H, int tile, int item) {
  unsigned words = 0;
  for (int q = 0; q < c; ++q) words += static_cast<unsigned>(slice_words(q, units, H, item));
  return 4u * words * static_cast<unsigned>(tile);
}

}  // namespace
}  // namespace cluster
}  // namespace cuda
}  // namespace tsrnn
