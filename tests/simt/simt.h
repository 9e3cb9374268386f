// A SIMT emulation that runs the unmodified CUDA kernel source of csrc/recurrence/cuda on the CPU, for the
// tests (tests/kernels/recurrence/test_simt.py); it is not part of the package.
//
// g++ compiles csrc/recurrence/cuda/*.cu as C++ with tests/simt/include first on the include path, whose
// <cuda_runtime.h>, <cooperative_groups.h> and c10/cuda headers include this file. Every CUDA
// thread of a launch is a fiber with its own stack (simt.cpp). A fiber runs until it reaches a
// block barrier (__syncthreads), the cooperative grid-wide sync, a cluster barrier, or a warp
// collective (shuffles, votes, __syncwarp, wmma's loads, stores and mma_sync), and the
// scheduler then resumes another fiber picked by a seeded
// pseudo-random draw: the progress of the threads between synchronisations runs in a random
// order, so a missing barrier shows up as a read of memory not yet written (the tests fill fresh
// memory with NaN) rather than passing by luck. With an odd seed the draw is by warp instead: each
// warp gets a random priority and the highest-priority warp with a runnable thread always goes on,
// so one warp runs as far as it can before the others (a uniform draw lets nearly every thread
// catch up while a warp gathers its 32 lanes at a collective, and hides such a read). The emulation is strict where CUDA leaves the
// result undefined: the threads of a block must all reach the same barrier (an exited thread
// never arrives), a warp collective waits for every lane of its mask, which must include the
// calling lane and the lanes it reads, and a deadlock is reported with what each thread waits on.
// Each block's dynamic shared memory is a heap buffer of exactly the launch's size, filled with
// NaN bytes (0xff), so that AddressSanitizer sees any access past it.
//
// Thread-block clusters (sm_90): cudaLaunchKernelEx with a cluster dimension (1-D, dividing the
// grid, at most 8 blocks or 16 with cudaFuncAttributeNonPortableClusterSizeAllowed), the cluster's
// barrier (cooperative_groups' cluster_group: sync, and the split barrier_arrive / barrier_wait,
// which counts every thread of every block of the cluster, all arriving on the same line: stricter
// than PTX, whose barrier.cluster waits for the non-exited threads only, an exited thread never
// arrives; a thread that exits while others wait for it, arrives twice without waiting, or waits
// without arriving is an error), block_rank, num_blocks, and map_shared_rank, which returns a
// pointer into the peer block's own shared-memory buffer (so AddressSanitizer bounds distributed
// shared memory too) after checking the rank, that the address is in the caller's dynamic shared
// memory and that the peer has not exited. A block that exits while a peer mapped its shared
// memory in the cluster barrier phase not yet completed is an error, and an exited block's shared
// memory is refilled with NaN bytes (and poisoned under ASan), so a later read through an old
// pointer shows. A launch without a cluster dimension runs clusters of one block, as CUDA's
// (this_cluster() is the block). Tensor cores (nvcuda::wmma, fragments in a layout drawn per seed):
// tests/simt/wmma.h. The PTX wrappers of csrc/recurrence/cuda/ptx.h (mapa, mbarriers, st.async,
// ldmatrix): tests/simt/ptx_emulation.h.
//
// Atomics and the grid-resident kernel's flag barrier (csrc/recurrence/cuda/flag_barrier.h):
// include/cuda/atomic's cuda::atomic_ref (load, store, exchange, compare_exchange, fetch_add & co.),
// atomicAdd, atomicExch, atomicCAS, __ldcv, __threadfence and __nanosleep are scheduling points as
// the barriers are (the seeded draw picks who goes on). A thread whose atomic read returns the same
// value at the same address as its previous atomic read there (no barrier, collective, atomic
// write of its own or simt::label between) is spinning: it is parked until an atomic write
// touches that address. When every thread that has not exited waits at a barrier or collective or
// spins, and no atomic write happened since any spinner read its value (nor a plain store changed
// it), nothing can ever change what they read: the launch fails with a livelock report that names
// each spinning thread (block, thread, simt::label's annotation such as "flag barrier phase 5",
// the source line of its read, the value and the address) and, per address, the blocks that wrote
// it atomically fewer times than the others (the block that skipped its arrive). Parking also
// keeps a spin from running forever under the odd seeds' by-warp order. A poll through a plain
// load (not atomic, not __ldcv) is not a scheduling point: it would spin forever, and must not be
// written. cudaLaunchKernelEx with cudaLaunchAttributeCooperative (val.cooperative = 1) launches
// cooperatively, with or without a cluster dimension: refused with
// cudaErrorCooperativeLaunchTooLarge unless every block (every cluster) is resident at once.
// Planted bugs for the tests (include/cuda/atomic), chosen at run time by simt::set_plant
// (torch.ops.simt.plant, tests/simt/run.py --plant): "flag_early", an acquire load that reads one
// more than the memory holds; "skip_arrive", block 1's release fetch_adds are dropped.
//
// What the emulation cannot catch: it is sequentially consistent (every atomic is seq_cst, a
// fence orders nothing more), so what a missing memory fence, or a relaxed order where release or
// acquire is needed, would break on a GPU cannot show here: the GPU job stresses the flag barrier
// instead; and a race shows only in the thread orders the seeds draw.
//
// simt::set_drop(file, N) (torch.ops.simt.drop_barrier, tests/simt/run.py --drop FILE:N), at run
// time in the one library, turns the block barrier, grid sync, cluster sync or cluster
// barrier_wait on line N of the source file whose path ends with `file` (the call site's
// __builtin_FILE(), compared from a '/' on: "recurrence.cu" is not "grid_recurrence.cu") into a
// no-op (the planted-bug test: the emulation must catch it; a dropped barrier_wait leaves the
// thread's arrival open, so its next arrival is reported as one without waiting).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#define TSRNN_SIMT 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)

struct uint3 {
  unsigned x, y, z;
};

struct dim3 {
  unsigned x, y, z;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

// --- the runtime API's types (the subset the host code of csrc/recurrence/cuda uses) ----------------------
enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevice = 101,
  cudaErrorLaunchFailure = 719,
  cudaErrorCooperativeLaunchTooLarge = 720,
  cudaErrorInvalidClusterSize = 912,
};
enum cudaDeviceAttr {
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrCooperativeLaunch = 95,
  cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
  cudaDevAttrClusterLaunch = 120,
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8, cudaFuncAttributeNonPortableClusterSizeAllowed = 14 };
enum cudaLaunchAttributeID { cudaLaunchAttributeCooperative = 2, cudaLaunchAttributeClusterDimension = 4 };
union cudaLaunchAttributeValue {
  struct {
    unsigned x, y, z;
  } clusterDim;
  int cooperative;
  char pad[64];
};
struct cudaLaunchAttribute {
  cudaLaunchAttributeID id;
  cudaLaunchAttributeValue val;
};
struct CUstream_st;
using cudaStream_t = CUstream_st*;

namespace simt {

// One emulated GPU: what plan() and the occupancy query read.
struct Device {
  int multiprocessors = 4;
  int shared_per_block_optin = 232448;       // bytes (an H100's 227 KiB)
  int shared_per_multiprocessor = 233472;    // bytes (228 KiB)
  int shared_reserved_per_block = 1024;      // bytes the hardware keeps per resident block
  int threads_per_multiprocessor = 2048;
  int registers_per_multiprocessor = 65536;
  int registers_per_thread = 64;             // not known without nvcc: an assumption
  int blocks_per_multiprocessor = 32;
  bool cooperative = true;
  bool clusters = true;                      // thread-block clusters (sm_90)
};

// The devices the tests define (each a distinct index, so cached plans stay per device) and the
// seed of the thread order of the next launches.
int add_device(const Device& device);
void set_device(int index);
void set_seed(std::uint64_t seed);
std::int64_t launches();              // kernels launched so far (each ran to completion)
std::int64_t launches_of(const std::string& part);  // those of kernels whose name holds `part`
std::int64_t launch_serial();         // the running launch's number among all begun, failed ones too

// What the kernels did, counted since reset_counts() (the GPU probe's removal ladder checks that a
// variant really skips its part): cluster arrivals by flavour, cluster waits, tensor-core products
// (wmma mma_sync and PTX mma.sync, per warp), block barriers, atomic writes, distributed shared
// memory mappings, reads of the clock, fragment loads (wmma load_matrix_sync and ldmatrix, per
// warp), __ldcg loads, ldmatrix's shared-memory wavefronts past one a matrix (ptx_emulation.h's
// model of bank conflicts), mbarrier waits (per thread, each completed try_wait.parity) and the
// shared-memory-restricted release and acquire fences (per thread).
enum class Count {
  kArriveRelease, kArriveRelaxed, kClusterWait, kMma, kBlockBarrier, kAtomicWrite, kMapShared, kClock, kFragmentLoad,
  kCachedLoad, kBankConflict, kMbarrierWait, kFenceSharedRelease, kFenceSharedAcquire, kKinds
};
inline constexpr const char* kCountNames[] = {"arrive_release", "arrive_relaxed", "cluster_wait", "mma",
                                              "block_barrier", "atomic_write", "map_shared", "clock",
                                              "fragment_load", "cached_load", "bank_conflict", "mbarrier_wait",
                                              "fence_shared_release", "fence_shared_acquire"};
static_assert(sizeof(kCountNames) / sizeof(kCountNames[0]) == static_cast<int>(Count::kKinds), "a name per count");
void count(Count what);
std::int64_t counted(Count what);
void reset_counts();
// The emulated clock (clock64, %globaltimer): one counter for the whole process, advanced by every
// read and every scheduling point, so a thread's successive reads strictly increase.
std::uint64_t clock_tick();
const char* last_error_message();     // what the last failed launch found, or ""

// The planted bugs of the tests, chosen at run time. set_drop: the barrier on `line` of the source
// file whose path ends with `file` (after a '/', or the whole path) becomes a no-op; ("", 0)
// clears it. dropped: whether the barrier called at file:line is the dropped one (each such call
// counted in drops(), which set_drop resets). set_plant: "" (none), "flag_early" or "skip_arrive"
// (include/cuda/atomic); any other name throws std::invalid_argument.
void set_drop(const char* file, int line);
bool dropped(const char* file, int line);
std::int64_t drops();
enum class Plant { kNone, kFlagEarly, kSkipArrive };
void set_plant(const std::string& name);
Plant plant();

// --- what the kernel code calls (through the CUDA names below) ---------------------------------
const uint3& thread_idx();
const uint3& block_idx();
const dim3& block_dim();
const dim3& grid_dim();
void* dynamic_shared();
std::size_t dynamic_shared_bytes();  // the size of the running block's dynamic shared memory
void block_barrier(int line);
void grid_barrier(int line);

// A warp collective: every lane of `mask` contributes `value` (up to 8 bytes) and gets back the
// values of all lanes (out[32], lanes outside the mask left untouched). kind names the call (for
// the check that the lanes of a mask are in the same collective), line its source line.
void warp_exchange(const char* kind, unsigned mask, std::uint64_t value, std::uint64_t* out, int line);
unsigned lane();
[[noreturn]] void fail(const char* what, int line);

template <typename T>
std::uint64_t bits_of(T v) {
  static_assert(std::is_trivially_copyable<T>::value && sizeof(T) <= 8, "shuffles move up to 8 bytes");
  std::uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}

template <typename T>
T from_bits(std::uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return v;
}

// Lane `src` of the calling lane's width-segment, as the PTX shfl modes define it: a source lane
// outside the segment returns the caller's own value; a source lane outside the mask is an error.
template <typename T>
T shuffle(const char* kind, unsigned mask, T v, int src, bool in_segment, int line) {
  std::uint64_t all[32];
  warp_exchange(kind, mask, bits_of(v), all, line);
  if (!in_segment) return v;
  if (!(mask >> src & 1u)) fail("a shuffle reads a lane outside its mask", line);
  return from_bits<T>(all[src]);
}

unsigned vote(const char* kind, unsigned mask, bool predicate, int line);

// A kernel run by cudaLaunchKernel / cudaLaunchCooperativeKernel: `body` runs once per thread.
cudaError_t launch(void (*body)(void*), void* context, dim3 grid, dim3 block, std::size_t shared_bytes,
                   bool cooperative, const void* kernel, dim3 cluster = dim3(1, 1, 1));

// --- atomics, fences and the livelock detector (include/cuda/atomic, atomicAdd & co. below) -------
// Every atomic operation, fence and __nanosleep is a point where the scheduler may run another
// thread (memory_point). An atomic operation that writes nothing (a load, a failed CAS, an add of
// 0) reports what it read to `spun`: a thread that reads the same value at the same address as
// its previous atomic read there, with no barrier, collective, atomic write of its own or label
// between, is spinning, and is parked (spun returns true: read again) until an atomic write
// overlaps the address, or every thread is parked or blocked and either an atomic write happened
// anywhere since it parked or the memory no longer holds what it read; if neither, the launch
// fails with a livelock report. atomic_wrote: the running thread just wrote `bytes` at `address`.
void memory_point(int line);
bool spun(const void* address, unsigned bytes, std::uint64_t bits, const char* file, int line);
void atomic_wrote(const void* address, unsigned bytes);
// The running thread's annotation in reports ("flag barrier phase 5"): `what`, then `value`.
void label(const char* what, long long value);
unsigned block_linear();  // the running thread's block, x fastest

// An atomic read of *p: a scheduling point, then the value (after parking while it spins).
template <typename T>
T atomic_read(const T* p, const char* file, int line) {
  static_assert(std::is_trivially_copyable<T>::value && sizeof(T) <= 8, "atomics of up to 8 bytes");
  memory_point(line);
  for (;;) {
    const T v = *p;
    if (!spun(p, sizeof(T), bits_of(v), file, line)) return v;
  }
}

// An atomic read-modify-write of *p to f(old), returning old; one that leaves the bits as they are
// is a read (a failed compare-and-swap polls).
template <typename T, typename F>
T atomic_update(T* p, F f, const char* file, int line) {
  static_assert(std::is_trivially_copyable<T>::value && sizeof(T) <= 8, "atomics of up to 8 bytes");
  memory_point(line);
  for (;;) {
    const T old = *p;
    const T next = f(old);
    if (bits_of(next) != bits_of(old)) {
      *p = next;
      atomic_wrote(p, sizeof(T));
      return old;
    }
    if (!spun(p, sizeof(T), bits_of(old), file, line)) return old;
  }
}

template <typename T>
void atomic_write(T* p, T v, int line) {
  memory_point(line);
  *p = v;
  atomic_wrote(p, sizeof(T));
}

// The running thread's cluster: its size in blocks and its block's rank; the barrier; the peer's
// shared memory at the offset of `address` in the caller's.
unsigned cluster_blocks();
unsigned cluster_rank();
void cluster_arrive(int line, bool relaxed = false);  // relaxed: barrier.cluster.arrive.relaxed (counted apart)
void cluster_wait(int line);
void* map_shared(const void* address, int rank, int line);

template <typename... P, std::size_t... I>
void call_kernel(void (*kernel)(P...), void** args, std::index_sequence<I...>) {
  kernel(*static_cast<typename std::decay<P>::type*>(args[I])...);
}

template <typename... P>
cudaError_t launch_kernel(void (*kernel)(P...), dim3 grid, dim3 block, void** args, std::size_t shared_bytes,
                          bool cooperative, dim3 cluster = dim3(1, 1, 1)) {
  struct Context {
    void (*kernel)(P...);
    void** args;
  } context{kernel, args};
  auto body = [](void* c) {
    auto* ctx = static_cast<Context*>(c);
    call_kernel(ctx->kernel, ctx->args, std::index_sequence_for<P...>{});
  };
  return launch(body, &context, grid, block, shared_bytes, cooperative, reinterpret_cast<const void*>(kernel), cluster);
}

// cudaFuncSetAttribute's per-kernel limit, checked by the launches.
cudaError_t set_max_dynamic_shared(const void* kernel, int bytes);
cudaError_t set_non_portable_clusters(const void* kernel, bool allowed);
cudaError_t active_clusters(int* clusters, const void* kernel, int block_size, std::size_t shared_bytes,
                            unsigned cluster);
cudaError_t occupancy(int* blocks, const void* kernel, int block_size, std::size_t shared_bytes);

}  // namespace simt

// --- CUDA's built-in variables and device functions ---------------------------------------------
// threadIdx, blockIdx, blockDim and gridDim are variables whose .x, .y, .z read the running
// thread's values when converted to unsigned (variables, not macros: a cudaLaunchConfig_t has
// members of the same names).
namespace simt {
enum class Builtin { kThreadIdx, kBlockIdx, kBlockDim, kGridDim };

inline unsigned builtin(Builtin which, int axis) {
  if (which == Builtin::kThreadIdx || which == Builtin::kBlockIdx) {
    const uint3& v = which == Builtin::kThreadIdx ? thread_idx() : block_idx();
    return axis == 0 ? v.x : axis == 1 ? v.y : v.z;
  }
  const dim3& v = which == Builtin::kBlockDim ? block_dim() : grid_dim();
  return axis == 0 ? v.x : axis == 1 ? v.y : v.z;
}

template <Builtin Which, int Axis>
struct BuiltinAxis {
  operator unsigned() const { return builtin(Which, Axis); }
};

template <Builtin Which>
struct BuiltinVector {
  BuiltinAxis<Which, 0> x;
  BuiltinAxis<Which, 1> y;
  BuiltinAxis<Which, 2> z;
};
}  // namespace simt

inline constexpr simt::BuiltinVector<simt::Builtin::kThreadIdx> threadIdx{};
inline constexpr simt::BuiltinVector<simt::Builtin::kBlockIdx> blockIdx{};
inline constexpr simt::BuiltinVector<simt::Builtin::kBlockDim> blockDim{};
inline constexpr simt::BuiltinVector<simt::Builtin::kGridDim> gridDim{};

inline void __syncthreads(int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
  if (!simt::dropped(file, line)) simt::block_barrier(line);
}
inline void __syncwarp(unsigned mask = 0xffffffffu, int line = __builtin_LINE()) {
  simt::vote("__syncwarp", mask, true, line);
}

template <typename T>
T __shfl_sync(unsigned mask, T v, int src, int width = 32, int line = __builtin_LINE()) {
  const int base = static_cast<int>(simt::lane()) & ~(width - 1);
  return simt::shuffle("__shfl_sync", mask, v, base + (src & (width - 1)), true, line);
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32, int line = __builtin_LINE()) {
  const int lane = static_cast<int>(simt::lane()), src = lane ^ lane_mask;
  return simt::shuffle("__shfl_xor_sync", mask, v, src, (src & ~(width - 1)) == (lane & ~(width - 1)), line);
}
template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32, int line = __builtin_LINE()) {
  const int lane = static_cast<int>(simt::lane()), src = lane + static_cast<int>(delta);
  return simt::shuffle("__shfl_down_sync", mask, v, src, (src & ~(width - 1)) == (lane & ~(width - 1)), line);
}
template <typename T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32, int line = __builtin_LINE()) {
  const int lane = static_cast<int>(simt::lane()), src = lane - static_cast<int>(delta);
  return simt::shuffle("__shfl_up_sync", mask, v, src, src >= (lane & ~(width - 1)), line);
}
inline unsigned __ballot_sync(unsigned mask, int predicate, int line = __builtin_LINE()) {
  return simt::vote("__ballot_sync", mask, predicate != 0, line);
}
inline int __any_sync(unsigned mask, int predicate, int line = __builtin_LINE()) {
  return simt::vote("__any_sync", mask, predicate != 0, line) != 0;
}
inline int __all_sync(unsigned mask, int predicate, int line = __builtin_LINE()) {
  return (simt::vote("__all_sync", mask, predicate != 0, line) & mask) == mask;
}

// CUDA's vector types that the kernels load and store whole (vector_types.h): as CUDA aligns them.
struct alignas(8) float2 {
  float x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(8) uint2 {
  unsigned x, y;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }

// Cache-hinted loads are plain loads on one CPU thread, but __ldcv (volatile: fetched again on
// every use, the load a poll of a flag written by another block uses) is an atomic read: a
// scheduling point, and a poll that can never end is reported as a livelock. A load of a vector
// (float2, float4: LDG.E.64, LDG.E.128) from an address that is not a multiple of its size is
// reported, as the GPU faults on it (a misaligned address).
template <typename T>
T __ldcg(const T* p, int line = __builtin_LINE()) {
  simt::count(simt::Count::kCachedLoad);
  if (reinterpret_cast<std::uintptr_t>(p) % alignof(T) != 0) {
    simt::fail(("__ldcg of " + std::to_string(sizeof(T)) + " bytes at an address not " + std::to_string(alignof(T)) +
                "-byte aligned").c_str(), line);
  }
  return *p;
}
template <typename T>
T __ldca(const T* p) {
  return *p;
}
template <typename T>
T __ldcv(const T* p, int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
  if constexpr (sizeof(T) <= 8) {
    return simt::atomic_read(p, file, line);
  } else {
    simt::memory_point(line);
    return *p;
  }
}

// Fences and sleeps: scheduling points (the emulation is sequentially consistent: a fence orders
// nothing more).
inline void __threadfence(int line = __builtin_LINE()) { simt::memory_point(line); }
inline void __threadfence_block(int line = __builtin_LINE()) { simt::memory_point(line); }
inline void __nanosleep(unsigned, int line = __builtin_LINE()) { simt::memory_point(line); }

// atomicAdd, atomicExch, atomicCAS: CUDA's overloads.
#define SIMT_ATOMICS(T)                                                                                     \
  inline T atomicAdd(T* p, T v, int line = __builtin_LINE(), const char* file = __builtin_FILE()) {        \
    return simt::atomic_update(p, [v](T old) { return static_cast<T>(old + v); }, file, line);            \
  }                                                                                                        \
  inline T atomicExch(T* p, T v, int line = __builtin_LINE(), const char* file = __builtin_FILE()) {       \
    return simt::atomic_update(p, [v](T) { return v; }, file, line);                                       \
  }
SIMT_ATOMICS(int)
SIMT_ATOMICS(unsigned)
SIMT_ATOMICS(unsigned long long)
SIMT_ATOMICS(float)
#undef SIMT_ATOMICS
#define SIMT_CAS(T)                                                                                         \
  inline T atomicCAS(T* p, T compare, T v, int line = __builtin_LINE(), const char* file = __builtin_FILE()) { \
    return simt::atomic_update(p, [compare, v](T old) { return old == compare ? v : old; }, file, line);    \
  }
SIMT_CAS(int)
SIMT_CAS(unsigned)
SIMT_CAS(unsigned long long)
#undef SIMT_CAS

inline unsigned __float_as_uint(float x) {
  unsigned u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
inline float __uint_as_float(unsigned u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }

// --- the host API ------------------------------------------------------------------------------
cudaError_t cudaGetDevice(int* device);
inline cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }  // every emulated launch has completed
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
const char* cudaGetErrorString(cudaError_t error);

template <typename... P>
cudaError_t cudaFuncSetAttribute(void (*kernel)(P...), cudaFuncAttribute attr, int value) {
  if (attr == cudaFuncAttributeNonPortableClusterSizeAllowed) {
    return simt::set_non_portable_clusters(reinterpret_cast<const void*>(kernel), value != 0);
  }
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaErrorInvalidValue;
  return simt::set_max_dynamic_shared(reinterpret_cast<const void*>(kernel), value);
}

struct cudaLaunchConfig_t {
  dim3 gridDim, blockDim;
  std::size_t dynamicSmemBytes = 0;
  cudaStream_t stream = nullptr;
  cudaLaunchAttribute* attrs = nullptr;
  unsigned numAttrs = 0;
};

namespace simt {
inline dim3 cluster_of(const cudaLaunchConfig_t* config) {
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    if (config->attrs[i].id == cudaLaunchAttributeClusterDimension) {
      const auto& c = config->attrs[i].val.clusterDim;
      return dim3(c.x, c.y, c.z);
    }
  }
  return dim3(1, 1, 1);
}

// cudaLaunchAttributeCooperative: all blocks resident at once, or the launch is refused.
inline bool cooperative_of(const cudaLaunchConfig_t* config) {
  bool cooperative = false;
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    if (config->attrs[i].id == cudaLaunchAttributeCooperative) cooperative = config->attrs[i].val.cooperative != 0;
  }
  return cooperative;
}

template <typename... P, typename Tuple, std::size_t... I>
cudaError_t launch_ex(const cudaLaunchConfig_t* config, void (*kernel)(P...), Tuple& values, std::index_sequence<I...>) {
  void* args[] = {static_cast<void*>(&std::get<I>(values))..., nullptr};
  return launch_kernel(kernel, config->gridDim, config->blockDim, args, config->dynamicSmemBytes,
                       cooperative_of(config), cluster_of(config));
}
}  // namespace simt

// cudaLaunchKernelEx's C++ form: the arguments converted to the kernel's parameter types.
template <typename... P, typename... A>
cudaError_t cudaLaunchKernelEx(const cudaLaunchConfig_t* config, void (*kernel)(P...), A&&... args) {
  std::tuple<typename std::decay<P>::type...> values(std::forward<A>(args)...);
  return simt::launch_ex(config, kernel, values, std::index_sequence_for<P...>{});
}

// How many clusters of config's size, block size and shared memory the emulated device holds at
// once: whole clusters of the blocks that fit on its multiprocessors (no GPC boundaries modelled).
template <typename... P>
cudaError_t cudaOccupancyMaxActiveClusters(int* clusters, void (*kernel)(P...), const cudaLaunchConfig_t* config) {
  const dim3 cluster = simt::cluster_of(config);
  return simt::active_clusters(clusters, reinterpret_cast<const void*>(kernel),
                               static_cast<int>(config->blockDim.x * config->blockDim.y * config->blockDim.z),
                               config->dynamicSmemBytes, cluster.x * cluster.y * cluster.z);
}

template <typename... P>
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, void (*kernel)(P...), int block_size,
                                                          std::size_t shared_bytes) {
  return simt::occupancy(blocks, reinterpret_cast<const void*>(kernel), block_size, shared_bytes);
}

template <typename... P>
cudaError_t cudaLaunchCooperativeKernel(void (*kernel)(P...), dim3 grid, dim3 block, void** args,
                                        std::size_t shared_bytes = 0, cudaStream_t = nullptr) {
  return simt::launch_kernel(kernel, grid, block, args, shared_bytes, true);
}

template <typename... P>
cudaError_t cudaLaunchKernel(void (*kernel)(P...), dim3 grid, dim3 block, void** args, std::size_t shared_bytes = 0,
                             cudaStream_t = nullptr) {
  return simt::launch_kernel(kernel, grid, block, args, shared_bytes, false);
}

// --- cooperative groups: the grid of a cooperative launch ---------------------------------------
namespace cooperative_groups {
struct grid_group {
  void sync(int line = __builtin_LINE(), const char* file = __builtin_FILE()) const {
    if (!simt::dropped(file, line)) simt::grid_barrier(line);
  }
};
inline grid_group this_grid() { return {}; }

// The block's cluster (a cluster of one in a launch without a cluster dimension).
struct cluster_group {
  using arrival_token = struct {};
  static void sync(int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
    if (simt::dropped(file, line)) return;
    simt::cluster_arrive(line);
    simt::cluster_wait(line);
  }
  static arrival_token barrier_arrive(int line = __builtin_LINE()) {
    simt::cluster_arrive(line);
    return {};
  }
  static void barrier_wait(int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
    if (!simt::dropped(file, line)) simt::cluster_wait(line);
  }
  static void barrier_wait(arrival_token&&, int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
    barrier_wait(line, file);
  }
  static unsigned block_rank() { return simt::cluster_rank(); }
  static unsigned num_blocks() { return simt::cluster_blocks(); }
  template <typename T>
  static T* map_shared_rank(T* address, int rank, int line = __builtin_LINE()) {
    return static_cast<T*>(simt::map_shared(address, rank, line));
  }
};
inline cluster_group this_cluster() { return {}; }
}  // namespace cooperative_groups
