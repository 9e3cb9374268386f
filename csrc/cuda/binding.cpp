// Torch binding of the persistent CUDA recurrence (csrc/cuda/recurrence.cu): the CUDA kernels of
// torch.ops.tsrnn.recurrence_forward / recurrence_backward / recurrence_plan, whose schemas are in
// tsrnn/ops.py, and the Python module tsrnn._cuda that registers them when imported.
#include <Python.h>
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <climits>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "cuda/recurrence.h"
#include "recurrence_op.h"

extern "C" {
PyObject* PyInit__cuda(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_cuda", nullptr, -1, nullptr};
  return PyModule_Create(&module_def);
}
}

namespace tsrnn {
namespace {

void check_cuda(cudaError_t err, const char* what) {
  TORCH_CHECK(err == cudaSuccess, "tsrnn: ", what, " failed: ", cudaGetErrorString(err));
}

// The launch plan of Cell for w_hh [G*H, H] on its device (made current by the caller), cached
// per (device, H) for each cell; blocks == 0 where the kernel does not apply.
template <typename Cell>
cuda::Plan plan_for(const Tensor& w_hh) {
  const int64_t hidden = w_hh.size(1);
  if (w_hh.scalar_type() != at::kFloat || hidden < 1 || hidden > INT_MAX) return {};
  static std::mutex mutex;
  static std::map<std::pair<int, int64_t>, cuda::Plan> plans;
  const auto key = std::make_pair(static_cast<int>(w_hh.get_device()), hidden);
  const std::lock_guard<std::mutex> lock(mutex);
  auto found = plans.find(key);
  if (found == plans.end()) {
    cuda::Plan plan;
    check_cuda(cuda::plan<Cell>(static_cast<int>(hidden), &plan), "planning the persistent CUDA kernel");
    found = plans.emplace(key, plan).first;
  }
  return found->second;
}

// Exact float32 cuBLAS for dW_hh, like the kernels, even where the user allowed TF32; restores
// the setting on exit.
class NoTF32 {
 public:
  NoTF32() : before_(at::globalContext().allowTF32CuBLAS()) { at::globalContext().setAllowTF32CuBLAS(false); }
  ~NoTF32() { at::globalContext().setAllowTF32CuBLAS(before_); }

 private:
  bool before_;
};

template <typename T>
T* data_or_null(const c10::optional<Tensor>& t) {
  return t ? t->data_ptr<T>() : nullptr;
}

int64_t recurrence_plan(const std::string& cell, const Tensor& w_hh) {
  TORCH_CHECK(w_hh.dim() == 2 && w_hh.is_cuda(), "tsrnn: recurrence_plan takes a 2-D CUDA w_hh, got ",
              w_hh.sizes(), " on ", w_hh.device());
  const c10::cuda::CUDAGuard guard(w_hh.device());
  int64_t blocks = 0;
  dispatch_cell(cell, [&](auto tag) { blocks = plan_for<decltype(tag)>(w_hh).blocks; });
  return blocks;
}

// The CUDA side of the recurrence operator's entries (csrc/recurrence_op.h): float32, the call's
// device made current, the cached plan of the cell and H (refusing the shapes the kernel does not
// take), one cooperative launch per direction, and exact float32 cuBLAS for dW_hh.
struct CudaRecurrence {
  using DeviceGuard = c10::cuda::CUDAGuard;
  using ExactGemm = NoTF32;
  using Plan = cuda::Plan;

  static void check_dtype(const Tensor& t) {
    TORCH_CHECK(t.scalar_type() == at::kFloat, "tsrnn: the CUDA kernels take float32, got ", t.scalar_type(),
                " (tsrnn.functional runs bf16/fp16 layers in float32)");
  }

  template <typename Cell>
  static Plan plan(const Tensor& w_hh, const Shapes& s) {
    TORCH_CHECK(s.T <= INT_MAX && s.B <= INT_MAX, "tsrnn: the CUDA kernels take at most ", INT_MAX,
                " steps and batch rows, got T=", s.T, ", B=", s.B);
    const Plan found = plan_for<Cell>(w_hh);
    TORCH_CHECK(found.blocks > 0, "tsrnn: the persistent CUDA kernel does not take H=", s.H,
                " on this GPU (W_hh does not fit in the shared memory of co-resident blocks); use "
                "backend='triton' or 'auto'");
    return found;
  }

  template <typename Cell>
  static void forward(const Plan& plan, const ForwardTensors& io) {
    const cuda::ForwardArgs args{io.xg.data_ptr<float>(), io.w_hh.data_ptr<float>(), io.h0.data_ptr<float>(),
                                 io.state0.data_ptr<float>(), data_or_null<float>(io.p),
                                 data_or_null<float>(io.dt), io.h_all.data_ptr<float>(),
                                 io.state_all.data_ptr<float>(), io.save ? io.saved.data_ptr<float>() : nullptr,
                                 static_cast<int>(io.s.T), static_cast<int>(io.s.B), static_cast<int>(io.s.H),
                                 static_cast<float>(io.eps)};
    check_cuda(cuda::forward<Cell>(plan, args, c10::cuda::getCurrentCUDAStream()),
               "launching the persistent forward kernel");
  }

  template <typename Cell>
  static void backward(const Plan& plan, const BackwardTensors& io) {
    const cuda::BackwardArgs args{data_or_null<float>(io.grad_h), io.w_hh.data_ptr<float>(),
                                  io.state0.data_ptr<float>(), io.state_all.data_ptr<float>(),
                                  io.saved.data_ptr<float>(), data_or_null<float>(io.p),
                                  data_or_null<float>(io.dt), io.dz.data_ptr<float>(), io.dh.data_ptr<float>(),
                                  io.dstate.data_ptr<float>(), io.dp.defined() ? io.dp.data_ptr<float>() : nullptr,
                                  static_cast<int>(io.s.T), static_cast<int>(io.s.B), static_cast<int>(io.s.H),
                                  static_cast<float>(io.eps)};
    check_cuda(cuda::backward<Cell>(plan, args, c10::cuda::getCurrentCUDAStream()),
               "launching the persistent backward kernel");
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(tsrnn, CUDA, m) {
  m.impl("recurrence_forward", &recurrence_forward<CudaRecurrence>);
  m.impl("recurrence_backward", &recurrence_backward<CudaRecurrence>);
  m.impl("recurrence_plan", &recurrence_plan);
}

}  // namespace tsrnn
