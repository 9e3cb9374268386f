// The device-side pieces the grid kernels of grid_recurrence.cu are built from (included by it
// only, before its kernels): the names they take from tensor_core.h, a direction's Shape, the
// cluster barrier sync<Skip> (or what a ladder rung puts in its place), a block's Place in its
// cluster, and the weight slice as fragment streams (stream_of, place_weights) with its product
// (block_product). The product's exchange barrier (exchange_sync) and the kernels stay in the .cu,
// whose lines the SIMT emulation's planted-barrier tests name.
#pragma once

#include "recurrence/cuda/fragment_stream.h"
#include "recurrence/cuda/grid_recurrence.h"
#include "recurrence/cuda/probe.h"
#include "recurrence/cuda/ptx.h"
#include "recurrence/cuda/tensor_core.h"
#include "recurrence/products.h"

namespace tsrnn {
namespace cuda {
namespace grid {
namespace {

using tensor_core::Cluster;
using tensor_core::Operand;
using tensor_core::Pair;
using tensor_core::pair;
using tensor_core::operand_bytes;
using tensor_core::Held;
using tensor_core::round_up;
using tensor_core::Stream;
using tensor_core::WarpStream;
using tensor_core::this_cluster;
using tensor_core::kPad;
using tensor_core::kSlotElements;

constexpr int kWarps = kThreads / 32;

// What a direction's kernel needs of the plan: the cluster's units, the weight slice's padded
// rows and width, the batch chunk, the floats of a load of the operand slice (slice_load.h's
// vector_width) (and, in the probe's build, where to record the phase trace).
struct Shape {
  int units, rows, width, chunk, vector;
#ifdef TSRNN_PROBE
  probe::Trace trace;
#endif
};

// cluster.sync(), or what a ladder rung puts in its place (probe.h).
template <unsigned Skip>
__device__ inline void sync([[maybe_unused]] Cluster& cluster, [[maybe_unused]] int line = __builtin_LINE(),
                            [[maybe_unused]] const char* file = __builtin_FILE()) {
  if constexpr (probe::Skips<Skip>::of(probe::kBarriers)) {
    return;
  } else if constexpr (probe::Skips<Skip>::of(probe::kRelaxed)) {
    ptx::cluster_arrive_relaxed();
    tensor_core::wait_at(cluster, line, file);
  } else {
    tensor_core::sync_at(cluster, line, file);
  }
}

// The block's position: its cluster's units [j0, j0 + nj) and its rank in the cluster.
struct Place {
  int c, rank, j0, nj;
};

__device__ inline Place place(const Cluster& cluster, int H, int units) {
  const int c = static_cast<int>(cluster.num_blocks()), rank = static_cast<int>(cluster.block_rank());
  const int j0 = static_cast<int>(blockIdx.x) / c * units;
  return {c, rank, j0, max(0, min(units, H - j0))};
}

// The weight slice W [s.rows][s.width] as fragment streams (tensor_core.h's Stream): warp w the
// m-tiles w, w + kWarps, ..., its first fragments held in registers where the products run on
// tensor cores, the rest in the slots at the start of shared memory.
template <Products P>
__device__ inline Stream stream_of(const Shape& s) {
  return Stream{s.rows / 16, s.width / tensor_core::kK<P>, kWarps, P != Products::kIeee};
}

// The stream's fragments from value(row, column) of W: this warp's held ones into `held` (staged
// through shared memory, every thread of the block taking part; not on the ladder's rung without the
// products, probe.h), then its others into its slots.
template <Products P, unsigned Skip, class Value>
__device__ inline void place_weights(Held& held, typename Operand<P>::T* slots, const Stream& stream, Value&& value) {
  const WarpStream own = tensor_core::warp_stream(stream, static_cast<int>(threadIdx.x) / 32);
  if constexpr (!probe::Skips<Skip>::of(probe::kOperands)) tensor_core::hold_stream<P>(held, slots, stream, own.warp, value);
  tensor_core::store_fragments<P>(slots + own.first_slot * kSlotElements<P>, stream, own.warp, own.held, own.length,
                                  value);
}

// out [chunk rows][s.rows] (float) = W x^T for the first `rows` rows of x [chunk][pitch]: each warp
// its m-tiles over the whole of K (tensor_core.h's stream_product), the batch in groups of up to
// kMaxNTiles n8 tiles (none, or without the mma, on the ladder's rungs that skip them: probe.h).
template <Products P, unsigned Skip>
__device__ inline void block_product(const Held& held, const typename Operand<P>::T* slots,
                                     const typename Operand<P>::T* x, unsigned pitch, int rows, const Stream& stream,
                                     const WarpStream& own, const Shape& s, float* out) {
  if constexpr (probe::Skips<Skip>::of(probe::kOperands)) return;
  const int n_tiles = (rows + 7) / 8;
  for (int t0 = 0; t0 < n_tiles; t0 += tensor_core::kMaxNTiles) {
    tensor_core::stream_product<P, !probe::Skips<Skip>::of(probe::kMma)>(
        held, slots, x + t0 * 8 * pitch, pitch, min(tensor_core::kMaxNTiles, n_tiles - t0), stream, own,
        [&](int i, int n, float v) { out[(t0 * 8 + n) * s.rows + i] = v; });
  }
}

}  // namespace
}  // namespace grid
}  // namespace cuda
}  // namespace tsrnn
