// Small kernels that check the emulation's tensor cores and clusters (tests/kernels/recurrence/test_simt.py,
// through probes.cpp's simt_probe): what wmma computes, against the same product on the host, and
// that a kernel which assumes a fragment layout, skips a cluster barrier, maps a wrong peer rank,
// exits while a peer still reads its shared memory, or arrives twice is caught.
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>

namespace {

namespace cg = cooperative_groups;
namespace wmma = nvcuda::wmma;

float tf32_rna(float x) { return wmma::__float_to_tf32(x); }

float tf32_truncated(float x) {
  unsigned u;
  std::memcpy(&u, &x, sizeof u);
  u &= 0xffffe000u;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// C (16 x 16, row-major) = A (16 x 8, row-major) B (8 x 16, column-major) + 1 in TF32, the
// operands rounded with __float_to_tf32 (round) or read as they are (the hardware truncates).
__global__ void wmma_tf32(const float* a, const float* b, float* c, int round) {
  wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc;
  wmma::load_matrix_sync(fa, a, 8);
  wmma::load_matrix_sync(fb, b, 8);
  if (round) {
    for (int i = 0; i < fa.num_elements; ++i) fa.x[i] = wmma::__float_to_tf32(fa.x[i]);
    for (int i = 0; i < fb.num_elements; ++i) fb.x[i] = wmma::__float_to_tf32(fb.x[i]);
  }
  wmma::fill_fragment(acc, 1.f);
  wmma::mma_sync(acc, fa, fb, acc);
  wmma::store_matrix_sync(c, acc, 16, wmma::mem_row_major);
}

// C (16 x 16, column-major) = A (16 x 16, column-major) B (16 x 16, row-major) in bf16.
__global__ void wmma_bf16(const __nv_bfloat16* a, const __nv_bfloat16* b, float* c, int) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::col_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::load_matrix_sync(fa, a, 16);
  wmma::load_matrix_sync(fb, b, 16);
  wmma::fill_fragment(acc, 0.f);
  wmma::mma_sync(acc, fa, fb, acc);
  wmma::store_matrix_sync(c, acc, 16, wmma::mem_col_major);
}

// Planted: fills the accumulator from C as if lane l held row l / 2, columns 8 (l % 2) + i.
__global__ void wmma_assumed_layout(const float* a, const float* b, float* c, int) {
  wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc;
  const int lane = threadIdx.x % 32;
  for (int i = 0; i < acc.num_elements; ++i) acc.x[i] = c[(lane / 2) * 16 + 8 * (lane % 2) + i];
  wmma::store_matrix_sync(c + 256, acc, 16, wmma::mem_row_major);
  (void)a;
  (void)b;
}

// 4-block clusters: block r writes r + 1 into slot r of every block's shared memory, then (with
// `synced`) a cluster barrier, and each block checks its 4 slots; `bad_rank` maps rank 4 instead.
__global__ void cluster_exchange(int* wrong, int synced, int bad_rank, int split) {
  cg::cluster_group cluster = cg::this_cluster();
  float* slots = static_cast<float*>(simt::dynamic_shared());
  const unsigned rank = cluster.block_rank();
  if (threadIdx.x == 0) {
    for (unsigned peer = 0; peer < cluster.num_blocks(); ++peer) {
      cluster.map_shared_rank(slots, bad_rank ? cluster.num_blocks() : peer)[rank] = static_cast<float>(rank + 1);
    }
  }
  if (split) {
    auto token = cluster.barrier_arrive();
    cluster.barrier_wait(std::move(token));
  } else if (synced) {
    cluster.sync();
  }
  if (threadIdx.x < cluster.num_blocks() && slots[threadIdx.x] != static_cast<float>(threadIdx.x + 1)) *wrong = 1;
  cluster.sync();  // no block exits while a peer may still write into it
}

// Planted: every block reads block 0's shared memory after a barrier, and block 0 leaves at once.
__global__ void cluster_early_exit(int* wrong, int, int, int) {
  cg::cluster_group cluster = cg::this_cluster();
  float* slots = static_cast<float*>(simt::dynamic_shared());
  slots[threadIdx.x] = 1.f;
  cluster.sync();
  if (cluster.block_rank() == 0) return;
  if (cluster.map_shared_rank(slots, 0)[threadIdx.x] != 1.f) *wrong = 1;
  cluster.sync();
}

// Planted: arrives twice without waiting.
__global__ void cluster_double_arrive(int*, int, int, int) {
  cg::cluster_group cluster = cg::this_cluster();
  cluster.barrier_arrive();
  cluster.barrier_arrive();
  cluster.barrier_wait();
}

std::string error_of(cudaError_t err) { return err == cudaSuccess ? "" : cudaGetErrorString(err); }

// One launch of 2 clusters of 4 blocks of 32 threads, 16 floats of shared memory a block.
std::string clusters(void (*kernel)(int*, int, int, int), int synced, int bad_rank, int split) {
  int wrong = 0;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(8);
  config.blockDim = dim3(32);
  config.dynamicSmemBytes = 16 * sizeof(float);
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = 4;
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  const std::string err = error_of(cudaLaunchKernelEx(&config, kernel, &wrong, synced, bad_rank, split));
  return !err.empty() ? err : wrong ? "wrong: a block read a slot its peer had not written" : "ok";
}

// A copy of v in memory aligned as cudaMalloc's (256 bytes), freed with the object.
template <typename E>
struct Device {
  E* data;
  explicit Device(const std::vector<E>& v)
      : data(static_cast<E*>(::operator new(v.size() * sizeof(E), std::align_val_t(256)))) {
    std::memcpy(static_cast<void*>(data), v.data(), v.size() * sizeof(E));
  }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  ~Device() { ::operator delete(data, std::align_val_t(256)); }
};

// Runs a one-warp wmma probe on a, b and compares C with `expected`.
template <typename E>
std::string product(void (*kernel)(const E*, const E*, float*, int), const std::vector<E>& a, const std::vector<E>& b,
                    const std::vector<float>& expected, int flag) {
  std::vector<float> host(512, 0.f);
  for (int i = 0; i < 256; ++i) host[i] = static_cast<float>(i);  // what the assumed-layout probe reads
  Device<E> da(a), db(b);
  Device<float> dc(host);
  const E* pa = da.data;
  const E* pb = db.data;
  float* pc = dc.data;
  void* args[] = {&pa, &pb, &pc, &flag};
  const std::string err = error_of(cudaLaunchKernel(kernel, 1, 32, args));
  const float* c = dc.data;
  if (!err.empty()) return err;
  const int offset = expected.size() == 512 ? 256 : 0;
  for (int i = 0; i < 256; ++i) {
    if (c[offset + i] != expected[offset + i]) {
      return "wrong: element " + std::to_string(i) + " is " + std::to_string(c[offset + i]) + ", expected " +
             std::to_string(expected[offset + i]);
    }
  }
  return "ok";
}

float operand(int i) { return 1.f + static_cast<float>(i % 37) / 7.f + 1e-4f * static_cast<float>(i % 5); }

// The TF32 probe's expected C, its operands rounded by `round`, summed in the order k = 0..7.
std::vector<float> tf32_expected(const std::vector<float>& a, const std::vector<float>& b, float (*round)(float)) {
  std::vector<float> c(256);
  for (int r = 0; r < 16; ++r) {
    for (int n = 0; n < 16; ++n) {
      float acc = 1.f;
      for (int k = 0; k < 8; ++k) acc += round(a[r * 8 + k]) * round(b[n * 8 + k]);
      c[r * 16 + n] = acc;
    }
  }
  return c;
}

}  // namespace

std::string simt_cluster_probe(const std::string& name) {
  std::vector<float> a(128), b(128);
  for (int i = 0; i < 128; ++i) {
    a[i] = operand(i);
    b[i] = operand(3 * i + 1);
  }
  if (name == "wmma_tf32") return product(wmma_tf32, a, b, tf32_expected(a, b, tf32_rna), 1);
  if (name == "wmma_tf32_truncates") {  // only a probe if truncating and rounding differ on these operands
    if (tf32_expected(a, b, tf32_truncated) == tf32_expected(a, b, tf32_rna)) return "the operands round alike";
    return product(wmma_tf32, a, b, tf32_expected(a, b, tf32_truncated), 0);
  }
  if (name == "wmma_bf16") {
    std::vector<__nv_bfloat16> ha(256), hb(256);
    for (int i = 0; i < 256; ++i) {
      ha[i] = __float2bfloat16(operand(i));
      hb[i] = __float2bfloat16(operand(5 * i + 2));
    }
    std::vector<float> c(256);
    for (int r = 0; r < 16; ++r) {
      for (int n = 0; n < 16; ++n) {
        float acc = 0.f;
        for (int k = 0; k < 16; ++k) acc += __bfloat162float(ha[k * 16 + r]) * __bfloat162float(hb[k * 16 + n]);
        c[n * 16 + r] = acc;
      }
    }
    return product(wmma_bf16, ha, hb, c, 0);
  }
  if (name == "wmma_assumed_layout") {
    std::vector<float> expected(512);
    for (int i = 0; i < 256; ++i) expected[i] = expected[256 + i] = static_cast<float>(i);
    return product(wmma_assumed_layout, a, b, expected, 0);
  }
  if (name == "cluster_exchange") return clusters(cluster_exchange, 1, 0, 0);
  if (name == "cluster_split_barrier") return clusters(cluster_exchange, 0, 0, 1);
  if (name == "cluster_missing_barrier") return clusters(cluster_exchange, 0, 0, 0);
  if (name == "cluster_wrong_rank") return clusters(cluster_exchange, 1, 1, 0);
  if (name == "cluster_early_exit") return clusters(cluster_early_exit, 0, 0, 0);
  if (name == "cluster_double_arrive") return clusters(cluster_double_arrive, 0, 0, 0);
  return "no probe " + name;
}
