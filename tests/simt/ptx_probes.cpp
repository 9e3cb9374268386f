// Small kernels that check the emulation of csrc/recurrence/cuda/ptx.h's PTX wrappers
// (tests/simt/ptx_emulation.h; tests/kernels/recurrence/test_simt_ptx.py, through probes.cpp's
// simt_probe): an st.async ping-pong between the two blocks of a cluster completing on mbarriers,
// the fragments ldmatrix x4 loads (returned for a test written from the PTX ISA's table), and one
// planted bug per check: a wrong peer rank, a reused phase parity, a missing expect_tx, an mbarrier
// never initialised or misaligned, st.async completing on another block's mbarrier, an ldmatrix
// row not 16-byte aligned.
#include <cstdint>
#include <string>

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include "recurrence/cuda/ptx.h"

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

// Planted: `how` 0, a wait on an mbarrier never initialised; 1, an mbarrier 4 bytes off 8-byte alignment.
__global__ void mbarrier_misuse(int*, int how) {
  auto* bytes = static_cast<unsigned char*>(simt::dynamic_shared());
  auto* bar = reinterpret_cast<std::uint64_t*>(bytes + (how == 1 ? 4 : 0));
  if (how == 1) ptx::mbarrier_init(bar, 1);
  await(bar, 0);
}

// Lane l passes row (7 l + 3) % 64, columns 8 (l % 2).. of a 64 x 16 tile of 16-bit elements whose
// element (r, c) holds 16 r + c; out[4 l + i]: lane l's register i. `misaligned`: pitch 12 elements.
__global__ void ldmatrix_fragments(std::uint32_t* out, int misaligned) {
  auto* tile = static_cast<std::uint16_t*>(simt::dynamic_shared());
  const int pitch = misaligned ? 12 : 16;
  for (int e = threadIdx.x; e < 64 * 16; e += 32) tile[e] = static_cast<std::uint16_t>(e);
  __syncwarp();
  const unsigned l = threadIdx.x;
  std::uint32_t r[4];
  ptx::ldmatrix_x4(r, tile + ((7 * l + 3) % 64) * pitch + 8 * (l % 2));
  for (int i = 0; i < 4; ++i) out[4 * l + i] = r[i];
}

std::string error_of(cudaError_t err) { return err == cudaSuccess ? "" : cudaGetErrorString(err); }

// One cluster of 2 blocks of 32 threads, 16 bytes of shared memory each (an mbarrier and a slot).
std::string cluster_of_two(void (*kernel)(int*, int), int flag) {
  int wrong = 0;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(2);
  config.blockDim = dim3(32);
  config.dynamicSmemBytes = 16;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = 2;
  attribute[0].val.clusterDim.y = attribute[0].val.clusterDim.z = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  const std::string err = error_of(cudaLaunchKernelEx(&config, kernel, &wrong, flag));
  return !err.empty() ? err : wrong ? "wrong: a block received another value than its peer pushed" : "ok";
}

// The 128 registers ldmatrix_fragments loaded (lane-major), space-separated, or the launch's error.
std::string fragments(int misaligned) {
  std::uint32_t out[128] = {};
  std::uint32_t* pointer = out;
  void* args[] = {&pointer, &misaligned};
  const std::string err = error_of(cudaLaunchKernel(ldmatrix_fragments, 1, 32, args, 64 * 16 * sizeof(std::uint16_t)));
  if (!err.empty()) return err;
  std::string s;
  for (std::uint32_t v : out) s += (s.empty() ? "" : " ") + std::to_string(v);
  return s;
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
  if (name == "ptx_ldmatrix_fragments") return fragments(0);
  if (name == "ptx_ldmatrix_misaligned") return fragments(1);
  return "no probe " + name;
}
