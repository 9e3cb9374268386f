// What the CUDA kernels of csrc/recurrence/cuda share: their dynamic shared memory and the rows of a
// step (padded or packed, csrc/recurrence/cuda/kernel_args.h). Device code only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tsrnn {
namespace cuda {

// The block's dynamic shared memory (the launch's shared bytes), 128-byte aligned. Under the SIMT
// emulation of the tests (tests/simt, which defines TSRNN_SIMT), the emulator's buffer of the
// running block.
template <typename T>
__device__ inline T* dynamic_shared() {
#ifdef TSRNN_SIMT
  return static_cast<T*>(simt::dynamic_shared());
#else
  extern __shared__ __align__(128) unsigned char shared_bytes[];
  return reinterpret_cast<T*>(shared_bytes);
#endif
}

// The first packed row of step t and how many rows it runs (padded: t*B and B).
struct StepRows {
  long long first;
  int rows;
};

__device__ inline StepRows step_rows(const std::int64_t* offsets, int t, int B) {
  if (!offsets) return {static_cast<long long>(t) * B, B};
  const long long first = offsets[t];
  return {first, static_cast<int>(offsets[t + 1] - first)};
}

// A unit's P parameters, column j of params [P, H], and P zeroed accumulators of their gradient
// (a cell's backward adds this step's dL/dparam into them).
template <int P, typename Size, typename Unit>
__device__ inline void unit_params(const float* params, Size H, Unit j, float* param, float* dparam) {
#pragma unroll
  for (int k = 0; k < P; ++k) {
    param[k] = params[k * H + j];
    dparam[k] = 0.f;
  }
}

}  // namespace cuda
}  // namespace tsrnn
