// The CUDA side of the recurrence operator (csrc/recurrence/op.h): the policy CudaRecurrence that
// packs the checked tensors into the kernels' arguments (csrc/recurrence/cuda/recurrence.h), the launch plans
// cached per device and H, and exact float32 cuBLAS for dW_hh. Included by csrc/recurrence/cuda/binding.cpp,
// which registers the operators, and by the tests' SIMT emulation (tests/simt), which runs the same
// policy and kernels on the CPU.
#pragma once

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <climits>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "recurrence/cuda/recurrence.h"
#include "recurrence/op.h"
#include "check_message.h"

namespace tsrnn {
namespace cuda_binding {

inline void check_cuda(cudaError_t err, const char* what) {
  TSRNN_CHECK(err == cudaSuccess, "tsrnn: ", what, " failed: ", cudaGetErrorString(err));
}

// The launch plan of Cell for w_hh [G*H, H] on the current device (the caller makes w_hh's device
// current), cached per (device, H) for each cell; blocks == 0 where the kernel does not apply.
template <typename Cell>
cuda::Plan plan_for(const Tensor& w_hh) {
  const int64_t hidden = w_hh.size(1);
  if (w_hh.scalar_type() != at::kFloat || hidden < 1 || hidden > INT_MAX) return {};
  int device = 0;
  check_cuda(cudaGetDevice(&device), "querying the current device");
  static std::mutex mutex;
  static std::map<std::pair<int, int64_t>, cuda::Plan> plans;
  const auto key = std::make_pair(device, hidden);
  const std::lock_guard<std::mutex> lock(mutex);
  auto found = plans.find(key);
  if (found == plans.end()) {
    cuda::Plan plan;
    check_cuda(cuda::plan<Cell>(static_cast<int>(hidden), &plan), "planning the persistent CUDA kernel");
    found = plans.emplace(key, plan).first;
  }
  return found->second;
}

template <typename T>
T* data_or_null(const c10::optional<Tensor>& t) {
  return t ? t->data_ptr<T>() : nullptr;
}

inline const std::int64_t* offsets_or_null(const Tensor& offsets) {
  return offsets.defined() ? offsets.data_ptr<int64_t>() : nullptr;
}

// The step offsets of a packed call (csrc/recurrence/op.h's Steps, int64 [T+1]) on `device`, for
// the kernels to read; undefined when the call is padded. The copy is ordered on the current
// stream before the launch, and the caching allocator keeps the device copy's memory until the
// work queued on that stream (the kernel) is done, so it may be freed when the caller returns.
// On a real GPU the host side is staged in pinned memory and copied without blocking the host
// (the pinned block is not reused before the copy completes); the SIMT emulation of the tests
// runs on CPU tensors, where the offsets are used in place.
inline Tensor device_offsets(const Steps& steps, const at::Device& device) {
  if (!steps.packed) return Tensor();
#ifdef TSRNN_SIMT
  return steps.offsets_cpu.to(device);
#else
  return steps.offsets_cpu.pin_memory().to(device, at::kLong, /*non_blocking=*/true);
#endif
}

// The kernels' arguments (csrc/recurrence/cuda/recurrence.h) of a forward call, its step offsets
// on the device (device_offsets).
inline cuda::ForwardArgs forward_args(const ForwardTensors& io, const Tensor& offsets) {
  return cuda::ForwardArgs{io.xg.data_ptr<float>(), io.w_hh.data_ptr<float>(), io.h0.data_ptr<float>(),
                           io.state0.data_ptr<float>(), data_or_null<float>(io.p),
                           data_or_null<float>(io.dt), offsets_or_null(offsets), io.h_all.data_ptr<float>(),
                           io.state_all.data_ptr<float>(), io.save ? io.saved.data_ptr<float>() : nullptr,
                           static_cast<int>(io.s.T), static_cast<int>(io.s.B), static_cast<int>(io.s.H),
                           static_cast<float>(io.eps)};
}

// The kernels' arguments of a backward call.
inline cuda::BackwardArgs backward_args(const BackwardTensors& io, const Tensor& offsets) {
  return cuda::BackwardArgs{data_or_null<float>(io.grad_h), io.w_hh.data_ptr<float>(),
                            io.state0.data_ptr<float>(), io.state_all.data_ptr<float>(),
                            io.saved.data_ptr<float>(), data_or_null<float>(io.p),
                            data_or_null<float>(io.dt), offsets_or_null(offsets), io.dz.data_ptr<float>(),
                            io.dh.data_ptr<float>(), io.dstate.data_ptr<float>(),
                            io.dp.defined() ? io.dp.data_ptr<float>() : nullptr,
                            static_cast<int>(io.s.T), static_cast<int>(io.s.B), static_cast<int>(io.s.H),
                            static_cast<float>(io.eps)};
}

// The float32 check of the CUDA kernels' inputs.
inline void check_float32(const Tensor& t) {
  TSRNN_CHECK(t.scalar_type() == at::kFloat, "tsrnn: the CUDA kernels take float32, got ", t.scalar_type(),
              " (tsrnn.functional runs bf16/fp16 layers in float32)");
}

// Thread blocks of the persistent kernel of `cell` for w_hh on the current device (0: no fit).
inline int64_t plan_blocks(const std::string& cell, const Tensor& w_hh) {
  int64_t blocks = 0;
  dispatch_cell(cell, [&](auto tag) { blocks = plan_for<decltype(tag)>(w_hh).blocks; });
  return blocks;
}

// The CUDA side of the recurrence operator's entries (csrc/recurrence/op.h): float32, the call's
// device made current, the cached plan of the cell and H (refusing the shapes the kernel does not
// take), one cooperative launch per direction (scalar float32 products whatever the precision
// asked: more exact than TF32 or bf16), and dW_hh's GEMM in the precision asked.
struct CudaRecurrence : AtenBuffersAndGemm {
  using DeviceGuard = c10::cuda::CUDAGuard;
  using Plan = cuda::Plan;

  static void check_dtype(const Tensor& t) { check_float32(t); }

  template <typename Cell>
  static Plan plan(const Tensor& w_hh, const Shapes& s, Products /*products*/) {
    TSRNN_CHECK(s.T <= INT_MAX && s.B <= INT_MAX, "tsrnn: the CUDA kernels take at most ", INT_MAX,
                " steps and batch rows, got T=", s.T, ", B=", s.B);
    const Plan found = plan_for<Cell>(w_hh);
    TSRNN_CHECK(found.blocks > 0, "tsrnn: the persistent CUDA kernel does not take H=", s.H,
                " on this GPU (W_hh does not fit in the shared memory of co-resident blocks); use "
                "backend='triton' or 'auto'");
    return found;
  }

  template <typename Cell>
  static void forward(const Plan& plan, const ForwardTensors& io) {
    const Tensor offsets = device_offsets(io.steps, io.xg.device());
    check_cuda(cuda::forward<Cell>(plan, forward_args(io, offsets), c10::cuda::getCurrentCUDAStream()),
               "launching the persistent forward kernel");
  }

  template <typename Cell>
  static void backward(const Plan& plan, const BackwardTensors& io) {
    const Tensor offsets = device_offsets(io.steps, io.dz.device());
    check_cuda(cuda::backward<Cell>(plan, backward_args(io, offsets), c10::cuda::getCurrentCUDAStream()),
               "launching the persistent backward kernel");
  }
};

}  // namespace cuda_binding
}  // namespace tsrnn
