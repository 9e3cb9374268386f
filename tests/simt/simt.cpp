// The SIMT emulation's runtime (see simt.h): one fiber (ucontext) per CUDA thread, a scheduler
// that resumes a pseudo-randomly drawn runnable fiber each time one blocks, the block barriers,
// the grid-wide sync, the warp collectives, per-block dynamic shared memory, and the host calls
// (devices, attributes, occupancy, launches) over a table of emulated devices.
#include "simt.h"

#include <sys/mman.h>
#include <ucontext.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <list>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define SIMT_ASAN 1
#else
#define SIMT_ASAN 0
#endif

namespace simt {
namespace {

constexpr int kWarpSize = 32;
constexpr int kDefaultMaxDynamicShared = 48 * 1024;  // CUDA's limit until cudaFuncSetAttribute raises it
// Per fiber. AddressSanitizer's redzones around stack arrays need more room.
constexpr std::size_t kStackBytes = SIMT_ASAN ? 256 * 1024 : 64 * 1024;

struct Fiber {
  ucontext_t context;
  char* stack = nullptr;
  uint3 thread{}, block{};
  unsigned block_index = 0, warp = 0, lane = 0;
  enum { kRunnable, kWaiting, kDone } state = kRunnable;
  const char* waits_on = "";  // while waiting: the barrier or collective, and its line
  int waits_line = 0;
  void* fake_stack = nullptr;  // AddressSanitizer's, saved while switched out
};

struct Barrier {
  unsigned arrived = 0;
  int line = 0;
  std::vector<unsigned> waiting;
};

struct Collective {
  const char* kind;
  unsigned mask;
  unsigned arrived = 0, unread = 0;
  bool complete = false;
  std::uint64_t values[kWarpSize] = {};
};

struct Launch {
  void (*body)(void*);
  void* context;
  dim3 grid, block;
  bool cooperative;
  unsigned threads_per_block = 0, blocks = 0, warps_per_block = 0;
  char* stacks = nullptr;
  std::size_t stacks_bytes = 0;
  std::vector<Fiber> fibers;
  std::vector<std::vector<unsigned char>> shared;
  std::vector<Barrier> block_barriers;
  Barrier grid_barrier;
  std::vector<std::list<Collective>> warps;
  std::vector<unsigned> runnable;
  std::mt19937_64 rng;
  ucontext_t scheduler;
  const void* scheduler_stack = nullptr;  // AddressSanitizer's bounds of the host thread's stack
  std::size_t scheduler_stack_size = 0;
  void* scheduler_fake_stack = nullptr;
  Fiber* current = nullptr;
  std::string error;
};

std::mutex launch_mutex;  // one launch at a time: the fibers run on the launching host thread
Launch* active = nullptr;
std::vector<Device> devices{Device{}};
int current_device = 0;
std::uint64_t seed = 0;
std::int64_t launched = 0;
std::string last_error;
std::map<const void*, int> max_dynamic_shared;

Launch& now() {
  if (!active || !active->current) {
    std::fprintf(stderr, "simt: a device function was called outside a kernel launch\n");
    std::abort();
  }
  return *active;
}

std::string where(const Fiber& f) {
  std::ostringstream s;
  s << "thread (" << f.thread.x << "," << f.thread.y << "," << f.thread.z << ") of block (" << f.block.x << ","
    << f.block.y << "," << f.block.z << ")";
  return s.str();
}

// Switch from the running fiber back to the scheduler; `exiting`: the fiber will not resume.
void to_scheduler(Launch& l, bool exiting) {
  Fiber& f = *l.current;
#if SIMT_ASAN
  __sanitizer_start_switch_fiber(exiting ? nullptr : &f.fake_stack, l.scheduler_stack, l.scheduler_stack_size);
#else
  (void)exiting;
#endif
  swapcontext(&f.context, &l.scheduler);
#if SIMT_ASAN
  __sanitizer_finish_switch_fiber(f.fake_stack, &l.scheduler_stack, &l.scheduler_stack_size);
#endif
}

void make_runnable(Launch& l, unsigned index) {
  l.fibers[index].state = Fiber::kRunnable;
  l.runnable.push_back(index);
}

// Blocks the running fiber until another releases it (make_runnable), then returns.
void wait(Launch& l, const char* what, int line) {
  l.current->state = Fiber::kWaiting;
  l.current->waits_on = what;
  l.current->waits_line = line;
  to_scheduler(l, false);
}

// The running fiber yields: it stays runnable, another draw decides who continues.
void yield(Launch& l) {
  l.runnable.push_back(static_cast<unsigned>(l.current - l.fibers.data()));
  to_scheduler(l, false);
}

// `members` threads must arrive; the last one releases them all, and they go on in a new random order.
void arrive(Launch& l, Barrier& barrier, unsigned members, const char* name, int line) {
  if (barrier.arrived == 0) barrier.line = line;
  if (barrier.line != line) {
    std::ostringstream s;
    s << "it reaches a " << name << " while others wait at the one on line " << barrier.line;
    fail(s.str().c_str(), line);
  }
  const unsigned me = static_cast<unsigned>(l.current - l.fibers.data());
  if (++barrier.arrived < members) {
    barrier.waiting.push_back(me);
    wait(l, name, line);
    return;
  }
  for (unsigned f : barrier.waiting) make_runnable(l, f);
  barrier.waiting.clear();
  barrier.arrived = 0;
  yield(l);
}

// Checks that a finishing thread leaves nobody waiting for it.
void check_exit(Launch& l) {
  const Fiber& f = *l.current;
  const Barrier& block = l.block_barriers[f.block_index];
  if (block.arrived > 0) {
    fail("the thread exits while threads of its block wait at this __syncthreads", block.line);
  }
  if (l.grid_barrier.arrived > 0) {
    fail("the thread exits while threads wait at this grid sync", l.grid_barrier.line);
  }
  for (const Collective& c : l.warps[f.warp]) {
    if (!c.complete && (c.mask >> f.lane & 1u) && !(c.arrived >> f.lane & 1u)) {
      fail((std::string("the thread exits while its warp waits for it in ") + c.kind).c_str(), 0);
    }
  }
}

void fiber_main() {
  Launch& l = *active;
#if SIMT_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &l.scheduler_stack, &l.scheduler_stack_size);
#endif
  l.body(l.context);
  check_exit(l);
  l.current->state = Fiber::kDone;
  to_scheduler(l, true);
}

std::string deadlock(const Launch& l) {
  std::ostringstream s;
  s << "deadlock: no thread can go on;";
  int shown = 0;
  for (const Fiber& f : l.fibers) {
    if (f.state != Fiber::kWaiting) continue;
    if (shown++ == 8) {
      s << " ...";
      break;
    }
    s << " " << where(f) << " waits at " << f.waits_on << " on line " << f.waits_line << ";";
  }
  return s.str();
}

void run(Launch& l) {
  while (!l.runnable.empty() && l.error.empty()) {
    const std::size_t pick = l.rng() % l.runnable.size();
    const unsigned index = l.runnable[pick];
    l.runnable[pick] = l.runnable.back();
    l.runnable.pop_back();
    l.current = &l.fibers[index];
#if SIMT_ASAN
    __sanitizer_start_switch_fiber(&l.scheduler_fake_stack, l.current->stack, kStackBytes);
#endif
    swapcontext(&l.scheduler, &l.current->context);
#if SIMT_ASAN
    __sanitizer_finish_switch_fiber(l.scheduler_fake_stack, nullptr, nullptr);
#endif
  }
  l.current = nullptr;
  if (!l.error.empty()) return;
  for (const Fiber& f : l.fibers) {
    if (f.state != Fiber::kDone) {
      l.error = deadlock(l);
      return;
    }
  }
}

// The kernel's dynamic shared memory limit: cudaFuncSetAttribute's value, else CUDA's default.
int max_dynamic(const void* kernel) {
  auto found = max_dynamic_shared.find(kernel);
  return found == max_dynamic_shared.end() ? kDefaultMaxDynamicShared : found->second;
}

cudaError_t check_launch(const Device& d, dim3 grid, dim3 block, std::size_t shared_bytes, bool cooperative,
                         const void* kernel, std::string* why) {
  const unsigned long long threads = 1ull * block.x * block.y * block.z;
  const unsigned long long blocks = 1ull * grid.x * grid.y * grid.z;
  if (threads == 0 || threads > 1024 || blocks == 0) {
    *why = "invalid configuration: " + std::to_string(blocks) + " blocks of " + std::to_string(threads) + " threads";
    return cudaErrorInvalidConfiguration;
  }
  const int limit = max_dynamic(kernel);
  if (shared_bytes > static_cast<std::size_t>(limit)) {
    *why = std::to_string(shared_bytes) + " bytes of dynamic shared memory over the kernel's limit of " +
           std::to_string(limit) + " (cudaFuncSetAttribute)";
    return cudaErrorInvalidValue;
  }
  if (cooperative) {
    int per_sm = 0;
    occupancy(&per_sm, kernel, static_cast<int>(threads), shared_bytes);
    if (!d.cooperative || blocks > 1ull * per_sm * d.multiprocessors) {
      *why = "cooperative launch of " + std::to_string(blocks) + " blocks, " + std::to_string(per_sm) +
             " per multiprocessor fit on " + std::to_string(d.multiprocessors);
      return cudaErrorCooperativeLaunchTooLarge;
    }
  }
  return cudaSuccess;
}

}  // namespace

int add_device(const Device& device) {
  devices.push_back(device);
  return static_cast<int>(devices.size()) - 1;
}

void set_device(int index) { current_device = index; }
void set_seed(std::uint64_t s) { seed = s; }
std::int64_t launches() { return launched; }
const char* last_error_message() { return last_error.c_str(); }

const uint3& thread_idx() { return now().current->thread; }
const uint3& block_idx() { return now().current->block; }
const dim3& block_dim() { return now().block; }
const dim3& grid_dim() { return now().grid; }
unsigned lane() { return now().current->lane; }

void* dynamic_shared() {
  Launch& l = now();
  return l.shared[l.current->block_index].data();
}

void fail(const char* what, int line) {
  Launch& l = now();
  if (l.error.empty()) {
    l.error = where(*l.current) + ": " + what + (line > 0 ? " (line " + std::to_string(line) + ")" : "");
  }
  to_scheduler(l, true);
  __builtin_unreachable();
}

void block_barrier(int line) {
  Launch& l = now();
  arrive(l, l.block_barriers[l.current->block_index], l.threads_per_block, "__syncthreads", line);
}

void grid_barrier(int line) {
  Launch& l = now();
  if (!l.cooperative) fail("grid.sync() in a kernel not launched cooperatively", line);
  arrive(l, l.grid_barrier, l.threads_per_block * l.blocks, "grid.sync()", line);
}

void warp_exchange(const char* kind, unsigned mask, std::uint64_t value, std::uint64_t* out, int line) {
  Launch& l = now();
  Fiber& me = *l.current;
  const unsigned bit = 1u << me.lane;
  if (!(mask & bit)) fail((std::string(kind) + " with a mask that leaves out the calling lane").c_str(), line);
  const unsigned in_block = me.warp % l.warps_per_block * kWarpSize;
  const unsigned lanes = std::min<unsigned>(kWarpSize, l.threads_per_block - in_block);
  if (lanes < kWarpSize && (mask >> lanes) != 0) fail((std::string(kind) + " names lanes the warp does not have").c_str(), line);
  auto& open = l.warps[me.warp];
  Collective* joined = nullptr;
  for (Collective& c : open) {
    if (c.complete || !(c.mask & bit) || (c.arrived & bit)) continue;
    if (c.mask != mask || std::strcmp(c.kind, kind) != 0) {
      std::ostringstream s;
      s << kind << " with mask " << std::hex << mask << " while lanes of mask " << c.mask << " wait in " << c.kind;
      fail(s.str().c_str(), line);
    }
    joined = &c;
    break;
  }
  if (!joined) {
    open.push_back(Collective{kind, mask});
    joined = &open.back();
  }
  joined->values[me.lane] = value;
  joined->arrived |= bit;
  if (joined->arrived != mask) {
    joined->unread |= bit;
    wait(l, kind, line);
  } else {
    joined->complete = true;
    joined->unread |= bit;
    const unsigned first = static_cast<unsigned>(&me - l.fibers.data()) - me.lane;
    for (unsigned lane = 0; lane < kWarpSize; ++lane) {
      if ((mask >> lane & 1u) && lane != me.lane) make_runnable(l, first + lane);
    }
    yield(l);
  }
  for (unsigned lane = 0; lane < kWarpSize; ++lane) {
    if (mask >> lane & 1u) out[lane] = joined->values[lane];
  }
  joined->unread &= ~bit;
  if (joined->unread == 0) {
    for (auto it = open.begin(); it != open.end(); ++it) {
      if (&*it == joined) {
        open.erase(it);
        break;
      }
    }
  }
}

unsigned vote(const char* kind, unsigned mask, bool predicate, int line) {
  std::uint64_t all[kWarpSize];
  warp_exchange(kind, mask, predicate, all, line);
  unsigned ballot = 0;
  for (int lane = 0; lane < kWarpSize; ++lane) {
    if ((mask >> lane & 1u) && all[lane]) ballot |= 1u << lane;
  }
  return ballot;
}

cudaError_t set_max_dynamic_shared(const void* kernel, int bytes) {
  if (bytes < 0 || bytes > devices[current_device].shared_per_block_optin) return cudaErrorInvalidValue;
  max_dynamic_shared[kernel] = bytes;
  return cudaSuccess;
}

cudaError_t occupancy(int* blocks, const void* kernel, int block_size, std::size_t shared_bytes) {
  const Device& d = devices[current_device];
  if (block_size < 1 || block_size > 1024) return cudaErrorInvalidValue;
  const int limit = max_dynamic(kernel);
  if (shared_bytes > static_cast<std::size_t>(limit)) {
    *blocks = 0;
    return cudaSuccess;
  }
  const int warps = (block_size + kWarpSize - 1) / kWarpSize * kWarpSize;
  int fit = std::min(d.blocks_per_multiprocessor, d.threads_per_multiprocessor / warps);
  fit = std::min(fit, d.registers_per_multiprocessor / (d.registers_per_thread * warps));
  fit = std::min<long long>(fit, d.shared_per_multiprocessor / static_cast<long long>(shared_bytes + d.shared_reserved_per_block));
  *blocks = fit;
  return cudaSuccess;
}

cudaError_t launch(void (*body)(void*), void* context, dim3 grid, dim3 block, std::size_t shared_bytes,
                   bool cooperative, const void* kernel) {
  const std::lock_guard<std::mutex> lock(launch_mutex);
  std::string why;
  const cudaError_t refused = check_launch(devices[current_device], grid, block, shared_bytes, cooperative, kernel, &why);
  if (refused != cudaSuccess) {
    last_error = why;
    return refused;
  }
  Launch l;
  l.body = body;
  l.context = context;
  l.grid = grid;
  l.block = block;
  l.cooperative = cooperative;
  l.threads_per_block = block.x * block.y * block.z;
  l.blocks = grid.x * grid.y * grid.z;
  l.warps_per_block = (l.threads_per_block + kWarpSize - 1) / kWarpSize;
  l.rng.seed(seed * 0x9e3779b97f4a7c15ull + static_cast<std::uint64_t>(launched));
  const std::size_t total = static_cast<std::size_t>(l.threads_per_block) * l.blocks;
  l.stacks_bytes = total * kStackBytes;
  void* stacks = mmap(nullptr, l.stacks_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (stacks == MAP_FAILED) {
    last_error = "could not map " + std::to_string(l.stacks_bytes) + " bytes of fiber stacks";
    return cudaErrorLaunchFailure;
  }
  l.stacks = static_cast<char*>(stacks);
  l.shared.assign(l.blocks, std::vector<unsigned char>(shared_bytes, 0xff));
  l.block_barriers.resize(l.blocks);
  l.warps.resize(static_cast<std::size_t>(l.warps_per_block) * l.blocks);
  l.fibers.resize(total);
  for (unsigned b = 0; b < l.blocks; ++b) {
    for (unsigned t = 0; t < l.threads_per_block; ++t) {
      const std::size_t index = static_cast<std::size_t>(b) * l.threads_per_block + t;
      Fiber& f = l.fibers[index];
      f.thread = {t % block.x, t / block.x % block.y, t / (block.x * block.y)};
      f.block = {b % grid.x, b / grid.x % grid.y, b / (grid.x * grid.y)};
      f.block_index = b;
      f.warp = b * l.warps_per_block + t / kWarpSize;
      f.lane = t % kWarpSize;
      f.stack = l.stacks + index * kStackBytes;
      getcontext(&f.context);
      f.context.uc_stack.ss_sp = f.stack;
      f.context.uc_stack.ss_size = kStackBytes;
      f.context.uc_link = nullptr;
      makecontext(&f.context, fiber_main, 0);
      l.runnable.push_back(static_cast<unsigned>(index));
    }
  }
  active = &l;
  run(l);
  active = nullptr;
#if SIMT_ASAN
  ASAN_UNPOISON_MEMORY_REGION(l.stacks, l.stacks_bytes);  // frames of fibers that did not return
#endif
  munmap(l.stacks, l.stacks_bytes);
  if (!l.error.empty()) {
    last_error = l.error;
    return cudaErrorLaunchFailure;
  }
  ++launched;
  last_error.clear();
  return cudaSuccess;
}

}  // namespace simt

cudaError_t cudaGetDevice(int* device) {
  *device = simt::current_device;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device < 0 || device >= static_cast<int>(simt::devices.size())) return cudaErrorInvalidDevice;
  const simt::Device& d = simt::devices[device];
  switch (attr) {
    case cudaDevAttrMultiProcessorCount:
      *value = d.multiprocessors;
      return cudaSuccess;
    case cudaDevAttrCooperativeLaunch:
      *value = d.cooperative;
      return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = d.shared_per_block_optin;
      return cudaSuccess;
  }
  return cudaErrorInvalidValue;
}

const char* cudaGetErrorString(cudaError_t error) {
  static thread_local std::string message;
  message = "cudaError " + std::to_string(static_cast<int>(error)) + " (simt: " + simt::last_error + ")";
  return message.c_str();
}
