// The CUDA side of the recurrence operator (csrc/recurrence/op.h) for the grid-resident tensor-core
// kernel (csrc/recurrence/cuda/grid_recurrence.cu): the policy GridRecurrence, the launch plans
// cached per device, cell, H, batch, precision and forced configuration (TSRNN_GRID="cluster,chunk"),
// and the plan's description for the operator `recurrence_config`. Included by
// csrc/recurrence/cuda/binding.cpp, which registers the operators of the namespace tsrnn_grid, and by
// the tests' SIMT emulation (tests/simt), which runs the same policy and kernels on the CPU.
#pragma once

#include <climits>
#include <string>
#include <utility>
#include <vector>

#include "recurrence/cuda/cluster_policy.h"
#include "recurrence/cuda/grid_recurrence.h"

namespace tsrnn {
namespace cuda_binding {

// The plan of Cell for `hidden` units, `batch` rows and products p (cached_plan); cluster == 0
// where nothing fits (the reason in `why`).
template <typename Cell>
cuda::grid::Plan grid_plan_for(int64_t hidden, int64_t batch, Products p) {
  return cached_plan<cuda::grid::Plan, Cell>(
      hidden, batch, p, "TSRNN_GRID", [](int h, int b, Products products, std::pair<int, int> forced, auto* plan) {
        dispatch_products(products, [&](auto q) {
          check_cuda(cuda::grid::plan<Cell, decltype(q)::value>(h, b, forced.first, forced.second, plan),
                     "planning the grid-resident CUDA kernel");
        });
      });
}

// The plan of `cell` for w_hh (its H), `batch` rows and `precision` on the current device, as
// {cluster, chunk, clusters, units, forward bytes, backward bytes}; all zero where nothing fits.
inline std::vector<int64_t> grid_config(const std::string& cell, const Tensor& w_hh, int64_t batch,
                                        const std::string& precision) {
  cuda::grid::Plan plan;
  const Products p = products_of(precision);
  dispatch_cell(cell, [&](auto tag) { plan = grid_plan_for<decltype(tag)>(w_hh.size(1), batch, p); });
  return {plan.cluster, plan.chunk, plan.clusters, plan.units, static_cast<int64_t>(plan.forward_bytes),
          static_cast<int64_t>(plan.backward_bytes)};
}

// Thread blocks of the grid-resident kernel's plan (0: no fit), the operator recurrence_plan.
inline int64_t grid_plan_blocks(const std::string& cell, const Tensor& w_hh, int64_t batch,
                                const std::string& precision) {
  const std::vector<int64_t> config = grid_config(cell, w_hh, batch, precision);
  return config[0] * config[2];
}

// The CUDA side of the recurrence operator's entries for the grid-resident kernel: float32, the
// call's device made current, the cached plan of (cell, H, B, precision) refusing with its reason
// what does not fit, one cooperative cluster launch per direction with a zeroed flag-barrier
// counter of its own, dW_hh's GEMM in the precision asked.
struct GridRecurrence : AtenBuffersAndGemm {
  using DeviceGuard = c10::cuda::CUDAGuard;
  struct Plan {
    cuda::grid::Plan config;
    Products products;
  };

  static void check_dtype(const Tensor& t) { check_float32(t); }

  template <typename Cell>
  static Plan plan(const Tensor& w_hh, const Shapes& s, Products products) {
    TORCH_CHECK(s.T <= INT_MAX && s.B <= INT_MAX, "tsrnn: the CUDA kernels take at most ", INT_MAX,
                " steps and batch rows, got T=", s.T, ", B=", s.B);
    const cuda::grid::Plan found = grid_plan_for<Cell>(w_hh.size(1), s.B, products);
    TORCH_CHECK(found.cluster > 0, "tsrnn: the grid-resident CUDA kernel does not take H=", s.H, ", B=", s.B,
                " on this GPU (", found.why, "); use backend='auto'");
    return {found, products};
  }

  // The flag barrier's counter: one zeroed 64-bit word on the call's device, freed by the caching
  // allocator once the kernel queued on the current stream is done.
  static Tensor barrier_counter(const Tensor& like) {
    return at::zeros({1}, like.options().dtype(at::kLong));
  }

  template <typename Cell>
  static void forward(const Plan& plan, const ForwardTensors& io) {
    const Tensor offsets = device_offsets(io.steps, io.xg.device());
    const Tensor counter = barrier_counter(io.xg);
    dispatch_products(plan.products, [&](auto p) {
      check_cuda(cuda::grid::forward<Cell, decltype(p)::value>(
                     plan.config, forward_args(io, offsets),
                     reinterpret_cast<unsigned long long*>(counter.data_ptr<int64_t>()),
                     c10::cuda::getCurrentCUDAStream()),
                 "launching the grid-resident forward kernel");
    });
  }

  template <typename Cell>
  static void backward(const Plan& plan, const BackwardTensors& io) {
    const Tensor offsets = device_offsets(io.steps, io.dz.device());
    const Tensor counter = barrier_counter(io.dz);
    dispatch_products(plan.products, [&](auto p) {
      check_cuda(cuda::grid::backward<Cell, decltype(p)::value>(
                     plan.config, backward_args(io, offsets),
                     reinterpret_cast<unsigned long long*>(counter.data_ptr<int64_t>()),
                     c10::cuda::getCurrentCUDAStream()),
                 "launching the grid-resident backward kernel");
    });
  }
};

}  // namespace cuda_binding
}  // namespace tsrnn
