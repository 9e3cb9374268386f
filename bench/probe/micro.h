// The microbenchmarks of bench/probe/micro.cu: host functions that launch one benchmark each, on
// device memory the caller allocated (zeroed) and passes in. Every timed one writes `reps` pairs
// (nanoseconds from %globaltimer, cycles from clock64) of one timed loop of `iters` operations
// into times[2 * rep], [2 * rep + 1], and sets *wrong nonzero where its own check of what it
// computed fails (its times then mean nothing). The same source runs on the GPU (nvcc) and under
// the SIMT emulation of tests/simt (g++).
#pragma once

#include <cuda_runtime.h>

namespace tsrnn_micro {

using Times = unsigned long long;

// Cluster barrier round trip (arrive then wait) in one cluster of `cluster` blocks of 128 threads;
// `relaxed`: barrier.cluster.arrive.relaxed, else cooperative_groups' release-flavoured arrive;
// each thread issues `stores` global stores into `scratch` (cluster * (128 * stores + 1) floats)
// just before each arrive; the last `cluster` floats: each block's iteration count, for the caller
// to check.
cudaError_t cluster_barrier(int cluster, bool relaxed, int stores, int iters, int reps, float* scratch, Times* times, int* wrong);

// DSMEM ping-pong between the 2 blocks of a cluster: st.async into the peer's shared memory,
// completing on its mbarrier, the peer waiting with try_wait.parity and pushing back; one
// operation is a round trip.
cudaError_t dsmem_pingpong(int iters, int reps, Times* times, int* wrong);

// Flag barrier round trip over `blocks` resident blocks of 128 threads (cooperative launch):
// mode 0, one counter every block adds to (csrc/recurrence/cuda/flag_barrier.h); 1, one counter
// per cluster of `cluster` blocks, every counter polled; 2 (the grid kernel's), a cluster barrier,
// then one arrival per cluster (its rank-0 block) on one counter that every block polls. counters:
// 16 * blocks zeroed words; slots: `blocks` zeroed words.
cudaError_t flag_barrier(int mode, int blocks, int cluster, int iters, int reps, unsigned long long* counters,
                         unsigned* slots, Times* times, int* wrong);

// A dependent chain of __ldcg loads i = next[i] from `start` by one thread; *end: the index reached
// after iters * reps loads.
cudaError_t ldcg_chain(const unsigned* next, unsigned start, int iters, int reps, unsigned* end, Times* times);

// One warp loading 16x16 bf16 tiles from shared memory with row pitch `pitch` elements (a multiple
// of 16), by wmma::load_matrix_sync or by ldmatrix x4, each tile's column chosen from the previous
// tile's data (a dependent chain: the latency of one tile load).
cudaError_t fragment_loads(bool ldmatrix, int pitch, int iters, int reps, Times* times, int* wrong);

// cudaOccupancyMaxActiveClusters of a 256-thread kernel with `shared_bytes` of dynamic shared memory
// in clusters of `cluster` blocks.
cudaError_t active_clusters(int cluster, int shared_bytes, int* clusters);

int multiprocessors();

}  // namespace tsrnn_micro
