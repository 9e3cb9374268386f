// One kernel per wrapper of csrc/recurrence/cuda/ptx.h, for test_ptx_sass.py: nvcc compiles each
// and the test reads what it became (the instruction ptx.h says, and no GPU-wide fence where ptx.h
// says there is none).
#include <cstdint>

#include "recurrence/cuda/ptx.h"

namespace ptx = tsrnn::cuda::ptx;

extern __shared__ std::uint64_t shared[];

extern "C" __global__ void mma_tf32(float* out, const std::uint32_t* in) {
  float d[4] = {0.f, 0.f, 0.f, 0.f};
  const std::uint32_t a[4] = {in[0], in[1], in[2], in[3]}, b[2] = {in[4], in[5]};
  ptx::mma_tf32(d, a, b, d);
  for (int i = 0; i < 4; ++i) out[i] = d[i];
}

extern "C" __global__ void mma_bf16(float* out, const std::uint32_t* in) {
  float d[4] = {0.f, 0.f, 0.f, 0.f};
  const std::uint32_t a[4] = {in[0], in[1], in[2], in[3]}, b[2] = {in[4], in[5]};
  ptx::mma_bf16(d, a, b, d);
  for (int i = 0; i < 4; ++i) out[i] = d[i];
}

template <int N, bool Trans>
__device__ void load(std::uint32_t* out) {
  std::uint32_t r[N];
  ptx::ldmatrix<N, Trans>(r, reinterpret_cast<unsigned char*>(shared) + 16 * threadIdx.x);
  for (int i = 0; i < N; ++i) out[i] = r[i];
}
extern "C" __global__ void ldmatrix_x1(std::uint32_t* out) { load<1, false>(out); }
extern "C" __global__ void ldmatrix_x2_trans(std::uint32_t* out) { load<2, true>(out); }
extern "C" __global__ void ldmatrix_x4(std::uint32_t* out) { load<4, false>(out); }
extern "C" __global__ void ldmatrix_x4_trans(std::uint32_t* out) { load<4, true>(out); }

extern "C" __global__ void cp_async(const float4* in, float* out) {
  auto* tile = reinterpret_cast<float4*>(shared);
  ptx::cp_async<16>(tile + threadIdx.x, in + threadIdx.x);
  ptx::cp_async<4>(reinterpret_cast<float*>(tile + 64) + threadIdx.x, reinterpret_cast<const float*>(in) + threadIdx.x, false);
  ptx::cp_async_commit();
  ptx::cp_async_wait<0>();
  out[threadIdx.x] = tile[threadIdx.x].x;
}

extern "C" __global__ void mbarrier_local(int* out) {
  ptx::mbarrier_init(shared, 1);
  ptx::mbarrier_arrive(shared);
  ptx::mbarrier_wait(shared, 0);
  out[0] = 1;
}

extern "C" __global__ void mbarrier_remote_relaxed(unsigned rank) {
  ptx::mbarrier_arrive_remote_relaxed(ptx::mapa(ptx::shared_address(shared), rank));
}

extern "C" __global__ void st_async_push(unsigned rank, std::uint32_t value) {
  const std::uint32_t bar = ptx::mapa(ptx::shared_address(shared), rank);
  ptx::st_async(ptx::mapa(ptx::shared_address(shared + 1), rank), value, bar);
}

extern "C" __global__ void bulk_push(unsigned rank) {
  ptx::fence_proxy_async_shared();
  ptx::bulk_push(ptx::mapa(ptx::shared_address(shared + 2), rank), shared + 4, 64, ptx::mapa(ptx::shared_address(shared), rank));
}

extern "C" __global__ void cluster_relaxed() {
  ptx::cluster_arrive_relaxed();
  ptx::cluster_wait();
}

extern "C" __global__ void cluster_shared_only(float* out) {  // the grid kernel's exchange barrier
  extern __shared__ float partial[];
  partial[threadIdx.x] = out[threadIdx.x];
  ptx::fence_release_own_shared();
  ptx::cluster_arrive_relaxed();
  ptx::cluster_wait();
  ptx::fence_acquire_cluster_shared();
  out[threadIdx.x] = partial[(threadIdx.x + 1) % blockDim.x];
}

extern "C" __global__ void cluster_release() {
  ptx::cluster_arrive_release();
  ptx::cluster_wait();
}
