// The SIMT emulation of the PTX wrappers of csrc/recurrence/cuda/ptx.h (see tests/simt/simt.h): shared
// memory addresses, mapa, mbarriers, st.async and ldmatrix, written from the PTX ISA's definitions.
//
// Addresses. A shared::cta address (cvta.to.shared) is the offset of a pointer in the block's
// dynamic shared memory (the only shared memory the emulation has; anything else is an error); a
// shared::cluster address (mapa) is 0x80000000 | rank << 24 | offset. Both are 32 bits, as PTX's.
//
// mbarrier (PTX ISA, "Parallel Synchronization and Communication Instructions: mbarrier"): an 8-byte
// object in shared memory, 8-byte aligned, whose current phase completes when its pending arrival
// count and its tx-count are both zero; then the phase advances, pending is reset to the expected
// count of mbarrier.init and tx-count to 0. arrive.expect_tx raises tx-count by its bytes, then
// arrives; st.async's complete_tx lowers it by the bytes it wrote (tx-count may go negative in a
// phase, as PTX allows: the data may land before the expect_tx). try_wait.parity(p) is true once the
// phase of parity p has completed, i.e. while the current phase's parity differs from p. The state
// lives in the object's own 8 bytes (so a peer's st.async reaches it by address):
//   bits 0-15 pending arrivals, 16-31 expected arrivals (the emulation's limit: 65535), 32-53
//   tx-count + 2^21, bit 54 zero (set in fresh shared memory's 0xff bytes: a barrier never
//   initialised), bits 55-63 the phase count modulo 512 (bit 55: the parity).
// Every operation on it is one of the emulation's atomics: a scheduling point, and a try_wait loop
// whose phase can never complete (a missing expect_tx, a wrong parity, an arrival that never
// comes) is parked and reported as a livelock, as the flag barrier's polls are. Stricter than PTX:
// a thread whose try_wait succeeds again on the phase it already waited for (a reused parity: the
// phase two back has the same parity) is an error, as is an arrival at a phase with no pending
// arrival left. The emulation is sequentially consistent: the acquire of try_wait, the release of
// an arrive and fence.mbarrier_init order nothing more, so a missing fence cannot show here.
//
// Data that lands later. st.async and cp.async.bulk write their destination only when the phase of
// the destination's mbarrier they complete on completes, and fill it with 0xff bytes (NaN) from
// the moment they are issued; cp.async lands at the cp.async.wait_group that waits for its group
// and fills its destination the same way until then. So a thread that reads a tile before its
// wait reads NaN in every thread order, not only in the orders where the data happens to be late.
// The PTX ISA leaves such a read undefined; this is one of its outcomes.
//
// ldmatrix.sync.aligned.m8n8.xN{.trans}.shared.b16 (N = 1, 2, 4): a warp collective; lane 8 i + r
// gives the address of row r of matrix i (16 bytes, 16-byte aligned, in shared memory; the
// addresses of lanes 8 N.. are not read), and lane l receives in register i the two 16-bit elements
// (row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1) of matrix i, the lower column in the lower
// half; with .trans (column l / 4, rows 2 (l % 4) and 2 (l % 4) + 1). Counted per warp as a fragment
// load, and its bank conflicts under the emulation's model of shared memory (32 banks of 4 bytes;
// the 8 rows of a matrix are one wavefront when their 16-byte chunks fall in 8 different groups of
// 4 banks): the wavefronts past one a matrix are counted as bank_conflict.
//
// mma.sync.aligned.m16n8k8 (TF32) and m16n8k16 (bf16), f32 accumulators: warp collectives whose
// fragments follow the PTX ISA's layouts (ptx.h states them), so a kernel that fills a fragment
// with the wrong element computes the wrong product. Each product of two operands is exact in
// float32, summed in float32 onto the accumulator in the order k = 0, 1, ...; a TF32 operand is
// read as the hardware reads it, its low 13 mantissa bits ignored. Counted per warp as mma.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "simt.h"

namespace simt {
namespace ptx {

constexpr std::uint32_t kClusterBit = 0x80000000u;

inline std::uint32_t shared_address(const void* p, int line) {
  const auto* base = static_cast<const unsigned char*>(dynamic_shared());
  const auto* byte = static_cast<const unsigned char*>(p);
  if (byte < base || byte >= base + dynamic_shared_bytes()) fail("a shared-memory address outside the block's shared memory", line);
  return static_cast<std::uint32_t>(byte - base);
}

inline std::uint32_t mapa(std::uint32_t address, unsigned rank, int line) {
  if (address & kClusterBit) fail("mapa of an address that is already a shared::cluster address", line);
  if (rank >= cluster_blocks()) {
    fail(("mapa to rank " + std::to_string(rank) + " of a cluster of " + std::to_string(cluster_blocks()) + " blocks").c_str(), line);
  }
  map_shared(static_cast<unsigned char*>(dynamic_shared()) + address, static_cast<int>(rank), line);  // checks the peer
  return kClusterBit | rank << 24 | address;
}

// The pointer of a shared::cta or shared::cluster address, `bytes` of it checked to lie in the block's
// shared memory and aligned to `align`.
inline void* at(std::uint32_t address, unsigned bytes, unsigned align, const char* what, int line) {
  const unsigned rank = address & kClusterBit ? (address >> 24 & 0x7f) : cluster_rank();
  const std::uint32_t offset = address & 0xffffffu;
  if (offset % align) fail((std::string(what) + " at an address not " + std::to_string(align) + "-byte aligned").c_str(), line);
  if (offset + bytes > dynamic_shared_bytes()) fail((std::string(what) + " past the block's shared memory").c_str(), line);
  auto* mine = static_cast<unsigned char*>(dynamic_shared()) + offset;
  return rank == cluster_rank() ? mine : map_shared(mine, static_cast<int>(rank), line);
}

// --- mbarrier ---------------------------------------------------------------------------------------
constexpr std::uint64_t kTxBias = 1ull << 21;
constexpr long long kTxLimit = (1ll << 20) - 1;  // PTX's range of tx-count

struct Mbarrier {
  unsigned pending, expected, phase;
  long long tx;
};

inline std::uint64_t pack(const Mbarrier& m) {
  return m.pending | static_cast<std::uint64_t>(m.expected) << 16 | static_cast<std::uint64_t>(m.tx + kTxBias) << 32 |
         static_cast<std::uint64_t>(m.phase & 511u) << 55;
}

inline Mbarrier unpack(std::uint64_t bits, int line) {
  if (bits >> 54 & 1) fail("an mbarrier used before mbarrier.init", line);
  return {static_cast<unsigned>(bits & 0xffff), static_cast<unsigned>(bits >> 16 & 0xffff),
          static_cast<unsigned>(bits >> 55), static_cast<long long>(bits >> 32 & 0x3fffff) - static_cast<long long>(kTxBias)};
}

inline std::uint64_t* mbarrier_at(std::uint32_t address, int line) {
  return static_cast<std::uint64_t*>(at(address, 8, 8, "an mbarrier", line));
}

inline void mbarrier_init(void* bar, unsigned count, int line) {
  if (count < 1 || count > 0xffff) fail("mbarrier.init with a count outside 1..65535 (the emulation's limit)", line);
  atomic_write(mbarrier_at(shared_address(bar, line), line), pack({count, count, 0, 0}), line);
}

// Bytes an st.async or cp.async.bulk wrote that land when the phase they complete on completes.
struct Landing {
  unsigned char* to;
  std::vector<unsigned char> bytes;
};

// Per launch (a failed launch's leftovers never reach the next): what each mbarrier (by the address
// of its 8 bytes) has in flight.
inline std::map<const void*, std::vector<Landing>>& in_flight() {
  static std::map<const void*, std::vector<Landing>> pending;
  static std::int64_t serial = -1;
  if (serial != launch_serial()) {
    pending.clear();
    serial = launch_serial();
  }
  return pending;
}

// Arrivals and transaction bytes on the mbarrier at `address`: tx-count += expect - complete, then
// `arrivals` arrive; the phase completes when nothing is pending, and what was in flight to it lands.
inline void mbarrier_update(std::uint32_t address, unsigned arrivals, long long expect, long long complete, int line) {
  std::uint64_t* word = mbarrier_at(address, line);
  bool completed = false;
  atomic_update(word, [&](std::uint64_t bits) {
    Mbarrier m = unpack(bits, line);
    m.tx += expect - complete;
    if (m.tx > kTxLimit || m.tx < -kTxLimit) fail("an mbarrier's tx-count outside PTX's range", line);
    if (arrivals > m.pending) fail("an arrival at an mbarrier phase with no pending arrival left", line);
    m.pending -= arrivals;
    completed = m.pending == 0 && m.tx == 0;
    if (completed) m = {m.expected, m.expected, m.phase + 1, 0};
    return pack(m);
  }, __FILE__, line);
  if (!completed) return;
  auto& pending = in_flight();
  auto it = pending.find(word);
  if (it == pending.end()) return;
  for (const Landing& l : it->second) std::memcpy(l.to, l.bytes.data(), l.bytes.size());
  pending.erase(it);
}

inline void mbarrier_arrive(void* bar, int line) { mbarrier_update(shared_address(bar, line), 1, 0, 0, line); }

inline void mbarrier_arrive_remote(std::uint32_t bar, int line) {
  if (!(bar & kClusterBit)) fail("a remote mbarrier arrive at a shared::cta address (mapa it first)", line);
  mbarrier_update(bar, 1, 0, 0, line);
}

inline void mbarrier_arrive_expect_tx(void* bar, unsigned bytes, int line) {
  mbarrier_update(shared_address(bar, line), 1, bytes, 0, line);
}

// The phase each thread last saw complete, per launch, thread and mbarrier (the reused-parity check).
inline std::map<std::tuple<std::int64_t, unsigned, unsigned, const void*>, unsigned>& waited() {
  static std::map<std::tuple<std::int64_t, unsigned, unsigned, const void*>, unsigned> seen;
  return seen;
}

// `file` and `line`: the caller's, for a livelock report.
// A wait dropped by set_drop (the planted-bug tests: the thread goes on as if the phase had completed).
inline bool mbarrier_try_wait_parity(void* bar, unsigned parity, const char* file, int line) {
  if (dropped(file, line)) return true;
  std::uint64_t* word = mbarrier_at(shared_address(bar, line), line);
  const Mbarrier m = unpack(atomic_read(word, file, line), line);
  if ((m.phase & 1u) == (parity & 1u)) return false;  // the phase of that parity is the current one
  const uint3& t = thread_idx();
  const unsigned thread = t.x + block_dim().x * (t.y + block_dim().y * t.z);
  auto& seen = waited();
  if (!seen.empty() && std::get<0>(seen.begin()->first) != launch_serial()) seen.clear();
  auto [it, fresh] = seen.try_emplace({launch_serial(), block_linear(), thread, bar}, m.phase);
  if (!fresh && it->second == m.phase) fail("mbarrier try_wait.parity succeeds again on the phase the thread already waited for (a reused phase parity)", line);
  it->second = m.phase;
  count(Count::kMbarrierWait);
  return true;
}

// What st.async and cp.async.bulk send into a block of the cluster: `bytes` at `address` (aligned to
// `align`), in flight to the mbarrier `bar` of the same block until its phase completes.
inline void send(std::uint32_t address, const void* from, unsigned bytes, unsigned align, std::uint32_t bar, const char* what,
                 int line) {
  const unsigned rank = address & kClusterBit ? (address >> 24 & 0x7f) : cluster_rank();
  const unsigned bar_rank = bar & kClusterBit ? (bar >> 24 & 0x7f) : cluster_rank();
  if (rank != bar_rank) fail((std::string(what) + " into one block completing on another block's mbarrier").c_str(), line);
  auto* to = static_cast<unsigned char*>(at(address, bytes, align, what, line));
  const auto* source = static_cast<const unsigned char*>(from);
  in_flight()[mbarrier_at(bar, line)].push_back({to, std::vector<unsigned char>(source, source + bytes)});
  memory_point(line);
  std::memset(to, 0xff, bytes);
  mbarrier_update(bar, 0, 0, bytes, line);
}

// st.async.shared::cluster.mbarrier::complete_tx::bytes.b32: 4 bytes completing on `bar`.
inline void st_async(std::uint32_t address, std::uint32_t value, std::uint32_t bar, int line) {
  send(address, &value, 4, 4, bar, "st.async", line);
}

// cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes.
inline void bulk_push(std::uint32_t address, const void* from, unsigned bytes, std::uint32_t bar, int line) {
  if (bytes == 0 || bytes % 16) fail("cp.async.bulk of a size that is not a positive multiple of 16 bytes", line);
  at(shared_address(from, line), bytes, 16, "cp.async.bulk's source", line);
  send(address, from, bytes, 16, bar, "cp.async.bulk", line);
}

// --- cp.async -------------------------------------------------------------------------------------
// Each thread's copies not yet committed, and its committed groups oldest first, per launch.
struct Copies {
  std::vector<Landing> open;
  std::deque<std::vector<Landing>> groups;
};

inline Copies& copies() {
  static std::map<std::tuple<unsigned, unsigned>, Copies> all;
  static std::int64_t serial = -1;
  if (serial != launch_serial()) {
    all.clear();
    serial = launch_serial();
  }
  const uint3& t = thread_idx();
  return all[{block_linear(), t.x + block_dim().x * (t.y + block_dim().y * t.z)}];
}

inline void cp_async(void* to, const void* from, unsigned bytes, bool read, int line) {
  at(shared_address(to, line), bytes, bytes, "cp.async's destination", line);
  if (reinterpret_cast<std::uintptr_t>(from) % bytes) {
    fail(("cp.async's source at an address not " + std::to_string(bytes) + "-byte aligned").c_str(), line);
  }
  Landing copy{static_cast<unsigned char*>(to), std::vector<unsigned char>(bytes, 0)};
  if (read) std::memcpy(copy.bytes.data(), from, bytes);
  copies().open.push_back(std::move(copy));
  memory_point(line);
  std::memset(to, 0xff, bytes);
}

inline void cp_async_commit(int line) {
  Copies& c = copies();
  c.groups.push_back(std::move(c.open));
  c.open.clear();
  memory_point(line);
}

// A wait dropped by set_drop (the planted-bug tests) waits for nothing: the copies land at a later wait.
inline void cp_async_wait(int newest, const char* file, int line) {
  if (dropped(file, line)) return;
  Copies& c = copies();
  memory_point(line);
  while (c.groups.size() > static_cast<std::size_t>(newest)) {
    for (const Landing& l : c.groups.front()) std::memcpy(l.to, l.bytes.data(), l.bytes.size());
    c.groups.pop_front();
  }
}

// --- ldmatrix -------------------------------------------------------------------------------------
inline void ldmatrix(std::uint32_t* out, int matrices, bool trans, const void* row, int line) {
  std::uint64_t rows[32];
  warp_exchange(trans ? "ldmatrix.trans" : "ldmatrix", 0xffffffffu, reinterpret_cast<std::uintptr_t>(row), rows, line);
  for (int r = 0; r < 8 * matrices; ++r) {
    at(shared_address(reinterpret_cast<const void*>(rows[r]), line), 16, 16, "ldmatrix's row", line);
  }
  const unsigned l = lane();
  if (l == 0) {
    count(Count::kFragmentLoad);
    for (int i = 0; i < matrices; ++i) {  // wavefronts past one: the most rows in one 16-byte bank group
      int in_group[8] = {};
      int most = 0;
      for (int r = 0; r < 8; ++r) {
        const int group = static_cast<int>(shared_address(reinterpret_cast<const void*>(rows[8 * i + r]), line) / 16 % 8);
        most = std::max(most, ++in_group[group]);
      }
      for (int extra = 1; extra < most; ++extra) count(Count::kBankConflict);
    }
  }
  for (int i = 0; i < matrices; ++i) {
    if (!trans) {
      std::memcpy(&out[i], reinterpret_cast<const unsigned char*>(rows[8 * i + l / 4]) + 4 * (l % 4), 4);
    } else {
      std::uint16_t low, high;
      std::memcpy(&low, reinterpret_cast<const unsigned char*>(rows[8 * i + 2 * (l % 4)]) + 2 * (l / 4), 2);
      std::memcpy(&high, reinterpret_cast<const unsigned char*>(rows[8 * i + 2 * (l % 4) + 1]) + 2 * (l / 4), 2);
      out[i] = low | static_cast<std::uint32_t>(high) << 16;
    }
  }
}

// --- mma.sync -------------------------------------------------------------------------------------
// cvt.rna.tf32.f32: to nearest, ties away from zero, in the float's upper 19 bits.
inline float round_tf32(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// The PTX ISA's fragment layouts (g = lane / 4, t = lane % 4): the (row, column) of element e of a
// lane's A, B or C fragment. TF32 (m16n8k8): element e is register e; bf16 (m16n8k16): element e is
// half e % 2 of register e / 2.
struct Position {
  int row, col;
};
inline Position a_element(bool bf16, int lane, int e) {
  const int g = lane / 4, t = lane % 4;
  return bf16 ? Position{g + 8 * (e / 2 % 2), 2 * t + e % 2 + 8 * (e / 4)} : Position{g + 8 * (e % 2), t + 4 * (e / 2)};
}
inline Position b_element(bool bf16, int lane, int e) {
  const int g = lane / 4, t = lane % 4;
  return bf16 ? Position{2 * t + e % 2 + 8 * (e / 2), g} : Position{t + 4 * e, g};
}
inline Position c_element(int lane, int e) { return {lane / 4 + 8 * (e / 2), 2 * (lane % 4) + e % 2}; }

// Element e of a lane's A or B registers as the tensor core reads it.
inline float operand(const std::uint32_t* registers, bool bf16, int e) {
  std::uint32_t bits = registers[bf16 ? e / 2 : e];
  if (bf16) {
    bits = (e % 2 ? bits >> 16 : bits & 0xffffu) << 16;
  } else if ((bits & 0x7fffffffu) <= 0x7f800000u) {
    bits &= 0xffffe000u;  // TF32: 10 mantissa bits read (a NaN stays NaN)
  }
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}

// d = a b + c over the warp. Two collectives, as wmma.h's mma_sync: the lanes swap pointers to their
// registers, each computes its own d into a temporary, and only after the second (when no lane still
// reads another's) writes d, which may be c.
inline void mma(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2], const float (&c)[4], bool bf16, int line) {
  struct Operands {
    const std::uint32_t* a;
    const std::uint32_t* b;
    const float* c;
  } mine{a, b, c};
  const char* kind = bf16 ? "mma.sync.m16n8k16.bf16" : "mma.sync.m16n8k8.tf32";
  if (lane() == 0) count(Count::kMma);
  std::uint64_t all[32];
  warp_exchange(kind, 0xffffffffu, reinterpret_cast<std::uintptr_t>(&mine), all, line);
  const int K = bf16 ? 16 : 8, per_lane = bf16 ? 8 : 4;
  float A[16][16], B[16][8], C[16][8];
  for (int l = 0; l < 32; ++l) {
    const auto* o = reinterpret_cast<const Operands*>(all[l]);
    for (int e = 0; e < per_lane; ++e) {
      const Position pa = a_element(bf16, l, e);
      A[pa.row][pa.col] = operand(o->a, bf16, e);
    }
    for (int e = 0; e < per_lane / 2; ++e) {
      const Position pb = b_element(bf16, l, e);
      B[pb.row][pb.col] = operand(o->b, bf16, e);
    }
    for (int e = 0; e < 4; ++e) {
      const Position pc = c_element(l, e);
      C[pc.row][pc.col] = o->c[e];
    }
  }
  float out[4];
  for (int e = 0; e < 4; ++e) {
    const Position p = c_element(static_cast<int>(lane()), e);
    float acc = C[p.row][p.col];
    for (int k = 0; k < K; ++k) acc += A[p.row][k] * B[k][p.col];
    out[e] = acc;
  }
  vote(kind, 0xffffffffu, true, line);
  for (int e = 0; e < 4; ++e) d[e] = out[e];
}

// fence.release.sync_restrict::shared::cta.cluster (release) and fence.acquire.sync_restrict::
// shared::cluster.cluster: counted (the emulation is sequentially consistent: what they order is
// the GPU's to show), not where the planted-bug tests drop the line.
inline void fence_shared(bool release, int line, const char* file) {
  if (!simt::dropped(file, line)) count(release ? Count::kFenceSharedRelease : Count::kFenceSharedAcquire);
  memory_point(line);
}

}  // namespace ptx
}  // namespace simt
