// The host side of cluster_recurrence.cu: a direction's Shape at launch (shape_of), a block's
// shared memory (forward_bytes, backward_bytes), the parts and prefetch that fit it
// (parts_and_prefetch), the plan of a call (plan), the launches (forward, backward: the probe's
// ladder rungs included) and the templates' instantiations for every cell and precision. Included
// at the end of cluster_recurrence.cu only, after the kernels it launches (forward_kernel,
// backward_kernel) and the device pieces it sizes (cluster_parts.h).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "recurrence/cells/list.h"
#include "recurrence/cuda/cluster_parts.h"
#include "recurrence/cuda/cluster_recurrence.h"
#include "recurrence/cuda/cost_model.h"
#include "recurrence/cuda/probe.h"
#include "recurrence/cuda/tensor_core.h"

namespace tsrnn {
namespace cuda {
namespace cluster {
namespace {

// -- the plan ---------------------------------------------------------------------------------------
// Configurations are priced by the fitted cost model of cost_model.h (cluster_step_us).
Shape shape_of(const Plan& plan, bool forward) {
  const bool prefetch = forward ? plan.forward_prefetch : plan.backward_prefetch;
  const int parts = forward ? plan.forward_parts : plan.backward_parts;
#ifdef TSRNN_PROBE
  return Shape{plan.units, plan.rows, plan.width, plan.tile, parts, plan.pairs, prefetch, probe::armed().trace};
#else
  return Shape{plan.units, plan.rows, plan.width, plan.tile, parts, plan.pairs, prefetch};
#endif
}

// Whether the ladder's variants of (C, P) are built (probe.h: the LSTM in TF32 and bf16).
template <class C, Products P>
constexpr bool kLadder = std::is_same<C, LSTMCell>::value && P != Products::kIeee;

}  // namespace

std::size_t forward_bytes(Products products, int rows, int width, int tile, int units, int parts, int prefetched) {
  const std::size_t item = operand_bytes(products), pitch = width + tensor_core::pad_of(products);
  return 2 * sizeof(std::uint64_t) + item * (static_cast<std::size_t>(rows) + tile) * pitch +
         sizeof(float) * static_cast<std::size_t>(parts) * tile * (rows + kPartPad) +
         item * static_cast<std::size_t>(tile) * units +
         sizeof(float) * static_cast<std::size_t>(prefetched);
}

std::size_t backward_bytes(Products products, int rows, int width, int tile, int units, int cluster, int parts,
                           int prefetched) {
  const std::size_t item = operand_bytes(products), pitch = rows + tensor_core::pad_of(products);
  const std::size_t p_parts = parts > 1 ? static_cast<std::size_t>(parts) * tile * (width + kPartPad) : 0;
  return 2 * sizeof(std::uint64_t) + item * (static_cast<std::size_t>(width) + 2 * static_cast<std::size_t>(tile)) * pitch +
         sizeof(float) * (static_cast<std::size_t>(cluster) * tile * units + p_parts + static_cast<std::size_t>(prefetched));
}

// The parts of a product of k_steps and whether the cell's operands are prefetched, by what the
// shared memory holds (bytes(parts, prefetch) <= limit): the prefetch first, then as many parts as
// keep every segment within kHeldSteps k-steps (each chain of dependent mma at most that long, and
// every k-step of a held segment held), fewer where they do not fit; and the bytes they take.
// parts 0: none fits.
struct Layout {
  int parts = 0;
  bool prefetch = false;
  std::size_t bytes = 0;
};

template <class Bytes>
Layout parts_and_prefetch(int k_steps, std::size_t limit, Bytes&& bytes) {
  const int most = (k_steps + tensor_core::kHeldSteps - 1) / tensor_core::kHeldSteps;
  for (const bool prefetch : {true, false}) {
    for (int parts = most; parts >= 1; --parts) {
      const int used = tensor_core::split(1, 1, k_steps, parts).parts;  // as many as that length needs
      const std::size_t taken = bytes(used, prefetch);
      if (taken <= limit) return {used, prefetch, taken};
    }
  }
  return {};
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
    // units x operand bytes a multiple of 4: the forward pushes 32-bit words of a block's h slice
    const int units = round_up((hidden + c - 1) / c, 4 / operand_bytes(P));
    if ((cluster > 0 && c != cluster) || (hidden + units - 1) / units != c) continue;  // a block of no unit
    for (int nb = 8; nb <= 8 * tensor_core::kMaxNTiles; nb += 8) {
      if (tile > 0 && nb != tile) continue;
      const int rows = round_up(C::kGates * units, 16), width = round_up(hidden, 16), k = tensor_core::kK<P>;
      const int pairs = (units * nb + kThreads - 1) / kThreads;
      if (pairs > kMaxPairs) continue;
      const std::size_t limit = static_cast<std::size_t>(optin);
      const int forward_slots = 2 * pairs * C::kGates * kThreads;
      const int backward_slots = 2 * pairs * (C::kSaved + 2 * C::kStates + 1) * kThreads;
      const Layout fw = parts_and_prefetch(width / k, limit, [&](int parts, bool prefetch) {
        return forward_bytes(P, rows, width, nb, units, parts, prefetch ? forward_slots : 0);
      });
      const Layout bw = parts_and_prefetch(rows / k, limit, [&](int parts, bool prefetch) {
        return backward_bytes(P, rows, width, nb, units, c, parts, prefetch ? backward_slots : 0);
      });
      if (fw.parts == 0 || bw.parts == 0) continue;
      const std::size_t fb = fw.bytes, bb = bw.bytes;
      int forward_resident = 0, backward_resident = 0;
      err = tensor_core::resident_clusters(forward_kernel<C, P, 0>, kThreads, optin, c, fb, &forward_resident);
      if (err == cudaSuccess) {
        err = tensor_core::resident_clusters(backward_kernel<C, P, 0>, kThreads, optin, c, bb, &backward_resident);
      }
      if (err != cudaSuccess) return err;
      const int resident = std::min(forward_resident, backward_resident);
      if (resident < 1) continue;
      const int clusters = (batch + nb - 1) / nb;
      const double cost = cost_model::cluster_step_us(operand_bytes(P), hidden, C::kGates, nb, clusters, units, resident,
                                                      fw.parts, bw.parts);
      if (out->cluster == 0 || cost < best) {
        best = cost;
        *out = Plan{c, nb, clusters, units, rows, width, fb, bb, pairs, fw.prefetch, bw.prefetch, fw.parts, bw.parts, ""};
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
                                           plan.cluster, plan.forward_bytes, false, stream, args, shape_of(plan, true));
  });
}

template <class C, Products P>
cudaError_t backward(const Plan& plan, const BackwardArgs& args, cudaStream_t stream) {
  return probe::with_skip<kLadder<C, P>, probe::kClusterRungs>([&](auto skip) {
    constexpr unsigned kSkip = decltype(skip)::value;  // 0 but in the probe's ladder, whose rungs no plan checked
    return tensor_core::launch<kSkip == 0>(backward_kernel<C, P, kSkip>, plan.clusters * plan.cluster, kThreads,
                                           plan.cluster, plan.backward_bytes, false, stream, args, shape_of(plan, false));
  });
}

// The cells of csrc/recurrence/cells/ and the precisions of csrc/recurrence/products.h, the only
// instantiations (cluster_recurrence.h declares the templates).
#define TSRNN_INSTANTIATE(C, P)                                                                  \
  template cudaError_t plan<C, P>(int, int, int, int, Plan*);                                    \
  template cudaError_t forward<C, P>(const Plan&, const ForwardArgs&, cudaStream_t);             \
  template cudaError_t backward<C, P>(const Plan&, const BackwardArgs&, cudaStream_t);
#define TSRNN_INSTANTIATE_CELL(C)           \
  TSRNN_INSTANTIATE(C, Products::kIeee)     \
  TSRNN_INSTANTIATE(C, Products::kTf32)     \
  TSRNN_INSTANTIATE(C, Products::kBf16)
TSRNN_CELLS(TSRNN_INSTANTIATE_CELL)
#undef TSRNN_INSTANTIATE_CELL
#undef TSRNN_INSTANTIATE

}  // namespace cluster
}  // namespace cuda
}  // namespace tsrnn
