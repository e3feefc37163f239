#include "profile/sampling.h"

#include <atomic>
#include <bit>
#include <cstring>

#include "hetmem/hetmem.h"
#include "prim/prim.h"

__thread int64_t hm_profile_bytes_to_sample __attribute__((tls_model("initial-exec"))) = 0;
uint64_t hm_profile_sample_below = 0;
const uint8_t *hm_profile_sample_filter = nullptr;

namespace hm::profile {

namespace {

// The counting filter: one byte per 16-byte granule of a 2 MiB window of addresses (a pointer's
// granule modulo the window), the number of remembered allocations there (255 sticks: the granule
// is then always looked up). 128 KiB, read by every free: by address, not by a hash, so that the
// frees of neighbouring blocks read the same cache lines (a hashed index cost a cache miss a
// free, most of an unsampled free's cost).
constexpr size_t kFilterBytes = kSampleFilterBytes;
constexpr uint8_t kSticky = 255;
constexpr size_t kFirstSlots = size_t{1} << 12;

uint64_t g_mean = 0;         // 0: every allocation
std::atomic<uint8_t> *g_filter = nullptr;  // hm_profile_sample_filter's bytes
// The remembered pointers: open addressing with linear probing and backward-shift deletion,
// under the lock (taken only for a sampled allocation and a free the filter cannot rule out).
// A cache line of its own: what a sampled event writes must not share one with what every
// allocation and free reads (hm_profile_sample_below, hm_profile_sample_filter).
struct alignas(64) Table {
  std::atomic<int> lock{0};
  uint64_t *slots = nullptr;
  size_t capacity = 0;
  size_t used = 0;
};
Table g_table;

// The thread's random state (hm_profile_bytes_to_sample: its bytes to the next sample point).
__thread uint64_t t_random __attribute__((tls_model("initial-exec"))) = 0;

inline uint64_t mix(uint64_t x) {  // MurmurHash3's finaliser
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}
inline size_t filter_index(uint64_t key) { return sample_filter_index(reinterpret_cast<const void *>(key)); }
inline size_t home(uint64_t key, size_t capacity) { return mix(key) & (capacity - 1); }

void lock() { prim::spin_lock(g_table.lock); }
void unlock() { prim::spin_unlock(g_table.lock); }

// -ln(x) for 0 < x <= 1, without the C math library (libhetmem does not link it: every process the
// preload library starts in would load it). x = m 2^e with 1/sqrt(2) <= m < sqrt(2), and ln m =
// 2 atanh(s) = 2 (s + s^3/3 + s^5/5 + ...) with s = (m - 1) / (m + 1), |s| < 0.172: nine terms
// leave a relative error near 1e-15.
double minus_log(double x) {
  const uint64_t bits = std::bit_cast<uint64_t>(x);
  int e = int((bits >> 52) & 0x7ff) - 1023;
  double m = std::bit_cast<double>((bits & ((uint64_t{1} << 52) - 1)) | (uint64_t{1023} << 52));
  if (m > 1.4142135623730951) {
    m *= 0.5;
    ++e;
  }
  const double s = (m - 1) / (m + 1), s2 = s * s;
  double sum = 0;
  for (int k = 17; k >= 1; k -= 2) sum = sum * s2 + 1.0 / k;
  return -(e * 0.69314718055994530942 + 2 * s * sum);
}

// Bytes to the next sample point: exponentially distributed with mean g_mean (xorshift64*).
__attribute__((noinline)) int64_t draw() {
  if (t_random == 0) t_random = mix(prim::fast_now_ns() ^ (uint64_t(prim::thread_id()) << 32)) | 1;
  t_random ^= t_random >> 12;
  t_random ^= t_random << 25;
  t_random ^= t_random >> 27;
  const double u = double((t_random * 0x2545f4914f6cdd1dull) >> 11) * 0x1.0p-53;  // [0, 1)
  const double bytes = minus_log(1.0 - u) * double(g_mean);
  return bytes >= 9.0e18 ? INT64_MAX : int64_t(bytes) + 1;
}

void insert_locked(uint64_t key) {
  size_t i = home(key, g_table.capacity);
  while (g_table.slots[i]) i = (i + 1) & (g_table.capacity - 1);
  g_table.slots[i] = key;
  ++g_table.used;
}

// Doubles the table when half full. False when no memory: the allocation is then recorded but not
// remembered, and its free goes unrecorded (the object looks alive to the end of the trace).
bool make_room_locked() {
  if (g_table.slots && 2 * (g_table.used + 1) <= g_table.capacity) return true;
  const size_t capacity = g_table.capacity ? 2 * g_table.capacity : kFirstSlots;
  void *mem = nullptr;
  if (prim::map_anon(capacity * sizeof(uint64_t), prim::kPageSize, 0, &mem) != HM_OK) return false;
  uint64_t *old = g_table.slots;
  const size_t old_capacity = g_table.capacity;
  g_table.slots = static_cast<uint64_t *>(mem);
  g_table.capacity = capacity;
  g_table.used = 0;
  for (size_t i = 0; i < old_capacity; ++i)
    if (old[i]) insert_locked(old[i]);
  if (old) prim::unmap(old, old_capacity * sizeof(uint64_t));
  return true;
}

// The filter counts the pointer even when the table has no room for it: its free then still
// takes the slow path (where the preload library forgets a large object), and finds nothing.
__attribute__((noinline)) void remember(uint64_t key) {
  lock();
  if (make_room_locked()) insert_locked(key);
  std::atomic<uint8_t> &count = g_filter[filter_index(key)];
  const uint8_t c = count.load(std::memory_order_relaxed);
  if (c != kSticky) count.store(c + 1, std::memory_order_relaxed);
  unlock();
}

bool forget_locked(uint64_t key) {
  if (!g_table.slots) return false;
  const size_t mask = g_table.capacity - 1;
  size_t i = home(key, g_table.capacity);
  while (g_table.slots[i] != key) {
    if (!g_table.slots[i]) return false;
    i = (i + 1) & mask;
  }
  // Backward-shift deletion: every entry after the hole that may move back into it does, so that
  // probes never meet a hole inside their run.
  for (size_t j = (i + 1) & mask; g_table.slots[j]; j = (j + 1) & mask) {
    const size_t k = home(g_table.slots[j], g_table.capacity);
    const bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
    if (!stays) {
      g_table.slots[i] = g_table.slots[j];
      i = j;
    }
  }
  g_table.slots[i] = 0;
  --g_table.used;
  std::atomic<uint8_t> &count = g_filter[filter_index(key)];
  const uint8_t c = count.load(std::memory_order_relaxed);
  if (c != kSticky && c != 0) count.store(c - 1, std::memory_order_relaxed);
  return true;
}

__attribute__((noinline)) bool forget(uint64_t key) {
  lock();
  const bool found = forget_locked(key);
  unlock();
  return found;
}

}  // namespace

int sampling_start(uint64_t mean_bytes, uint64_t every_from) {
  if (mean_bytes && !g_filter) {
    void *mem = nullptr;
    if (prim::map_anon(kFilterBytes, prim::kPageSize, 0, &mem) != HM_OK) return HM_ENOMEM;
    g_filter = static_cast<std::atomic<uint8_t> *>(mem);
  }
  // A thread's bytes to its next sample point carry over from an earlier trace: the distance is
  // exponential, so what is left of it is too (with the earlier mean if the mean changed).
  g_mean = mean_bytes;
  __atomic_store_n(&hm_profile_sample_below, mean_bytes ? std::min(mean_bytes, every_from ? every_from : mean_bytes) : 0,
                   __ATOMIC_RELAXED);
  __atomic_store_n(&hm_profile_sample_filter, mean_bytes ? reinterpret_cast<const uint8_t *>(g_filter) : nullptr,
                   __ATOMIC_RELAXED);
  return HM_OK;
}

void sampling_clear() {
  lock();
  if (g_table.slots) std::memset(g_table.slots, 0, g_table.capacity * sizeof(uint64_t));
  g_table.used = 0;
  if (g_filter) prim::zero_pages(g_filter, kFilterBytes);
  unlock();
}

void sampling_after_fork() {
  t_random = 0;  // the child's samples are drawn afresh, not as the parent's next ones
  if (g_table.lock.load(std::memory_order_relaxed)) {
    // Held by a thread of the parent, maybe halfway through a change: start the table afresh.
    g_table.slots = nullptr;  // the parent's mapping, left as it is
    g_table.capacity = g_table.used = 0;
    if (g_filter) prim::zero_pages(g_filter, kFilterBytes);
    g_table.lock.store(0, std::memory_order_relaxed);
  }
}

bool sample_allocation(const void *ptr, size_t size) {
  if (g_mean == 0) return true;
  if (size < hm_profile_sample_below) {
    if (skips_allocation(size)) return false;
    if (hm_profile_bytes_to_sample == 0) {  // the thread's first allocation: its first distance
      hm_profile_bytes_to_sample = draw();
      if (skips_allocation(size)) return false;
    }
    hm_profile_bytes_to_sample = draw();  // a sample point fell inside: the next one from its end
  }
  remember(reinterpret_cast<uint64_t>(ptr));
  return true;
}

bool sampled_free(const void *ptr) {
  if (g_mean == 0) return true;
  if (skips_free(ptr)) return false;
  return forget(reinterpret_cast<uint64_t>(ptr));
}

size_t sampled_live() {
  lock();
  const size_t n = g_table.used;
  unlock();
  return n;
}

}  // namespace hm::profile
