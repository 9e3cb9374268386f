// What every cell of csrc/recurrence/cells/ shares: TSRNN_HOST_DEVICE (a cell's functions are
// __host__ __device__ under nvcc: the CPU loop and the CUDA kernels call the same code) and the
// sigmoid.
#pragma once

#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define TSRNN_HOST_DEVICE __host__ __device__
#else
#define TSRNN_HOST_DEVICE
#endif

namespace tsrnn {

template <typename T>
TSRNN_HOST_DEVICE inline T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

}  // namespace tsrnn
