// The host side of a tensor-core kernel's cluster launch (cluster_recurrence.cu, grid_recurrence.cu,
// the GPU probe): the operand sizes and padding of a precision at run time, the clusters a device
// holds at once (resident_clusters) and the launch itself (launch_clusters, launch). Included by
// tensor_core.h.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "recurrence/products.h"

namespace tsrnn {
namespace cuda {
namespace tensor_core {

inline int operand_bytes(Products products) { return products == Products::kBf16 ? 2 : 4; }

// kPad of products P at run time: the padded pitch of an operand tile's rows is length + pad_of(P).
inline int pad_of(Products products) { return 16 / operand_bytes(products); }

inline int round_up(int x, int to) { return (x + to - 1) / to * to; }

// How many clusters of `cluster` blocks of `threads` threads of `kernel` with `bytes` of dynamic shared memory the
// current device holds at once (its opt-in shared memory limit `optin` set on the kernel first).
template <typename Kernel>
cudaError_t resident_clusters(Kernel kernel, int threads, int optin, int cluster, std::size_t bytes, int* count) {
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin);
  if (err != cudaSuccess) return err;
  if (cluster == 1) {  // blocks per multiprocessor times multiprocessors (no cluster query before sm_90)
    int device = 0, sms = 0, per_sm = 0;
    err = cudaGetDevice(&device);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (err == cudaSuccess) err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, bytes);
    *count = sms * per_sm;
    return err;
  }
  err = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  if (err != cudaSuccess) return err;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(cluster);
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = bytes;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = cluster;
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  return cudaOccupancyMaxActiveClusters(count, kernel, &config);
}

// One launch of `blocks` blocks of `threads` threads in clusters of `cluster` with `bytes` of dynamic
// shared memory on `stream`; `cooperative`: the launch fails unless every block is resident at once
// (what a kernel whose blocks wait for each other needs).
template <typename... P, typename... A>
cudaError_t launch_clusters(void (*kernel)(P...), int blocks, int threads, int cluster, std::size_t bytes, bool cooperative,
                            cudaStream_t stream, A&&... args) {
  if (cluster < 1 || blocks < 1 || blocks % cluster != 0) return cudaErrorInvalidConfiguration;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = bytes;
  config.stream = stream;
  cudaLaunchAttribute attribute[2];
  unsigned count = 0;
  if (cluster > 1) {  // a cluster of one needs no attribute (and a GPU before sm_90 takes none)
    attribute[count].id = cudaLaunchAttributeClusterDimension;
    attribute[count].val.clusterDim.x = cluster;
    attribute[count].val.clusterDim.y = 1;
    attribute[count++].val.clusterDim.z = 1;
  }
  if (cooperative) {
    attribute[count].id = cudaLaunchAttributeCooperative;
    attribute[count++].val.cooperative = 1;
  }
  config.attrs = attribute;
  config.numAttrs = count;
  return cudaLaunchKernelEx(&config, kernel, std::forward<A>(args)...);
}

// launch_clusters of a kernel no plan checked (Checked false: the GPU probe's ladder rungs, probe.h)
// after setting what a plan's resident_clusters sets on the kernels it checks: `bytes` of dynamic
// shared memory and, past 8 blocks, a non-portable cluster size.
template <bool Checked, typename... P, typename... A>
cudaError_t launch(void (*kernel)(P...), int blocks, int threads, int cluster, std::size_t bytes, bool cooperative,
                   cudaStream_t stream, A&&... args) {
  if constexpr (!Checked) {
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
    if (err == cudaSuccess && cluster > 1) err = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    if (err != cudaSuccess) return err;
  }
  return launch_clusters(kernel, blocks, threads, cluster, bytes, cooperative, stream, std::forward<A>(args)...);
}
}  // namespace tensor_core
}  // namespace cuda
}  // namespace tsrnn
