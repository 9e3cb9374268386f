// The CUDA side of the recurrence operator (csrc/recurrence/op.h) that the tensor-core kernels'
// policy (tensor_core_policy.h) builds on: the checked tensors packed into the kernels' arguments
// (csrc/recurrence/cuda/kernel_args.h), the step offsets on the device, the float32 check and CUDA
// errors as exceptions. Included through that policy by csrc/recurrence/cuda/binding.cpp, which
// registers the operators, and by the tests' SIMT emulation (tests/simt), which runs the same
// policies and kernels on the CPU.
#pragma once

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <cstdint>

#include "recurrence/cuda/kernel_args.h"
#include "recurrence/op.h"
#include "check_message.h"

namespace tsrnn {
namespace cuda_binding {

inline void check_cuda(cudaError_t err, const char* what) {
  TSRNN_CHECK(err == cudaSuccess, "tsrnn: ", what, " failed: ", cudaGetErrorString(err));
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

// The call's constants as the kernels take them (checked against the cell's count by op.h).
inline cuda::Constants constants_of(c10::ArrayRef<double> constants) {
  TSRNN_CHECK(constants.size() <= static_cast<size_t>(kMaxConstants), "tsrnn: the CUDA kernels take at most ",
              kMaxConstants, " constants, got ", constants.size());
  cuda::Constants out{};
  for (size_t k = 0; k < constants.size(); ++k) out.value[k] = static_cast<float>(constants[k]);
  return out;
}

// The kernels' arguments (csrc/recurrence/cuda/kernel_args.h) of a forward call, its step offsets
// on the device (device_offsets).
inline cuda::ForwardArgs forward_args(const ForwardTensors& io, const Tensor& offsets) {
  return cuda::ForwardArgs{io.xg.data_ptr<float>(), io.w_hh.data_ptr<float>(), io.h0.data_ptr<float>(),
                           io.state0.data_ptr<float>(), data_or_null<float>(io.params),
                           data_or_null<float>(io.step_input), offsets_or_null(offsets), io.h_all.data_ptr<float>(),
                           io.state_all.data_ptr<float>(), io.save ? io.saved.data_ptr<float>() : nullptr,
                           static_cast<int>(io.s.T), static_cast<int>(io.s.B), static_cast<int>(io.s.H),
                           constants_of(io.constants)};
}

// The kernels' arguments of a backward call.
inline cuda::BackwardArgs backward_args(const BackwardTensors& io, const Tensor& offsets) {
  return cuda::BackwardArgs{data_or_null<float>(io.grad_h), io.w_hh.data_ptr<float>(),
                            io.state0.data_ptr<float>(), io.state_all.data_ptr<float>(),
                            io.saved.data_ptr<float>(), data_or_null<float>(io.params),
                            data_or_null<float>(io.step_input), offsets_or_null(offsets), io.dz.data_ptr<float>(),
                            io.dh.data_ptr<float>(), io.dstate.data_ptr<float>(),
                            io.dparams.defined() ? io.dparams.data_ptr<float>() : nullptr,
                            static_cast<int>(io.s.T), static_cast<int>(io.s.B), static_cast<int>(io.s.H),
                            constants_of(io.constants)};
}

// The float32 check of the CUDA kernels' inputs.
inline void check_float32(const Tensor& t) {
  TSRNN_CHECK(t.scalar_type() == at::kFloat, "tsrnn: the CUDA kernels take float32, got ", t.scalar_type(),
              " (tsrnn.functional runs bf16/fp16 layers in float32)");
}

}  // namespace cuda_binding
}  // namespace tsrnn
