// The SIMT emulation in place of c10's CUDA streams (see tests/simt/simt.h): one default stream.
#pragma once
#include "simt.h"

namespace c10 {
namespace cuda {
struct CUDAStream {
  operator cudaStream_t() const { return nullptr; }
};
inline CUDAStream getCurrentCUDAStream() { return {}; }
}  // namespace cuda
}  // namespace c10
