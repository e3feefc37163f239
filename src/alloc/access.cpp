// Declared accesses (hm_access, hm_access_scattered): the emulated tier's second and most used
// charge point. A kernel that works on hetmem memory in place says what it did to it; on an
// emulated tier the extra device time is charged on the calling thread and the allocation's
// record is marked declared, so the referenced-page sampler leaves it out.
//
// Small declarations are gathered per thread and tier and paid once they are worth a
// microsecond of device time (or a few MiB of volume, so that the zero-charge profile still
// reports its volume): a wait costs two clock reads, which must stay small beside what it charges.
#include <algorithm>
#include <cstdint>

#include "alloc/access.h"
#include "alloc/heap.h"
#include "alloc/settings.h"
#include "base/error.h"
#include "hetmem/hetmem.h"
#include "prim/prim.h"
#include "tier/emul.h"

namespace hm {
namespace {

constexpr double kPayAtNs = 1000;
constexpr uint64_t kPayAtBytes = uint64_t{4} << 20;
constexpr uint64_t kPayAtAccesses = 4096;
constexpr uint64_t kLine = 64;

struct Pending {
  uint64_t read = 0, write = 0, dependent = 0;
  double extra_ns = 0;  // the one-thread estimate that decides when to pay
};
// Per tier, in a block of the thread's own (prim::thread_block: not in the static TLS block),
// mapped by its first declared access.
thread_local Pending *t_pending = nullptr;
prim::ThreadBlockKey g_pending_key;
thread_local bool t_any_pending = false;

void pay(int tier, Pending &p) {
  Tier *t = tier_get(tier);
  if (t && t->emulated()) emul_charge(*t->profile, t->emul, p.read, p.write, p.dependent, kEmulDeclared);
  p = Pending{};
}

// Marks the record declared and gathers the charge for tier `tier` on the calling thread.
int declare(Tier *t, int tier, TierHeap *record_heap, SlotOwner *owner, uint64_t read, uint64_t write,
            uint64_t dependent) {
  if (!t_pending) {
    t_pending = static_cast<Pending *>(prim::thread_block(&g_pending_key, sizeof(Pending) * kMaxTiers));
    if (!t_pending) return fail(HM_ENOMEM, "hm_access: no memory for the thread's pending charges");
  }
  record_heap->declare(owner);
  Pending &p = t_pending[tier];
  p.read += read;
  p.write += write;
  p.dependent += dependent;
  p.extra_ns += emul_extra_ns(*t->profile, calibration(), 1, read, write, dependent);
  t_any_pending = true;
  if (p.extra_ns >= kPayAtNs || p.read + p.write >= kPayAtBytes || p.dependent >= kPayAtAccesses) pay(tier, p);
  return HM_OK;
}

// The part of an access that falls on one tier: where it starts, how many of its bytes and which
// share of its scattered accesses.
struct Part {
  int tier;
  const void *at;
  uint64_t bytes;
  double share;
};

// The parts of an access of `bytes` from ptr to the allocation of `owner`: one, or two for a block
// split across tiers (TierHeap::split_to), each charged on its own tier. Returns the count.
int parts_of(const void *ptr, uint64_t bytes, const SlotOwner *owner, Part out[2]) {
  TierHeap::SplitView sv;
  if (!TierHeap::split_view(owner, &sv)) {
    out[0] = Part{owner->tier, ptr, bytes, 1.0};
    return 1;
  }
  const uintptr_t a = reinterpret_cast<uintptr_t>(ptr), cut = sv.base + sv.tail_offset;
  const uint64_t head = a < cut ? std::min<uint64_t>(bytes, cut - a) : 0;
  const double tail_share = static_cast<double>(sv.usable - sv.tail_offset) / static_cast<double>(sv.usable);
  out[0] = Part{owner->tier, ptr, head, 1.0 - tail_share};
  out[1] = Part{sv.tail_tier, reinterpret_cast<const void *>(std::max(a, cut)), bytes - head, tail_share};
  return 2;
}

// The emulated tier of a part, or nullptr when there is nothing to charge (real tiers, HM_EMUL=0).
Tier *emulated(const Part &part) {
  Tier *t = tier_get(part.tier);
  return t && t->emulated() && emul_enabled() ? t : nullptr;
}

}  // namespace

void access_pay_pending() {
  if (!t_any_pending) return;
  for (int t = 0; t < kMaxTiers; ++t)
    if (t_pending[t].read || t_pending[t].write || t_pending[t].dependent) pay(t, t_pending[t]);
  t_any_pending = false;
}

uint64_t scattered_dependent_equivalent(const hm_calibration_t &cal, uint64_t count) {
  // Independent accesses overlap in the memory system: count of them take as long as
  // count / MLP dependent ones, with the parallelism MLP = latency / (time per gather) measured on
  // this machine's DRAM. A device with a longer latency keeps the same parallelism.
  if (!(cal.gather_ns > 0) || !(cal.latency_ns > 0)) return 0;
  double mlp = std::max(1.0, cal.latency_ns / cal.gather_ns);
  return static_cast<uint64_t>(static_cast<double>(count) / mlp + 0.5);
}

DeviceVolume scattered_volume(const EmulProfile &p, const hm_calibration_t &cal, uint64_t count, size_t size,
                              unsigned how) {
  DeviceVolume v;
  // A chain of dependent loads is bound by latency: the device's extra latency per access, and
  // no bandwidth on top (the loads do not overlap). Independent ones move whole lines and overlap.
  if (how & HM_ACCESS_DEPENDENT) {
    v.dependent = count;
    return v;
  }
  uint64_t bytes = count * ((size + kLine - 1) / kLine) * kLine;
  uint64_t r = (how & HM_ACCESS_READ) ? bytes : 0, w = (how & HM_ACCESS_WRITE) ? bytes : 0;
  uint64_t n = scattered_dependent_equivalent(cal, count);
  if (emul_extra_ns(p, cal, 1, 0, 0, n) > emul_extra_ns(p, cal, 1, r, w, 0)) v.dependent = n;
  else v.read = r, v.write = w;
  return v;
}

}  // namespace hm

using namespace hm;

extern "C" {

int hm_access(const void *ptr, size_t bytes, unsigned how) {
  if (!ptr) return fail(HM_EINVAL, "hm_access: ptr is NULL");
  if (how & HM_ACCESS_DEPENDENT)
    return fail(HM_EINVAL, "hm_access: HM_ACCESS_DEPENDENT describes scattered accesses; use hm_access_scattered");
  if (!(how & HM_ACCESS_RW) || (how & ~HM_ACCESS_RW))
    return fail(HM_EINVAL, "hm_access: how is %#x; give HM_ACCESS_READ, HM_ACCESS_WRITE or HM_ACCESS_RW", how);
  int rc = hm_init();
  if (rc != HM_OK) return rc;
  if (bytes == 0) return HM_OK;
  SlotOwner *owner = slot_map().get(ptr);
  TierHeap *heap = owner ? heap_of(owner->tier) : nullptr;
  if (!heap) return HM_OK;  // memory hetmem does not own counts as DRAM
  Part parts[2];
  int n = parts_of(ptr, bytes, owner, parts);
  for (int i = 0; i < n; ++i) {
    Tier *t = emulated(parts[i]);
    if (!t || parts[i].bytes == 0) continue;
    DeviceVolume v = tier_device_range(*t, parts[i].at, parts[i].bytes, how & HM_ACCESS_READ, how & HM_ACCESS_WRITE);
    declare(t, parts[i].tier, heap, owner, v.read, v.write, v.dependent);
  }
  return HM_OK;
}

int hm_access_scattered(const void *ptr, uint64_t count, size_t size, unsigned how) {
  if (!ptr) return fail(HM_EINVAL, "hm_access_scattered: ptr is NULL");
  if (!(how & HM_ACCESS_RW) || (how & ~(HM_ACCESS_RW | HM_ACCESS_DEPENDENT)))
    return fail(HM_EINVAL, "hm_access_scattered: how is %#x; give HM_ACCESS_READ, HM_ACCESS_WRITE or HM_ACCESS_RW, "
                "optionally with HM_ACCESS_DEPENDENT", how);
  if (size == 0) return fail(HM_EINVAL, "hm_access_scattered: an access of 0 bytes");
  int rc = hm_init();
  if (rc != HM_OK) return rc;
  if (count == 0) return HM_OK;
  SlotOwner *owner = slot_map().get(ptr);
  TierHeap *heap = owner ? heap_of(owner->tier) : nullptr;
  if (!heap) return HM_OK;
  const size_t span = TierHeap::usable_size(ptr, owner);
  Part parts[2];
  int n = parts_of(ptr, span ? span : size, owner, parts);
  for (int i = 0; i < n; ++i) {
    Tier *t = emulated(parts[i]);
    // Scattered accesses spread over the allocation: each part takes its share of them.
    uint64_t c = n == 1 ? count : static_cast<uint64_t>(static_cast<double>(count) * parts[i].share + 0.5);
    if (!t || c == 0) continue;
    DeviceVolume v = scattered_volume(*t->profile, calibration(), c, size, how);
    if (t->charge_model) {
      // Where in the allocation the accesses land is not known: the model spreads them over it.
      v = t->charge_model->scattered(reinterpret_cast<uintptr_t>(parts[i].at), parts[i].bytes ? parts[i].bytes : size,
                                     c, size, how & HM_ACCESS_WRITE, how & HM_ACCESS_DEPENDENT, v);
    }
    declare(t, parts[i].tier, heap, owner, v.read, v.write, v.dependent);
  }
  return HM_OK;
}

int hm_emul_charge(hm_tier_t tier, uint64_t r, uint64_t w, uint64_t n, uint64_t *charged_ns) {
  int rc = hm_init();
  if (rc != HM_OK) return rc;
  Tier *t = tier_get(tier);
  if (!t) return fail(HM_ENOTIER, "hm_emul_charge: unknown tier %d", tier);
  uint64_t ns = t->emulated() ? emul_charge(*t->profile, t->emul, r, w, n, kEmulDeclared) : 0;
  if (charged_ns) *charged_ns = ns;
  return HM_OK;
}

uint64_t hm_emul_pay_owed(void) { return emul_pay_owed(); }

int hm_emul_stats(hm_tier_t tier, hm_emul_stats_t *out) {
  if (!out) return fail(HM_EINVAL, "hm_emul_stats: stats is NULL");
  int rc = hm_init();
  if (rc != HM_OK) return rc;
  Tier *t = tier_get(tier);
  if (!t) return fail(HM_ENOTIER, "hm_emul_stats: unknown tier %d", tier);
  *out = hm_emul_stats_t{};
  if (!t->emulated()) return HM_OK;
  access_pay_pending();  // the caller's own gathered declarations belong in the figures
  for (int s = 0; s < kEmulSources; ++s) {
    out->charged_ns[s] = t->emul.source_ns[s].load();
    out->read_bytes[s] = t->emul.read_bytes[s].load();
    out->write_bytes[s] = t->emul.write_bytes[s].load();
    out->accesses[s] = t->emul.accesses[s].load();
  }
  out->charges = emul_enabled() && emul_charges(*t->profile);
  return HM_OK;
}

}  // extern "C"
