// The cluster-resident recurrence on tensor cores (docs/kernels.md, "How the GPU kernels work"):
// one launch per direction runs all T steps, each batch tile of `tile` rows on one thread-block
// cluster of c <= 16 blocks that keeps W_hh in its shared memory for the whole sequence, with no
// grid-wide synchronisation and no cluster barrier inside the time loops.
//
// Block r owns the units J_r = [r U, min(H, (r + 1) U)) and holds their rows of W_hh rounded to the
// operand type as W_r [rows][width] (row g U + u is W_hh[g H + j0 + u, :]; the backward W_r^T),
// padded to multiples of 16, each row kPad bytes longer (tensor_core.h). The products are segments
// (tensor_core.h's Split) dealt to the 8 warps; held fragments stay in registers, the rest is read
// by ldmatrix; K parts are summed in a fixed order. Blocks exchange data by st.async pushes that
// complete on the destination's mbarrier `full`, and push into a tile only after every block has
// arrived at its mbarrier `empty` (relaxed, no fence).
// Forward, step t: 1. wait for phase t - 1 of `full` (every block's h_{t-1} in this block's h
// tile); 2. z_r = W_r h_tile^T on the tensor cores; block barrier; arrive at `full` and at every
// block's `empty`; 3. the cell (csrc/recurrence/cells/) on each thread's (unit, row) pairs, states
// in registers, xg prefetched with cp.async; h_t, the states and the saved activations to global
// memory; 4. block barrier; wait for phase t of `empty`, push h_t into every block's h tile.
// Backward, step t from T-1 down: 1. wait for `full` (every block's P_q = W_q^T dz_q rows for this
// block's units in recv [c][tile][units]; dL/dh_t is their sum); 2. the cell's backward, dz_t to
// global memory and, rounded, to the dz tile (two, alternating); 3. block barrier; arrive at `full`
// and every `empty`; wait for `empty`, then P_r = W_r^T dz_tile pushed to each unit's owner.
// After the loop dL/dh0, dstate and dL/dparams are written once; dW_hh is one GEMM afterwards
// (csrc/recurrence/weight_grad.h). Cluster syncs before the loop and before exit are the only
// GPU-wide fences. Packed sequences: step t runs rows b < rows(t); an inactive row pushes its last h
// again forward and a zero dz backward. Products: kTf32 (m16n8k8), kBf16 (m16n8k16), kIeee (a scalar
// float32 loop); the exchange is sm_90 PTX: the kernel traps on an earlier GPU, where the plan
// launches nothing.
#include <algorithm>
#include <climits>
#include <cstdint>

#include "recurrence/cells/list.h"
#include "recurrence/cuda/cluster_parts.h"
#include "recurrence/cuda/cluster_recurrence.h"
#include "recurrence/cuda/cost_model.h"
#include "recurrence/cuda/device_common.h"
#include "recurrence/cuda/probe.h"
#include "recurrence/cuda/tensor_core.h"

namespace tsrnn {
namespace cuda {
namespace cluster {
namespace {

template <class C, Products P, unsigned Skip>
__global__ void __launch_bounds__(kThreads, 1) forward_kernel(ForwardArgs a, Shape s) {
  using T = typename Operand<P>::T;
  constexpr int G = C::kGates, S = C::kStates, K = C::kSaved, kItem = static_cast<int>(sizeof(T));
  using Skipped = probe::Skips<Skip>;
  // The ladder's rungs: kBarriers leaves the mbarrier protocol out, kExchange the pushes and the
  // handshake that guards them (`full` then completes on this block's own arrival).
  constexpr bool kSync = !Skipped::of(probe::kBarriers);
  constexpr bool kPush = kSync && !Skipped::of(probe::kExchange);
  Cluster cluster = this_cluster();
  probe::Recorder clock(s);
  const int c = static_cast<int>(cluster.num_blocks()), rank = static_cast<int>(cluster.block_rank());
  const int H = a.H, b0 = static_cast<int>(blockIdx.x) / c * s.tile;
  const int j0 = rank * s.units, nj = max(0, min(s.units, H - j0));
  const long long BH = static_cast<long long>(a.B) * H;
  const int pitch = s.width + kPad<P>;          // of W_r's and the h tile's rows
  const int stage_words = s.units * kItem / 4;  // a row of the stage (units x item is a multiple of 4)
  std::uint64_t* const full = dynamic_shared<std::uint64_t>();  // the h tile holds h_{t-1}
  std::uint64_t* const empty = full + 1;                        // every block is done reading its h tile
  T* const w = reinterpret_cast<T*>(full + 2);                  // [rows][pitch]
  T* const h_tile = w + s.rows * pitch;                         // [tile][pitch]
  const int z_pitch = s.rows + kPartPad;  // z's parts [parts][tile][z_pitch]
  float* const z = reinterpret_cast<float*>(h_tile + s.tile * pitch);
  std::uint32_t* const stage = reinterpret_cast<std::uint32_t*>(z + s.parts * s.tile * z_pitch);  // [tile][stage_words]
  T* const stage_h = reinterpret_cast<T*>(stage);  // [tile][units]: this block's h_t, rounded
  // xg a step ahead (after the stage, 4-byte aligned: units x item is a multiple of 4)
  const Prefetch pf{reinterpret_cast<float*>(stage + s.tile * stage_words), s.pairs, G};
  constexpr bool kLoads = !Skipped::of(probe::kCellLoads);
  const bool prefetch = s.prefetch && kLoads;
  load_weights<C, P, false>(w, a.w_hh, H, j0, nj, s);
  for (int idx = threadIdx.x; idx < s.tile * pitch; idx += blockDim.x) {
    const int b = b0 + idx / pitch, k = idx % pitch;
    h_tile[idx] = Operand<P>::round(b < a.B && k < H ? a.h0[static_cast<long long>(b) * H + k] : 0.f);
  }
  for (int idx = threadIdx.x; idx < s.tile * stage_words; idx += blockDim.x) stage[idx] = 0u;  // units past nj stay 0
  Pair pairs[kMaxPairs];      // this thread's (unit, row) pairs, the same at every step
  float state[kMaxPairs][S];  // each pair's states after the last step it ran
  float h_last[kMaxPairs];    // each pair's h after the last step it ran (pushed again while its row waits)
#pragma unroll
  for (int i = 0; i < kMaxPairs; ++i) {
    pairs[i] = pair(i, 0, kThreads, nj, s.tile);
    const Pair q = pairs[i];
    const bool real = q.valid && b0 + q.n < a.B;
    const long long n = static_cast<long long>(b0 + q.n) * H + j0 + q.u;
#pragma unroll
    for (int k = 0; k < S; ++k) state[i][k] = real ? a.state0[k * BH + n] : 0.f;
    h_last[i] = real ? a.h0[n] : 0.f;
  }
  if (threadIdx.x == 0) {
    ptx::mbarrier_init(full, 1);  // this block's arrival with the bytes it expects, then the bytes
    ptx::mbarrier_init(empty, static_cast<unsigned>(c));  // one arrival from every block a step
    ptx::fence_mbarrier_init();
  }
  // W, the h tile, the stage and the mbarriers in place in every block of the cluster before any
  // block signals or pushes (once: the cluster barrier's fences stay out of the time loop).
  cluster.sync();
  if (prefetch) prefetch_forward<G>(pf, a, pairs, 0, b0, j0);
  const unsigned expected = kPush ? exchange_bytes(c, s.units, H, s.tile, kItem) : 0u;
  const int my_words = slice_words(rank, s.units, H, kItem);
  const std::uint32_t tile_address = ptx::shared_address(h_tile) + static_cast<std::uint32_t>(j0 * kItem);
  const std::uint32_t full_address = ptx::shared_address(full), empty_address = ptx::shared_address(empty);
  // z = W_r h_tile^T in segments (m-tile, part of K), the first of each warp's A fragments held
  const Split split = tensor_core::split(s.rows / 16, s.tile / 8, s.width / tensor_core::kK<P>, s.parts);
  const int warp = static_cast<int>(threadIdx.x) / 32;
  tensor_core::Held held;
  if (!Skipped::of(probe::kOperands)) tensor_core::hold<P>(held, w, pitch, split, warp, kWarps);
  for (int t = 0; t < a.T; ++t) {
    const StepRows step = step_rows(a.offsets, t, a.B);
    const bool pushes = t + 1 < a.T;
    clock.step(t);
    if (prefetch) prefetch_forward<G>(pf, a, pairs, t + 1, b0, j0);  // lands while this step runs
    // Phase t - 1 of `full`: every block's h_{t-1} (h0 was loaded) has landed in the h tile.
    if (t > 0 && kSync) ptx::mbarrier_wait(full, static_cast<unsigned>((t - 1) % 2));
    clock.mark(probe::Phase::kWait);
    if (!Skipped::of(probe::kOperands)) {
      tensor_core::product<P, !Skipped::of(probe::kMma)>(held, w, pitch, h_tile, pitch, split, warp, kWarps,
                                                         [&](int part, int m, int n, float v) {
        z[(part * s.tile + n) * z_pitch + m] = v;
      });
    }
    clock.mark(probe::Phase::kProduct);
    // z complete, so this block is done reading its h tile; every thread is past this step's wait
    // on `full` and its last step's wait on `empty` (the arrivals below open the phases after them).
    __syncthreads();
    clock.mark(probe::Phase::kBlockSync);
    if (pushes && kSync) {
      // Phase t of `full` expects the pushes of step t (peers' may land first: the tx-count goes
      // negative until this arrival). Then block `threadIdx.x` learns that this block is done
      // reading: a relaxed arrival (no fence): the reads' values were consumed by the mma before
      // the barrier above, so no later push can change what they returned.
      if (threadIdx.x == 0) ptx::mbarrier_arrive_expect_tx(full, expected);
      if (kPush && static_cast<int>(threadIdx.x) < c) ptx::mbarrier_arrive_remote_relaxed(ptx::mapa(empty_address, threadIdx.x));
    }
    clock.mark(probe::Phase::kArrive);
    if (prefetch) ptx::cp_async_wait<1>();  // this step's xg landed (the next step's may still be in flight)
#pragma unroll
    for (int i = 0; i < kMaxPairs; ++i) {
      const Pair q = pairs[i];
      if (!q.valid) continue;
      if (b0 + q.n < step.rows) {
        const int j = j0 + q.u;
        const long long row = step.first + b0 + q.n, n = static_cast<long long>(b0 + q.n) * H + j;
        float zj[G], act[K], next[S];
#pragma unroll
        for (int g = 0; g < G; ++g) {
          const float x = !kLoads ? 0.f : prefetch ? *pf.at(t, i, g) : a.xg[row * G * H + g * H + j];
          float sum = 0.f;  // z's parts, in a fixed order
          for (int part = 0; part < split.parts; ++part) sum += z[(part * s.tile + q.n) * z_pitch + g * s.units + q.u];
          zj[g] = sum + x;
        }
        float param[at_least_one(C::kParams)];  // the unit's parameters (a cell of none loads none)
#pragma unroll
        for (int k = 0; k < C::kParams; ++k) param[k] = a.params[k * H + j];
        const float delta = C::kStepInput && a.steps ? a.steps[row] : 1.f;
        h_last[i] = C::forward(zj, 1, act, state[i], next, 1, 1, param, delta, a.constants.value);
#pragma unroll
        for (int k = 0; k < S; ++k) {
          if (!Skipped::of(probe::kStores)) a.state_all[t * (S * BH) + k * BH + n] = next[k];
          state[i][k] = next[k];
        }
        if (!Skipped::of(probe::kStores)) {
          a.h_all[row * H + j] = h_last[i];
          if (a.saved) {
#pragma unroll
            for (int k = 0; k < K; ++k) a.saved[row * K * H + k * H + j] = act[k];
          }
        }
      }
      stage_h[q.n * s.units + q.u] = Operand<P>::round(h_last[i]);  // a row past this step pushes its last h again
    }
    clock.mark(probe::Phase::kCell);
    if (!pushes) break;
    __syncthreads();  // the stage complete
    clock.mark(probe::Phase::kBlockSync);
    // Phase t of `empty`: every block is done reading its h tile of step t; then h_t into it.
    if (kPush) ptx::mbarrier_wait(empty, static_cast<unsigned>(t % 2));
    clock.mark(probe::Phase::kWaitB);
    for (int word = threadIdx.x; kPush && word < s.tile * my_words; word += blockDim.x) {
      const int n = word / my_words, k = word % my_words;
      const std::uint32_t value = stage[n * stage_words + k];
      const std::uint32_t to = tile_address + static_cast<std::uint32_t>(n * pitch * kItem + 4 * k);
      for (int peer = 0; peer < c; ++peer) ptx::st_async(ptx::mapa(to, peer), value, ptx::mapa(full_address, peer));
    }
    clock.mark(probe::Phase::kExchange);
  }
  // Every push into this block was waited for; no block exits before its peers are done with the
  // addresses of its shared memory (mapa).
  cluster.sync();
  clock.finish();
}

template <class C, Products P, unsigned Skip>
__global__ void __launch_bounds__(kThreads, 1) backward_kernel(BackwardArgs a, Shape s) {
  using T = typename Operand<P>::T;
  constexpr int G = C::kGates, S = C::kStates, K = C::kSaved;
  using Skipped = probe::Skips<Skip>;
  // The ladder's rungs: kBarriers leaves the mbarrier protocol out, kExchange the pushes and the
  // handshake that guards them (as kOperands, without which there is nothing to push): `full` then
  // completes on this block's own arrival.
  constexpr bool kSync = !Skipped::of(probe::kBarriers);
  constexpr bool kPush = kSync && !Skipped::of(probe::kExchange) && !Skipped::of(probe::kOperands);
  Cluster cluster = this_cluster();
  probe::Recorder clock(s);
  const int c = static_cast<int>(cluster.num_blocks()), rank = static_cast<int>(cluster.block_rank());
  const int H = a.H, GH = G * a.H, b0 = static_cast<int>(blockIdx.x) / c * s.tile;
  const int j0 = rank * s.units, nj = max(0, min(s.units, H - j0));
  const long long BH = static_cast<long long>(a.B) * H;
  const int pitch = s.rows + kPad<P>;                           // of W_r^T's and the dz tile's rows
  std::uint64_t* const full = dynamic_shared<std::uint64_t>();  // every block's P slice has landed in recv
  std::uint64_t* const empty = full + 1;                        // every block is done reading its recv
  T* const w_t = reinterpret_cast<T*>(full + 2);                // [width][pitch]: W_r^T
  // [2][tile][pitch]: step t's dz in tile t % 2 (the cell of step t - 1 writes the other while slower
  // warps still read this one in the product of step t; the barrier after that cell separates a
  // tile's product from its next writes)
  T* const dz_tiles = w_t + s.width * pitch;
  float* const recv = reinterpret_cast<float*>(dz_tiles + 2 * s.tile * pitch);  // [c][tile][units]: P_q's rows of J_r
  // P_r's parts [parts][tile][p_pitch] where K is split (parts > 1), summed before they are pushed
  const int p_pitch = s.width + kPartPad;
  float* const p_parts = recv + c * s.tile * s.units;
  const Prefetch pf{p_parts + (s.parts > 1 ? s.parts * s.tile * p_pitch : 0), s.pairs, K + 2 * S + 1};  // the cell's operands a step ahead
  constexpr bool kLoads = !Skipped::of(probe::kCellLoads);
  const bool prefetch = s.prefetch && kLoads;
  load_weights<C, P, true>(w_t, a.w_hh, H, j0, nj, s);
  for (int idx = threadIdx.x; idx < 2 * s.tile * pitch; idx += blockDim.x) dz_tiles[idx] = Operand<P>::round(0.f);
  Pair pairs[kMaxPairs];  // this thread's (unit, row) pairs, the same at every step
  float dstate[kMaxPairs][S], dparam[kMaxPairs][at_least_one(C::kParams)], dh[kMaxPairs];
#pragma unroll
  for (int i = 0; i < kMaxPairs; ++i) {
    pairs[i] = pair(i, 0, kThreads, nj, s.tile);
    const Pair q = pairs[i];
    const bool real = q.valid && b0 + q.n < a.B;
#pragma unroll
    for (int k = 0; k < S; ++k) {
      dstate[i][k] = real ? a.dstate[k * BH + static_cast<long long>(b0 + q.n) * H + j0 + q.u] : 0.f;
    }
#pragma unroll
    for (int k = 0; k < C::kParams; ++k) dparam[i][k] = 0.f;
  }
  if (threadIdx.x == 0) {
    ptx::mbarrier_init(full, 1);  // this block's arrival with the bytes it expects, then the bytes
    ptx::mbarrier_init(empty, static_cast<unsigned>(c));  // one arrival from every block a step
    ptx::fence_mbarrier_init();
  }
  // W, the dz tile and the mbarriers in place in every block of the cluster before any block
  // signals or pushes (once: the cluster barrier's fences stay out of the time loop).
  cluster.sync();
  if (prefetch) prefetch_backward<K, S>(pf, a, pairs, a.T - 1, b0, j0);
  // Every block pushes its P's rows of this block's units, for the whole tile, each step.
  const unsigned expected = kPush ? 4u * static_cast<unsigned>(c * s.tile * nj) : 0u;
  const std::uint32_t recv_address = ptx::shared_address(recv) + static_cast<std::uint32_t>(4 * rank * s.tile * s.units);
  const std::uint32_t full_address = ptx::shared_address(full), empty_address = ptx::shared_address(empty);
  // P_r = W_r^T dz_tile^T in segments (m-tile of W_r^T's rows, part of K), the first of each warp's A
  // fragments held
  const Split split = tensor_core::split(s.width / 16, s.tile / 8, s.rows / tensor_core::kK<P>, s.parts);
  const int warp = static_cast<int>(threadIdx.x) / 32;
  tensor_core::Held held;
  if (!Skipped::of(probe::kOperands)) tensor_core::hold<P>(held, w_t, pitch, split, warp, kWarps);
  // Element (k, n) of P_r pushed into the recv of the block that owns unit k, slot (r, n, k - its j0).
  auto push = [&](int k, int n, float v) {
    const unsigned owner = static_cast<unsigned>(k / s.units);
    const std::uint32_t to = recv_address + static_cast<std::uint32_t>(4 * (n * s.units + k % s.units));
    ptx::st_async(ptx::mapa(to, owner), __float_as_uint(v), ptx::mapa(full_address, owner));
  };
  for (int t = a.T - 1; t >= -1; --t) {
    clock.step(t + 1);
    if (prefetch && t >= 0) prefetch_backward<K, S>(pf, a, pairs, t - 1, b0, j0);  // lands while this step runs
    // dL/dh_t of the pairs: the sum over the cluster's blocks q of P_q = W_q^T dz_q of step t + 1
    // (none at t = T - 1), push T - 2 - t into recv: phase T - 2 - t of `full`.
#pragma unroll
    for (int i = 0; i < kMaxPairs; ++i) dh[i] = 0.f;
    const int received = a.T - 2 - t;
    if (t + 1 < a.T) {
      if (kSync) ptx::mbarrier_wait(full, static_cast<unsigned>(received % 2));
      clock.mark(probe::Phase::kWait);
      for (int q = 0; q < c && kPush; ++q) {
#pragma unroll
        for (int i = 0; i < kMaxPairs; ++i) {
          if (pairs[i].valid) dh[i] += recv[(q * s.tile + pairs[i].n) * s.units + pairs[i].u];
        }
      }
      clock.mark(probe::Phase::kExchange);
    }
    if (t < 0) break;  // dh holds dL/dh0
    const StepRows step = step_rows(a.offsets, t, a.B);
    const float* const prev = t == 0 ? a.state0 : a.state_all + (t - 1) * (S * BH);
    const float* const next = a.state_all + t * (S * BH);
    T* const dz_tile = dz_tiles + t % 2 * s.tile * pitch;
    if (prefetch) ptx::cp_async_wait<1>();  // this step's operands landed (the next step's may still be in flight)
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
        // the cell_loads rung's stand-in: a value the compiler cannot know (the first constant is an argument), new
        // each step and pair, so no math that uses it folds or moves out of the loop
        const float stand_in = a.constants.value[0] * static_cast<float>(t + i) + 0.5f;
#pragma unroll
        for (int k = 0; k < K; ++k) act[k] = !kLoads ? stand_in : prefetch ? *pf.at(t, i, k) : a.saved[row * K * H + k * H + j];
#pragma unroll
        for (int k = 0; k < S; ++k) {
          prev_l[k] = !kLoads ? stand_in : prefetch ? *pf.at(t, i, K + k) : prev[k * BH + n];
          next_l[k] = !kLoads ? stand_in : prefetch ? *pf.at(t, i, K + S + k) : next[k * BH + n];
        }
        float param[at_least_one(C::kParams)], dparam_step[at_least_one(C::kParams)];
        unit_params<C::kParams>(a.params, H, j, param, dparam_step);
        const float delta = C::kStepInput && a.steps ? a.steps[row] : 1.f;
        const float grad_h = !a.grad_h ? 0.f : !kLoads ? stand_in : prefetch ? *pf.at(t, i, K + 2 * S) : a.grad_h[row * H + j];
        const float dh_total = dh[i] + grad_h;
        C::backward(act, prev_l, next_l, dh_total, dstate[i], dz, dparam_step, 1, 1, param, delta, a.constants.value);
#pragma unroll
        for (int k = 0; k < C::kParams; ++k) dparam[i][k] += dparam_step[k];
#pragma unroll
        for (int g = 0; g < G && !Skipped::of(probe::kStores); ++g) a.dz[row * GH + g * H + j] = dz[g];
      }
#pragma unroll
      for (int g = 0; g < G; ++g) dz_tile[q.n * pitch + g * s.units + q.u] = Operand<P>::round(dz[g]);
    }
    clock.mark(probe::Phase::kCell);
    // The dz tile complete; every thread is past its reads of recv and this step's wait on `full`
    // (the arrivals below open the phases after the ones waited for).
    __syncthreads();
    clock.mark(probe::Phase::kBlockSync);
    if (kSync) {
      // Phase received + 1 of `full` expects the pushes of step t (peers' may land first: the
      // tx-count goes negative until this arrival); block threadIdx.x learns that this block is done
      // reading its recv, by a relaxed arrival (no fence): the reads' values were consumed before
      // the barrier above.
      if (threadIdx.x == 0) ptx::mbarrier_arrive_expect_tx(full, expected);
      if (kPush && t + 1 < a.T && static_cast<int>(threadIdx.x) < c) {
        ptx::mbarrier_arrive_remote_relaxed(ptx::mapa(empty_address, threadIdx.x));
      }
    }
    clock.mark(probe::Phase::kArrive);
    // Phase `received` of `empty`: every block is done reading its recv of the last push (the first
    // push, at t = T - 1, goes into recvs nobody has read).
    if (kPush && t + 1 < a.T) ptx::mbarrier_wait(empty, static_cast<unsigned>(received % 2));
    clock.mark(probe::Phase::kWaitB);
    // P_r = W_r^T dz: with K whole (one part) each element pushed from the accumulators; split, the
    // parts into shared memory, then (block barrier) their sums pushed, in a fixed order.
    if (!Skipped::of(probe::kOperands)) {
      tensor_core::product<P, !Skipped::of(probe::kMma)>(held, w_t, pitch, dz_tile, pitch, split, warp, kWarps,
                                                         [&](int part, int k, int n, float v) {
        if (split.parts > 1) {
          p_parts[(part * s.tile + n) * p_pitch + k] = v;
        } else if (kPush && k < H) {
          push(k, n, v);
        }
      });
      if (split.parts > 1) {
        __syncthreads();  // every part in place (the next writes of p_parts follow the cell's barrier)
        for (int idx = threadIdx.x; kPush && idx < s.tile * H; idx += blockDim.x) {
          const int n = idx / H, k = idx % H;
          float sum = 0.f;
          for (int part = 0; part < split.parts; ++part) sum += p_parts[(part * s.tile + n) * p_pitch + k];
          push(k, n, sum);
        }
      }
    }
    clock.mark(probe::Phase::kProduct);
  }
  // Every push into this block was waited for; no block exits before its peers are done with the
  // addresses of its shared memory (mapa).
  cluster.sync();
  clock.finish();
#pragma unroll
  for (int i = 0; i < kMaxPairs; ++i) {
    const Pair q = pairs[i];
    if (!q.valid || b0 + q.n >= a.B) continue;
    const long long n = static_cast<long long>(b0 + q.n) * H + j0 + q.u;
    a.dh[n] = dh[i];
#pragma unroll
    for (int k = 0; k < S; ++k) a.dstate[k * BH + n] = dstate[i][k];
#pragma unroll
    for (int k = 0; k < C::kParams; ++k) a.dparams[k * BH + n] = dparam[i][k];
  }
}

}  // namespace
}  // namespace cluster
}  // namespace cuda
}  // namespace tsrnn

#include "recurrence/cuda/cluster_plan.h"
