// The TF32 rounding of a float32 tensor in one pass: out[i] = cvt.rna.tf32.f32(in[i]) (10 mantissa
// bits kept, to nearest, ties away from zero; infinities and NaN pass), the operands of the
// tensor-core GEMMs (tensor_core_gemm.h) and what tsrnn.precision.round_operands computes in torch's
// elementwise ops. 16-byte loads and stores where both pointers allow them, a grid-stride loop of
// a few blocks per multiprocessor. Free of torch headers: the SIMT emulation (tests/simt) compiles it.
#include <cuda_runtime.h>

#include <cstdint>

#include "recurrence/cuda/ptx.h"

namespace tsrnn {
namespace cuda_gemm {

constexpr int kThreads = 256;
constexpr int kBlocksPerSm = 4;

__global__ void round_tf32_kernel(const float* in, float* out, std::int64_t n, bool vectors) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  std::int64_t scalars_from = 0;
  if (vectors) {
    const std::int64_t quads = n / 4;
    const float4* in4 = reinterpret_cast<const float4*>(in);
    float4* out4 = reinterpret_cast<float4*>(out);
    for (std::int64_t i = first; i < quads; i += stride) {
      const float4 v = in4[i];
      out4[i] = make_float4(cuda::ptx::round_tf32(v.x), cuda::ptx::round_tf32(v.y), cuda::ptx::round_tf32(v.z),
                            cuda::ptx::round_tf32(v.w));
    }
    scalars_from = quads * 4;
  }
  for (std::int64_t i = scalars_from + first; i < n; i += stride) out[i] = cuda::ptx::round_tf32(in[i]);
}

// out[0, n) = the TF32 rounding of in[0, n) on `stream` (in may be out).
cudaError_t launch_round_tf32(const float* in, float* out, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  int device = 0, sms = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (err != cudaSuccess) return err;
  const bool vectors = reinterpret_cast<std::uintptr_t>(in) % 16 == 0 && reinterpret_cast<std::uintptr_t>(out) % 16 == 0;
  const std::int64_t items = vectors ? n / 4 + n % 4 : n;
  const std::int64_t wanted = (items + kThreads - 1) / kThreads, most = static_cast<std::int64_t>(sms) * kBlocksPerSm;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(wanted < most ? wanted : most));
  config.blockDim = dim3(kThreads);
  config.stream = stream;
  return cudaLaunchKernelEx(&config, round_tf32_kernel, in, out, n, vectors);
}

}  // namespace cuda_gemm
}  // namespace tsrnn
