// The cluster-resident recurrence on tensor cores: one launch per direction runs all T steps, each
// batch tile of `tile` rows on one thread-block cluster of c <= 16 blocks that keeps W_hh in its
// shared memory for the whole sequence, with no grid-wide synchronisation.
//
// Block r of a cluster owns the hidden units J_r = [r U, min(H, (r + 1) U)) and holds their rows of
// W_hh, rounded once to the operand type (csrc/recurrence/products.h), as W_r [rows][width]: row
// g U + u is W_hh[g H + j0 + u, :] (gate g of unit j0 + u), padded with zero rows and columns to
// multiples of 16. Forward, step t (z_t = W_hh h_{t-1}, then the cell of csrc/recurrence/cells.h):
//   1. wait for phase A of the cluster barrier: h_{t-1} is complete in this block's h tile
//      [tile][width] (t > 0; h0 is loaded at the start);
//   2. the tensor cores form z_r = W_r h_tile^T [rows][tile] (mma.sync, float32 accumulation), stored
//      to the block's z tile; arrive at phase B (this block is done reading its h tile);
//   3. each thread applies the cell to its (unit, row) pairs: z + xg, the states kept in registers
//      across the steps, h_t, the states and the saved activations written to global memory;
//   4. wait for phase B (every block is done reading its h tile), then write the pairs' h_t,
//      rounded to the operand type, into the h tile of every block of the cluster through
//      distributed shared memory, and arrive at phase A.
// Backward, step t from T-1 down to 0 (dL/dh_{t-1} = W_hh^T dz_t, reduced over the cluster):
//   1. wait for phase A: every block's partial product P_q = W_q^T dz_q of step t+1 is complete;
//      each pair's dL/dh_t is the sum over the cluster's blocks q of P_q at its (unit, row),
//      read through distributed shared memory; arrive at phase B;
//   2. the cell's backward (dstate and the per-row dL/dp in registers across the steps), dz_t
//      to global memory (for the weight gradients) and, rounded, to the block's dz tile;
//   3. wait for phase B (no block still reads this block's P), P_r = W_r^T dz_tile [width][tile]
//      on the tensor cores, arrive at phase A.
// After the loop, dL/dh0 = sum_q P_q, then dstate and dp are written once. dW_hh is one GEMM over
// the h's after the kernel (csrc/recurrence/op.h). The two phases of the one hardware cluster
// barrier make each step's exchange safe with a single h (or P) buffer per block; phase B's wait
// comes after the cell, so only phase A's latency is on the critical path of a step.
//
// Packed sequences (recurrence.h): step t runs the rows b < rows(t) only; a pair of an inactive
// row writes nothing forward and a zero dz backward, so its h tile row keeps the h of its last step
// and its dL/dh is zero until the reverse sweep reaches its last step, as the cooperative kernel's.
// Rows of the last tile past B compute on the zeros they were given and are never written out.
// Products: kTf32 (ldmatrix + mma.sync m16n8k8, the operands pre-rounded with cvt.rna), kBf16
// (ldmatrix + mma.sync m16n8k16), kIeee (a scalar float32 loop with the same tiles, for callers
// that turned TF32 off): tensor_core.h's tile_product. The backward keeps W_r^T in shared memory,
// [width][rows], so that its product reads a row-major A as the forward's does.
#include <algorithm>
#include <climits>

#include "recurrence/cells.h"
#include "recurrence/cuda/cluster_recurrence.h"
#include "recurrence/cuda/cost_model.h"
#include "recurrence/cuda/device_common.h"
#include "recurrence/cuda/probe.h"
#include "recurrence/cuda/tensor_core.h"

namespace tsrnn {
namespace cuda {
namespace cluster {
namespace {

using tensor_core::Cluster;
using tensor_core::Operand;
using tensor_core::Pair;
using tensor_core::pair;
using tensor_core::operand_bytes;
using tensor_core::round_up;
using tensor_core::this_cluster;
using tensor_core::tile_product;

constexpr int kWarps = kThreads / 32;

// What the kernels need of the plan (and, in the probe's build, where to record the phase trace).
struct Shape {
  int units, rows, width, tile;
#ifdef TSRNN_PROBE
  probe::Trace trace;
#endif
};

// The cluster barrier's two halves, or what a ladder rung puts in their place (probe.h).
template <unsigned Skip>
__device__ inline void arrive([[maybe_unused]] Cluster& cluster) {
  if constexpr (probe::Skips<Skip>::of(probe::kBarriers)) {
    return;
  } else if constexpr (probe::Skips<Skip>::of(probe::kRelaxed)) {
    ptx::cluster_arrive_relaxed();
  } else {
    cluster.barrier_arrive();
  }
}

template <unsigned Skip>
__device__ inline void wait([[maybe_unused]] Cluster& cluster, int line = __builtin_LINE(),
                            const char* file = __builtin_FILE()) {
  if constexpr (!probe::Skips<Skip>::of(probe::kBarriers)) tensor_core::wait_at(cluster, line, file);
}

// Loads block r's rows of W_hh into w [rows][width] (the forward's W_r) or, Transposed, into
// w [width][rows] (the backward's W_r^T, so that both products read a row-major A), rounded, zero
// where no unit or column is.
template <class C, Products P, bool Transposed>
__device__ inline void load_weights(typename Operand<P>::T* w, const float* w_hh, int H, int j0, int nj,
                                    const Shape& s) {
  for (int idx = threadIdx.x; idx < s.rows * s.width; idx += blockDim.x) {
    const int m = Transposed ? idx % s.rows : idx / s.width, k = Transposed ? idx / s.rows : idx % s.width;
    const int g = m / s.units, u = m % s.units;
    const bool real = g < C::kGates && u < nj && k < H;
    w[idx] = Operand<P>::round(real ? w_hh[static_cast<long long>(g * H + j0 + u) * H + k] : 0.f);
  }
}

template <class C, Products P, unsigned Skip>
__global__ void __launch_bounds__(kThreads) forward_kernel(ForwardArgs a, Shape s) {
  using T = typename Operand<P>::T;
  constexpr int G = C::kGates, S = C::kStates, K = C::kSaved;
  using Skipped = probe::Skips<Skip>;
  Cluster cluster = this_cluster();
  probe::Recorder clock(s);
  const int c = static_cast<int>(cluster.num_blocks()), rank = static_cast<int>(cluster.block_rank());
  const int H = a.H, b0 = static_cast<int>(blockIdx.x) / c * s.tile;
  const int j0 = rank * s.units, nj = max(0, min(s.units, H - j0));
  const long long BH = static_cast<long long>(a.B) * H;
  T* const w = dynamic_shared<T>();                                       // [rows][width]
  T* const h_tile = w + s.rows * s.width;                                 // [tile][width]
  float* const z = reinterpret_cast<float*>(h_tile + s.tile * s.width);  // [tile][rows]
  load_weights<C, P, false>(w, a.w_hh, H, j0, nj, s);
  for (int idx = threadIdx.x; idx < s.tile * s.width; idx += blockDim.x) {
    const int b = b0 + idx / s.width, k = idx % s.width;
    h_tile[idx] = Operand<P>::round(b < a.B && k < H ? a.h0[static_cast<long long>(b) * H + k] : 0.f);
  }
  Pair pairs[kMaxPairs];      // this thread's (unit, row) pairs, the same at every step
  float state[kMaxPairs][S];  // each pair's states after the last step it ran
#pragma unroll
  for (int i = 0; i < kMaxPairs; ++i) {
    pairs[i] = pair(i, 0, kThreads, nj, s.tile);
    const Pair q = pairs[i];
#pragma unroll
    for (int k = 0; k < S; ++k) {
      state[i][k] = q.valid && b0 + q.n < a.B ? a.state0[k * BH + static_cast<long long>(b0 + q.n) * H + j0 + q.u] : 0.f;
    }
  }
  __syncthreads();  // W and the h tile loaded
  if constexpr (Skipped::of(probe::kBarriers)) cluster.sync();  // every block started before any DSMEM access
  const int m_tiles = s.rows / 16, jobs = m_tiles * (s.tile / 16);
  for (int t = 0; t < a.T; ++t) {
    const StepRows step = step_rows(a.offsets, t, a.B);
    clock.step(t);
    if (t > 0) wait<Skip>(cluster);  // phase A: h_{t-1} is in the h tile
    clock.mark(probe::Phase::kWait);
    for (int job = static_cast<int>(threadIdx.x) / 32; job < jobs && !Skipped::of(probe::kOperands); job += kWarps) {
      const int mt = job % m_tiles, nt = job / m_tiles;
      tile_product<P, !Skipped::of(probe::kMma)>(w + mt * 16 * s.width, s.width, h_tile + nt * 16 * s.width, s.width,
                                                   s.width, z + nt * 16 * s.rows + mt * 16, s.rows);
    }
    clock.mark(probe::Phase::kProduct);
    __syncthreads();  // z complete
    clock.mark(probe::Phase::kBlockSync);
    arrive<Skip>(cluster);  // phase B: done reading the h tile
    clock.mark(probe::Phase::kArrive);
    float h_new[kMaxPairs];
#pragma unroll
    for (int i = 0; i < kMaxPairs; ++i) {
      const Pair q = pairs[i];
      h_new[i] = 0.f;
      if (!q.valid || b0 + q.n >= step.rows) continue;
      const int j = j0 + q.u;
      const long long row = step.first + b0 + q.n, n = static_cast<long long>(b0 + q.n) * H + j;
      float zj[G], act[K], next[S];
#pragma unroll
      for (int g = 0; g < G; ++g) {
        zj[g] = z[q.n * s.rows + g * s.units + q.u] + (Skipped::of(probe::kCellLoads) ? 0.f : a.xg[row * G * H + g * H + j]);
      }
      const float p = a.p ? a.p[j] : 0.f, dt = a.dt ? a.dt[row] : 1.f;
      h_new[i] = C::forward(zj, 1, act, state[i], next, 1, 1, p, dt, a.eps);
#pragma unroll
      for (int k = 0; k < S; ++k) {
        if (!Skipped::of(probe::kStores)) a.state_all[t * (S * BH) + k * BH + n] = next[k];
        state[i][k] = next[k];
      }
      if (Skipped::of(probe::kStores)) continue;
      a.h_all[row * H + j] = h_new[i];
      if (a.saved) {
#pragma unroll
        for (int k = 0; k < K; ++k) a.saved[row * K * H + k * H + j] = act[k];
      }
    }
    clock.mark(probe::Phase::kCell);
    wait<Skip>(cluster);  // phase B: no block reads its h tile any more
    clock.mark(probe::Phase::kWaitB);
    if (t + 1 == a.T) break;
    for (int peer = 0; peer < c && !Skipped::of(probe::kExchange); ++peer) {
      T* const tile = cluster.map_shared_rank(h_tile, peer);
#pragma unroll
      for (int i = 0; i < kMaxPairs; ++i) {
        const Pair q = pairs[i];
        if (q.valid && b0 + q.n < step.rows) tile[q.n * s.width + j0 + q.u] = Operand<P>::round(h_new[i]);
      }
    }
    clock.mark(probe::Phase::kExchange);
    arrive<Skip>(cluster);  // phase A: h_t written into every block's h tile
    clock.mark(probe::Phase::kArriveA);
  }
  if constexpr (Skipped::of(probe::kBarriers)) cluster.sync();  // no peer writes into this block's h tile any more
  clock.finish();
}

template <class C, Products P, unsigned Skip>
__global__ void __launch_bounds__(kThreads) backward_kernel(BackwardArgs a, Shape s) {
  using T = typename Operand<P>::T;
  constexpr int G = C::kGates, S = C::kStates, K = C::kSaved;
  using Skipped = probe::Skips<Skip>;
  Cluster cluster = this_cluster();
  probe::Recorder clock(s);
  const int c = static_cast<int>(cluster.num_blocks()), rank = static_cast<int>(cluster.block_rank());
  const int H = a.H, GH = G * a.H, b0 = static_cast<int>(blockIdx.x) / c * s.tile;
  const int j0 = rank * s.units, nj = max(0, min(s.units, H - j0));
  const long long BH = static_cast<long long>(a.B) * H;
  T* const w_t = dynamic_shared<T>();                                         // [width][rows]: W_r^T
  T* const dz_tile = w_t + s.rows * s.width;                                  // [tile][rows]
  float* const partial = reinterpret_cast<float*>(dz_tile + s.tile * s.rows);  // [tile][width]
  load_weights<C, P, true>(w_t, a.w_hh, H, j0, nj, s);
  for (int idx = threadIdx.x; idx < s.tile * s.rows; idx += blockDim.x) dz_tile[idx] = Operand<P>::round(0.f);
  Pair pairs[kMaxPairs];  // this thread's (unit, row) pairs, the same at every step
  float dstate[kMaxPairs][S], dp[kMaxPairs], dh[kMaxPairs];
#pragma unroll
  for (int i = 0; i < kMaxPairs; ++i) {
    pairs[i] = pair(i, 0, kThreads, nj, s.tile);
    const Pair q = pairs[i];
    const bool real = q.valid && b0 + q.n < a.B;
#pragma unroll
    for (int k = 0; k < S; ++k) {
      dstate[i][k] = real ? a.dstate[k * BH + static_cast<long long>(b0 + q.n) * H + j0 + q.u] : 0.f;
    }
    dp[i] = 0.f;
  }
  __syncthreads();  // W and the zero dz tile in place
  if constexpr (Skipped::of(probe::kBarriers)) cluster.sync();  // every block started before any DSMEM access
  const int k_tiles = s.width / 16, jobs = k_tiles * (s.tile / 16);
  for (int t = a.T - 1; t >= -1; --t) {
    clock.step(t + 1);
    // dL/dh_t of the pairs: the cluster's partial products of step t + 1 (none at t = T - 1).
#pragma unroll
    for (int i = 0; i < kMaxPairs; ++i) dh[i] = 0.f;
    if (t + 1 < a.T) {
      wait<Skip>(cluster);  // phase A: every block's P of step t + 1 is complete
      clock.mark(probe::Phase::kWait);
      for (int peer = 0; peer < c && !Skipped::of(probe::kExchange); ++peer) {
        const float* const from = cluster.map_shared_rank(partial, peer);
#pragma unroll
        for (int i = 0; i < kMaxPairs; ++i) {
          const Pair q = pairs[i];
          if (q.valid) dh[i] += from[q.n * s.width + j0 + q.u];
        }
      }
      clock.mark(probe::Phase::kExchange);
      arrive<Skip>(cluster);  // phase B: done reading the peers' P
      clock.mark(probe::Phase::kArrive);
    }
    if (t < 0) break;  // dh holds dL/dh0
    const StepRows step = step_rows(a.offsets, t, a.B);
    const float* const prev = t == 0 ? a.state0 : a.state_all + (t - 1) * (S * BH);
    const float* const next = a.state_all + t * (S * BH);
#pragma unroll
    for (int i = 0; i < kMaxPairs; ++i) {
      const Pair q = pairs[i];
      if (!q.valid) continue;
      float dz[G];
#pragma unroll
      for (int g = 0; g < G; ++g) dz[g] = 0.f;
      if (b0 + q.n < step.rows) {
        const int j = j0 + q.u;
        const long long row = step.first + b0 + q.n, n = static_cast<long long>(b0 + q.n) * H + j;
        float act[K], prev_l[S], next_l[S];
        constexpr bool kLoads = !Skipped::of(probe::kCellLoads);
        // the cell_loads rung's stand-in: a value the compiler cannot know (eps is an argument), new
        // each step and pair, so no math that uses it folds or moves out of the loop
        const float stand_in = a.eps * static_cast<float>(t + i) + 0.5f;
#pragma unroll
        for (int k = 0; k < K; ++k) act[k] = kLoads ? a.saved[row * K * H + k * H + j] : stand_in;
#pragma unroll
        for (int k = 0; k < S; ++k) {
          prev_l[k] = kLoads ? prev[k * BH + n] : stand_in;
          next_l[k] = kLoads ? next[k * BH + n] : stand_in;
        }
        const float p = a.p ? a.p[j] : 0.f, dt = a.dt ? a.dt[row] : 1.f;
        const float dh_total = dh[i] + (!a.grad_h ? 0.f : kLoads ? a.grad_h[row * H + j] : stand_in);
        float dp_step = 0.f;
        C::backward(act, prev_l, next_l, dh_total, dstate[i], dz, &dp_step, 1, 1, p, dt, a.eps);
        dp[i] += dp_step;
#pragma unroll
        for (int g = 0; g < G && !Skipped::of(probe::kStores); ++g) a.dz[row * GH + g * H + j] = dz[g];
      }
#pragma unroll
      for (int g = 0; g < G; ++g) dz_tile[q.n * s.rows + g * s.units + q.u] = Operand<P>::round(dz[g]);
    }
    clock.mark(probe::Phase::kCell);
    __syncthreads();  // the dz tile is complete
    clock.mark(probe::Phase::kBlockSync);
    if (t + 1 < a.T) wait<Skip>(cluster);  // phase B: no block reads this block's P any more
    clock.mark(probe::Phase::kWaitB);
    for (int job = static_cast<int>(threadIdx.x) / 32; job < jobs && !Skipped::of(probe::kOperands); job += kWarps) {
      const int kt = job % k_tiles, nt = job / k_tiles;
      tile_product<P, !Skipped::of(probe::kMma)>(w_t + kt * 16 * s.rows, s.rows, dz_tile + nt * 16 * s.rows, s.rows, s.rows,
                                                   partial + nt * 16 * s.width + kt * 16, s.width);
    }
    clock.mark(probe::Phase::kProduct);
    arrive<Skip>(cluster);  // phase A: this block's P of step t is complete
    clock.mark(probe::Phase::kArriveA);
  }
  if constexpr (Skipped::of(probe::kBarriers)) cluster.barrier_arrive();  // the ladder's rung arrived nowhere
  cluster.barrier_wait();  // phase B: no block reads this block's P any more (it may exit)
  clock.finish();
#pragma unroll
  for (int i = 0; i < kMaxPairs; ++i) {
    const Pair q = pairs[i];
    if (!q.valid || b0 + q.n >= a.B) continue;
    const long long n = static_cast<long long>(b0 + q.n) * H + j0 + q.u;
    a.dh[n] = dh[i];
#pragma unroll
    for (int k = 0; k < S; ++k) a.dstate[k * BH + n] = dstate[i][k];
    if (C::kHasP) a.dp[n] = dp[i];
  }
}

// -- the plan ---------------------------------------------------------------------------------------
// Configurations are priced by the fitted cost model of cost_model.h (cluster_step_us).
Shape shape_of(const Plan& plan) {
#ifdef TSRNN_PROBE
  return Shape{plan.units, plan.rows, plan.width, plan.tile, probe::armed().trace};
#else
  return Shape{plan.units, plan.rows, plan.width, plan.tile};
#endif
}

// Whether the ladder's variants of (C, P) are built (probe.h: the LSTM in TF32 and bf16).
template <class C, Products P>
constexpr bool kLadder = std::is_same<C, LSTMCell>::value && P != Products::kIeee;

}  // namespace

std::size_t forward_bytes(Products products, int rows, int width, int tile) {
  const std::size_t item = operand_bytes(products);
  return item * (static_cast<std::size_t>(rows) * width + static_cast<std::size_t>(tile) * width) +
         sizeof(float) * static_cast<std::size_t>(tile) * rows;
}

std::size_t backward_bytes(Products products, int rows, int width, int tile) {
  const std::size_t item = operand_bytes(products);
  return item * (static_cast<std::size_t>(rows) * width + static_cast<std::size_t>(tile) * rows) +
         sizeof(float) * static_cast<std::size_t>(tile) * width;
}

template <class C, Products P>
cudaError_t plan(int hidden, int batch, int cluster, int tile, Plan* out) {
  *out = Plan{};
  out->why = "no cluster size and batch tile fit";
  if (hidden < 1 || batch < 1) return cudaErrorInvalidValue;
  int device = 0, optin = 0, launchable = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&launchable, cudaDevAttrClusterLaunch, device);
  if (err != cudaSuccess) return err;
  if (!launchable) {
    out->why = "the GPU cannot launch thread-block clusters (before sm_90)";
    return cudaSuccess;
  }
  double best = 0.0;
  for (int c = 1; c <= kMaxCluster; c *= 2) {
    const int units = (hidden + c - 1) / c;
    if ((cluster > 0 && c != cluster) || (hidden + units - 1) / units != c) continue;  // a block of no unit
    for (int nb = 16; nb <= 32; nb += 16) {
      if (tile > 0 && nb != tile) continue;
      const int rows = round_up(C::kGates * units, 16), width = round_up(hidden, 16);
      const std::size_t fb = forward_bytes(P, rows, width, nb), bb = backward_bytes(P, rows, width, nb);
      if (units * nb > kThreads * kMaxPairs || std::max(fb, bb) > static_cast<std::size_t>(optin)) continue;
      int forward_resident = 0, backward_resident = 0;
      err = tensor_core::resident_clusters(forward_kernel<C, P, 0>, kThreads, optin, c, fb, &forward_resident);
      if (err == cudaSuccess) {
        err = tensor_core::resident_clusters(backward_kernel<C, P, 0>, kThreads, optin, c, bb, &backward_resident);
      }
      if (err != cudaSuccess) return err;
      const int resident = std::min(forward_resident, backward_resident);
      if (resident < 1) continue;
      const int clusters = (batch + nb - 1) / nb;
      const double cost = cost_model::cluster_step_us(operand_bytes(P), hidden, C::kGates, nb, clusters, units, resident);
      if (out->cluster == 0 || cost < best) {
        best = cost;
        *out = Plan{c, nb, clusters, units, rows, width, fb, bb, ""};
      }
    }
  }
  if (out->cluster == 0 && (cluster > 0 || tile > 0)) out->why = "the forced cluster size or batch tile does not fit";
  return cudaSuccess;
}

template <class C, Products P>
cudaError_t forward(const Plan& plan, const ForwardArgs& args, cudaStream_t stream) {
  return probe::with_skip<kLadder<C, P>, probe::kClusterRungs>([&](auto skip) {
    constexpr unsigned kSkip = decltype(skip)::value;  // 0 but in the probe's ladder, whose rungs no plan checked
    return tensor_core::launch<kSkip == 0>(forward_kernel<C, P, kSkip>, plan.clusters * plan.cluster, kThreads,
                                           plan.cluster, plan.forward_bytes, false, stream, args, shape_of(plan));
  });
}

template <class C, Products P>
cudaError_t backward(const Plan& plan, const BackwardArgs& args, cudaStream_t stream) {
  return probe::with_skip<kLadder<C, P>, probe::kClusterRungs>([&](auto skip) {
    constexpr unsigned kSkip = decltype(skip)::value;  // 0 but in the probe's ladder, whose rungs no plan checked
    return tensor_core::launch<kSkip == 0>(backward_kernel<C, P, kSkip>, plan.clusters * plan.cluster, kThreads,
                                           plan.cluster, plan.backward_bytes, false, stream, args, shape_of(plan));
  });
}

// The cells of csrc/recurrence/cells.h and the precisions of csrc/recurrence/products.h, the only
// instantiations (cluster_recurrence.h declares the templates).
#define TSRNN_INSTANTIATE(C, P)                                                                  \
  template cudaError_t plan<C, P>(int, int, int, int, Plan*);                                    \
  template cudaError_t forward<C, P>(const Plan&, const ForwardArgs&, cudaStream_t);             \
  template cudaError_t backward<C, P>(const Plan&, const BackwardArgs&, cudaStream_t);
#define TSRNN_INSTANTIATE_CELL(C)           \
  TSRNN_INSTANTIATE(C, Products::kIeee)     \
  TSRNN_INSTANTIATE(C, Products::kTf32)     \
  TSRNN_INSTANTIATE(C, Products::kBf16)
TSRNN_INSTANTIATE_CELL(LSTMCell)
TSRNN_INSTANTIATE_CELL(PowerLawCell<true>)
TSRNN_INSTANTIATE_CELL(PowerLawCell<false>)
#undef TSRNN_INSTANTIATE_CELL
#undef TSRNN_INSTANTIATE

}  // namespace cluster
}  // namespace cuda
}  // namespace tsrnn
