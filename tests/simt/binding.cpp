// The SIMT emulation's operators: the CUDA binding's policies (csrc/recurrence/cuda/cluster_policy.h,
// grid_policy.h) and the kernels of csrc/recurrence/cuda/cluster_recurrence.cu and
// grid_recurrence.cu, compiled by g++ against tests/simt/simt.h, as the CPU kernels of
// torch.ops.tsrnn_simt_cluster and tsrnn_simt_grid (recurrence_forward / recurrence_backward /
// recurrence_plan / recurrence_config; schemas defined from Python by tsrnn.ops, see
// tests/simt/emulation.py), the tensor-core GEMMs (csrc/gemm/cuda/tensor_core_gemm.h, against the
// emulated cuBLAS of tests/simt/include/cublas_v2.h) as those of tsrnn_simt_tensor_core's mm /
// round_tf32, and torch.ops.simt.* to choose
// the emulated device and the thread-order seed, to plant the tests' bugs (a dropped barrier, broken
// atomics: see tests/simt/simt.h) and to run the emulation's own probes (tests/simt/probes.cpp).
#include <torch/library.h>

#include "recurrence/cuda/cluster_policy.h"
#include "recurrence/cuda/grid_policy.h"
#ifdef TSRNN_PROBE
#include "recurrence/cuda/probe_ops.h"
#endif

std::string simt_probe(const std::string& name);

namespace {

// A new emulated device with `multiprocessors` SMs, `shared_optin` bytes of shared memory per block
// and kernels of `registers` registers a thread in its occupancy queries (the rest as an H100);
// returns its index.
int64_t add_device(int64_t multiprocessors, int64_t shared_optin, int64_t registers) {
  TORCH_CHECK(multiprocessors >= 1 && shared_optin >= 0 && registers >= 1 && registers <= 255, "simt: bad device");
  simt::Device device;
  device.multiprocessors = static_cast<int>(multiprocessors);
  device.shared_per_block_optin = static_cast<int>(shared_optin);
  device.registers_per_thread = static_cast<int>(registers);
  return simt::add_device(device);
}

// The device of the next launches and the seed of their thread order.
void use(int64_t device, int64_t seed) {
  simt::set_device(static_cast<int>(device));
  simt::set_seed(static_cast<std::uint64_t>(seed));
}

int64_t launches() { return simt::launches(); }

// The launches of kernels whose (demangled) name holds `part`.
int64_t launches_of(const std::string& part) { return simt::launches_of(part); }

// What the kernels did since the last reset, by simt::Count's names.
c10::Dict<std::string, int64_t> counts() {
  c10::Dict<std::string, int64_t> out;
  for (int i = 0; i < static_cast<int>(simt::Count::kKinds); ++i) {
    out.insert(simt::kCountNames[i], simt::counted(static_cast<simt::Count>(i)));
  }
  return out;
}

void reset_counts() { simt::reset_counts(); }

// The barrier on `line` of the kernel source file whose path ends with `file` becomes a no-op
// ("", 0: none); barrier_drops: how many barrier calls it dropped since.
void drop_barrier(const std::string& file, int64_t line) {
  TORCH_CHECK(line == 0 ? file.empty() : line > 0 && !file.empty(),
              "simt: drop_barrier takes a file and a line >= 1, or (\"\", 0) for none; got (\"", file, "\", ", line, ")");
  simt::set_drop(file.c_str(), static_cast<int>(line));
}

int64_t barrier_drops() { return simt::drops(); }

// The emulation's atomics broken: "flag_early", "skip_arrive", or "" (none).
void plant(const std::string& name) {
  TORCH_CHECK(name.empty() || name == "flag_early" || name == "skip_arrive", "simt: no plant '", name,
              "': one of \"\", \"flag_early\", \"skip_arrive\"");
  simt::set_plant(name);
}

// "ok", what a probe kernel computed wrong, or the error its launch reported.
std::string probe(const std::string& name, int64_t seed) {
  simt::set_seed(static_cast<std::uint64_t>(seed));
  return simt_probe(name);
}

}  // namespace

TORCH_LIBRARY(simt, m) {
  m.def("add_device(int multiprocessors, int shared_optin, int registers) -> int", &add_device);
  m.def("use(int device, int seed) -> ()", &use);
  m.def("launches() -> int", &launches);
  m.def("launches_of(str part) -> int", &launches_of);
  m.def("drop_barrier(str file, int line) -> ()", &drop_barrier);
  m.def("barrier_drops() -> int", &barrier_drops);
  m.def("plant(str name) -> ()", &plant);
  m.def("probe(str name, int seed) -> str", &probe);
  m.def("counts() -> Dict(str, int)", &counts);
  m.def("reset_counts() -> ()", &reset_counts);
#ifdef TSRNN_PROBE
  m.def("probe_arm(int skip, Tensor? trace, bool ignore_skip=False) -> ()", &tsrnn::cuda::probe::arm);
  m.def("probe_layout() -> (str[], str[], int)", &tsrnn::cuda::probe::layout);
  m.def("probe_rungs(str kernel) -> int[]", &tsrnn::cuda::probe::rungs);
#endif
}

TORCH_LIBRARY_IMPL(tsrnn_simt_cluster, CPU, m) {
  m.impl("recurrence_forward", &tsrnn::recurrence_forward<tsrnn::cuda_binding::ClusterRecurrence>);
  m.impl("recurrence_backward", &tsrnn::recurrence_backward<tsrnn::cuda_binding::ClusterRecurrence>);
  m.impl("recurrence_plan", &tsrnn::cuda_binding::tensor_core_blocks<tsrnn::cuda_binding::ClusterKernel>);
  m.impl("recurrence_config", &tsrnn::cuda_binding::tensor_core_config<tsrnn::cuda_binding::ClusterKernel>);
}

TORCH_LIBRARY_IMPL(tsrnn_simt_grid, CPU, m) {
  m.impl("recurrence_forward", &tsrnn::recurrence_forward<tsrnn::cuda_binding::GridRecurrence>);
  m.impl("recurrence_backward", &tsrnn::recurrence_backward<tsrnn::cuda_binding::GridRecurrence>);
  m.impl("recurrence_plan", &tsrnn::cuda_binding::tensor_core_blocks<tsrnn::cuda_binding::GridKernel>);
  m.impl("recurrence_config", &tsrnn::cuda_binding::tensor_core_config<tsrnn::cuda_binding::GridKernel>);
}

TORCH_LIBRARY_IMPL(tsrnn_simt_tensor_core, CPU, m) {
  m.impl("mm", &tsrnn::cuda_gemm::mm);
  m.impl("round_tf32", static_cast<tsrnn::Tensor (*)(const tsrnn::Tensor&)>(&tsrnn::cuda_gemm::round_tf32));
}
