// The SIMT emulation's runtime (see simt.h): one fiber (a stack of its own) per CUDA thread, a scheduler
// that resumes a pseudo-randomly drawn runnable fiber each time one blocks, the block barriers,
// the grid-wide sync, the warp collectives, the clusters' barriers and distributed shared memory,
// the atomics' scheduling points and the livelock detector (spinning threads parked until a write),
// the wmma fragments' layouts (wmma.h), per-block dynamic shared memory, and the host calls
// (devices, attributes, occupancy, launches) over a table of emulated devices.
#include "simt.h"
#include "wmma.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <sys/mman.h>
#if !defined(__x86_64__)
#include <ucontext.h>  // the context switch of other architectures
#endif

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <map>
#include <memory>
#include <new>
#include <mutex>
#include <queue>
#include <random>
#include <sstream>
#include <stdexcept>
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

// --- the fibers' context switch ---------------------------------------------------------------------
#if defined(__x86_64__)
// A suspended fiber (or the scheduler): its stack pointer, below the registers simt_switch_stack
// pushed. simt_switch_stack(from, to) (x86-64 System V) pushes the callee-saved registers (rbp,
// rbx, r12-r15) and the SSE and x87 control words, stores the stack pointer in *from, loads `to`
// and pops the same from there; everything else is the caller's to save across a call. glibc's
// swapcontext also makes a sigprocmask system call at every switch, which took 40% of an emulated
// cluster launch's time (perf, 2026-12-07); other architectures keep it (the #else below).
struct Context {
  void* sp = nullptr;
};

extern "C" void simt_switch_stack(void** from, void* to);
asm(R"(
  .text
  .p2align 4
  .globl simt_switch_stack
  .hidden simt_switch_stack
  .type simt_switch_stack, @function
simt_switch_stack:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size simt_switch_stack, .-simt_switch_stack
)");

void switch_context(Context& from, const Context& to) { simt_switch_stack(&from.sp, to.sp); }

// A context that starts entry() (which never returns) on the stack [stack, stack + bytes), with the
// caller's floating-point control words: the stack as simt_switch_stack leaves it, its return
// address entry's first instruction, entered with the stack pointer 8 bytes off a 16-byte boundary
// as after a call.
void make_context(Context& c, char* stack, std::size_t bytes, void (*entry)()) {
  auto* top = reinterpret_cast<std::uint64_t*>(reinterpret_cast<std::uintptr_t>(stack + bytes) & ~std::uintptr_t{15});
  std::uint32_t mxcsr = 0;
  std::uint16_t x87 = 0;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(x87));
  top[-1] = 0;                                     // entry's return address: it never returns
  top[-2] = reinterpret_cast<std::uint64_t>(entry);  // where simt_switch_stack's ret goes
  for (int r = 3; r <= 8; ++r) top[-r] = 0;         // rbp, rbx, r12-r15
  top[-9] = mxcsr | static_cast<std::uint64_t>(x87) << 32;
  c.sp = top - 9;
}
#else
struct Context {
  ucontext_t uc;
};

void switch_context(Context& from, const Context& to) { swapcontext(&from.uc, &to.uc); }

void make_context(Context& c, char* stack, std::size_t bytes, void (*entry)()) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = bytes;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, entry, 0);
}
#endif

// An atomic read a thread made: where, and the bits it read.
struct Read {
  const void* address = nullptr;
  unsigned bytes = 0;
  std::uint64_t bits = 0;
};
constexpr int kReads = 4;  // the addresses a spinning thread may poll in turn
constexpr std::size_t kTrackedAddresses = 256;

struct Fiber {
  Context context;
  char* stack = nullptr;
  uint3 thread{}, block{};
  unsigned block_index = 0, warp = 0, lane = 0;
  enum { kRunnable, kWaiting, kSpinning, kDone } state = kRunnable;
  const char* waits_on = "";  // while waiting: the barrier or collective, and its line
  int waits_line = 0;
  const char* label = nullptr;  // simt::label's annotation, and its value
  long long label_value = 0;
  // Its atomic reads since its last barrier, collective, atomic write or label (the most recent
  // kReads addresses), and while spinning: the read it repeats, where, and the write count then.
  Read reads[kReads];
  int read_count = 0;
  Read spin;
  const char* spin_file = "";
  int spin_line = 0;
  std::uint64_t spin_epoch = 0;
  long long cluster_arrival = -1;  // the cluster barrier phase it arrived in and has not waited for
  void* fake_stack = nullptr;  // AddressSanitizer's, saved while switched out
};

struct Barrier {
  unsigned arrived = 0;
  int line = 0;
  std::vector<unsigned> waiting;
};

// A cluster's barrier: `phase` counts the completed phases; and, per block of the cluster, the
// phase in which a peer last mapped its shared memory (-1: never) and whether it has exited.
struct Cluster {
  unsigned arrived = 0;
  long long phase = 0;
  int line = 0;
  std::vector<unsigned> waiting;
  std::vector<long long> mapped_in;
  std::vector<bool> exited;
};

// A block's dynamic shared memory, 128-byte aligned as CUDA's, exactly the launch's size (ASan
// bounds it).
struct SharedBuffer {
  unsigned char* data = nullptr;
  std::size_t size = 0;
  explicit SharedBuffer(std::size_t n) : data(static_cast<unsigned char*>(::operator new(n ? n : 1, std::align_val_t(128)))), size(n) {
    std::memset(data, 0xff, n);
  }
  SharedBuffer(const SharedBuffer&) = delete;
  SharedBuffer& operator=(const SharedBuffer&) = delete;
  ~SharedBuffer() { ::operator delete(data, std::align_val_t(128)); }
};

struct Collective {
  const char* kind;
  unsigned mask;
  int line;  // of the lane that opened it
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
  std::vector<std::unique_ptr<SharedBuffer>> shared;
  unsigned cluster_size = 1;
  std::vector<Cluster> clusters;
  std::vector<unsigned> done_in_block;
  std::map<int, std::vector<int>> layouts;  // wmma fragment kind -> its layout this launch
  std::vector<Barrier> block_barriers;
  Barrier grid_barrier;
  std::vector<std::list<Collective>> warps;
  std::vector<unsigned> runnable;  // drawn at random (even seeds)
  std::vector<unsigned> spinners;  // parked: spinning on a value
  std::uint64_t writes = 0;        // atomic writes so far
  // Atomic writes per block at each of the first kTrackedAddresses addresses written (the
  // livelock report names the blocks that wrote fewer times than others where threads spin).
  std::map<const void*, std::vector<unsigned>> block_writes;
  // Odd seeds: each warp gets a random priority and a runnable thread of the highest-priority warp
  // with any (drawn at random among them) always goes on: one warp runs as far as it can before the
  // others move, the order that exposes a read of what a lagging warp has not written yet.
  bool by_warp = false;
  std::vector<std::uint64_t> warp_priority;
  std::vector<std::vector<unsigned>> warp_runnable;                  // each warp's runnable threads
  std::priority_queue<std::pair<std::uint64_t, unsigned>> ranked;  // (priority, warp) of the warps with any
  std::mt19937_64 rng;
  Context scheduler;
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
std::map<std::string, std::int64_t> launched_by_name;  // the completed launches by their kernel's name
std::int64_t started = 0;  // launches begun, failed ones too
std::string last_error;
// A kernel's attributes, per device (as CUDA's cudaFuncSetAttribute: the current device's context).
std::map<std::pair<int, const void*>, int> max_dynamic_shared;
std::map<std::pair<int, const void*>, bool> non_portable_clusters;

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

std::string label_of(const Fiber& f) {
  return f.label ? std::string(f.label) + " " + std::to_string(f.label_value) : std::string();
}

// The thread made progress other than an atomic read: its reads no longer make a spin.
void forget_reads(Fiber& f) { f.read_count = 0; }

// Switch from the running fiber back to the scheduler; `exiting`: the fiber will not resume.
void to_scheduler(Launch& l, bool exiting) {
  Fiber& f = *l.current;
#if SIMT_ASAN
  __sanitizer_start_switch_fiber(exiting ? nullptr : &f.fake_stack, l.scheduler_stack, l.scheduler_stack_size);
#else
  (void)exiting;
#endif
  switch_context(f.context, l.scheduler);
#if SIMT_ASAN
  __sanitizer_finish_switch_fiber(f.fake_stack, &l.scheduler_stack, &l.scheduler_stack_size);
#endif
}

void push_runnable(Launch& l, unsigned index) {
  if (l.by_warp) {
    const unsigned warp = l.fibers[index].warp;
    if (l.warp_runnable[warp].empty()) l.ranked.push({l.warp_priority[warp], warp});
    l.warp_runnable[warp].push_back(index);
  } else {
    l.runnable.push_back(index);
  }
}

// The next fiber to run, taken out of the runnable ones (which are not empty).
unsigned pop_runnable(Launch& l) {
  std::vector<unsigned>& from = l.by_warp ? l.warp_runnable[l.ranked.top().second] : l.runnable;
  const std::size_t pick = l.rng() % from.size();
  const unsigned index = from[pick];
  from[pick] = from.back();
  from.pop_back();
  if (l.by_warp && from.empty()) l.ranked.pop();  // only the top warp ever loses its last runnable thread
  return index;
}

bool any_runnable(const Launch& l) { return l.by_warp ? !l.ranked.empty() : !l.runnable.empty(); }

void make_runnable(Launch& l, unsigned index) {
  l.fibers[index].state = Fiber::kRunnable;
  push_runnable(l, index);
}

// Blocks the running fiber until another releases it (make_runnable), then returns.
void wait(Launch& l, const char* what, int line) {
  l.current->state = Fiber::kWaiting;
  l.current->waits_on = what;
  l.current->waits_line = line;
  to_scheduler(l, false);
}

// The emulated clock's counter (clock_tick), advanced by every scheduling point too.
std::uint64_t ticks = 0;

// The running fiber yields: it stays runnable, another draw decides who continues.
void yield(Launch& l) {
  ++ticks;
  push_runnable(l, static_cast<unsigned>(l.current - l.fibers.data()));
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

// The running thread's cluster and its block's rank in it.
Cluster& cluster_of(Launch& l) { return l.clusters[l.current->block_index / l.cluster_size]; }
unsigned rank_of(const Launch& l, const Fiber& f) { return f.block_index % l.cluster_size; }

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
  const Cluster& cluster = cluster_of(l);
  if (cluster.arrived > 0 && f.cluster_arrival != cluster.phase) {
    fail("the thread exits while threads of its cluster wait for it at this cluster barrier", cluster.line);
  }
  for (const Collective& c : l.warps[f.warp]) {
    if (!c.complete && (c.mask >> f.lane & 1u) && !(c.arrived >> f.lane & 1u)) {
      fail((std::string("the thread exits while its warp waits for it in ") + c.kind).c_str(), c.line);
    }
  }
}

// The last thread of a block exits: no peer may still read its shared memory (one mapped it in the
// cluster barrier phase not yet completed), which is refilled with NaN bytes and, under ASan,
// poisoned, so that a later read through an old pointer shows.
void block_exits(Launch& l) {
  Cluster& c = cluster_of(l);
  const unsigned rank = rank_of(l, *l.current);
  c.exited[rank] = true;
  bool peers_run = false;
  for (unsigned r = 0; r < l.cluster_size; ++r) peers_run = peers_run || !c.exited[r];
  if (peers_run && c.mapped_in[rank] == c.phase) {
    fail(("block rank " + std::to_string(rank) + " of its cluster exits while a peer may still read its shared "
          "memory (mapped in the cluster barrier phase not yet completed: end with cluster.sync())").c_str(), 0);
  }
  SharedBuffer& mine = *l.shared[l.current->block_index];
  std::memset(mine.data, 0xff, mine.size);
#if SIMT_ASAN
  ASAN_POISON_MEMORY_REGION(mine.data, mine.size);
#endif
}

void fiber_main() {
  Launch& l = *active;
#if SIMT_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &l.scheduler_stack, &l.scheduler_stack_size);
#endif
  l.body(l.context);
  check_exit(l);
  if (++l.done_in_block[l.current->block_index] == l.threads_per_block) block_exits(l);
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
    s << " " << where(f) << " waits at " << f.waits_on << " on line " << f.waits_line;
    if (f.label) s << " (" << label_of(f) << ")";
    s << ";";
  }
  return s.str();
}

bool overlaps(const Read& r, const void* address, unsigned bytes) {
  const auto* a = static_cast<const unsigned char*>(r.address);
  const auto* b = static_cast<const unsigned char*>(address);
  return a < b + bytes && b < a + r.bytes;
}

void wake_spinner(Launch& l, std::size_t at) {
  const unsigned index = l.spinners[at];
  l.spinners[at] = l.spinners.back();
  l.spinners.pop_back();
  make_runnable(l, index);
}

// No thread can run: wakes the spinners that may read something new (an atomic write happened
// since they parked, or their memory changed under a plain store); false if none may.
bool wake_spinners(Launch& l) {
  bool woken = false;
  for (std::size_t i = l.spinners.size(); i-- > 0;) {
    const Fiber& f = l.fibers[l.spinners[i]];
    std::uint64_t now_bits = 0;
    std::memcpy(&now_bits, f.spin.address, f.spin.bytes);
    if (f.spin_epoch != l.writes || now_bits != f.spin.bits) {
      wake_spinner(l, i);
      woken = true;
    }
  }
  return woken;
}

std::string livelock(const Launch& l) {
  std::vector<unsigned> spinners = l.spinners;
  std::sort(spinners.begin(), spinners.end());
  std::ostringstream s;
  s << "livelock:";
  int shown = 0;
  for (unsigned index : spinners) {
    if (shown++ == 8) {
      s << " ...;";
      break;
    }
    const Fiber& f = l.fibers[index];
    const unsigned thread = f.thread.x + l.block.x * (f.thread.y + l.block.y * f.thread.z);
    const char* file = std::strrchr(f.spin_file, '/');
    s << " block " << f.block_index << " thread " << thread << " waits at " << (f.label ? label_of(f) : "an atomic read")
      << " (line " << f.spin_line << " of " << (file ? file + 1 : f.spin_file) << "), reading " << f.spin.bits << " at "
      << f.spin.address << ";";
  }
  std::vector<const void*> addresses;  // what the blocks wrote where they spin
  for (unsigned index : spinners) {
    const void* a = l.fibers[index].spin.address;
    if (std::find(addresses.begin(), addresses.end(), a) != addresses.end() || addresses.size() == 2) continue;
    addresses.push_back(a);
    const auto tracked = l.block_writes.find(a);
    if (tracked == l.block_writes.end()) {
      s << " no block wrote " << a << " atomically;";
      continue;
    }
    const std::vector<unsigned>& counts = tracked->second;
    const unsigned most = *std::max_element(counts.begin(), counts.end());
    std::ostringstream fewer;
    int named = 0;
    for (unsigned b = 0; b < counts.size() && named < 8; ++b) {
      if (counts[b] < most) fewer << (named++ ? ", " : " ") << "block " << b << " made " << counts[b];
    }
    if (named == 0) {
      s << " every block wrote " << a << " atomically " << most << " times;";
    } else {
      s << " atomic writes to " << a << ":" << fewer.str() << ", every other block " << most << ";";
    }
  }
  std::size_t waiting = 0;
  for (const Fiber& f : l.fibers) waiting += f.state == Fiber::kWaiting;
  s << " no thread can change what " << (spinners.size() == 1 ? "it reads" : "they read") << " (" << spinners.size()
    << " spinning, " << waiting << " waiting at barriers or collectives)";
  return s.str();
}

void run(Launch& l) {
  for (;;) {
    while (any_runnable(l) && l.error.empty()) {
      const unsigned index = pop_runnable(l);
      l.current = &l.fibers[index];
#if SIMT_ASAN
      __sanitizer_start_switch_fiber(&l.scheduler_fake_stack, l.current->stack, kStackBytes);
#endif
      switch_context(l.scheduler, l.current->context);
#if SIMT_ASAN
      __sanitizer_finish_switch_fiber(l.scheduler_fake_stack, nullptr, nullptr);
#endif
    }
    l.current = nullptr;
    if (!l.error.empty() || l.spinners.empty()) break;
    if (!wake_spinners(l)) {
      l.error = livelock(l);
      return;
    }
  }
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
  auto found = max_dynamic_shared.find({current_device, kernel});
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

// A launch with a cluster dimension: 1-D, dividing the grid, at most 8 blocks (16 where the kernel
// allows a non-portable size), on a device with clusters, and co-resident; a cooperative one, all
// its clusters at once.
cudaError_t check_cluster(const Device& d, dim3 grid, dim3 block, std::size_t shared_bytes, bool cooperative,
                          const void* kernel, dim3 cluster, std::string* why) {
  const unsigned size = cluster.x * cluster.y * cluster.z;
  if (size == 1) return cudaSuccess;
  if (size == 0 || cluster.y != 1 || cluster.z != 1 || grid.y != 1 || grid.z != 1 || grid.x % cluster.x != 0) {
    const auto text = [](dim3 d) { return std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z); };
    *why = "a cluster launch must be 1-D, its grid a multiple of the cluster: grid (" + text(grid) + "), cluster (" +
           text(cluster) + ")";
    return cudaErrorInvalidConfiguration;
  }
  int resident = 0;
  active_clusters(&resident, kernel, static_cast<int>(block.x * block.y * block.z), shared_bytes, size);
  if (!d.clusters || resident < 1) {
    *why = "a cluster of " + std::to_string(size) + " blocks does not fit the device (clusters " +
           (d.clusters ? "supported" : "not supported") + "; more than 8 blocks need "
           "cudaFuncAttributeNonPortableClusterSizeAllowed)";
    return cudaErrorInvalidClusterSize;
  }
  if (cooperative && 1ull * resident * size < grid.x) {
    *why = "cooperative launch of " + std::to_string(grid.x) + " blocks in clusters of " + std::to_string(size) + ", " +
           std::to_string(resident) + " clusters fit at once";
    return cudaErrorCooperativeLaunchTooLarge;
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

namespace {
std::string drop_file;  // the dropped barrier's file (a suffix of the path) and line; 0: none
int drop_line = 0;
std::int64_t dropped_calls = 0;
Plant planted = Plant::kNone;
}  // namespace

void set_drop(const char* file, int line) {
  if (line < 0 || (line > 0 && (file == nullptr || *file == '\0'))) {
    throw std::invalid_argument("simt: a dropped barrier needs a file and a line >= 1 (\"\", 0 clears it)");
  }
  drop_file = line > 0 ? file : "";
  drop_line = line;
  dropped_calls = 0;
}

bool dropped(const char* file, int line) {
  if (drop_line == 0 || line != drop_line) return false;
  const std::size_t n = std::strlen(file), k = drop_file.size();
  if (n < k || drop_file.compare(0, k, file + (n - k)) != 0) return false;
  if (n > k && file[n - k - 1] != '/' && drop_file.front() != '/') return false;  // "recurrence.cu" is not "grid_recurrence.cu"
  ++dropped_calls;
  return true;
}

std::int64_t drops() { return dropped_calls; }

void set_plant(const std::string& name) {
  if (name.empty()) {
    planted = Plant::kNone;
  } else if (name == "flag_early") {
    planted = Plant::kFlagEarly;
  } else if (name == "skip_arrive") {
    planted = Plant::kSkipArrive;
  } else {
    throw std::invalid_argument("simt: no plant '" + name + "': one of \"\", \"flag_early\", \"skip_arrive\"");
  }
}

Plant plant() { return planted; }
std::int64_t launches() { return launched; }

std::int64_t launches_of(const std::string& part) {
  std::int64_t count = 0;
  for (const auto& [name, launches] : launched_by_name) {
    if (name.find(part) != std::string::npos) count += launches;
  }
  return count;
}
std::int64_t launch_serial() { return started; }

namespace {
std::int64_t counts[static_cast<int>(Count::kKinds)] = {};
}  // namespace

void count(Count what) { ++counts[static_cast<int>(what)]; }
std::int64_t counted(Count what) { return counts[static_cast<int>(what)]; }
void reset_counts() {
  for (std::int64_t& c : counts) c = 0;
}
std::uint64_t clock_tick() {
  count(Count::kClock);
  return ++ticks;
}
const char* last_error_message() { return last_error.c_str(); }

const uint3& thread_idx() { return now().current->thread; }
const uint3& block_idx() { return now().current->block; }
const dim3& block_dim() { return now().block; }
const dim3& grid_dim() { return now().grid; }
unsigned lane() { return now().current->lane; }

void* dynamic_shared() {
  Launch& l = now();
  return l.shared[l.current->block_index]->data;
}

std::size_t dynamic_shared_bytes() {
  Launch& l = now();
  return l.shared[l.current->block_index]->size;
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
  count(Count::kBlockBarrier);
  Launch& l = now();
  forget_reads(*l.current);
  arrive(l, l.block_barriers[l.current->block_index], l.threads_per_block, "__syncthreads", line);
}

unsigned cluster_blocks() { return now().cluster_size; }
unsigned cluster_rank() {
  Launch& l = now();
  return rank_of(l, *l.current);
}

void cluster_arrive(int line, bool relaxed) {
  count(relaxed ? Count::kArriveRelaxed : Count::kArriveRelease);
  Launch& l = now();
  Fiber& me = *l.current;
  forget_reads(me);
  Cluster& c = cluster_of(l);
  if (me.cluster_arrival >= 0) fail("the thread arrives at the cluster barrier again without waiting", line);
  if (c.arrived == 0) c.line = line;
  if (c.line != line) {
    fail(("it arrives at a cluster barrier while others arrived at the one on line " + std::to_string(c.line)).c_str(),
         line);
  }
  me.cluster_arrival = c.phase;
  if (++c.arrived == l.threads_per_block * l.cluster_size) {  // the phase completes
    c.arrived = 0;
    ++c.phase;
    for (unsigned f : c.waiting) make_runnable(l, f);
    c.waiting.clear();
  }
  yield(l);
}

void cluster_wait(int line) {
  count(Count::kClusterWait);
  Launch& l = now();
  Fiber& me = *l.current;
  forget_reads(me);
  Cluster& c = cluster_of(l);
  if (me.cluster_arrival < 0) fail("the thread waits at the cluster barrier without arriving", line);
  if (me.cluster_arrival == c.phase) {
    c.waiting.push_back(static_cast<unsigned>(&me - l.fibers.data()));
    wait(l, "cluster barrier_wait", line);
  } else {
    yield(l);
  }
  me.cluster_arrival = -1;
}

void* map_shared(const void* address, int rank, int line) {
  count(Count::kMapShared);
  Launch& l = now();
  const Fiber& me = *l.current;
  Cluster& c = cluster_of(l);
  if (rank < 0 || rank >= static_cast<int>(l.cluster_size)) {
    fail(("map_shared_rank to rank " + std::to_string(rank) + " of a cluster of " + std::to_string(l.cluster_size) +
          " blocks").c_str(), line);
  }
  const SharedBuffer& mine = *l.shared[me.block_index];
  const auto* byte = static_cast<const unsigned char*>(address);
  if (byte < mine.data || byte >= mine.data + mine.size) fail("map_shared_rank of an address outside the block's shared memory", line);
  if (c.exited[rank]) fail(("map_shared_rank into block rank " + std::to_string(rank) + ", which has exited").c_str(), line);
  if (static_cast<unsigned>(rank) != rank_of(l, me)) c.mapped_in[rank] = c.phase;
  const unsigned first = me.block_index - rank_of(l, me);
  return l.shared[first + rank]->data + (byte - mine.data);
}

void memory_point(int) { yield(now()); }

bool spun(const void* address, unsigned bytes, std::uint64_t bits, const char* file, int line) {
  Launch& l = now();
  Fiber& me = *l.current;
  for (int i = 0; i < me.read_count; ++i) {
    Read& r = me.reads[i];
    if (r.address != address || r.bytes != bytes) continue;
    if (r.bits != bits) {
      r.bits = bits;
      return false;
    }
    me.spin = r;  // the same value again: spinning, parked until something may change it
    me.spin_file = file;
    me.spin_line = line;
    me.spin_epoch = l.writes;
    me.state = Fiber::kSpinning;
    l.spinners.push_back(static_cast<unsigned>(&me - l.fibers.data()));
    to_scheduler(l, false);
    return true;
  }
  if (me.read_count == kReads) {
    std::move(me.reads + 1, me.reads + kReads, me.reads);
    --me.read_count;
  }
  me.reads[me.read_count++] = Read{address, bytes, bits};
  return false;
}

void atomic_wrote(const void* address, unsigned bytes) {
  count(Count::kAtomicWrite);
  Launch& l = now();
  ++l.writes;
  forget_reads(*l.current);
  auto tracked = l.block_writes.find(address);
  if (tracked == l.block_writes.end() && l.block_writes.size() < kTrackedAddresses) {
    tracked = l.block_writes.emplace(address, std::vector<unsigned>(l.blocks, 0)).first;
  }
  if (tracked != l.block_writes.end()) ++tracked->second[l.current->block_index];
  for (std::size_t i = l.spinners.size(); i-- > 0;) {
    if (overlaps(l.fibers[l.spinners[i]].spin, address, bytes)) wake_spinner(l, i);
  }
}

void label(const char* what, long long value) {
  Fiber& me = *now().current;
  me.label = what;
  me.label_value = value;
  forget_reads(me);
}

unsigned block_linear() { return now().current->block_index; }

const int* fragment_layout(int kind, int rows, int cols) {
  Launch& l = now();
  auto found = l.layouts.find(kind);
  if (found == l.layouts.end()) {
    std::vector<int> layout(rows * cols);
    for (int i = 0; i < rows * cols; ++i) layout[i] = i;
    std::mt19937_64 draw(seed * 0x9e3779b97f4a7c15ull + static_cast<std::uint64_t>(kind));
    std::shuffle(layout.begin(), layout.end(), draw);
    found = l.layouts.emplace(kind, std::move(layout)).first;
  }
  return found->second.data();
}

// The lanes exchange a fingerprint of (pointer, ldm, layout): lanes that pass different ones are
// told apart (short of a 64-bit hash collision).
void matrix_access(const char* what, const void* pointer, unsigned ldm, unsigned element_bytes, bool row_major,
                   int line) {
  const std::uint64_t mine =
      reinterpret_cast<std::uintptr_t>(pointer) * 0x9e3779b97f4a7c15ull ^ (std::uint64_t{ldm} << 1 | row_major);
  std::uint64_t all[kWarpSize];
  warp_exchange(what, 0xffffffffu, mine, all, line);
  for (std::uint64_t other : all) {
    if (other != mine) fail((std::string(what) + " with a pointer, ldm or layout that differs between the lanes").c_str(), line);
  }
  if (reinterpret_cast<std::uintptr_t>(pointer) % 32 != 0) fail((std::string(what) + " of a pointer not 256-bit aligned").c_str(), line);
  if (ldm * element_bytes % 16 != 0) fail((std::string(what) + " with ldm not a multiple of 16 bytes").c_str(), line);
}

void grid_barrier(int line) {
  Launch& l = now();
  forget_reads(*l.current);
  if (!l.cooperative) fail("grid.sync() in a kernel not launched cooperatively", line);
  arrive(l, l.grid_barrier, l.threads_per_block * l.blocks, "grid.sync()", line);
}

void warp_exchange(const char* kind, unsigned mask, std::uint64_t value, std::uint64_t* out, int line) {
  Launch& l = now();
  Fiber& me = *l.current;
  forget_reads(me);
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
    open.push_back(Collective{kind, mask, line});
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
  max_dynamic_shared[{current_device, kernel}] = bytes;
  return cudaSuccess;
}

cudaError_t set_non_portable_clusters(const void* kernel, bool allowed) {
  non_portable_clusters[{current_device, kernel}] = allowed;
  return cudaSuccess;
}

cudaError_t active_clusters(int* clusters, const void* kernel, int block_size, std::size_t shared_bytes,
                            unsigned cluster) {
  const Device& d = devices[current_device];
  int per_sm = 0;
  const cudaError_t err = occupancy(&per_sm, kernel, block_size, shared_bytes);
  if (err != cudaSuccess) return err;
  const auto found = non_portable_clusters.find({current_device, kernel});
  const unsigned largest = found != non_portable_clusters.end() && found->second ? 16 : 8;
  *clusters = d.clusters && cluster >= 1 && cluster <= largest ? per_sm * d.multiprocessors / static_cast<int>(cluster) : 0;
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

// A kernel's demangled name (dladdr: a kernel of external linkage), or "" where it has none.
std::string kernel_name(const void* kernel) {
  Dl_info info;
  if (dladdr(kernel, &info) == 0 || info.dli_sname == nullptr) return "";
  int status = 0;
  char* demangled = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
  std::string name = status == 0 && demangled != nullptr ? demangled : info.dli_sname;
  std::free(demangled);
  return name;
}

cudaError_t launch(void (*body)(void*), void* context, dim3 grid, dim3 block, std::size_t shared_bytes,
                   bool cooperative, const void* kernel, dim3 cluster) {
  const std::lock_guard<std::mutex> lock(launch_mutex);
  std::string why;
  cudaError_t refused = check_launch(devices[current_device], grid, block, shared_bytes, cooperative, kernel, &why);
  if (refused == cudaSuccess) refused = check_cluster(devices[current_device], grid, block, shared_bytes, cooperative,
                                                      kernel, cluster, &why);
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
  for (unsigned b = 0; b < l.blocks; ++b) l.shared.push_back(std::make_unique<SharedBuffer>(shared_bytes));
  l.cluster_size = cluster.x * cluster.y * cluster.z;
  l.clusters.resize(l.blocks / l.cluster_size);
  for (Cluster& c : l.clusters) {
    c.mapped_in.assign(l.cluster_size, -1);
    c.exited.assign(l.cluster_size, false);
  }
  l.done_in_block.assign(l.blocks, 0);
  l.block_barriers.resize(l.blocks);
  l.warps.resize(static_cast<std::size_t>(l.warps_per_block) * l.blocks);
  l.fibers.resize(total);
  l.by_warp = seed % 2 == 1;
  for (std::size_t w = 0; w < l.warps.size(); ++w) l.warp_priority.push_back(l.rng());
  l.warp_runnable.resize(l.warps.size());
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
      make_context(f.context, f.stack, kStackBytes, fiber_main);
      push_runnable(l, static_cast<unsigned>(index));
    }
  }
  active = &l;
  ++started;
  run(l);
  active = nullptr;
#if SIMT_ASAN
  ASAN_UNPOISON_MEMORY_REGION(l.stacks, l.stacks_bytes);  // frames of fibers that did not return
  for (const auto& buffer : l.shared) ASAN_UNPOISON_MEMORY_REGION(buffer->data, buffer->size);  // exited blocks'
#endif
  munmap(l.stacks, l.stacks_bytes);
  if (!l.error.empty()) {
    last_error = l.error;
    return cudaErrorLaunchFailure;
  }
  ++launched;
  ++launched_by_name[kernel_name(kernel)];
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
    case cudaDevAttrClusterLaunch:
      *value = d.clusters;
      return cudaSuccess;
  }
  return cudaErrorInvalidValue;
}

const char* cudaGetErrorString(cudaError_t error) {
  static thread_local std::string message;
  message = "cudaError " + std::to_string(static_cast<int>(error)) + " (simt: " + simt::last_error + ")";
  return message.c_str();
}
