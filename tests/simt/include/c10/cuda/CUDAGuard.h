// The SIMT emulation in place of c10's CUDA device guard (see tests/simt/simt.h): the emulated
// kernels take CPU tensors, and the current emulated device is the tests' choice (simt::set_device).
#pragma once
#include <c10/core/Device.h>

#include "simt.h"

namespace c10 {
namespace cuda {
struct CUDAGuard {
  explicit CUDAGuard(c10::Device) {}
};
}  // namespace cuda
}  // namespace c10
