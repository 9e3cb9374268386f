// The SIMT emulation in place of ATen's <ATen/cuda/CUDAContext.h> (see tests/simt/simt.h): the
// cuBLAS handle of the emulated cuBLAS (tests/simt/include/cublas_v2.h).
#pragma once

#include <cublas_v2.h>

namespace at {
namespace cuda {
inline cublasHandle_t getCurrentCUDABlasHandle() {
  static cublasContext context;
  return &context;
}
}  // namespace cuda
}  // namespace at
