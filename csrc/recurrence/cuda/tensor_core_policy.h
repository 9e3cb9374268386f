// The CUDA side of the recurrence operator (csrc/recurrence/op.h) for the tensor-core kernels, one
// template over a kernel's traits (cluster_policy.h's ClusterKernel, grid_policy.h's GridKernel):
// the policy TensorCoreRecurrence<Kernel>, the launch plans cached per device, cell, H, batch,
// precision and forced configuration, and the plan's description for the operator
// `recurrence_config`. Included through those two headers by csrc/recurrence/cuda/binding.cpp,
// which registers the operators of the namespaces tsrnn_cluster and tsrnn_grid, and by the tests'
// SIMT emulation (tests/simt), which runs the same policies and kernels on the CPU.
//
// A kernel's traits hold: Plan (its cuda:: plan, `why` where nothing fits) and fits(plan);
// blocks(plan), its launches' most blocks; kName ("cluster-resident"), kForcing (the environment
// variable that forces a configuration) and kForcedValues (2, or 4 where each direction has its own);
// plan<C, P>(hidden, batch, forced, Plan*) (forced_configuration's four values, 0 for the plan's
// choice); describe(plan), the operator recurrence_config's numbers (six or more, the first four
// the forward's cluster, tile or chunk, clusters and units); and forward<C, P> / backward<C, P>
// (plan, args, device, stream), one launch.
#pragma once

#include <array>
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

#include "gemm/cuda/tensor_core_gemm.h"
#include "recurrence/cuda/cuda_recurrence.h"
#include "check_message.h"

namespace tsrnn {
namespace cuda_binding {

// The configuration an environment variable forces on a plan, {forward a, forward b, backward a,
// backward b}, each 0 for the plan's choice: TSRNN_CLUSTER="cluster,tile" for the cluster-resident
// kernel (one configuration for both directions), TSRNN_GRID="cluster,chunk" for both directions of
// the grid-resident one or "cluster,chunk,cluster,chunk" for its forward and backward apart (values
// = 4), what bench/gpu_report.py's sweep and the tests set. Unset: all 0.
inline std::array<int, 4> forced_configuration(const char* variable, int values) {
  const char* text = std::getenv(variable);
  std::array<int, 4> forced{};
  if (text && *text) {
    int read = 0;
    const int parsed = std::sscanf(text, "%d,%d%n,%d,%d%n", &forced[0], &forced[1], &read, &forced[2], &forced[3], &read);
    const bool two = parsed == 2 && text[read] == '\0', four = values == 4 && parsed == 4 && text[read] == '\0';
    TSRNN_CHECK((two || four) && forced[0] >= 0 && forced[1] >= 0 && forced[2] >= 0 && forced[3] >= 0, "tsrnn: ",
                variable, values == 4 ? " must be 'a,b' or 'a,b,c,d'" : " must be 'a,b'",
                ", non-negative integers (0: the plan's choice), got '", text, "'");
    if (two) {
      forced[2] = forced[0];
      forced[3] = forced[1];
    }
  }
  return forced;
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

// Kernel's plan of Cell for `hidden` units, `batch` rows and products p on the current device (the
// caller makes it current), cached per device, hidden, batch, products and the configuration the
// kernel's forcing variable sets; a Plan{} (one that fits nothing) for sizes past int.
template <typename Kernel, typename Cell>
typename Kernel::Plan tensor_core_plan(int64_t hidden, int64_t batch, Products p) {
  using Plan = typename Kernel::Plan;
  if (hidden < 1 || hidden > INT_MAX || batch < 1 || batch > INT_MAX) return {};
  int device = 0;
  check_cuda(cudaGetDevice(&device), "querying the current device");
  const std::array<int, 4> forced = forced_configuration(Kernel::kForcing, Kernel::kForcedValues);
  static std::mutex mutex;
  static std::map<std::tuple<int, int64_t, int64_t, Products, std::array<int, 4>>, Plan> plans;
  const auto key = std::make_tuple(device, hidden, batch, p, forced);
  const std::lock_guard<std::mutex> lock(mutex);
  auto found = plans.find(key);
  if (found == plans.end()) {
    Plan plan;
    dispatch_products(p, [&](auto q) {
      const std::string what = std::string("planning the ") + Kernel::kName + " CUDA kernel";
      check_cuda(Kernel::template plan<Cell, decltype(q)::value>(static_cast<int>(hidden), static_cast<int>(batch),
                                                                  forced, &plan),
                 what.c_str());
    });
    found = plans.emplace(key, plan).first;
  }
  return found->second;
}

// Kernel's plan of `cell` for w_hh (its H), `batch` rows and `precision` on the current device.
template <typename Kernel>
typename Kernel::Plan cell_plan(const std::string& cell, const Tensor& w_hh, int64_t batch, const std::string& precision) {
  typename Kernel::Plan plan;
  const Products p = products_of(precision);
  dispatch_cell(cell, [&](auto tag) { plan = tensor_core_plan<Kernel, decltype(tag)>(w_hh.size(1), batch, p); });
  return plan;
}

// The plan as the operator recurrence_config gives it (Kernel::describe); all zero where nothing fits.
template <typename Kernel>
std::vector<int64_t> tensor_core_config(const std::string& cell, const Tensor& w_hh, int64_t batch,
                                        const std::string& precision) {
  return Kernel::describe(cell_plan<Kernel>(cell, w_hh, batch, precision));
}

// Thread blocks of the plan (the more of its two launches; 0: no fit), the operator recurrence_plan.
template <typename Kernel>
int64_t tensor_core_blocks(const std::string& cell, const Tensor& w_hh, int64_t batch, const std::string& precision) {
  const typename Kernel::Plan plan = cell_plan<Kernel>(cell, w_hh, batch, precision);
  return Kernel::fits(plan) ? Kernel::blocks(plan) : 0;
}

// The CUDA side of the recurrence operator's entries for a tensor-core kernel: float32, the call's
// device made current, the cached plan of (cell, H, B, precision) refusing with its reason what
// does not fit, one launch per direction, dW_hh's GEMM in the precision asked.
template <typename Kernel>
struct TensorCoreRecurrence : AtenBuffersAndGemm {
  using DeviceGuard = c10::cuda::CUDAGuard;
  struct Plan {
    typename Kernel::Plan config;
    Products products;
  };

  static void check_dtype(const Tensor& t) { check_float32(t); }

  // dW_hh's GEMMs, out = a^T b (+ out): TF32 or bf16 products on the tensor cores (csrc/gemm/cuda/
  // tensor_core_gemm.h), each operand rounded (converted) in one kernel first; ieee, ATen's GEMM.
  static void weight_gemm(const Tensor& out, const Tensor& a, const Tensor& b, bool accumulate, Products products) {
    if (products == Products::kIeee) return AtenBuffersAndGemm::weight_gemm(out, a, b, accumulate, products);
    const auto operand = [products](const Tensor& x) {
      return products == Products::kTf32 ? cuda_gemm::round_tf32(x) : x.to(at::kBFloat16);
    };
    cuda_gemm::gemm(out, operand(a).t(), operand(b), accumulate);
  }

  template <typename Cell>
  static Plan plan(const Tensor& w_hh, const Shapes& s, Products products) {
    TSRNN_CHECK(s.T <= INT_MAX && s.B <= INT_MAX, "tsrnn: the CUDA kernels take at most ", INT_MAX,
                " steps and batch rows, got T=", s.T, ", B=", s.B);
    const typename Kernel::Plan found = tensor_core_plan<Kernel, Cell>(w_hh.size(1), s.B, products);
    TSRNN_CHECK(Kernel::fits(found), "tsrnn: the ", Kernel::kName, " CUDA kernel does not take H=", s.H, ", B=", s.B,
                " on this GPU (", found.why, "); use backend='auto'");
    return {found, products};
  }

  template <typename Cell>
  static void forward(const Plan& plan, const ForwardTensors& io) {
    const Tensor offsets = device_offsets(io.steps, io.xg.device());
    dispatch_products(plan.products, [&](auto p) {
      const std::string what = std::string("launching the ") + Kernel::kName + " forward kernel";
      check_cuda(Kernel::template forward<Cell, decltype(p)::value>(plan.config, forward_args(io, offsets),
                                                                     io.xg.device(), c10::cuda::getCurrentCUDAStream()),
                 what.c_str());
    });
  }

  template <typename Cell>
  static void backward(const Plan& plan, const BackwardTensors& io) {
    const Tensor offsets = device_offsets(io.steps, io.dz.device());
    dispatch_products(plan.products, [&](auto p) {
      const std::string what = std::string("launching the ") + Kernel::kName + " backward kernel";
      check_cuda(Kernel::template backward<Cell, decltype(p)::value>(plan.config, backward_args(io, offsets),
                                                                      io.dz.device(), c10::cuda::getCurrentCUDAStream()),
                 what.c_str());
    });
  }
};

}  // namespace cuda_binding
}  // namespace tsrnn
