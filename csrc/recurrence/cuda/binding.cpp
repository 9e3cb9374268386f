// Torch binding of the CUDA recurrences: the cluster-resident tensor-core kernel
// (csrc/recurrence/cuda/cluster_recurrence.cu) as the CUDA kernels of torch.ops.tsrnn_cluster's
// recurrence_forward / recurrence_backward / recurrence_plan / recurrence_config, the grid-resident
// tensor-core kernel (grid_recurrence.cu) as those of torch.ops.tsrnn_grid, whose schemas are in
// tsrnn/ops/recurrence/op.py, the tensor-core GEMMs (csrc/gemm/cuda/tensor_core_gemm.h) as the CUDA
// kernels of torch.ops.tsrnn_tensor_core's mm / round_tf32 (schemas in tsrnn/ops/projection.py), and
// the Python module tsrnn._cuda that registers them when imported.
#include <Python.h>
#include <ATen/ATen.h>
#include <torch/library.h>

#include "recurrence/cuda/cluster_policy.h"
#include "recurrence/cuda/grid_policy.h"
#include "check_message.h"

extern "C" {
PyObject* PyInit__cuda(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_cuda", nullptr, -1, nullptr};
  return PyModule_Create(&module_def);
}
}

namespace tsrnn {
namespace {

void check_plan_weight(const Tensor& w_hh) {
  TSRNN_CHECK(w_hh.dim() == 2 && w_hh.is_cuda(), "tsrnn: the plan takes a 2-D CUDA w_hh, got ", w_hh.sizes(), " on ",
              w_hh.device());
}

// A plan query of a tensor-core kernel (`query`: tensor_core_blocks or tensor_core_config of its
// traits) on w_hh's device.
template <auto query>
auto on_device(const std::string& cell, const Tensor& w_hh, int64_t batch, const std::string& precision) {
  check_plan_weight(w_hh);
  const c10::cuda::CUDAGuard guard(w_hh.device());
  return query(cell, w_hh, batch, precision);
}

}  // namespace

TORCH_LIBRARY_IMPL(tsrnn_cluster, CUDA, m) {
  m.impl("recurrence_forward", &recurrence_forward<cuda_binding::ClusterRecurrence>);
  m.impl("recurrence_backward", &recurrence_backward<cuda_binding::ClusterRecurrence>);
  m.impl("recurrence_plan", &on_device<cuda_binding::tensor_core_blocks<cuda_binding::ClusterKernel>>);
  m.impl("recurrence_config", &on_device<cuda_binding::tensor_core_config<cuda_binding::ClusterKernel>>);
}

TORCH_LIBRARY_IMPL(tsrnn_grid, CUDA, m) {
  m.impl("recurrence_forward", &recurrence_forward<cuda_binding::GridRecurrence>);
  m.impl("recurrence_backward", &recurrence_backward<cuda_binding::GridRecurrence>);
  m.impl("recurrence_plan", &on_device<cuda_binding::tensor_core_blocks<cuda_binding::GridKernel>>);
  m.impl("recurrence_config", &on_device<cuda_binding::tensor_core_config<cuda_binding::GridKernel>>);
}

TORCH_LIBRARY_IMPL(tsrnn_tensor_core, CUDA, m) {
  m.impl("mm", &cuda_gemm::mm);
  m.impl("round_tf32", static_cast<Tensor (*)(const Tensor&)>(&cuda_gemm::round_tf32));
}

}  // namespace tsrnn
