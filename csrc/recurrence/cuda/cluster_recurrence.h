// The cluster-resident tensor-core recurrence: the host side of
// csrc/recurrence/cuda/cluster_recurrence.cu, free of torch headers. It takes the kernels'
// arguments (csrc/recurrence/cuda/kernel_args.h's ForwardArgs and BackwardArgs, float32,
// contiguous, padded or packed) and computes the recurrent products in the precision of
// csrc/recurrence/products.h on tensor cores (TF32 or bf16 mma.sync; kIeee: scalar float32).
// Every function is a template on the cell C of csrc/recurrence/cells.h and the Products P,
// instantiated at the end of the .cu file for the three cells and the three precisions.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "recurrence/cuda/kernel_args.h"
#include "recurrence/products.h"

namespace tsrnn {
namespace cuda {
namespace cluster {

constexpr int kThreads = 256;       // threads of a block (8 warps)
constexpr int kMaxPairs = 4;        // (unit, batch row) pairs one thread carries through the steps
constexpr int kMaxCluster = 16;     // blocks of a cluster (more than 8: a non-portable size)

// One launch configuration: a cluster of `cluster` blocks per batch tile of `tile` rows (a multiple
// of 8: the products' N in n8 tiles, tensor_core.h), `clusters` = ceil(B / tile) clusters; block r of a cluster owns the hidden
// units [r * units, min(H, (r + 1) * units)) and keeps their G rows of W_hh in shared memory for the
// whole sequence (rows padded to `rows`, a multiple of 16; columns to `width`, a multiple of 16).
// forward_bytes / backward_bytes: the dynamic shared memory of each direction's blocks. cluster == 0:
// no configuration fits this device (the reason in `why`).
// pairs: the (unit, row) pairs a thread carries; forward_prefetch / backward_prefetch: whether that
// direction's shared memory also holds the cell's operands copied a step ahead (cp.async);
// forward_parts / backward_parts: the parts the K of each direction's product is split into
// (tensor_core.h's Split: segments of W's rows and K dealt to the warps, summed in shared memory).
struct Plan {
  int cluster = 0, tile = 0, clusters = 0, units = 0, rows = 0, width = 0;
  std::size_t forward_bytes = 0, backward_bytes = 0;
  int pairs = 0;
  bool forward_prefetch = false, backward_prefetch = false;
  int forward_parts = 0, backward_parts = 0;
  const char* why = "";
};

// Shared memory of one block of each direction, bytes: the forward's two mbarriers, W_hh slice
// [rows][width + pad], h tile [tile][width + pad], z's parts [parts][tile][rows + 4] (float) and the
// stage of its h slice [tile][units], or the backward's two mbarriers, transposed slice
// [width][rows + pad], two dz tiles [tile][rows + pad], the partial products its peers push,
// [cluster][tile][units] (float), and where parts > 1 its own product's parts [parts][tile][width + 4];
// then `prefetched` floats of the cell's operands copied a step ahead;
// W, h and dz in the operand type, their rows padded by 16 bytes (tensor_core.h's kPad:
// conflict-free ldmatrix).
std::size_t forward_bytes(Products products, int rows, int width, int tile, int units, int parts, int prefetched);
std::size_t backward_bytes(Products products, int rows, int width, int tile, int units, int cluster, int parts,
                           int prefetched);

// The configuration for `hidden` units of cell C, a batch of `batch` rows and products P on the
// current device: every (cluster, tile) whose shared memory fits one block and whose cluster the
// device can host, priced by the fitted cost model of cost_model.h (per step: the shared-memory
// wavefronts of the block's products, the cell's pairs a thread, the cluster barriers; times the
// waves of clusters the device runs at once);
// `cluster` / `tile` > 0 force that value (the GPU report's sweep), refused with `why` if it does
// not fit. Returns the first CUDA error of the queries.
template <class C, Products P>
cudaError_t plan(int hidden, int batch, int cluster, int tile, Plan* out);

// One launch of clusters each, on `stream`, with a plan from plan<C, P>().
template <class C, Products P>
cudaError_t forward(const Plan& plan, const ForwardArgs& args, cudaStream_t stream);
template <class C, Products P>
cudaError_t backward(const Plan& plan, const BackwardArgs& args, cudaStream_t stream);

}  // namespace cluster
}  // namespace cuda
}  // namespace tsrnn
