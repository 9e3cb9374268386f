// The grid-resident tensor-core kernel (csrc/recurrence/cuda/grid_recurrence.cu) as the traits of
// tensor_core_policy.h: its plan (TSRNN_GRID="cluster,chunk" forces one for both directions,
// "cluster,chunk,cluster,chunk" the forward's and the backward's), its description for the operator
// `recurrence_config` ({the forward's cluster, chunk, clusters and units a cluster, forward bytes,
// backward bytes, the backward's cluster, chunk, clusters and units}) and its launches, each with a zeroed flag-barrier counter of its own; GridRecurrence, the
// recurrence operator's policy of the namespace tsrnn_grid (csrc/recurrence/cuda/binding.cpp) and
// of the tests' emulation (tests/simt).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "recurrence/cuda/grid_recurrence.h"
#include "recurrence/cuda/tensor_core_policy.h"

namespace tsrnn {
namespace cuda_binding {

struct GridKernel {
  using Plan = cuda::grid::Plan;
  static constexpr const char* kName = "grid-resident";
  static constexpr const char* kForcing = "TSRNN_GRID";
  static constexpr int kForcedValues = 4;  // "cluster,chunk" for both directions, or each its own

  template <class C, Products P>
  static cudaError_t plan(int hidden, int batch, const std::array<int, 4>& forced, Plan* out) {
    return cuda::grid::plan<C, P>(hidden, batch, forced, out);
  }

  static bool fits(const Plan& plan) { return plan.fits(); }
  static int64_t blocks(const Plan& plan) { return std::max(plan.forward.blocks(), plan.backward.blocks()); }

  static std::vector<int64_t> describe(const Plan& plan) {
    const cuda::grid::Direction &f = plan.forward, &b = plan.backward;
    return {f.cluster, f.chunk, f.clusters, f.units, static_cast<int64_t>(f.bytes), static_cast<int64_t>(b.bytes),
            b.cluster, b.chunk, b.clusters, b.units};
  }

  // The flag barrier's counter: one zeroed 64-bit word on `device`. The caching allocator may hand
  // its memory to a later allocation once this returns: only work queued after the kernel on the
  // same stream can use it.
  static Tensor counter(const at::Device& device) { return at::zeros({1}, at::TensorOptions(device).dtype(at::kLong)); }

  static unsigned long long* words(const Tensor& counter) {
    return reinterpret_cast<unsigned long long*>(counter.data_ptr<int64_t>());
  }

  template <class C, Products P>
  static cudaError_t forward(const Plan& plan, const cuda::ForwardArgs& args, const at::Device& device,
                             cudaStream_t stream) {
    return cuda::grid::forward<C, P>(plan, args, words(counter(device)), stream);
  }

  template <class C, Products P>
  static cudaError_t backward(const Plan& plan, const cuda::BackwardArgs& args, const at::Device& device,
                              cudaStream_t stream) {
    return cuda::grid::backward<C, P>(plan, args, words(counter(device)), stream);
  }
};

using GridRecurrence = TensorCoreRecurrence<GridKernel>;

}  // namespace cuda_binding
}  // namespace tsrnn
