// torch.ops.tsrnn_micro: the microbenchmarks of bench/probe/micro.cu as operators, on the GPU (built by
// bench/probe/micro.py with torch.utils.cpp_extension) or on CPU tensors under the SIMT emulation
// (tests/simt/build.py's probe library). Each timed operator allocates its buffers on `device`,
// launches, and returns (status, median nanoseconds per operation, median cycles per operation):
// status "ok", "wrong: <what>" (its own check failed: the times are NaN) or "error: <CUDA's error>".
#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "micro.h"

namespace {

using Result = std::tuple<std::string, double, double>;
using tsrnn_micro::Times;

at::Tensor zeros(int64_t n, at::ScalarType type, const c10::Device& device) {
  return at::zeros({n}, at::TensorOptions().dtype(type).device(device));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? NAN : v[v.size() / 2];
}

Result finish(cudaError_t err, const at::Tensor& times, const at::Tensor& wrong, int64_t iters, const std::string& what) {
  if (err != cudaSuccess) return {std::string("error: ") + cudaGetErrorString(err), NAN, NAN};
  if (wrong.defined() && wrong.cpu().item<int>() != 0) {
    return {"wrong: " + what + (wrong.cpu().item<int>() == 2 ? " (a wait timed out)" : ""), NAN, NAN};
  }
  const at::Tensor host = times.cpu();
  const auto* t = host.data_ptr<int64_t>();
  std::vector<double> ns, cycles;
  for (int64_t i = 0; i + 1 < host.numel(); i += 2) {
    ns.push_back(static_cast<double>(t[i]) / static_cast<double>(iters));
    cycles.push_back(static_cast<double>(t[i + 1]) / static_cast<double>(iters));
  }
  return {"ok", median(ns), median(cycles)};
}

Times* times_of(const at::Tensor& t) { return reinterpret_cast<Times*>(t.data_ptr<int64_t>()); }

Result cluster_barrier(int64_t cluster, bool relaxed, int64_t stores, int64_t iters, int64_t reps, c10::Device device) {
  const at::Tensor scratch = zeros(cluster * (128 * stores + 1), at::kFloat, device);
  const at::Tensor times = zeros(2 * reps, at::kLong, device);
  at::Tensor wrong = zeros(1, at::kInt, device);
  const cudaError_t err = tsrnn_micro::cluster_barrier(cluster, relaxed, stores, iters, reps, scratch.data_ptr<float>(),
                                                       times_of(times), wrong.data_ptr<int>());
  if (err == cudaSuccess) {  // every block's iteration count
    wrong = wrong.cpu() + (scratch.cpu().slice(0, cluster * 128 * stores) != static_cast<double>(iters * reps)).any().to(at::kInt);
  }
  return finish(err, times, wrong, iters, "a block of the cluster ran other iterations, or a store was lost");
}

Result dsmem_pingpong(int64_t iters, int64_t reps, c10::Device device) {
  const at::Tensor times = zeros(2 * reps, at::kLong, device), wrong = zeros(1, at::kInt, device);
  const cudaError_t err = tsrnn_micro::dsmem_pingpong(iters, reps, times_of(times), wrong.data_ptr<int>());
  return finish(err, times, wrong, iters, "a block received another value than its peer pushed");
}

Result flag_barrier(int64_t mode, int64_t blocks, int64_t cluster, int64_t iters, int64_t reps, c10::Device device) {
  const at::Tensor counters = zeros(16 * blocks, at::kLong, device), slots = zeros(blocks, at::kInt, device);
  const at::Tensor times = zeros(2 * reps, at::kLong, device), wrong = zeros(1, at::kInt, device);
  const cudaError_t err = tsrnn_micro::flag_barrier(mode, blocks, cluster, iters, reps,
                                                    reinterpret_cast<unsigned long long*>(counters.data_ptr<int64_t>()),
                                                    reinterpret_cast<unsigned*>(slots.data_ptr<int>()), times_of(times),
                                                    wrong.data_ptr<int>());
  return finish(err, times, wrong, iters, "a block passed the barrier before its neighbour arrived");
}

// A random cycle through `length` indices (Sattolo's shuffle), chased from 0.
Result ldcg_chain(int64_t length, int64_t iters, int64_t reps, c10::Device device) {
  std::vector<int> order(length);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937 draw(12345);
  for (int64_t i = length - 1; i > 0; --i) std::swap(order[i], order[std::uniform_int_distribution<int64_t>(0, i - 1)(draw)]);
  at::Tensor next = at::empty({length}, at::kInt);
  for (int64_t i = 0; i < length; ++i) next.data_ptr<int>()[order[i]] = order[(i + 1) % length];
  int expected = 0;
  for (int64_t k = 0; k < iters * reps; ++k) expected = next.data_ptr<int>()[expected];
  next = next.to(device);
  const at::Tensor times = zeros(2 * reps, at::kLong, device), end = zeros(1, at::kInt, device);
  const cudaError_t err = tsrnn_micro::ldcg_chain(reinterpret_cast<const unsigned*>(next.data_ptr<int>()), 0, iters, reps,
                                                  reinterpret_cast<unsigned*>(end.data_ptr<int>()), times_of(times));
  const at::Tensor wrong = err == cudaSuccess ? (end.cpu() != expected).to(at::kInt) : at::Tensor();
  return finish(err, times, wrong, iters, "the chase ended at another index than the host's");
}

Result fragment_loads(bool ldmatrix, int64_t pitch, int64_t iters, int64_t reps, c10::Device device) {
  TORCH_CHECK(pitch % 16 == 0, "tsrnn_micro: the pitch must be a multiple of 16 elements");
  const at::Tensor times = zeros(2 * reps, at::kLong, device), wrong = zeros(1, at::kInt, device);
  const cudaError_t err = tsrnn_micro::fragment_loads(ldmatrix, pitch, iters, reps, times_of(times), wrong.data_ptr<int>());
  return finish(err, times, wrong, iters, "the last tile's elements summed to another value than the tile's");
}

int64_t active_clusters(int64_t cluster, int64_t shared_bytes) {
  int clusters = 0;
  const cudaError_t err = tsrnn_micro::active_clusters(cluster, shared_bytes, &clusters);
  TORCH_CHECK(err == cudaSuccess, "tsrnn_micro: cudaOccupancyMaxActiveClusters: ", cudaGetErrorString(err));
  return clusters;
}

int64_t multiprocessors() { return tsrnn_micro::multiprocessors(); }

}  // namespace

TORCH_LIBRARY(tsrnn_micro, m) {
  m.def("cluster_barrier(int cluster, bool relaxed, int stores, int iters, int reps, Device device) -> (str, float, float)",
        &cluster_barrier);
  m.def("dsmem_pingpong(int iters, int reps, Device device) -> (str, float, float)", &dsmem_pingpong);
  m.def("flag_barrier(int mode, int blocks, int cluster, int iters, int reps, Device device) -> (str, float, float)",
        &flag_barrier);
  m.def("ldcg_chain(int length, int iters, int reps, Device device) -> (str, float, float)", &ldcg_chain);
  m.def("fragment_loads(bool ldmatrix, int pitch, int iters, int reps, Device device) -> (str, float, float)", &fragment_loads);
  m.def("active_clusters(int cluster, int shared_bytes) -> int", &active_clusters);
  m.def("multiprocessors() -> int", &multiprocessors);
}
