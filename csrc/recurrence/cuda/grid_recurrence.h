// The grid-resident tensor-core recurrence: the host side of csrc/recurrence/cuda/grid_recurrence.cu,
// free of torch headers. For H too large for W_hh to fit one cluster's shared memory (AWD-LSTM's
// 1150): W_hh is sliced over every block of a launch whose blocks are all resident, and the steps
// are ordered by the flag barrier of csrc/recurrence/cuda/flag_barrier.h. It takes the arguments of
// the kernels (csrc/recurrence/cuda/kernel_args.h's ForwardArgs and BackwardArgs,
// float32, contiguous, padded or packed) and computes the recurrent products in the precision of
// csrc/recurrence/products.h on tensor cores (TF32 or bf16 mma.sync; kIeee: scalar float32). Every
// function is a template on the cell C of csrc/recurrence/cells.h and the Products P, instantiated
// at the end of the .cu file for the three cells and the three precisions.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>

#include "recurrence/cuda/kernel_args.h"
#include "recurrence/products.h"

namespace tsrnn {
namespace cuda {
namespace grid {

constexpr int kThreads = 256;    // threads of a block (8 warps)
constexpr int kMaxPairs = 4;     // (unit, batch row) pairs one thread carries through the steps
constexpr int kMaxCluster = 16;  // blocks of a cluster (more than 8: a non-portable size)

// One direction's launch configuration: `clusters` clusters of `cluster` blocks, all resident.
// Cluster i owns the hidden units [i * units, min(H, (i + 1) * units)); its blocks split the inner
// dimension of the direction's product, block r keeping on chip for the whole sequence
//   forward:  W_hh[g H + j, k] for the cluster's units j, every gate g and k in K_r, the r-th of
//             `cluster` slices of width `width` of [0, H), as [rows][width] (row g units + u; rows
//             padded to a multiple of 16, columns to width);
//   backward: W_hh[m, j] for the cluster's units j and m in M_r, the r-th slice of width `width` of
//             [0, G H), as [rows][width] (row u),
// as fragment streams (tensor_core.h's Stream): each warp's first 24 fragments (16 rows x 32 bytes
// each) in its registers, where the products are on tensor cores, the rest in shared memory.
// A step's product runs over the batch in chunks of `chunk` rows (a multiple of 16): one chunk
// where the operand slice and the partial sums of the whole batch fit shared memory beside the
// weights, else several, each with two more cluster barriers. bytes: its dynamic shared memory per
// block; cluster == 0: nothing fits.
struct Direction {
  int cluster = 0, clusters = 0, units = 0, chunk = 0, rows = 0, width = 0;
  std::size_t bytes = 0;
  int blocks() const { return cluster * clusters; }
};

// The plan of a call: the forward's and the backward's configurations, each chosen for its own
// product (the two launches share nothing on chip, only the saved activations in global memory):
// at H = 1150, B = 80 (TF32 LSTM) the forward's partial sums fit one pass only in clusters of at most
// 8 blocks and the backward's slice of dz only in clusters of 16. `why`: the reason where a
// direction fits nothing on this device.
struct Plan {
  Direction forward, backward;
  const char* why = "";
  bool fits() const { return forward.cluster > 0 && backward.cluster > 0; }
};

// Shared memory of one block, bytes: the weight slice's fragments not held in registers (512 bytes
// each; all of them for products kIeee), the chunk of the inner vector [chunk][width + 16 bytes] in
// the operand type and the block's partial sums [chunk][rows] in float32; at least the staging of
// the held fragments (8 warps x 8 fragments) where the products are on tensor cores.
std::size_t block_bytes(Products products, int rows, int width, int chunk);

// The configurations for `hidden` units of cell C, a batch of `batch` rows and products P on the
// current device, each direction's on its own: for each cluster size and chunk, as many clusters as
// the device keeps resident (cudaOccupancyMaxActiveClusters) with blocks whose shared memory fits,
// priced by the fitted cost model of cost_model.h. forced = {forward cluster, forward chunk,
// backward cluster, backward chunk}, each > 0 forcing that value (the GPU report's sweep, the
// tests), a direction refused with `why` if it does not fit. Returns the first CUDA error of the
// queries.
template <class C, Products P>
cudaError_t plan(int hidden, int batch, const std::array<int, 4>& forced, Plan* out);

// One cooperative launch of every cluster of the direction's configuration, on `stream`, with a plan
// from plan<C, P>(); `counter` is the flag barrier's, one unsigned 64-bit word in device memory that
// is zero at the launch.
template <class C, Products P>
cudaError_t forward(const Plan& plan, const ForwardArgs& args, unsigned long long* counter, cudaStream_t stream);
template <class C, Products P>
cudaError_t backward(const Plan& plan, const BackwardArgs& args, unsigned long long* counter, cudaStream_t stream);

}  // namespace grid
}  // namespace cuda
}  // namespace tsrnn
