// The CUDA side of the recurrence operator (csrc/recurrence/op.h) for the cluster-resident
// tensor-core kernel (csrc/recurrence/cuda/cluster_recurrence.cu): the policy ClusterRecurrence,
// the launch plans cached per device, cell, H, batch, precision and forced configuration, and the
// plan's description for the operator `recurrence_config`. Included by csrc/recurrence/cuda/binding.cpp,
// which registers the operators of the namespace tsrnn_cluster, and by the tests' SIMT emulation
// (tests/simt), which runs the same policy and kernels on the CPU.
#pragma once

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "recurrence/cuda/cluster_recurrence.h"
#include "recurrence/cuda/cuda_recurrence.h"

namespace tsrnn {
namespace cuda_binding {

// The two integers an environment variable forces on a plan ("a,b", either 0 for the plan's
// choice): TSRNN_CLUSTER="cluster,tile" for the cluster-resident kernel, TSRNN_GRID="cluster,chunk"
// for the grid-resident one (grid_policy.h), what bench/gpu_report.py's sweep sets for each
// variant. Unset: (0, 0).
inline std::pair<int, int> forced_configuration(const char* variable) {
  const char* text = std::getenv(variable);
  int first = 0, second = 0;
  if (text && *text) {
    TORCH_CHECK(std::sscanf(text, "%d,%d", &first, &second) == 2 && first >= 0 && second >= 0, "tsrnn: ", variable,
                " must be two non-negative integers 'a,b' (0: the plan's choice), got '", text, "'");
  }
  return {first, second};
}

// Calls fn with std::integral_constant of the Products p.
template <typename Fn>
void dispatch_products(Products p, Fn&& fn) {
  switch (p) {
    case Products::kIeee:
      return fn(std::integral_constant<Products, Products::kIeee>{});
    case Products::kTf32:
      return fn(std::integral_constant<Products, Products::kTf32>{});
    case Products::kBf16:
      return fn(std::integral_constant<Products, Products::kBf16>{});
  }
}

// The plan `compute(hidden, batch, products, forced, &plan)` makes on the current device (the caller
// makes it current), cached per device, hidden, batch, products and the configuration forced by
// the environment `variable` (forced_configuration); a Plan{} for sizes past int.
template <typename Plan, typename Cell, typename Compute>
Plan cached_plan(int64_t hidden, int64_t batch, Products p, const char* variable, Compute compute) {
  if (hidden < 1 || hidden > INT_MAX || batch < 1 || batch > INT_MAX) return {};
  int device = 0;
  check_cuda(cudaGetDevice(&device), "querying the current device");
  const std::pair<int, int> forced = forced_configuration(variable);
  static std::mutex mutex;
  static std::map<std::tuple<int, int64_t, int64_t, Products, std::pair<int, int>>, Plan> plans;
  const auto key = std::make_tuple(device, hidden, batch, p, forced);
  const std::lock_guard<std::mutex> lock(mutex);
  auto found = plans.find(key);
  if (found == plans.end()) {
    Plan plan;
    compute(static_cast<int>(hidden), static_cast<int>(batch), p, forced, &plan);
    found = plans.emplace(key, plan).first;
  }
  return found->second;
}

// The plan of Cell for `hidden` units, `batch` rows and products p (cached_plan); cluster == 0
// where nothing fits (the reason in `why`).
template <typename Cell>
cuda::cluster::Plan cluster_plan_for(int64_t hidden, int64_t batch, Products p) {
  return cached_plan<cuda::cluster::Plan, Cell>(
      hidden, batch, p, "TSRNN_CLUSTER", [](int h, int b, Products products, std::pair<int, int> forced, auto* plan) {
        dispatch_products(products, [&](auto q) {
          check_cuda(cuda::cluster::plan<Cell, decltype(q)::value>(h, b, forced.first, forced.second, plan),
                     "planning the cluster-resident CUDA kernel");
        });
      });
}

// The plan of `cell` for w_hh (its H), `batch` rows and `precision` on the current device, as
// {cluster, tile, clusters, units, forward bytes, backward bytes}; all zero where nothing fits.
inline std::vector<int64_t> cluster_config(const std::string& cell, const Tensor& w_hh, int64_t batch,
                                           const std::string& precision) {
  cuda::cluster::Plan plan;
  const Products p = products_of(precision);
  dispatch_cell(cell, [&](auto tag) { plan = cluster_plan_for<decltype(tag)>(w_hh.size(1), batch, p); });
  return {plan.cluster, plan.tile, plan.clusters, plan.units, static_cast<int64_t>(plan.forward_bytes),
          static_cast<int64_t>(plan.backward_bytes)};
}

// Thread blocks of the cluster-resident kernel's plan (0: no fit), the operator recurrence_plan.
inline int64_t cluster_plan_blocks(const std::string& cell, const Tensor& w_hh, int64_t batch,
                                   const std::string& precision) {
  const std::vector<int64_t> config = cluster_config(cell, w_hh, batch, precision);
  return config[0] * config[2];
}

// The CUDA side of the recurrence operator's entries for the cluster-resident kernel: float32, the
// call's device made current, the cached plan of (cell, H, B, precision) refusing with its reason
// what does not fit, one cluster launch per direction, dW_hh's GEMM in the precision asked.
struct ClusterRecurrence : AtenBuffersAndGemm {
  using DeviceGuard = c10::cuda::CUDAGuard;
  struct Plan {
    cuda::cluster::Plan config;
    Products products;
  };

  static void check_dtype(const Tensor& t) { check_float32(t); }

  template <typename Cell>
  static Plan plan(const Tensor& w_hh, const Shapes& s, Products products) {
    TORCH_CHECK(s.T <= INT_MAX && s.B <= INT_MAX, "tsrnn: the CUDA kernels take at most ", INT_MAX,
                " steps and batch rows, got T=", s.T, ", B=", s.B);
    const cuda::cluster::Plan found = cluster_plan_for<Cell>(w_hh.size(1), s.B, products);
    TORCH_CHECK(found.cluster > 0, "tsrnn: the cluster-resident CUDA kernel does not take H=", s.H, " on this GPU (",
                found.why, "); use backend='auto'");
    return {found, products};
  }

  template <typename Cell>
  static void forward(const Plan& plan, const ForwardTensors& io) {
    const Tensor offsets = device_offsets(io.steps, io.xg.device());
    dispatch_products(plan.products, [&](auto p) {
      check_cuda(cuda::cluster::forward<Cell, decltype(p)::value>(plan.config, forward_args(io, offsets),
                                                                  c10::cuda::getCurrentCUDAStream()),
                 "launching the cluster-resident forward kernel");
    });
  }

  template <typename Cell>
  static void backward(const Plan& plan, const BackwardTensors& io) {
    const Tensor offsets = device_offsets(io.steps, io.dz.device());
    dispatch_products(plan.products, [&](auto p) {
      check_cuda(cuda::cluster::backward<Cell, decltype(p)::value>(plan.config, backward_args(io, offsets),
                                                                   c10::cuda::getCurrentCUDAStream()),
                 "launching the cluster-resident backward kernel");
    });
  }
};

}  // namespace cuda_binding
}  // namespace tsrnn
