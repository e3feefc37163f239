// Iteration arenas (Ren et al. (ICS'21) §4.1, temporary space): bump allocation over chunks taken from a
// tier, reset at the end of an iteration, merged into one chunk after growing.
#include <atomic>
#include <cstring>
#include <mutex>
#include <new>

#include "alloc/runtime.h"
#include "base/error.h"
#include "hetmem/hetmem.h"

struct hm_arena {
  int tier;
  int cls = -1;  // an arena of a class: its chunks are placed where the class's objects go
  unsigned flags;
  struct Chunk {
    char *base;
    size_t size;
    Chunk *prev;
    uint64_t gen;  // which chunk the bump word speaks of
  };
  std::atomic<Chunk *> chunk{nullptr};   // the chunk being filled; older ones via prev
  // The bump word: the chunk's generation in the top bits, the offset inside it below. Concurrent
  // allocations advance it by compare-and-swap, so one that read the old chunk can never take
  // bytes of the new one (or the reverse) when another thread grows the arena meanwhile.
  std::atomic<uint64_t> offset{0};
  uint64_t gen_next = 0;
  size_t used_before = 0;                // bytes handed out from older chunks
  size_t capacity = 0;
  uint64_t chunks = 0, grows = 0, resets = 0, peak = 0, fallbacks = 0;
  std::mutex grow_mutex;
};

namespace {

size_t align_up(size_t v, size_t a) { return (v + a - 1) & ~(a - 1); }

constexpr int kOffsetBits = 40;  // chunks up to 1 TiB
constexpr uint64_t kOffsetMask = (uint64_t{1} << kOffsetBits) - 1;
uint64_t bump_word(uint64_t gen, size_t off) { return (gen << kOffsetBits) | off; }
size_t offset_of(uint64_t word) { return static_cast<size_t>(word & kOffsetMask); }
uint64_t gen_of(uint64_t word) { return word >> kOffsetBits; }

// Takes `size` bytes aligned to `align` from chunk c if the bump word still speaks of it and the
// bytes fit; nullptr otherwise (*cur holds the word last seen).
void *bump(hm_arena *a, hm_arena::Chunk *c, uint64_t *cur, size_t size, size_t align) {
  while (c && gen_of(*cur) == c->gen) {
    size_t off = align_up(offset_of(*cur), align);
    if (off + size > c->size) return nullptr;
    if (a->offset.compare_exchange_weak(*cur, bump_word(c->gen, off + size), std::memory_order_acq_rel))
      return c->base + off;
  }
  return nullptr;
}

// A chunk comes from the arena's tier, or, when that tier's budget is full, from the next tier of
// the fallback chain (counted here and in the tiers' fallback counters): a full fast tier slows
// temporaries down, it never stops the run. HM_ARENA_STRICT arenas refuse instead.
bool add_chunk(hm_arena *a, size_t size) {
  unsigned placement = (a->flags & HM_ARENA_STRICT) ? HM_STRICT : HM_PREFERRED;
  auto *c = static_cast<hm_arena::Chunk *>(hm_tier_alloc(a->tier, sizeof(hm_arena::Chunk), 16, placement));
  if (!c) return false;
  hm::ClassChunkAlloc class_alloc = a->cls >= 0 ? hm::class_chunk_alloc() : nullptr;
  c->base = static_cast<char *>(class_alloc ? class_alloc(a->cls, size, 64, 0) : hm_tier_alloc(a->tier, size, 64, placement));
  if (!c->base) {
    hm_free(c);
    return false;
  }
  hm_tier_t got = a->tier;
  if (hm_ptr_tier(c->base, &got) == HM_OK && got != a->tier) ++a->fallbacks;
  c->size = size;
  c->prev = a->chunk.load(std::memory_order_relaxed);
  c->gen = ++a->gen_next & (~uint64_t{0} >> kOffsetBits);
  if (c->prev) a->used_before += offset_of(a->offset.load(std::memory_order_relaxed));
  // The chunk first, then the word that names it: whoever reads the word sees its chunk.
  a->chunk.store(c, std::memory_order_release);
  a->offset.store(bump_word(c->gen, 0), std::memory_order_release);
  a->capacity += size;
  ++a->chunks;
  return true;
}

void free_chunks(hm_arena *a) {
  for (hm_arena::Chunk *c = a->chunk.load(); c;) {
    hm_arena::Chunk *prev = c->prev;
    hm_free(c->base);
    hm_free(c);
    c = prev;
  }
  a->chunk.store(nullptr);
  a->capacity = 0;
  a->chunks = 0;
  a->used_before = 0;
  a->offset.store(0);
}

size_t used_now(const hm_arena *a) { return a->used_before + offset_of(a->offset.load(std::memory_order_relaxed)); }

void *grow_and_alloc(hm_arena *a, size_t size, size_t align) {
  std::lock_guard<std::mutex> lock(a->grow_mutex);
  if (!a->chunk.load()) {  // an earlier reset could not re-map its chunk
    if (!add_chunk(a, align_up(size + align > (size_t{1} << 20) ? size + align : size_t{1} << 20, 4096))) return nullptr;
    ++a->grows;
  }
  // Another thread may have grown the arena meanwhile: try the current chunk again.
  hm_arena::Chunk *c = a->chunk.load(std::memory_order_acquire);
  uint64_t cur = a->offset.load(std::memory_order_acquire);
  if (void *p = bump(a, c, &cur, size, align)) return p;
  size_t next = c->size * 2;
  if (next < size + align) next = align_up(size + align, 4096);
  if (!add_chunk(a, next)) return nullptr;
  ++a->grows;
  // Others may take bytes of the new chunk as soon as it is published: bump like them.
  c = a->chunk.load(std::memory_order_acquire);
  cur = a->offset.load(std::memory_order_acquire);
  return bump(a, c, &cur, size, align);
}

}  // namespace

using namespace hm;

namespace {

// An arena on `tier`, or, for cls >= 0, one whose header and chunks are placed as the class's
// objects are (the placement runtime's temporary space).
int arena_create(hm_tier_t tier, int cls, size_t initial_bytes, unsigned flags, hm_arena_t **out) {
  void *mem = cls >= 0 ? class_chunk_alloc()(cls, sizeof(hm_arena), alignof(hm_arena), 0)
                       : hm_tier_alloc(tier, sizeof(hm_arena), alignof(hm_arena),
                                       (flags & HM_ARENA_STRICT) ? HM_STRICT : HM_PREFERRED);
  if (!mem) return hm_last_error_code();
  if (cls >= 0) hm_ptr_tier(mem, &tier);
  auto *a = new (mem) hm_arena();
  a->tier = tier;
  a->cls = cls;
  a->flags = flags;
  if (!add_chunk(a, initial_bytes ? align_up(initial_bytes, 4096) : size_t{1} << 20)) {
    int code = hm_last_error_code();
    a->~hm_arena();
    hm_free(mem);
    return code;
  }
  *out = a;
  return HM_OK;
}

int check_create(const char *fn, unsigned flags, hm_arena_t **out) {
  int rc = runtime_ensure();
  if (rc != HM_OK) return rc;
  if (!out) return fail(HM_EINVAL, "%s: arena is NULL", fn);
  if (flags & ~(HM_ARENA_CONCURRENT | HM_ARENA_STRICT))
    return fail(HM_EINVAL, "%s: unknown flags %#x (HM_ARENA_CONCURRENT, HM_ARENA_STRICT)", fn, flags);
  return HM_OK;
}

}  // namespace

extern "C" {

int hm_arena_create(hm_tier_t tier, size_t initial_bytes, unsigned flags, hm_arena_t **out) {
  int rc = check_create("hm_arena_create", flags, out);
  if (rc != HM_OK) return rc;
  if (!heap_of(tier)) return fail(HM_ENOTIER, "hm_arena_create: unknown tier %d", tier);
  return arena_create(tier, -1, initial_bytes, flags, out);
}

int hm_arena_create_class(hm_class_t cls, size_t initial_bytes, unsigned flags, hm_arena_t **out) {
  int rc = check_create("hm_arena_create_class", flags, out);
  if (rc != HM_OK) return rc;
  if (!class_chunk_alloc()) return fail(HM_ENOTSUP, "hm_arena_create_class: no placement runtime in this build");
  if (cls < 0) return fail(HM_EINVAL, "hm_arena_create_class: %d is not a defined class", cls);
  return arena_create(-1, cls, initial_bytes, flags, out);
}

void *hm_arena_alloc(hm_arena_t *a, size_t size, size_t align) {
  if (!a) return fail_null(HM_EINVAL, "hm_arena_alloc: arena is NULL");
  if (align & (align - 1)) return fail_null(HM_EINVAL, "hm_arena_alloc: alignment %zu is not a power of two", align);
  if (align < 16) align = 16;
  size = align_up(size ? size : 1, 16);  // keeps the bump pointer 16-byte aligned
  if (!(a->flags & HM_ARENA_CONCURRENT)) {
    hm_arena::Chunk *c = a->chunk.load(std::memory_order_relaxed);
    uint64_t cur = a->offset.load(std::memory_order_relaxed);
    size_t off = align_up(offset_of(cur), align);
    if (__builtin_expect(c && off + size <= c->size, 1)) {
      a->offset.store(bump_word(c->gen, off + size), std::memory_order_relaxed);
      return c->base + off;
    }
    return grow_and_alloc(a, size, align);
  }
  uint64_t cur = a->offset.load(std::memory_order_acquire);
  for (;;) {
    if (void *p = bump(a, a->chunk.load(std::memory_order_acquire), &cur, size, align)) return p;
    // The chunk is full, or the word names a chunk being published: look again, else grow.
    uint64_t again = a->offset.load(std::memory_order_acquire);
    hm_arena::Chunk *c = a->chunk.load(std::memory_order_acquire);
    if (again != cur && c && gen_of(again) == c->gen) {
      cur = again;
      continue;
    }
    return grow_and_alloc(a, size, align);
  }
}

void hm_arena_reset(hm_arena_t *a) {
  if (!a) return;
  size_t used = used_now(a);
  if (used > a->peak) a->peak = used;
  ++a->resets;
  if (a->chunks > 1) {
    size_t total = align_up(a->capacity > a->peak ? a->capacity : a->peak, 4096);
    free_chunks(a);
    if (!add_chunk(a, total)) add_chunk(a, size_t{1} << 20);  // keep the arena usable
    return;
  }
  a->used_before = 0;
  hm_arena::Chunk *c = a->chunk.load();
  a->offset.store(c ? bump_word(c->gen, 0) : 0, std::memory_order_release);
}

void hm_arena_destroy(hm_arena_t *a) {
  if (!a) return;
  free_chunks(a);
  a->~hm_arena();
  hm_free(a);
}

int hm_arena_stats(const hm_arena_t *a, hm_arena_stats_t *s) {
  if (!a || !s) return fail(HM_EINVAL, "hm_arena_stats: NULL argument");
  s->used = used_now(a);
  s->peak = s->used > a->peak ? s->used : a->peak;
  s->capacity = a->capacity;
  s->chunks = a->chunks;
  s->grows = a->grows;
  s->resets = a->resets;
  s->fallbacks = a->fallbacks;
  return HM_OK;
}

}  // extern "C"
