// Small kernels that check the SIMT emulation itself (tests/kernels/recurrence/test_simt.py): what the shuffles and
// votes return, and that what CUDA leaves undefined (a barrier some threads skip, a shuffle that
// reads a lane outside its mask, two barriers met at once, a deadlock, a grid sync without a cooperative
// launch, a race on shared memory) is reported rather than run.
#include <string>
#include <vector>

#include <cooperative_groups.h>
#include <cuda_runtime.h>

std::string simt_cluster_probe(const std::string& name);
std::string simt_flag_probe(const std::string& name);
std::string simt_ptx_probe(const std::string& name);

namespace {

__global__ void shuffles(unsigned* out) {
  const unsigned lane = threadIdx.x % 32;
  unsigned v = lane + 1, down = lane + 1;
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  for (int offset = 16; offset > 0; offset >>= 1) down += __shfl_down_sync(0xffffffffu, down, offset);
  const unsigned from_5 = __shfl_sync(0xffffffffu, lane * 10, 5);
  const unsigned up = __shfl_up_sync(0xffffffffu, lane, 1);
  const unsigned odd = __ballot_sync(0xffffffffu, lane % 2);
  const int all_small = __all_sync(0xffffffffu, lane < 32), any_big = __any_sync(0xffffffffu, lane > 30);
  unsigned half = lane;
  if (lane < 16) half = __shfl_xor_sync(0x0000ffffu, lane, 1);  // lanes 0-15 only
  out[threadIdx.x * 8 + 0] = v;
  out[threadIdx.x * 8 + 1] = down;
  out[threadIdx.x * 8 + 2] = from_5;
  out[threadIdx.x * 8 + 3] = up;
  out[threadIdx.x * 8 + 4] = odd;
  out[threadIdx.x * 8 + 5] = all_small;
  out[threadIdx.x * 8 + 6] = any_big;
  out[threadIdx.x * 8 + 7] = half;
}

__global__ void skipped_barrier(int) {
  if (threadIdx.x < 32) __syncthreads();
}

__global__ void two_barriers(int) {
  if (threadIdx.x < 32) {
    __syncthreads();
  } else {
    __syncthreads();
  }
}

__global__ void shuffle_outside_mask(int) {
  if (threadIdx.x < 16) __shfl_xor_sync(0x0000ffffu, 1.f, 16);
}

// Half a warp shuffles with the whole warp, which waits at a barrier instead.
__global__ void deadlock(int) {
  if (threadIdx.x % 32 < 16) {
    __shfl_xor_sync(0xffffffffu, 1.f, 1);
  } else {
    __syncthreads();
  }
}

__global__ void grid_sync(int) { cooperative_groups::this_grid().sync(); }

// Each thread writes its slot, then reads its neighbour's, with no barrier between.
__global__ void racy_neighbours(float* out) {
  float* const slots = static_cast<float*>(simt::dynamic_shared());
  slots[threadIdx.x] = static_cast<float>(threadIdx.x);
  __syncwarp();  // orders a warp, not the block: the neighbour across a warp boundary may lag
  out[threadIdx.x] = slots[(threadIdx.x + 32) % blockDim.x];
}

std::string error_of(cudaError_t err) { return err == cudaSuccess ? "" : cudaGetErrorString(err); }

}  // namespace

std::string simt_probe(const std::string& name) {
  int arg = 0;
  void* args[] = {&arg};
  if (name == "shuffles") {
    std::vector<unsigned> out(64 * 8);
    unsigned* data = out.data();
    void* pointer[] = {&data};
    const std::string err = error_of(cudaLaunchKernel(shuffles, 1, 64, pointer));
    if (!err.empty()) return err;
    for (unsigned t = 0; t < 64; ++t) {
      const unsigned lane = t % 32,* o = &out[t * 8];
      const unsigned expected[8] = {528, lane == 0 ? 528u : o[1], 50, lane == 0 ? 0u : lane - 1, 0xaaaaaaaau, 1,
                                    1, lane < 16 ? lane ^ 1u : lane};
      for (int k = 0; k < 8; ++k) {
        if (o[k] != expected[k]) {
          return "wrong: thread " + std::to_string(t) + " result " + std::to_string(k) + " is " + std::to_string(o[k]) +
                 ", expected " + std::to_string(expected[k]);
        }
      }
    }
    return "ok";
  }
  if (name == "skipped_barrier") return error_of(cudaLaunchKernel(skipped_barrier, 2, 64, args));
  if (name == "two_barriers") return error_of(cudaLaunchKernel(two_barriers, 1, 64, args));
  if (name == "shuffle_outside_mask") return error_of(cudaLaunchKernel(shuffle_outside_mask, 1, 32, args));
  if (name == "deadlock") return error_of(cudaLaunchKernel(deadlock, 1, 64, args));
  if (name == "grid_sync") return error_of(cudaLaunchKernel(grid_sync, 2, 32, args));
  if (name == "racy_neighbours") {  // up to 8 launches, each in its own thread order: an even seed's
    // uniform draw misses this race in about one launch of ten
    for (int attempt = 0; attempt < 8; ++attempt) {
      std::vector<float> out(128);
      float* data = out.data();
      void* pointer[] = {&data};
      const std::string err = error_of(cudaLaunchKernel(racy_neighbours, 1, 128, pointer, 128 * sizeof(float)));
      if (!err.empty()) return err;
      for (unsigned t = 0; t < 128; ++t) {
        if (out[t] != static_cast<float>((t + 32) % 128)) return "race seen";
      }
    }
    return "ok";
  }
  if (name.rfind("flag_", 0) == 0 || name.rfind("atomic", 0) == 0) {
    return simt_flag_probe(name);  // atomics and the flag barrier (flag_probes.cpp)
  }
  if (name.rfind("ptx_", 0) == 0) return simt_ptx_probe(name);  // ptx.h's wrappers (ptx_probes.cpp)
  return simt_cluster_probe(name);  // tensor cores and clusters (cluster_probes.cpp)
}
