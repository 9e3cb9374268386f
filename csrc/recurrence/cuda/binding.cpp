// Torch binding of the persistent CUDA recurrence (csrc/recurrence/cuda/recurrence.cu): the CUDA kernels of
// torch.ops.tsrnn.recurrence_forward / recurrence_backward / recurrence_plan, whose schemas are in
// tsrnn/ops/recurrence/op.py, and the Python module tsrnn._cuda that registers them when imported.
#include <Python.h>
#include <ATen/ATen.h>
#include <torch/library.h>

#include "recurrence/cuda/cuda_recurrence.h"

extern "C" {
PyObject* PyInit__cuda(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_cuda", nullptr, -1, nullptr};
  return PyModule_Create(&module_def);
}
}

namespace tsrnn {
namespace {

int64_t recurrence_plan(const std::string& cell, const Tensor& w_hh, int64_t /*batch*/, const std::string& /*precision*/) {
  TORCH_CHECK(w_hh.dim() == 2 && w_hh.is_cuda(), "tsrnn: recurrence_plan takes a 2-D CUDA w_hh, got ",
              w_hh.sizes(), " on ", w_hh.device());
  const c10::cuda::CUDAGuard guard(w_hh.device());
  return cuda_binding::plan_blocks(cell, w_hh);
}

}  // namespace

TORCH_LIBRARY_IMPL(tsrnn, CUDA, m) {
  m.impl("recurrence_forward", &recurrence_forward<cuda_binding::CudaRecurrence>);
  m.impl("recurrence_backward", &recurrence_backward<cuda_binding::CudaRecurrence>);
  m.impl("recurrence_plan", &recurrence_plan);
}

}  // namespace tsrnn
