// Small kernels that check the emulation's tensor cores and clusters (tests/kernels/recurrence/test_simt.py,
// through probes.cpp's simt_probe): what wmma computes, against the same product on the host, and
// that a kernel which assumes a fragment layout, breaks wmma's rules (alignment, ldm, a pointer
// that differs between lanes, half a warp), skips a cluster barrier, maps a wrong peer rank or an
// address outside shared memory, exits while a peer still reads its shared memory or waits for it
// at a barrier, or arrives twice is caught, and that a launch configuration CUDA refuses is refused.
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

// C (16 x 16, row-major) += A (16 x 8, row-major) B (8 x 16, column-major) in TF32, the operands
// rounded with __float_to_tf32 (round) or read as they are (the hardware truncates).
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
  wmma::load_matrix_sync(acc, c, 16, wmma::mem_row_major);
  wmma::mma_sync(acc, fa, fb, acc);
  wmma::store_matrix_sync(c, acc, 16, wmma::mem_row_major);
}

// C (16 x 16, column-major) += A (16 x 16, column-major) B (16 x 16, row-major) in bf16.
__global__ void wmma_bf16(const __nv_bfloat16* a, const __nv_bfloat16* b, float* c, int) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::col_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::load_matrix_sync(fa, a, 16);
  wmma::load_matrix_sync(fb, b, 16);
  wmma::load_matrix_sync(acc, c, 16, wmma::mem_col_major);
  wmma::mma_sync(acc, fa, fb, acc);
  wmma::store_matrix_sync(c, acc, 16, wmma::mem_col_major);
}

// C = 3 + A B with every element of A 1 and of B 2 in bf16, by fill_fragment alone: 35 everywhere.
__global__ void wmma_fill(const float*, const float*, float* c, int) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(fa, 1.f);
  wmma::fill_fragment(fb, __float2bfloat16(2.f));
  wmma::fill_fragment(acc, 3.f);
  wmma::mma_sync(acc, fa, fb, acc);
  wmma::store_matrix_sync(c, acc, 16, wmma::mem_row_major);
}

// Planted: a load that breaks one of wmma's rules: `how` 0, a pointer 16 bytes off 32-byte
// alignment; 1, ldm 6 floats (24 bytes); 2, a pointer that differs between the lanes; 3, only
// half the warp loads.
__global__ void wmma_misuse(const float* a, const float*, float*, int how) {
  wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fa;
  const int lane = threadIdx.x % 32;
  if (how == 0) wmma::load_matrix_sync(fa, a + 4, 8);
  if (how == 1) wmma::load_matrix_sync(fa, a, 6);
  if (how == 2) wmma::load_matrix_sync(fa, a + 8 * (lane % 2), 8);
  if (how == 3 && lane < 16) wmma::load_matrix_sync(fa, a, 8);
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

// Planted: after a barrier every block reads its neighbour's shared memory and exits, with no
// barrier that keeps the neighbour from exiting first.
__global__ void cluster_early_exit(int* wrong, int, int, int) {
  cg::cluster_group cluster = cg::this_cluster();
  float* slots = static_cast<float*>(simt::dynamic_shared());
  slots[threadIdx.x % 16] = 1.f;
  cluster.sync();
  const int next = static_cast<int>((cluster.block_rank() + 1) % cluster.num_blocks());
  if (cluster.map_shared_rank(slots, next)[threadIdx.x % 16] != 1.f) *wrong = 1;
}

// Planted: block rank 0 exits while the others wait for it at a cluster barrier.
__global__ void cluster_exit_at_barrier(int*, int, int, int) {
  cg::cluster_group cluster = cg::this_cluster();
  if (cluster.block_rank() == 0) return;
  cluster.sync();
}

// Planted: maps an address in global memory, not in shared memory.
__global__ void cluster_map_outside(int* wrong, int, int, int) {
  cg::cluster_group cluster = cg::this_cluster();
  *cluster.map_shared_rank(wrong, 0) = 1;
  cluster.sync();
}

// A launch without a cluster dimension: each block is a cluster of one.
__global__ void cluster_of_one(int* wrong, int, int, int) {
  cg::cluster_group cluster = cg::this_cluster();
  float* slots = static_cast<float*>(simt::dynamic_shared());
  if (cluster.num_blocks() != 1 || cluster.block_rank() != 0 || cluster.map_shared_rank(slots, 0) != slots) *wrong = 1;
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

// A launch of `grid` blocks of 32 threads in clusters of `cluster`, 16 floats of shared memory a block.
cudaError_t launch_clusters(void (*kernel)(int*, int, int, int), unsigned grid, dim3 cluster, int* wrong, int synced,
                            int bad_rank, int split) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(grid);
  config.blockDim = dim3(32);
  config.dynamicSmemBytes = 16 * sizeof(float);
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = cluster.x;
  attribute[0].val.clusterDim.y = cluster.y;
  attribute[0].val.clusterDim.z = cluster.z;
  config.attrs = attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, wrong, synced, bad_rank, split);
}

// One launch of 2 clusters of 4 blocks.
std::string clusters(void (*kernel)(int*, int, int, int), int synced, int bad_rank, int split) {
  int wrong = 0;
  const std::string err = error_of(launch_clusters(kernel, 8, dim3(4), &wrong, synced, bad_rank, split));
  return !err.empty() ? err : wrong ? "wrong: a block read a slot its peer had not written" : "ok";
}

// Each block a cluster of one in a launch without a cluster dimension.
std::string clusters_of_one() {
  int wrong = 0, flag = 0;
  int* pointer = &wrong;
  void* args[] = {&pointer, &flag, &flag, &flag};
  const std::string err = error_of(cudaLaunchKernel(cluster_of_one, 2, 32, args, 16 * sizeof(float)));
  return !err.empty() ? err : wrong ? "wrong: this_cluster() is not the block alone" : "ok";
}

template <int>
__global__ void cluster_noop(int*, int, int, int) {}

// The launch configurations CUDA refuses are refused (a grid no multiple of the cluster, a 2-D or
// empty cluster, more than 8 blocks without cudaFuncAttributeNonPortableClusterSizeAllowed, more
// than 16), the others run, and cudaOccupancyMaxActiveClusters counts whole clusters of the
// blocks the device holds at once.
std::string cluster_limits() {
  int wrong = 0, device = 0, sms = 0, supported = 0, per_sm = 0, active = 0, active_wide = 0, active_wider = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  cudaDeviceGetAttribute(&supported, cudaDevAttrClusterLaunch, device);
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, cluster_noop<0>, 32, 16 * sizeof(float));
  cudaLaunchConfig_t config = {};
  config.blockDim = dim3(32);
  config.dynamicSmemBytes = 16 * sizeof(float);
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = 4;
  attribute[0].val.clusterDim.y = attribute[0].val.clusterDim.z = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  cudaOccupancyMaxActiveClusters(&active, cluster_noop<0>, &config);
  attribute[0].val.clusterDim.x = 16;
  cudaOccupancyMaxActiveClusters(&active_wide, cluster_noop<0>, &config);
  cudaFuncSetAttribute(cluster_noop<1>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  cudaOccupancyMaxActiveClusters(&active_wider, cluster_noop<1>, &config);
  const struct {
    const char* what;
    long long got, expected;
  } checks[] = {
      {"cudaDevAttrClusterLaunch", supported, 1},
      {"active clusters of 4", active, per_sm * sms / 4},
      {"active clusters of 16, not allowed", active_wide, 0},
      {"active clusters of 16, allowed", active_wider, per_sm * sms / 16},
      {"grid 6, cluster 4", launch_clusters(cluster_noop<0>, 6, dim3(4), &wrong, 0, 0, 0), cudaErrorInvalidConfiguration},
      {"cluster (2, 2)", launch_clusters(cluster_noop<0>, 8, dim3(2, 2), &wrong, 0, 0, 0), cudaErrorInvalidConfiguration},
      {"cluster 0", launch_clusters(cluster_noop<0>, 8, dim3(0), &wrong, 0, 0, 0), cudaErrorInvalidConfiguration},
      {"cluster 16, not allowed", launch_clusters(cluster_noop<0>, 16, dim3(16), &wrong, 0, 0, 0), cudaErrorInvalidClusterSize},
      {"cluster 16, allowed", launch_clusters(cluster_noop<1>, 16, dim3(16), &wrong, 0, 0, 0), cudaSuccess},
      {"cluster 32, allowed", launch_clusters(cluster_noop<1>, 32, dim3(32), &wrong, 0, 0, 0), cudaErrorInvalidClusterSize},
  };
  for (const auto& c : checks) {
    if (c.got != c.expected) {
      return std::string("wrong: ") + c.what + " gave " + std::to_string(c.got) + ", expected " + std::to_string(c.expected);
    }
  }
  return "ok";
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
  for (int i = 0; i < 256; ++i) host[i] = static_cast<float>(i);  // C: what the accumulator loads read
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

// The TF32 probe's expected C, its operands rounded by `round`, summed onto C's first value in the
// order k = 0..7, as the emulation does (each product is exact: the same sums, bit for bit).
std::vector<float> tf32_expected(const std::vector<float>& a, const std::vector<float>& b, float (*round)(float)) {
  std::vector<float> c(256);
  for (int r = 0; r < 16; ++r) {
    for (int n = 0; n < 16; ++n) {
      float acc = static_cast<float>(r * 16 + n);
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
        float acc = static_cast<float>(n * 16 + r);
        for (int k = 0; k < 16; ++k) acc += __bfloat162float(ha[k * 16 + r]) * __bfloat162float(hb[k * 16 + n]);
        c[n * 16 + r] = acc;
      }
    }
    return product(wmma_bf16, ha, hb, c, 0);
  }
  if (name == "wmma_fill") return product(wmma_fill, a, b, std::vector<float>(256, 35.f), 0);
  const char* misuse[] = {"wmma_misaligned", "wmma_bad_ldm", "wmma_lanes_disagree", "wmma_half_warp"};
  for (int how = 0; how < 4; ++how) {
    if (name == misuse[how]) return product(wmma_misuse, a, b, std::vector<float>(256), how);
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
  if (name == "cluster_exit_at_barrier") return clusters(cluster_exit_at_barrier, 0, 0, 0);
  if (name == "cluster_map_outside") return clusters(cluster_map_outside, 0, 0, 0);
  if (name == "cluster_of_one") return clusters_of_one();
  if (name == "cluster_limits") return cluster_limits();
  return "no probe " + name;
}
