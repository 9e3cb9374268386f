// The grid-resident recurrence on tensor cores: one cooperative launch per direction runs all T
// steps with W_hh sliced over every block of the launch (all resident) and kept on chip for the
// whole sequence (each warp's first fragments in its registers, the rest in shared memory); the steps are ordered by the flag barrier of
// csrc/recurrence/cuda/flag_barrier.h (one counter, a release add per cluster and step after the
// cluster's barrier, an acquire poll by every block). For H whose W_hh does not fit one cluster
// (cluster_recurrence.cu).
//
// Cluster i owns the units J_i = [i U, min(H, (i + 1) U)); its c blocks split the inner dimension
// of the product (grid_recurrence.h's Direction: U, c and the chunk are each direction's own). Forward, step t (z_t = W_hh h_{t-1}, then the cell of
// csrc/recurrence/cells/), for each chunk of the batch rows that run the step:
//   1. after phase t of the flag barrier (every cluster has published h_{t-1}), block r reads its
//      slice K_r of h_{t-1} for the chunk's rows from global memory (L2), rounded to the operand
//      type, in 16- or 8-byte loads where the row pitch allows (slice_load.h): the cluster reads
//      h_{t-1} once, each block a 1/c of it;
//   2. the tensor cores form the partial product Z_r = W_r[:, K_r] h_{t-1}[:, K_r]^T
//      [rows][chunk] (mma.sync, float32 accumulation) into the block's shared memory, each warp its
//      m-tiles over the whole of K_r from its fragment stream (tensor_core.h's stream_product: W's
//      first fragments held in registers, the rest read by ldmatrix), the chunk in groups of up to
//      4 n8 tiles; a cluster barrier that publishes shared memory only (exchange_sync: no GPU-wide
//      fence);
//   3. each (unit, row) pair of the cluster, spread over the cluster's threads, sums z over the
//      blocks' partial products through distributed shared memory, adds xg and applies the cell,
//      its states kept in registers across the steps, and writes h_t to global memory;
//   4. between chunks a cluster barrier (the partial sums are reused); after the last, a cluster
//      barrier and the cluster's one arrival at the flag barrier; then each block writes the states
//      and saved activations it kept in registers (stores nobody reads in this launch overlap the
//      barrier), then waits.
// Backward, step t from T-1 down to 0 and a last product at t = -1 (dL/dh_t = W_hh^T dz_{t+1}):
// block r of cluster i holds W_hh[M_r, J_i] (M_r: its slice of the G H gate rows) and, after phase
// T-1-t (every cluster has published dz_{t+1}), forms P_r = W_r dz_{t+1}[:, M_r]^T [units][chunk]
// from dz read from L2 as the forward reads h; after a cluster barrier each pair sums its dL/dh_t
// over the blocks, runs the cell's backward (dstate and the per-row dL/dparams in registers across the
// steps), writes dz_t to global memory (the operator's output, which the next step reads), and the
// cluster arrives as in the forward. The
// last product gives dL/dh0; then dstate and dL/dparams are written once. dW_hh is one GEMM over the h's
// after the kernel (csrc/recurrence/op.h). Every block ends with a cluster barrier: its shared
// memory stays mapped until its peers are done reading it.
//
// Packed sequences (recurrence.h): step t runs the rows b < rows(t) only, in chunks over those
// rows; forward, h_{t-1} of such a row is packed row offsets[t-1] + b (rows(t) <= rows(t-1));
// backward, dz_{t+1} of a row b >= rows(t+1) is zero (the row's last step is t). The rows of the
// last chunk past B compute on zeros and are never read.
// Products: kTf32 (ldmatrix + mma.sync m16n8k8, the operands pre-rounded with cvt.rna), kBf16 (m16n8k16),
// kIeee (a scalar float32 loop over the same streams, every fragment in shared memory, for callers
// that turned TF32 off).
#include <algorithm>
#include <climits>

#include "recurrence/cells/list.h"
#include "recurrence/cuda/cost_model.h"
#include "recurrence/cuda/device_common.h"
#include "recurrence/cuda/flag_barrier.h"
#include "recurrence/cuda/fragment_stream.h"
#include "recurrence/cuda/grid_parts.h"
#include "recurrence/cuda/grid_recurrence.h"
#include "recurrence/cuda/probe.h"
#include "recurrence/cuda/slice_load.h"
#include "recurrence/cuda/tensor_core.h"

namespace tsrnn {
namespace cuda {
namespace grid {
namespace {

// The cluster barrier after a product, which publishes the blocks' partial sums to their peers
// and nothing else: each thread's release fence restricted to its block's shared memory (ptx.h:
// MEMBAR.ALL.CTA on sm_90, where the release arrive of cluster.sync() costs a GPU-wide
// MEMBAR.ALL.GPU), a relaxed arrival, the wait, and an acquire fence restricted to the cluster's
// shared memory before the reads of the peers' partial sums; on the ladder's rungs, what sync puts
// in its place (and, built by an nvcc before 12.8, cluster.sync()). The GPU-wide fence a step needs
// is the one of the barrier before the cluster's flag arrival, which publishes h_t (dz_t) in global
// memory.
template <unsigned Skip>
__device__ inline void exchange_sync(Cluster& cluster, int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
  if constexpr (probe::Skips<Skip>::of(probe::kBarriers) || probe::Skips<Skip>::of(probe::kRelaxed) ||
                !ptx::kRestrictedFences) {
    sync<Skip>(cluster, line, file);
  } else {
    ptx::fence_release_own_shared();
    ptx::cluster_arrive_relaxed(line);
    tensor_core::wait_at(cluster, line, file);
    ptx::fence_acquire_cluster_shared();
  }
}

template <class C, Products P, unsigned Skip>
__global__ void __launch_bounds__(kThreads, 1) forward_kernel(ForwardArgs a, Shape s, FlagBarrier barrier) {
  using T = typename Operand<P>::T;
  constexpr int G = C::kGates, S = C::kStates, K = C::kSaved;
  using Skipped = probe::Skips<Skip>;
  Cluster cluster = this_cluster();
  probe::Recorder clock(s);
  const int H = a.H;
  const Place at = place(cluster, H, s.units);
  const int k0 = at.rank * s.width, nk = max(0, min(s.width, H - k0));  // the block's slice of [0, H)
  const long long BH = static_cast<long long>(a.B) * H;
  const Walk walk = walk_of(s.width / s.vector);
  const Stream stream = stream_of<P>(s);
  const WarpStream own = tensor_core::warp_stream(stream, static_cast<int>(threadIdx.x) / 32);
  const unsigned pitch = s.width + kPad<P>;
  T* const slots = dynamic_shared<T>();                             // W's fragments not held
  T* const x = slots + stream.slots() * kSlotElements<P>;           // [chunk][pitch]
  float* const z = reinterpret_cast<float*>(x + s.chunk * pitch);  // [chunk][rows]
  Held held;  // this warp's first fragments of W, for the whole sequence
  place_weights<P, Skip>(held, slots, stream, [&](int m, int k) {
    const int g = m / s.units, u = m % s.units;
    const bool real = g < G && u < at.nj && k < nk;
    return real ? a.w_hh[static_cast<long long>(g * H + at.j0 + u) * H + k0 + k] : 0.f;
  });
  Pair pairs[kMaxPairs];      // this thread's (unit, row) pairs, the same at every step
  float state[kMaxPairs][S];  // each pair's states after the last step it ran
  float act[kMaxPairs][K];    // the saved activations of the step, stored after the arrive
  bool ran[kMaxPairs];
  float kept = 0.f;           // the ladder's stores rung (probe.h): the h it does not store, summed
#pragma unroll
  for (int i = 0; i < kMaxPairs; ++i) {
    pairs[i] = pair(i, at.rank * kThreads, at.c * kThreads, at.nj, a.B);  // the cluster's pairs
    const Pair q = pairs[i];
#pragma unroll
    for (int k = 0; k < S; ++k) {
      state[i][k] = q.valid ? a.state0[k * BH + static_cast<long long>(q.n) * H + at.j0 + q.u] : 0.f;
    }
  }
  // W's slots are ordered before the first product by the block barrier after the first chunk's load.
  if constexpr (Skipped::of(probe::kBarriers)) cluster.sync();  // every block started before any DSMEM access
  for (int t = 0; t < a.T; ++t) {
    const StepRows step = step_rows(a.offsets, t, a.B);
    clock.step(t);
    const float* h_prev = a.h0;
    if (t > 0) {
      if (!Skipped::of(probe::kFlagBarrier)) barrier.wait(t);  // every block has published h_{t-1}
      h_prev = a.h_all + step_rows(a.offsets, t - 1, a.B).first * H;
    }
    clock.mark(probe::Phase::kWait);
#pragma unroll
    for (int i = 0; i < kMaxPairs; ++i) ran[i] = false;
    for (int n0 = 0; n0 < step.rows; n0 += s.chunk) {
      const int rows = min(s.chunk, step.rows - n0), padded = (rows + 7) / 8 * 8;
      if (n0 > 0) sync<Skip>(cluster);  // no block reads the previous chunk's partial sums any more
      clock.mark(probe::Phase::kClusterSync);
      if (!Skipped::of(probe::kGridLoads)) {
        load_slice<P>(s.vector, x, pitch, h_prev + static_cast<long long>(n0) * H + k0, H, rows, padded, s.width, nk,
                      walk);
      }
      clock.mark(probe::Phase::kLoad);
      __syncthreads();  // the chunk of h_{t-1} loaded
      clock.mark(probe::Phase::kBlockSync);
      block_product<P, Skip>(held, slots, x, pitch, rows, stream, own, s, z);
      clock.mark(probe::Phase::kProduct);
      exchange_sync<Skip>(cluster);  // every block's partial sums of the chunk are complete
      clock.mark(probe::Phase::kClusterSync);
#pragma unroll
      for (int i = 0; i < kMaxPairs; ++i) {
        const Pair q = pairs[i];
        if (!q.valid || q.n < n0 || q.n >= n0 + rows) continue;
        const int j = at.j0 + q.u;
        const long long row = step.first + q.n;
        float zj[G], next[S];
#pragma unroll
        for (int g = 0; g < G; ++g) zj[g] = Skipped::of(probe::kCellLoads) ? 0.f : a.xg[row * G * H + g * H + j];
        for (int peer = 0; peer < at.c && !Skipped::of(probe::kExchange); ++peer) {
          const float* const from = cluster.map_shared_rank(z, peer) + (q.n - n0) * s.rows + q.u;
#pragma unroll
          for (int g = 0; g < G; ++g) zj[g] += from[g * s.units];
        }
        float param[at_least_one(C::kParams)];  // the unit's parameters (a cell of none loads none)
#pragma unroll
        for (int k = 0; k < C::kParams; ++k) param[k] = a.params[k * H + j];
        const float delta = C::kStepInput && a.steps ? a.steps[row] : 1.f;
        const float h = C::forward(zj, 1, act[i], state[i], next, 1, 1, param, delta, a.constants.value);
        if (Skipped::of(probe::kStores)) {
          kept += h;  // the cell stays: nothing else would read what it computes
        } else {
          a.h_all[row * H + j] = h;
        }
#pragma unroll
        for (int k = 0; k < S; ++k) state[i][k] = next[k];
        ran[i] = true;
      }
      clock.mark(probe::Phase::kCell);
    }
    sync<Skip>(cluster);  // the cluster's blocks have written h_t and read their peers' partial sums
    if (!Skipped::of(probe::kFlagBarrier)) barrier.arrive_for_cluster(at.rank);  // h_t published
    clock.mark(probe::Phase::kFlagArrive);
#pragma unroll
    for (int i = 0; i < kMaxPairs; ++i) {
      if (!ran[i] || Skipped::of(probe::kStores)) continue;
      const Pair q = pairs[i];
      const int j = at.j0 + q.u;
      const long long row = step.first + q.n, n = static_cast<long long>(q.n) * H + j;
#pragma unroll
      for (int k = 0; k < S; ++k) a.state_all[t * (S * BH) + k * BH + n] = state[i][k];
      if (a.saved) {
#pragma unroll
        for (int k = 0; k < K; ++k) a.saved[row * K * H + k * H + j] = act[i][k];
      }
    }
    clock.mark(probe::Phase::kStoresAfter);
  }
  if (Skipped::of(probe::kStores) && kept == -1.0e-30f) a.h_all[0] = kept;  // (practically) never: keeps the cell
  // The last step's cluster barrier: no peer reads this block's partial sums any more, it may exit.
  if constexpr (Skipped::of(probe::kBarriers)) cluster.sync();  // the rung without it: the same before exit
  clock.finish();
}

template <class C, Products P, unsigned Skip>
__global__ void __launch_bounds__(kThreads, 1) backward_kernel(BackwardArgs a, Shape s, FlagBarrier barrier) {
  using T = typename Operand<P>::T;
  constexpr int G = C::kGates, S = C::kStates, K = C::kSaved;
  using Skipped = probe::Skips<Skip>;
  Cluster cluster = this_cluster();
  probe::Recorder clock(s);
  const int H = a.H, GH = G * a.H;
  const Place at = place(cluster, H, s.units);
  const int m0 = at.rank * s.width, nm = max(0, min(s.width, GH - m0));  // the block's gate rows
  const long long BH = static_cast<long long>(a.B) * H;
  const Walk walk = walk_of(s.width / s.vector);
  const Stream stream = stream_of<P>(s);
  const WarpStream own = tensor_core::warp_stream(stream, static_cast<int>(threadIdx.x) / 32);
  const unsigned pitch = s.width + kPad<P>;
  T* const slots = dynamic_shared<T>();                                   // W_hh^T's fragments not held
  T* const x = slots + stream.slots() * kSlotElements<P>;                 // [chunk][pitch]
  float* const partial = reinterpret_cast<float*>(x + s.chunk * pitch);  // [chunk][rows]
  Held held;  // this warp's first fragments of W_hh^T, for the whole sequence
  place_weights<P, Skip>(held, slots, stream, [&](int u, int m) {
    const bool real = u < at.nj && m < nm;
    return real ? a.w_hh[static_cast<long long>(m0 + m) * H + at.j0 + u] : 0.f;
  });
  Pair pairs[kMaxPairs];  // this thread's (unit, row) pairs, the same at every step
  float dstate[kMaxPairs][S], dparam[kMaxPairs][at_least_one(C::kParams)], dh[kMaxPairs];
  float kept = 0.f;  // the ladder's stores rung (probe.h): the dz it does not store, summed
#pragma unroll
  for (int i = 0; i < kMaxPairs; ++i) {
    pairs[i] = pair(i, at.rank * kThreads, at.c * kThreads, at.nj, a.B);  // the cluster's pairs
    const Pair q = pairs[i];
#pragma unroll
    for (int k = 0; k < S; ++k) {
      dstate[i][k] = q.valid ? a.dstate[k * BH + static_cast<long long>(q.n) * H + at.j0 + q.u] : 0.f;
    }
#pragma unroll
    for (int k = 0; k < C::kParams; ++k) dparam[i][k] = 0.f;
  }
  // W's load is ordered before the first product by the block barriers of the flag barrier and of
  // the first chunk's load.
  if constexpr (Skipped::of(probe::kBarriers)) cluster.sync();  // every block started before any DSMEM access
  for (int t = a.T - 1; t >= -1; --t) {
    clock.step(t + 1);
    // dL/dh_t of the pairs from dz_{t+1} (none at t = T - 1).
#pragma unroll
    for (int i = 0; i < kMaxPairs; ++i) dh[i] = 0.f;
    if (t + 1 < a.T) {
      if (!Skipped::of(probe::kFlagBarrier)) barrier.wait(a.T - 1 - t);  // every block has published dz_{t+1}
      clock.mark(probe::Phase::kWait);
      const StepRows next = step_rows(a.offsets, t + 1, a.B);
      const int active = t >= 0 ? step_rows(a.offsets, t, a.B).rows : a.B;
      for (int n0 = 0; n0 < active; n0 += s.chunk) {
        const int rows = min(s.chunk, active - n0), padded = (rows + 7) / 8 * 8;
        if (n0 > 0) sync<Skip>(cluster);  // no block reads the previous chunk's partial sums any more
        clock.mark(probe::Phase::kClusterSync);
        if (!Skipped::of(probe::kGridLoads)) {
          load_slice<P>(s.vector, x, pitch, a.dz + (next.first + n0) * GH + m0, GH, min(rows, next.rows - n0),
                        padded, s.width, nm, walk);
        }
        clock.mark(probe::Phase::kLoad);
        __syncthreads();  // the chunk of dz_{t+1} loaded
        clock.mark(probe::Phase::kBlockSync);
        block_product<P, Skip>(held, slots, x, pitch, rows, stream, own, s, partial);
        clock.mark(probe::Phase::kProduct);
        exchange_sync<Skip>(cluster);  // every block's partial sums of the chunk are complete
        clock.mark(probe::Phase::kClusterSync);
#pragma unroll
        for (int i = 0; i < kMaxPairs; ++i) {
          const Pair q = pairs[i];
          if (!q.valid || q.n < n0 || q.n >= n0 + rows) continue;
          for (int peer = 0; peer < at.c && !Skipped::of(probe::kExchange); ++peer) {
            dh[i] += cluster.map_shared_rank(partial, peer)[(q.n - n0) * s.rows + q.u];
          }
        }
        clock.mark(probe::Phase::kExchange);
      }
    }
    if (t < 0) break;  // dh holds dL/dh0
    const StepRows step = step_rows(a.offsets, t, a.B);
    const float* const prev = t == 0 ? a.state0 : a.state_all + (t - 1) * (S * BH);
    const float* const next = a.state_all + t * (S * BH);
#pragma unroll
    for (int i = 0; i < kMaxPairs; ++i) {
      const Pair q = pairs[i];
      if (!q.valid || q.n >= step.rows) continue;
      const int j = at.j0 + q.u;
      const long long row = step.first + q.n, n = static_cast<long long>(q.n) * H + j;
      float act[K], prev_l[S], next_l[S], dz[G];
      constexpr bool kLoads = !Skipped::of(probe::kCellLoads);
      // the cell_loads rung's stand-in: a value the compiler cannot know (the first constant is an argument), new
      // each step and pair, so no math that uses it folds or moves out of the loop
      const float stand_in = a.constants.value[0] * static_cast<float>(t + i) + 0.5f;
#pragma unroll
      for (int k = 0; k < K; ++k) act[k] = kLoads ? a.saved[row * K * H + k * H + j] : stand_in;
#pragma unroll
      for (int k = 0; k < S; ++k) {
        prev_l[k] = kLoads ? prev[k * BH + n] : stand_in;
        next_l[k] = kLoads ? next[k * BH + n] : stand_in;
      }
      float param[at_least_one(C::kParams)], dparam_step[at_least_one(C::kParams)];
      unit_params<C::kParams>(a.params, H, j, param, dparam_step);
      const float delta = C::kStepInput && a.steps ? a.steps[row] : 1.f;
      const float dh_total = dh[i] + (!a.grad_h ? 0.f : kLoads ? a.grad_h[row * H + j] : stand_in);
      C::backward(act, prev_l, next_l, dh_total, dstate[i], dz, dparam_step, 1, 1, param, delta, a.constants.value);
#pragma unroll
      for (int k = 0; k < C::kParams; ++k) dparam[i][k] += dparam_step[k];
#pragma unroll
#pragma unroll
      for (int g = 0; g < G; ++g) {
        if (Skipped::of(probe::kStores)) {
          kept += dz[g];  // the cell stays: nothing else would read what it computes
        } else {
          a.dz[row * GH + g * H + j] = dz[g];
        }
      }
    }
    clock.mark(probe::Phase::kCell);
    sync<Skip>(cluster);  // the cluster's blocks have written dz_t and read their peers' partial sums
    if (!Skipped::of(probe::kFlagBarrier)) barrier.arrive_for_cluster(at.rank);  // dz_t published
    clock.mark(probe::Phase::kFlagArrive);
  }
  if (Skipped::of(probe::kStores) && kept == -1.0e-30f) a.dz[0] = kept;  // (practically) never: keeps the cell
  cluster.sync();  // no peer reads this block's partial sums any more (it may exit)
#pragma unroll
  for (int i = 0; i < kMaxPairs; ++i) {
    const Pair q = pairs[i];
    if (!q.valid) continue;
    const long long n = static_cast<long long>(q.n) * H + at.j0 + q.u;
    a.dh[n] = dh[i];
#pragma unroll
    for (int k = 0; k < S; ++k) a.dstate[k * BH + n] = dstate[i][k];
#pragma unroll
    for (int k = 0; k < C::kParams; ++k) a.dparams[k * BH + n] = dparam[i][k];
  }
  clock.finish();
}

}  // namespace
}  // namespace grid
}  // namespace cuda
}  // namespace tsrnn

#include "recurrence/cuda/grid_plan.h"
