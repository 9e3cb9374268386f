// The cluster-resident tensor-core kernel (csrc/recurrence/cuda/cluster_recurrence.cu) as the traits
// of tensor_core_policy.h: its plan (TSRNN_CLUSTER="cluster,tile" forces one), its description for
// the operator `recurrence_config` ({cluster, tile, clusters, units a block, forward bytes, backward
// bytes, forward parts, backward parts}) and its launches; ClusterRecurrence, the recurrence
// operator's policy of the namespace tsrnn_cluster (csrc/recurrence/cuda/binding.cpp) and of the
// tests' emulation (tests/simt).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "recurrence/cuda/cluster_recurrence.h"
#include "recurrence/cuda/tensor_core_policy.h"

namespace tsrnn {
namespace cuda_binding {

struct ClusterKernel {
  using Plan = cuda::cluster::Plan;
  static constexpr const char* kName = "cluster-resident";
  static constexpr const char* kForcing = "TSRNN_CLUSTER";
  static constexpr int kForcedValues = 2;  // "cluster,tile": one configuration serves both directions

  template <class C, Products P>
  static cudaError_t plan(int hidden, int batch, const std::array<int, 4>& forced, Plan* out) {
    return cuda::cluster::plan<C, P>(hidden, batch, forced[0], forced[1], out);
  }

  static bool fits(const Plan& plan) { return plan.cluster > 0; }
  static int64_t blocks(const Plan& plan) { return static_cast<int64_t>(plan.cluster) * plan.clusters; }

  static std::vector<int64_t> describe(const Plan& plan) {
    return {plan.cluster, plan.tile, plan.clusters, plan.units, static_cast<int64_t>(plan.forward_bytes),
            static_cast<int64_t>(plan.backward_bytes), plan.forward_parts, plan.backward_parts};
  }

  template <class C, Products P>
  static cudaError_t forward(const Plan& plan, const cuda::ForwardArgs& args, const at::Device&, cudaStream_t stream) {
    return cuda::cluster::forward<C, P>(plan, args, stream);
  }

  template <class C, Products P>
  static cudaError_t backward(const Plan& plan, const cuda::BackwardArgs& args, const at::Device&,
                              cudaStream_t stream) {
    return cuda::cluster::backward<C, P>(plan, args, stream);
  }
};

using ClusterRecurrence = TensorCoreRecurrence<ClusterKernel>;

}  // namespace cuda_binding
}  // namespace tsrnn
