// Small kernels that check the emulation of csrc/recurrence/cuda/ptx.h's PTX wrappers
// (tests/simt/ptx_emulation.h; tests/kernels/recurrence/test_simt_ptx.py, through probes.cpp's
// simt_probe): an st.async ping-pong between the two blocks of a cluster completing on mbarriers;
// a cluster of 4 exchanging slices every step through st.async or cp.async.bulk into
// double-buffered tiles; the registers ldmatrix (x1, x2, x4, .trans) and mma.sync (TF32, bf16) hand
// each lane, returned for a test written from the PTX ISA's tables; a warp's GEMM through ldmatrix
// and mma.sync checked against a plain loop; cp.async with its commit and wait; and one planted
// bug per check: a wrong peer rank (past the cluster, or inside it), a reused phase parity, a
// missing expect_tx, an arrival past the expected count, a remote arrival not mapa'd, an mbarrier
// never initialised or misaligned, st.async completing on another
// block's mbarrier, an ldmatrix row not 16-byte aligned, a fragment index off by one, a missing
// .trans, a tile or a cp.async destination read before its wait.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include "recurrence/cuda/ptx.h"
#include "recurrence/cuda/tensor_core.h"

namespace {

namespace cg = cooperative_groups;
namespace ptx = tsrnn::cuda::ptx;

enum Bug { kNone, kWrongPeer, kReusedPhase, kOtherBlocksBarrier };

void await(std::uint64_t* bar, unsigned parity) {
  simt::label("mbarrier phase parity", parity);
  while (!ptx::mbarrier_try_wait_parity(bar, parity)) {
  }
}

// 8 rounds: rank 0 pushes 2r + 1 into rank 1's slot, rank 1 replies 2r + 2; *wrong if a value differs.
__global__ void pingpong(int* wrong, int bug) {
  cg::cluster_group cluster = cg::this_cluster();
  auto* bar = static_cast<std::uint64_t*>(simt::dynamic_shared());
  auto* slot = reinterpret_cast<std::uint32_t*>(bar + 1);
  const unsigned rank = cluster.block_rank();
  if (threadIdx.x == 0) {
    ptx::mbarrier_init(bar, 1);
    ptx::fence_mbarrier_init();
  }
  cluster.sync();
  if (threadIdx.x == 0) {
    const unsigned peer = bug == kWrongPeer ? 2 : rank ^ 1u;
    const std::uint32_t peer_slot = ptx::mapa(ptx::shared_address(slot), peer);
    const std::uint32_t peer_bar = bug == kOtherBlocksBarrier ? ptx::shared_address(bar) : ptx::mapa(ptx::shared_address(bar), peer);
    for (unsigned round = 0; round < 8; ++round) {
      ptx::mbarrier_arrive_expect_tx(bar, 4);
      if (rank == 0) ptx::st_async(peer_slot, 2 * round + 1, peer_bar);
      await(bar, bug == kReusedPhase ? 0 : round & 1u);
      if (*slot != 2 * round + 2 - rank) *wrong = 1;
      if (rank == 1) ptx::st_async(peer_slot, 2 * round + 2, peer_bar);
    }
  }
  cluster.sync();
}

// Planted: rank 1 pushes 4 bytes into rank 0, which arrives without announcing them (expect_tx 0):
// its phase waits for a tx-count of -4 to return to zero, forever.
__global__ void missing_expect_tx(int*, int) {
  cg::cluster_group cluster = cg::this_cluster();
  auto* bar = static_cast<std::uint64_t*>(simt::dynamic_shared());
  auto* slot = reinterpret_cast<std::uint32_t*>(bar + 1);
  if (threadIdx.x == 0) ptx::mbarrier_init(bar, 1);
  cluster.sync();
  if (threadIdx.x == 0 && cluster.block_rank() == 1) {
    ptx::st_async(ptx::mapa(ptx::shared_address(slot), 0), 7, ptx::mapa(ptx::shared_address(bar), 0));
  }
  cluster.sync();
  if (threadIdx.x == 0 && cluster.block_rank() == 0) {
    ptx::mbarrier_arrive_expect_tx(bar, 0);
    await(bar, 0);
  }
  cluster.sync();
}

// Planted: `how` 0, a wait on an mbarrier never initialised; 1, an mbarrier 4 bytes off 8-byte
// alignment; 2, a second arrival at a phase that expects one (held open by 4 bytes of expect_tx);
// 3, a remote arrival at an address not mapped to the cluster.
__global__ void mbarrier_misuse(int*, int how) {
  auto* bytes = static_cast<unsigned char*>(simt::dynamic_shared());
  auto* bar = reinterpret_cast<std::uint64_t*>(bytes + (how == 1 ? 4 : 0));
  if (how == 2) {
    if (threadIdx.x == 0) ptx::mbarrier_init(bar, 1);
    __syncthreads();
    if (threadIdx.x == 0) ptx::mbarrier_arrive_expect_tx(bar, 4);
    __syncthreads();
    if (threadIdx.x == 1) ptx::mbarrier_arrive(bar);
    return;
  }
  if (how == 3) {  // a remote arrival at this block's own shared::cta address, not mapa'd
    if (threadIdx.x == 0) ptx::mbarrier_init(bar, 1);
    __syncthreads();
    if (threadIdx.x == 0) ptx::mbarrier_arrive_remote_relaxed(ptx::shared_address(bar));
    return;
  }
  if (how == 1) ptx::mbarrier_init(bar, 1);
  await(bar, 0);
}

// Lane l passes row (7 l + 3) % 64, columns 8 (l % 2).. of a 64 x 16 tile of 16-bit elements whose
// element (r, c) holds 16 r + c; out[N l + i]: lane l's register i. `misaligned`: pitch 12 elements.
template <int N, bool Trans>
__global__ void ldmatrix_fragments(std::uint32_t* out, int misaligned) {
  auto* tile = static_cast<std::uint16_t*>(simt::dynamic_shared());
  const int pitch = misaligned ? 12 : 16;
  for (int e = threadIdx.x; e < 64 * 16; e += 32) tile[e] = static_cast<std::uint16_t>(e);
  __syncwarp();
  const unsigned l = threadIdx.x;
  std::uint32_t r[N];
  ptx::ldmatrix<N, Trans>(r, tile + ((7 * l + 3) % 64) * pitch + 8 * (l % 2));
  for (int i = 0; i < N; ++i) out[N * l + i] = r[i];
}

// Lane l loads the float4 at element 4 l (+ 1 where `misaligned`) of `out` with __ldcg (the grid
// kernel's 16-byte loads of a slice, csrc/recurrence/cuda/slice_load.h) and stores its sum at out[l].
__global__ void vector_load(float* out, int misaligned) {
  const float4 v = __ldcg(reinterpret_cast<const float4*>(out + 4 * threadIdx.x + misaligned));
  __syncwarp();
  out[threadIdx.x] = v.x + v.y + v.z + v.w;
}

// The registers lane l passes to mma.sync (a test rebuilds A, B and C from them with the ISA's
// tables): small integers, exact in bf16 and TF32, so the sums are exact in float32.
__device__ float mma_input(int lane, int e, int which) { return static_cast<float>((lane * 7 + e * 3 + which * 5) % 17 - 8); }

__device__ std::uint32_t bf16_bits(float v) {
  std::uint32_t u;
  std::memcpy(&u, &v, 4);
  return u >> 16;  // exact: the values are small integers
}

// Register i of lane l's A (which 0) or B (1) fragment: element i (TF32), or elements 2 i and
// 2 i + 1 in its lower and upper halves (bf16).
__device__ std::uint32_t mma_register(int lane, int i, int which, bool bf16) {
  if (bf16) return bf16_bits(mma_input(lane, 2 * i, which)) | bf16_bits(mma_input(lane, 2 * i + 1, which)) << 16;
  const float v = mma_input(lane, i, which);
  std::uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}

// out[4 l + i]: lane l's d[i] of one mma.sync (bf16: the m16n8k16 one) on mma_input's registers.
__global__ void mma_registers(float* out, int bf16) {
  const int l = static_cast<int>(threadIdx.x);
  std::uint32_t a[4], b[2];
  float c[4];
  for (int i = 0; i < 4; ++i) {
    a[i] = mma_register(l, i, 0, bf16);
    c[i] = mma_input(l, i, 2);
  }
  for (int i = 0; i < 2; ++i) b[i] = mma_register(l, i, 1, bf16);
  if (bf16) {
    ptx::mma_bf16(c, a, b, c);
  } else {
    ptx::mma_tf32(c, a, b, c);
  }
  for (int i = 0; i < 4; ++i) out[4 * l + i] = c[i];
}

enum GemmBug { kGemmNone, kOffByOne, kNoTrans };

// One warp: D (16 x 16) = A (16 x 32) B (32 x 16) through ldmatrix and mma.sync, two n8 tiles, A
// row-major with a pitch of 40 elements; TF32: B stored n-major ([n][k], each n8 tile's two k4
// halves by one ldmatrix.x2), bf16: k-major ([k][n], ldmatrix.x2.trans), so each form's layout is
// exercised. out[n * 16 + m] = D(m, n), compared by the caller with a plain loop.
template <bool Bf16>
__global__ void warp_gemm(float* out, int bug) {
  using E = std::conditional_t<Bf16, std::uint16_t, float>;
  constexpr int M = 16, N = 16, K = 32, kStep = Bf16 ? 16 : 8, kPitch = 40;
  E* a = static_cast<E*>(simt::dynamic_shared());  // [M][kPitch]
  E* b = a + M * kPitch;                             // TF32: [N][kPitch]; bf16: [K][24]
  const int l = static_cast<int>(threadIdx.x);
  auto value = [](int i, int j, int which) { return static_cast<float>((i * 5 + j * 3 + which) % 9 - 4); };
  for (int e = l; e < M * K; e += 32) {
    const float v = value(e / K, e % K, 0);
    if constexpr (Bf16) a[e / K * kPitch + e % K] = static_cast<E>(bf16_bits(v)); else a[e / K * kPitch + e % K] = v;
  }
  for (int e = l; e < K * N; e += 32) {
    const int k = e / N, n = e % N;
    const float v = value(k, n, 1);
    if constexpr (Bf16) b[k * 24 + n] = static_cast<E>(bf16_bits(v)); else b[n * kPitch + k] = v;
  }
  __syncwarp();
  float d[2][4] = {};
  const int row = l % 16 + (bug == kOffByOne ? 1 : 0) * (l == 3);  // A's rows by lanes 0-15, then their right halves
  for (int k0 = 0; k0 < K; k0 += kStep) {
    std::uint32_t fa[4];
    // ldmatrix.x4: matrices (rows 0-7, k 0..), (rows 8-15, k 0..), (rows 0-7, k + 8 bytes' worth), (rows 8-15, ...)
    ptx::ldmatrix<4>(fa, a + row * kPitch + k0 + (l / 16) * (Bf16 ? 8 : 4));
    for (int nt = 0; nt < 2; ++nt) {
      std::uint32_t fb[2];
      if constexpr (Bf16) {
        const E* at = b + (k0 + l % 16) * 24 + nt * 8;  // rows k0.. of B, columns nt*8..
        if (bug == kNoTrans) ptx::ldmatrix<2>(fb, at); else ptx::ldmatrix<2, true>(fb, at);
      } else {
        ptx::ldmatrix<2>(fb, b + (nt * 8 + l % 8) * kPitch + k0 + (l / 8 % 2) * 4);
      }
      if constexpr (Bf16) ptx::mma_bf16(d[nt], fa, fb, d[nt]); else ptx::mma_tf32(d[nt], fa, fb, d[nt]);
    }
  }
  for (int nt = 0; nt < 2; ++nt) {
    for (int i = 0; i < 4; ++i) {
      const int m = l / 4 + 8 * (i / 2), n = nt * 8 + 2 * (l % 4) + i % 2;
      out[n * M + m] = d[nt][i];
    }
  }
}

std::string gemm(bool bf16, int bug) {
  float out[256];
  float* pointer = out;
  void* args[] = {&pointer, &bug};
  const std::size_t bytes = bf16 ? (16 * 40 + 32 * 24) * 2 : (16 * 40 + 16 * 40) * 4;
  const cudaError_t err = cudaLaunchKernel(bf16 ? warp_gemm<true> : warp_gemm<false>, 1, 32, args, bytes);
  if (err != cudaSuccess) return cudaGetErrorString(err);
  for (int m = 0; m < 16; ++m) {
    for (int n = 0; n < 16; ++n) {
      float want = 0.f;
      for (int k = 0; k < 32; ++k) want += static_cast<float>((m * 5 + k * 3) % 9 - 4) * static_cast<float>((k * 5 + n * 3 + 1) % 9 - 4);
      if (out[n * 16 + m] != want) {
        return "wrong: D(" + std::to_string(m) + ", " + std::to_string(n) + ") = " + std::to_string(out[n * 16 + m]) + ", not " +
               std::to_string(want);
      }
    }
  }
  return "ok";
}

enum ExchangeBug { kExchangeNone, kRankInside, kReadBeforeWait, kSameParity };

// A cluster of 4 blocks of 64 threads, 6 steps: at step t block r's threads j < 8 push
// 1000 (t + 1) + 8 r + j into slot 8 r + j of tile t % 2 of every block of the cluster (itself
// too), completing on that block's mbarrier t % 2, whose phase expects the 128 bytes of the step
// (thread 0's arrive.expect_tx); every thread waits for parity t / 2 % 2 and checks the 32 slots.
// Double-buffered, no barrier between the steps: a block pushes step t + 2 into tile t % 2 only
// after its wait of step t + 1, which needs every block's push of step t + 1, which each block
// makes after it read its tile t % 2 of step t. bulk: each block stages its 8 values in stage t % 2
// and pushes them with one cp.async.bulk a peer; the copy reads its source asynchronously, and the
// stage is rewritten at step t + 2, after the wait of step t + 1, which needs every peer's push of
// step t + 1, which each peer makes after its wait of step t, which needed this block's copies of
// step t to have landed. A block barrier a step keeps every thread within one phase of thread 0's
// arrive: a thread two phases behind would wait on a parity that has come round again (without it
// the emulation reports the livelock).
__global__ void exchange(int* wrong, int how) {
  const int bug = how % 4;
  const bool bulk = how >= 4;
  constexpr int kBlocks = 4, kUnits = 8, kSteps = 6;
  cg::cluster_group cluster = cg::this_cluster();
  auto* bar = static_cast<std::uint64_t*>(simt::dynamic_shared());  // [2]
  auto* tile = reinterpret_cast<std::uint32_t*>(bar + 2);            // [2][32]
  std::uint32_t* const stages = tile + 2 * kBlocks * kUnits;         // [2][8], bulk's sources
  const unsigned rank = cluster.block_rank(), j = threadIdx.x;
  if (j == 0) {
    ptx::mbarrier_init(&bar[0], 1);
    ptx::mbarrier_init(&bar[1], 1);
    ptx::fence_mbarrier_init();
  }
  cluster.sync();
  for (int t = 0; t < kSteps; ++t) {
    const int buf = t % 2;
    if (j == 0) ptx::mbarrier_arrive_expect_tx(&bar[buf], kBlocks * kUnits * 4);
    const std::uint32_t mine = 1000u * (t + 1) + kUnits * rank + j;
    std::uint32_t* slot = &tile[buf * kBlocks * kUnits + kUnits * rank];
    if (!bulk && j < kUnits) {
      for (unsigned q = 0; q < kBlocks; ++q) {
        const unsigned to = bug == kRankInside && rank == 0 && q == 1 ? 2 : q;
        ptx::st_async(ptx::mapa(ptx::shared_address(slot + j), to), mine, ptx::mapa(ptx::shared_address(&bar[buf]), to));
      }
    }
    if (bulk) {
      std::uint32_t* const stage = stages + buf * kUnits;
      if (j < kUnits) stage[j] = mine;
      ptx::fence_proxy_async_shared();  // the stores before the async proxy's reads
      __syncthreads();                  // the whole stage written before any push of it
      if (j < kBlocks) {
        const unsigned to = bug == kRankInside && rank == 0 && j == 1 ? 2 : j;
        ptx::bulk_push(ptx::mapa(ptx::shared_address(slot), to), stage, kUnits * 4, ptx::mapa(ptx::shared_address(&bar[buf]), to));
      }
    }
    std::uint32_t early = 0;
    if (bug == kReadBeforeWait) early = tile[buf * kBlocks * kUnits + j % (kBlocks * kUnits)];
    simt::label("exchange step", t);
    ptx::mbarrier_wait(&bar[buf], bug == kSameParity ? 0u : static_cast<unsigned>(t / 2 % 2));
    for (int s = j % 8; s < kBlocks * kUnits; s += 8) {
      const std::uint32_t got = bug == kReadBeforeWait && s == static_cast<int>(j % (kBlocks * kUnits)) ? early : tile[buf * kBlocks * kUnits + s];
      if (got != 1000u * (t + 1) + s) *wrong = 1;
    }
    __syncthreads();  // every thread past its wait before thread 0 can let the phase two ahead complete
  }
  cluster.sync();
}

enum CopyBug { kCopyNone, kCopyReadBeforeWait };

// Each of 32 threads copies 16 bytes (4 floats) of global memory into shared memory with cp.async in
// two groups (the first half, then the second half: zero-filled, src-size 0), waits for the older
// group, checks it, waits for all, checks the zeros. out: 1 if a value differs.
__global__ void copies(int* wrong, const float* from, int bug) {
  auto* tile = static_cast<float*>(simt::dynamic_shared());  // [256]
  const int l = static_cast<int>(threadIdx.x);
  ptx::cp_async<16>(tile + 4 * l, from + 4 * l);
  ptx::cp_async_commit();
  ptx::cp_async<16>(tile + 128 + 4 * l, from + 128 + 4 * l, false);
  ptx::cp_async_commit();
  float early = 0.f;
  if (bug == kCopyReadBeforeWait) early = tile[4 * l + 1];
  ptx::cp_async_wait<1>();
  for (int i = 0; i < 4; ++i) {
    const float v = bug == kCopyReadBeforeWait && i == 1 ? early : tile[4 * l + i];
    if (v != from[4 * l + i]) *wrong = 1;
  }
  ptx::cp_async_wait<0>();
  for (int i = 0; i < 4; ++i) {
    if (tile[128 + 4 * l + i] != 0.f) *wrong = 1;
  }
}

std::string error_of(cudaError_t err) { return err == cudaSuccess ? "" : cudaGetErrorString(err); }

// One cluster of `blocks` blocks of `threads` threads and `shared` bytes of shared memory each
// running kernel(&wrong, flag): "ok", `what` if the kernel set wrong, or the launch's error.
std::string one_cluster(void (*kernel)(int*, int), int flag, int blocks, int threads, std::size_t shared, const char* what) {
  int wrong = 0;
  const std::string err = error_of(tsrnn::cuda::tensor_core::launch_clusters(kernel, blocks, threads, blocks, shared, false,
                                                                             nullptr, &wrong, flag));
  return !err.empty() ? err : wrong ? what : "ok";
}

// One cluster of 2 blocks of 32 threads, 16 bytes of shared memory each (an mbarrier and a slot).
std::string cluster_of_two(void (*kernel)(int*, int), int flag) {
  return one_cluster(kernel, flag, 2, 32, 16, "wrong: a block received another value than its peer pushed");
}

// The registers a probe kernel wrote (lane-major), space-separated, or the launch's error.
template <typename V>
std::string registers(void (*kernel)(V*, int), int flag, int count, std::size_t shared) {
  std::vector<V> out(count);
  V* pointer = out.data();
  void* args[] = {&pointer, &flag};
  const std::string err = error_of(cudaLaunchKernel(kernel, 1, 32, args, shared));
  if (!err.empty()) return err;
  std::string s;
  for (V v : out) s += (s.empty() ? "" : " ") + std::to_string(static_cast<long long>(v));
  return s;
}

template <int N, bool Trans>
std::string fragments(int misaligned) {
  return registers(ldmatrix_fragments<N, Trans>, misaligned, 32 * N, 64 * 16 * sizeof(std::uint16_t));
}

std::string cluster_of_four(int how) {
  return one_cluster(exchange, how, 4, 64, 16 + 2 * 32 * 4 + 2 * 8 * 4, "wrong: a block read another value than its peer pushed");
}

std::string copied(int bug) {
  std::vector<float> from(256);
  for (int i = 0; i < 256; ++i) from[i] = static_cast<float>(i + 1);
  int wrong = 0;
  int* flag = &wrong;
  const float* source = from.data();
  void* args[] = {&flag, &source, &bug};
  const std::string err = error_of(cudaLaunchKernel(copies, 1, 32, args, 256 * sizeof(float)));
  return !err.empty() ? err : wrong ? "wrong: a thread read another value than it copied" : "ok";
}

}  // namespace

std::string simt_ptx_probe(const std::string& name) {
  if (name == "ptx_pingpong") return cluster_of_two(pingpong, kNone);
  if (name == "ptx_wrong_peer") return cluster_of_two(pingpong, kWrongPeer);
  if (name == "ptx_reused_phase") return cluster_of_two(pingpong, kReusedPhase);
  if (name == "ptx_other_blocks_barrier") return cluster_of_two(pingpong, kOtherBlocksBarrier);
  if (name == "ptx_missing_expect_tx") return cluster_of_two(missing_expect_tx, 0);
  if (name == "ptx_uninitialized_mbarrier") return cluster_of_two(mbarrier_misuse, 0);
  if (name == "ptx_misaligned_mbarrier") return cluster_of_two(mbarrier_misuse, 1);
  if (name == "ptx_extra_arrival") return cluster_of_two(mbarrier_misuse, 2);
  if (name == "ptx_remote_arrival_unmapped") return cluster_of_two(mbarrier_misuse, 3);
  if (name == "ptx_ldmatrix_x1") return fragments<1, false>(0);
  if (name == "ptx_ldmatrix_x2") return fragments<2, false>(0);
  if (name == "ptx_ldmatrix_x4") return fragments<4, false>(0);
  if (name == "ptx_ldmatrix_x1_trans") return fragments<1, true>(0);
  if (name == "ptx_ldmatrix_x2_trans") return fragments<2, true>(0);
  if (name == "ptx_ldmatrix_x4_trans") return fragments<4, true>(0);
  if (name == "ptx_ldmatrix_misaligned") return fragments<4, false>(1);
  if (name == "ptx_mma_tf32") return registers(mma_registers, 0, 128, 0);
  if (name == "ptx_mma_bf16") return registers(mma_registers, 1, 128, 0);
  if (name == "ptx_gemm_tf32") return gemm(false, kGemmNone);
  if (name == "ptx_gemm_bf16") return gemm(true, kGemmNone);
  if (name == "ptx_gemm_off_by_one") return gemm(false, kOffByOne);
  if (name == "ptx_gemm_missing_trans") return gemm(true, kNoTrans);
  for (int bulk = 0; bulk < 2; ++bulk) {
    const std::string form = bulk ? "bulk" : "st_async";
    if (name == "ptx_exchange_" + form) return cluster_of_four(4 * bulk + kExchangeNone);
    if (name == "ptx_exchange_" + form + "_rank_inside") return cluster_of_four(4 * bulk + kRankInside);
    if (name == "ptx_exchange_" + form + "_read_before_wait") return cluster_of_four(4 * bulk + kReadBeforeWait);
    if (name == "ptx_exchange_" + form + "_same_parity") return cluster_of_four(4 * bulk + kSameParity);
  }
  if (name == "ptx_vector_load_misaligned") return registers(vector_load, 1, 4 * 32 + 4, 0);
  if (name == "ptx_cp_async") return copied(kCopyNone);
  if (name == "ptx_cp_async_read_before_wait") return copied(kCopyReadBeforeWait);
  return "no probe " + name;
}
