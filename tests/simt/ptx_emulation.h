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
// ldmatrix.sync.aligned.m8n8.x4.shared.b16: a warp collective; lane 8 i + r gives the address of row
// r of matrix i (16 bytes, 16-byte aligned, in shared memory), and lane l receives in register i
// the two 16-bit elements (row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1) of matrix i, the lower
// column in the lower half.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <tuple>

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

// Arrivals and transaction bytes on the mbarrier at `address`: tx-count += expect - complete, then
// `arrivals` arrive; the phase completes when nothing is pending.
inline void mbarrier_update(std::uint32_t address, unsigned arrivals, long long expect, long long complete, int line) {
  atomic_update(mbarrier_at(address, line), [&](std::uint64_t bits) {
    Mbarrier m = unpack(bits, line);
    m.tx += expect - complete;
    if (m.tx > kTxLimit || m.tx < -kTxLimit) fail("an mbarrier's tx-count outside PTX's range", line);
    if (arrivals > m.pending) fail("an arrival at an mbarrier phase with no pending arrival left", line);
    m.pending -= arrivals;
    if (m.pending == 0 && m.tx == 0) m = {m.expected, m.expected, m.phase + 1, 0};
    return pack(m);
  }, __FILE__, line);
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
inline bool mbarrier_try_wait_parity(void* bar, unsigned parity, const char* file, int line) {
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
  return true;
}

// st.async.shared::cluster.mbarrier::complete_tx::bytes.b32: the value lands, then its 4 bytes
// complete on the mbarrier, which must be in the same block as the destination.
inline void st_async(std::uint32_t address, std::uint32_t value, std::uint32_t bar, int line) {
  const unsigned rank = address & kClusterBit ? (address >> 24 & 0x7f) : cluster_rank();
  const unsigned bar_rank = bar & kClusterBit ? (bar >> 24 & 0x7f) : cluster_rank();
  if (rank != bar_rank) fail("st.async into one block completing on another block's mbarrier", line);
  std::uint32_t* to = static_cast<std::uint32_t*>(at(address, 4, 4, "st.async", line));
  memory_point(line);
  *to = value;
  mbarrier_update(bar, 0, 0, 4, line);
}

// --- ldmatrix -------------------------------------------------------------------------------------
inline void ldmatrix_x4(std::uint32_t (&out)[4], const void* row, int line) {
  at(shared_address(row, line), 16, 16, "ldmatrix's row", line);
  std::uint64_t rows[32];
  warp_exchange("ldmatrix", 0xffffffffu, reinterpret_cast<std::uintptr_t>(row), rows, line);
  const unsigned l = lane();
  for (int i = 0; i < 4; ++i) {
    std::memcpy(&out[i], reinterpret_cast<const unsigned char*>(rows[8 * i + l / 4]) + 4 * (l % 4), 4);
  }
}

}  // namespace ptx
}  // namespace simt
