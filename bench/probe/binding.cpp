// The GPU probe's build of the tensor-core kernels (bench/probe/build.py compiles it with
// cluster_recurrence.cu and grid_recurrence.cu, -DTSRNN_PROBE=1): the recurrence operators of the
// namespaces tsrnn_probe_cluster and tsrnn_probe_grid (schemas from tsrnn/ops/recurrence/op.py) and
// torch.ops.tsrnn_probe.arm / layout / rungs (csrc/recurrence/cuda/probe_ops.h). Loaded beside the
// installed tsrnn._cuda, whose namespaces it leaves alone.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "recurrence/cuda/cluster_policy.h"
#include "recurrence/cuda/grid_policy.h"
#include "recurrence/cuda/probe_ops.h"

namespace tsrnn {
namespace {

// A plan query of a tensor-core kernel on w_hh's device.
template <auto query>
auto on_device(const std::string& cell, const Tensor& w_hh, int64_t batch, const std::string& precision) {
  const c10::cuda::CUDAGuard guard(w_hh.device());
  return query(cell, w_hh, batch, precision);
}

}  // namespace

TORCH_LIBRARY(tsrnn_probe, m) {
  m.def("arm(int skip, Tensor? trace, bool ignore_skip=False) -> ()", &cuda::probe::arm);
  m.def("layout() -> (str[], str[], int)", &cuda::probe::layout);
  m.def("rungs(str kernel) -> int[]", &cuda::probe::rungs);
}

TORCH_LIBRARY_IMPL(tsrnn_probe_cluster, CUDA, m) {
  m.impl("recurrence_forward", &recurrence_forward<cuda_binding::ClusterRecurrence>);
  m.impl("recurrence_backward", &recurrence_backward<cuda_binding::ClusterRecurrence>);
  m.impl("recurrence_plan", &on_device<cuda_binding::tensor_core_blocks<cuda_binding::ClusterKernel>>);
  m.impl("recurrence_config", &on_device<cuda_binding::tensor_core_config<cuda_binding::ClusterKernel>>);
}

TORCH_LIBRARY_IMPL(tsrnn_probe_grid, CUDA, m) {
  m.impl("recurrence_forward", &recurrence_forward<cuda_binding::GridRecurrence>);
  m.impl("recurrence_backward", &recurrence_backward<cuda_binding::GridRecurrence>);
  m.impl("recurrence_plan", &on_device<cuda_binding::tensor_core_blocks<cuda_binding::GridKernel>>);
  m.impl("recurrence_config", &on_device<cuda_binding::tensor_core_config<cuda_binding::GridKernel>>);
}

}  // namespace tsrnn
