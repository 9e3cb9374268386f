// The host side of grid_recurrence.cu: a block's shared memory (block_bytes), the plan of each
// direction and of a call (plan_direction, plan), a direction's Shape at launch (shape_of), the
// launches (forward, backward: the probe's ladder rungs included) and the templates' instantiations
// for every cell and precision. Included at the end of grid_recurrence.cu only, after the kernels
// it launches (forward_kernel, backward_kernel) and the device pieces it sizes (grid_parts.h).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <type_traits>

#include "recurrence/cells/list.h"
#include "recurrence/cuda/cost_model.h"
#include "recurrence/cuda/flag_barrier.h"
#include "recurrence/cuda/grid_parts.h"
#include "recurrence/cuda/grid_recurrence.h"
#include "recurrence/cuda/probe.h"
#include "recurrence/cuda/slice_load.h"
#include "recurrence/cuda/tensor_core.h"

namespace tsrnn {
namespace cuda {
namespace grid {

// -- the plan ---------------------------------------------------------------------------------------
// Configurations are priced by the fitted cost model of cost_model.h (grid_step_us).

std::size_t block_bytes(Products products, int rows, int width, int chunk) {
  const std::size_t item = operand_bytes(products);
  const bool holds = products != Products::kIeee;
  const Stream stream{rows / 16, width * static_cast<int>(item) / 32, kWarps, holds};  // a k-step: 32 bytes of a row
  const std::size_t bytes = static_cast<std::size_t>(stream.slots()) * Stream::kSlotBytes +
                            item * static_cast<std::size_t>(chunk) * (width + tensor_core::pad_of(products)) +
                            sizeof(float) * static_cast<std::size_t>(chunk) * rows;
  const std::size_t staging = holds ? static_cast<std::size_t>(kWarps) * tensor_core::kHeldSteps * Stream::kSlotBytes : 0;
  return std::max(bytes, staging);  // hold_stream stages a warp's held fragments in the slots' space
}

// The best configuration of one direction (Forward: the forward's) for `hidden` units of cell C and
// `batch` rows, `cluster` / `chunk` > 0 forcing that value: cluster == 0 in *out where nothing fits.
template <class C, Products P, bool Forward>
cudaError_t plan_direction(int hidden, int batch, int cluster, int chunk, int optin, int sms, bool launchable,
                           Direction* out) {
  constexpr int G = C::kGates;
  const int inner = Forward ? hidden : G * hidden;  // the product's K, split over a cluster's blocks
  const int padded = round_up(batch, 16);
  *out = Direction{};
  double best = 0.0;
  for (int c = 1; c <= (launchable ? kMaxCluster : 1); c *= 2) {
    if (cluster > 0 && c != cluster) continue;
    const int chunks[] = {16, 32, 48, 64, padded};  // up to 64 rows at a time, or the whole batch at once
    for (int which = 0; which < 5; ++which) {
      const int nb = chunks[which];
      if (nb > padded || (which == 4 && padded <= 64) || (chunk > 0 && nb != chunk)) continue;
      const int width = round_up((inner + c - 1) / c, 16);
      for (int clusters = std::min(sms / c, hidden); clusters >= 1; --clusters) {
        const int units = (hidden + clusters - 1) / clusters;
        if ((hidden + units - 1) / units != clusters) continue;  // a cluster of no unit
        if (units * batch > c * kThreads * kMaxPairs) break;    // fewer clusters: more pairs
        const int rows = round_up(Forward ? G * units : units, 16);
        const std::size_t bytes = block_bytes(P, rows, width, nb);
        if (bytes > static_cast<std::size_t>(optin)) continue;
        int resident = 0;
        cudaError_t err;
        if constexpr (Forward) {
          err = tensor_core::resident_clusters(forward_kernel<C, P, 0>, kThreads, optin, c, bytes, &resident);
        } else {
          err = tensor_core::resident_clusters(backward_kernel<C, P, 0>, kThreads, optin, c, bytes, &resident);
        }
        if (err != cudaSuccess) return err;
        if (resident < clusters) continue;
        const double cost = cost_model::grid_direction_us(operand_bytes(P), batch, c, nb, units, rows, width,
                                                          cost_model::vector_floats(inner));
        if (out->cluster == 0 || cost < best) {
          best = cost;
          *out = Direction{c, clusters, units, nb, rows, width, bytes};
        }
        break;  // the most clusters that fit: fewer cost more
      }
    }
  }
  return cudaSuccess;
}

template <class C, Products P>
cudaError_t plan(int hidden, int batch, const std::array<int, 4>& forced, Plan* out) {
  *out = Plan{};
  out->why = "no cluster size and batch chunk fit";
  if (hidden < 1 || batch < 1) return cudaErrorInvalidValue;
  int device = 0, optin = 0, sms = 0, launchable = 0, cooperative = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&launchable, cudaDevAttrClusterLaunch, device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device);
  if (err != cudaSuccess) return err;
  if (!cooperative) {
    out->why = "the GPU cannot launch cooperatively (all blocks resident)";
    return cudaSuccess;
  }
  err = plan_direction<C, P, true>(hidden, batch, forced[0], forced[1], optin, sms, launchable != 0, &out->forward);
  if (err == cudaSuccess) {
    err = plan_direction<C, P, false>(hidden, batch, forced[2], forced[3], optin, sms, launchable != 0, &out->backward);
  }
  if (err != cudaSuccess) return err;
  const bool forcing = forced[0] > 0 || forced[1] > 0 || forced[2] > 0 || forced[3] > 0;
  if (!out->fits()) {
    out->forward = out->backward = Direction{};
    if (forcing) out->why = "the forced cluster size or batch chunk does not fit";
  }
  return cudaSuccess;
}

// A direction's Shape: the floats of a load of its operand slice (`ld` floats a row, read from the
// `count` pointers) (and the armed trace in the probe's build).
Shape shape_of(const Direction& d, long long ld, const void* const* pointers, int count) {
  const int vector = vector_width(ld, pointers, count);
#ifdef TSRNN_PROBE
  return Shape{d.units, d.rows, d.width, d.chunk, vector, probe::armed().trace};
#else
  return Shape{d.units, d.rows, d.width, d.chunk, vector};
#endif
}

// Whether the ladder's variants of (C, P) are built (probe.h: the LSTM in TF32 and bf16).
template <class C, Products P>
constexpr bool kLadder = std::is_same<C, LSTMCell>::value && P != Products::kIeee;

template <class C, Products P>
cudaError_t forward(const Plan& plan, const ForwardArgs& args, unsigned long long* counter, cudaStream_t stream) {
  const Direction& d = plan.forward;
  const void* const read[] = {args.h0, args.h_all};  // h_{t-1}: h0 at t = 0
  const Shape shape = shape_of(d, args.H, read, 2);
  return probe::with_skip<kLadder<C, P>, probe::kGridRungs>([&](auto skip) {
    constexpr unsigned kSkip = decltype(skip)::value;  // 0 but in the probe's ladder, whose rungs no plan checked
    return tensor_core::launch<kSkip == 0>(forward_kernel<C, P, kSkip>, d.blocks(), kThreads, d.cluster, d.bytes, true,
                                           stream, args, shape,
                                           FlagBarrier{counter, static_cast<unsigned long long>(d.clusters)});
  });
}

template <class C, Products P>
cudaError_t backward(const Plan& plan, const BackwardArgs& args, unsigned long long* counter, cudaStream_t stream) {
  const Direction& d = plan.backward;
  const void* const read[] = {args.dz};
  const Shape shape = shape_of(d, static_cast<long long>(C::kGates) * args.H, read, 1);
  return probe::with_skip<kLadder<C, P>, probe::kGridRungs>([&](auto skip) {
    constexpr unsigned kSkip = decltype(skip)::value;  // 0 but in the probe's ladder, whose rungs no plan checked
    return tensor_core::launch<kSkip == 0>(backward_kernel<C, P, kSkip>, d.blocks(), kThreads, d.cluster, d.bytes, true,
                                           stream, args, shape,
                                           FlagBarrier{counter, static_cast<unsigned long long>(d.clusters)});
  });
}

// The cells of csrc/recurrence/cells/ and the precisions of csrc/recurrence/products.h, the only
// instantiations (grid_recurrence.h declares the templates).
#define TSRNN_INSTANTIATE(C, P)                                                                                  \
  template cudaError_t plan<C, P>(int, int, const std::array<int, 4>&, Plan*);                                    \
  template cudaError_t forward<C, P>(const Plan&, const ForwardArgs&, unsigned long long*, cudaStream_t);        \
  template cudaError_t backward<C, P>(const Plan&, const BackwardArgs&, unsigned long long*, cudaStream_t);
#define TSRNN_INSTANTIATE_CELL(C)       \
  TSRNN_INSTANTIATE(C, Products::kIeee) \
  TSRNN_INSTANTIATE(C, Products::kTf32) \
  TSRNN_INSTANTIATE(C, Products::kBf16)
TSRNN_CELLS(TSRNN_INSTANTIATE_CELL)
#undef TSRNN_INSTANTIATE_CELL
#undef TSRNN_INSTANTIATE

}  // namespace grid
}  // namespace cuda
}  // namespace tsrnn
