#include "profile/profiler.h"

#include <pthread.h>
#include <sched.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <new>
#include <system_error>
#include <thread>
#include <vector>

#include "alloc/hook.h"
#include "base/error.h"
#include "base/options.h"
#include "hetmem/hetmem.h"
#include "prim/prim.h"
#include "profile/sampling.h"

namespace hm::profile {

int write_record(uint32_t type, const void *payload, size_t bytes, const void *extra, size_t extra_bytes);

std::atomic<bool> g_active{false};

namespace {

constexpr uint32_t kEventsPerBuffer = 2048;  // 64 KiB of events per block
constexpr int kMaxDepth = kMaxProfileDepth;  // HM_PROFILE_DEPTH's range (base/options.h)
constexpr uint32_t kSiteSlots = 1u << 16;
constexpr uint64_t kBusy = 1;

// What laying out and compressing a block of events needs (a thread's own, or the writer's).
struct BlockScratch {
  ZSTD_CCtx *zstd = nullptr;  // one compression context, reused for every block
  unsigned char columns[kEventsPerBuffer * sizeof(trace::Event)];
  unsigned char packed[kEventsPerBuffer * sizeof(trace::Event) + 4096];  // >= ZSTD_compressBound
};

// A block handed to the writer thread: kIdle (none), kHanded (the writer may take it), kTaken
// (being written, by the writer or by the thread itself).
enum HandedState : int { kIdle, kHanded, kTaken };

// Each thread records into one of two blocks. A full block is handed to the writer thread, which
// lays it out, compresses and writes it while the thread records into the other: zstd and the byte
// planes were two thirds of an event's cost (32 of 47 ns on this VM) and are then no longer the
// program's. When the writer has not yet taken the block handed before (it is behind, or there
// is none, as in a followed fork child), the thread writes that block and its full one itself.
struct ThreadBuffer {
  std::atomic<int> lock{0};
  uint32_t tid = 0;
  uint32_t count = 0;  // events in `events`
  uint64_t generation = 0;
  uint64_t flushed_ns = 0;  // when this buffer was last written out
  ThreadBuffer *next = nullptr;
  trace::Event *events = blocks[0];  // the block being recorded into
  std::atomic<int> handed_state{kIdle};
  trace::Event *handed = nullptr;  // the other block, while handed
  uint32_t handed_count = 0;
  uint64_t handed_generation = 0;
  trace::Event blocks[2][kEventsPerBuffer];
  BlockScratch scratch;  // for the blocks the thread writes itself
};

// The call-site table: open addressing over kSiteSlots slots of 16 bytes (1 MiB), each site's
// depth and frames in an arena beside it (g_site_frames), written once and in order. Room for
// every slot's site at the largest depth: the arena cannot fill before the table does.
struct SiteSlot {
  std::atomic<uint64_t> key;  // 0: empty; kBusy: being filled
  uint32_t id;
  uint32_t at;  // its entry in g_site_frames: the depth, then the frames
};
static_assert(sizeof(SiteSlot) == 16, "256 slots a page (touch_site_page)");
constexpr size_t kSiteTableBytes = sizeof(SiteSlot) * kSiteSlots;
constexpr size_t kSiteFrameWords = size_t{kSiteSlots} * (kMaxDepth + 1);
constexpr uint32_t kSlotsPerPage = 4096 / sizeof(SiteSlot);

prim::AppendFile g_trace;  // this process's trace
int g_trace_pid = 0;  // the process the open trace belongs to (a vfork child is not it)
Options g_options;
std::atomic<uint64_t> g_generation{0};  // a new trace (start, or a followed fork) starts a new one
uint64_t g_start_ns = 0;
std::atomic<uint16_t> g_phase{0};
std::mutex g_mutex;  // start/stop, the buffer registry, large objects
std::atomic<ThreadBuffer *> g_buffers{nullptr};  // pushed at the head under g_mutex; read by the writer
SiteSlot *g_sites = nullptr;
uint64_t *g_site_frames = nullptr;
std::atomic<uint32_t> g_site_frames_used{0};
std::atomic<uint32_t> g_site_count{0};
bool g_tables_used = false;  // a trace has stopped since the site and sample tables were cleared
// The pages of the table written since it was last cleared (one bit each).
std::atomic<uint64_t> g_site_pages[kSiteSlots / kSlotsPerPage / 64];
std::vector<std::pair<uintptr_t, size_t>> *g_large = nullptr;
char g_failure[256];

__thread ThreadBuffer *t_buffer __attribute__((tls_model("initial-exec"))) = nullptr;
pthread_key_t g_key;
pthread_once_t g_key_once = PTHREAD_ONCE_INIT;

// Code told of each start and stop (watch): numpy's handler, which must not call the library
// for every array to know.
constexpr int kWatchers = 4;
std::atomic<void (*)(int)> g_watchers[kWatchers];

// Sets the state; returns what it was. Watchers hear of a change.
bool set_active(bool on) {
  const bool was = g_active.exchange(on);
  if (was != on)
    for (auto &w : g_watchers)
      if (void (*fn)(int) = w.load()) fn(on ? 1 : 0);
  return was;
}

void disable(const char *why) {
  if (set_active(false)) {
    std::snprintf(g_failure, sizeof g_failure, "%s", why);
    log(0, "profiler disabled: %s", why);
  }
}

// After a write the trace refused (errno says why).
void write_failed() {
  const int why = errno;
  char text[sizeof g_failure];
  if (why == ENOENT)
    std::snprintf(text, sizeof text, "the trace %s was removed or replaced while the program ran",
                  g_trace.path().c_str());
  else
    std::snprintf(text, sizeof text, "writing the trace %s failed: %s", g_trace.path().c_str(), std::strerror(why));
  disable(text);
}

// One record: its head (length and CRC-32 over type, length and payload), then the payload pieces,
// in one write (O_APPEND: each record lands whole, whichever thread writes it).
int write_sealed(uint32_t type, const prim::Piece *payload, int pieces) {
  trace::RecordHead head{type, static_cast<uint32_t>(sizeof(trace::RecordHead)), 0, 0};
  for (int i = 0; i < pieces; ++i) head.bytes += static_cast<uint32_t>(payload[i].bytes);
  uLong crc = crc32(0L, reinterpret_cast<const Bytef *>(&head), 8);
  for (int i = 0; i < pieces; ++i)
    if (payload[i].bytes) crc = crc32(crc, static_cast<const Bytef *>(payload[i].data), static_cast<uInt>(payload[i].bytes));
  head.crc = static_cast<uint32_t>(crc);
  prim::Piece all[4] = {{&head, sizeof head}};
  for (int i = 0; i < pieces; ++i) all[i + 1] = payload[i];
  return g_trace.write(all, pieces + 1);
}

// Lays the block out column by column, each column split into byte planes (all low bytes, then
// all second bytes, ...), with times and addresses as differences from the previous event: the
// high planes are then nearly constant and zstd shrinks a block several times more than whole
// events.
template <int Width>
unsigned char *byte_planes(const uint64_t *values, uint32_t n, unsigned char *out) {
  for (int byte = 0; byte < Width; ++byte) {
    const int shift = 8 * byte;
    for (uint32_t i = 0; i < n; ++i) out[i] = static_cast<unsigned char>(values[i] >> shift);
    out += n;
  }
  return out;
}

size_t pack_columns(const trace::Event *events, uint32_t n, unsigned char *out) {
  uint64_t column[kEventsPerBuffer];
  unsigned char *p = out;
  uint64_t last = 0;
  for (uint32_t i = 0; i < n; ++i) column[i] = events[i].time_ns - last, last = events[i].time_ns;
  p = byte_planes<8>(column, n, p);
  last = 0;
  for (uint32_t i = 0; i < n; ++i) column[i] = events[i].ptr - last, last = events[i].ptr;
  p = byte_planes<8>(column, n, p);
  for (uint32_t i = 0; i < n; ++i) column[i] = events[i].size;
  p = byte_planes<8>(column, n, p);
  for (uint32_t i = 0; i < n; ++i) column[i] = events[i].site;
  p = byte_planes<4>(column, n, p);
  for (uint32_t i = 0; i < n; ++i) column[i] = events[i].phase;
  p = byte_planes<2>(column, n, p);
  for (uint32_t i = 0; i < n; ++i) *p++ = events[i].op;
  for (uint32_t i = 0; i < n; ++i) *p++ = events[i].fn;
  return static_cast<size_t>(p - out);
}

void flush_sites(uint64_t older_than_ns);

// Lays out, compresses and writes one block of events of thread `tid`.
void write_events(uint32_t tid, const trace::Event *events, uint32_t n, BlockScratch *scratch) {
  if (n == 0 || !g_trace.is_open()) return;
  if (!scratch->zstd) scratch->zstd = ZSTD_createCCtx();
  size_t raw = pack_columns(events, n, scratch->columns);
  // zstd's fast level -4: the columns are regular enough that it keeps most of level 1's ratio
  // (a pw.x trace 4.4 MB instead of 3.9) at about half its time.
  size_t packed = scratch->zstd ? ZSTD_compressCCtx(scratch->zstd, scratch->packed, sizeof scratch->packed,
                                                    scratch->columns, raw, -4)
                                : 0;
  if (!scratch->zstd || ZSTD_isError(packed)) {
    disable("zstd could not compress an event block");
    return;
  }
  trace::EventsHeader eh{tid, n, static_cast<uint32_t>(packed), 0};
  prim::Piece payload[2] = {{&eh, sizeof eh}, {scratch->packed, packed}};
  if (write_sealed(trace::kEvents, payload, 2) != HM_OK) write_failed();
}

// Writes the block handed to the writer, if the writer has not taken it; waits for the writer if
// it has. Afterwards the thread's events before its current block are in the file.
void settle_handed(ThreadBuffer *b) {
  int state = kHanded;
  if (b->handed_state.compare_exchange_strong(state, kTaken, std::memory_order_acq_rel)) {
    if (b->handed_generation == g_generation.load()) write_events(b->tid, b->handed, b->handed_count, &b->scratch);
    b->handed_state.store(kIdle, std::memory_order_release);
    return;
  }
  while (b->handed_state.load(std::memory_order_acquire) != kIdle) sched_yield();
}

// Writes the thread's current block; with `all`, the block handed to the writer too (the trace is
// read sorted by time, so the order of a thread's blocks in the file does not matter).
void flush_locked(ThreadBuffer *b, bool all) {
  InternalScope internal;  // the compressor's allocations are not the program's
  flush_sites(1000000000ull);
  if (all) settle_handed(b);
  write_events(b->tid, b->events, b->count, &b->scratch);
  b->count = 0;
}

// The writer thread (started with the first trace; none in a fork child): takes the blocks handed
// to it and writes them. It never takes a thread's buffer lock, so a thread may wait for it while
// holding its own.
struct Writer {
  std::mutex wake_mutex;
  std::condition_variable wake;
  bool work = false;
  std::mutex write_mutex;  // held while it writes: stop() closes the file only outside it
  BlockScratch scratch;
};
std::atomic<Writer *> g_writer{nullptr};

void writer_loop(Writer *w) {
  InternalScope internal;  // everything this thread allocates is the profiler's
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(w->wake_mutex);
      w->wake.wait(lock, [w] { return w->work; });
      w->work = false;
    }
    std::lock_guard<std::mutex> writing(w->write_mutex);
    for (ThreadBuffer *b = g_buffers.load(std::memory_order_acquire); b; b = b->next) {
      int state = kHanded;
      if (!b->handed_state.compare_exchange_strong(state, kTaken, std::memory_order_acq_rel)) continue;
      if (b->handed_generation == g_generation.load()) {
        flush_sites(1000000000ull);
        write_events(b->tid, b->handed, b->handed_count, &w->scratch);
      }
      b->handed_state.store(kIdle, std::memory_order_release);
    }
  }
}

void start_writer() {
  if (g_writer.load()) return;
  void *mem = nullptr;
  if (prim::map_anon(sizeof(Writer), prim::kPageSize, 0, &mem) != HM_OK) return;
  auto *w = new (mem) Writer;  // never destroyed: the thread may wait on it while the process exits
  try {
    std::thread(writer_loop, w).detach();
  } catch (const std::system_error &) {
    return;  // no thread: every thread writes its own blocks
  }
  g_writer.store(w);
}

// A full block: handed to the writer, or written here when the writer cannot take it.
void block_full(ThreadBuffer *b) {
  Writer *w = g_writer.load(std::memory_order_acquire);
  if (!w || b->handed_state.load(std::memory_order_acquire) != kIdle) {
    flush_locked(b, false);
    return;
  }
  b->handed = b->events;
  b->handed_count = b->count;
  b->handed_generation = b->generation;
  b->handed_state.store(kHanded, std::memory_order_release);
  b->events = b->events == b->blocks[0] ? b->blocks[1] : b->blocks[0];
  b->count = 0;
  {
    std::lock_guard<std::mutex> lock(w->wake_mutex);
    w->work = true;
  }
  w->wake.notify_one();
}

void lock(ThreadBuffer *b) { prim::spin_lock(b->lock); }
void unlock(ThreadBuffer *b) { prim::spin_unlock(b->lock); }

void thread_exit(void *p) {
  auto *b = static_cast<ThreadBuffer *>(p);
  lock(b);
  if (b->generation == g_generation.load()) flush_locked(b, true);
  unlock(b);
}

void make_key() { pthread_key_create(&g_key, thread_exit); }

ThreadBuffer *buffer() {
  ThreadBuffer *b = t_buffer;
  if (__builtin_expect(b != nullptr, 1)) return b;
  void *mem = nullptr;
  if (prim::map_anon(sizeof(ThreadBuffer), prim::kPageSize, 0, &mem) != HM_OK) return nullptr;
  b = new (mem) ThreadBuffer;  // default-initialised: the scratch arrays are written before read (no page touched)
  b->tid = static_cast<uint32_t>(prim::thread_id());
  b->generation = g_generation.load();
  {
    std::lock_guard<std::mutex> guard(g_mutex);
    b->next = g_buffers.load(std::memory_order_relaxed);
    g_buffers.store(b, std::memory_order_release);
  }
  pthread_once(&g_key_once, make_key);
  pthread_setspecific(g_key, b);
  t_buffer = b;
  return b;
}

uint64_t hash_frames(const uint64_t *f, int n) {
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < n; ++i) h = (h ^ f[i]) * 1099511628211ull;
  return h | (uint64_t{1} << 63);  // never 0 (empty) or kBusy
}

// Call sites wait in a block that is written compressed (trace::kSites) when full and whenever
// events are written, so that every site an event refers to is in the file by then.
constexpr uint32_t kSitesPerBlock = 4096;
struct SiteBlock {
  std::atomic<int> lock{0};
  uint32_t count = 0;
  uint32_t frames = 0;
  uint64_t first_ns = 0;  // when the oldest site in the block was added
  uint32_t id[kSitesPerBlock];
  uint8_t depth[kSitesPerBlock];
  uint64_t frame[kSitesPerBlock * kMaxDepth];
  uint64_t delta[kSitesPerBlock * kMaxDepth];  // the columns being laid out
  uint32_t order[kSitesPerBlock];
  unsigned char raw[kSitesPerBlock * (5 + 8 * kMaxDepth)];
  unsigned char packed[kSitesPerBlock * (5 + 8 * kMaxDepth) + 65536];  // >= ZSTD_compressBound
  ZSTD_CCtx *zstd = nullptr;
};
SiteBlock *g_site_block = nullptr;  // mapped with the site table

void flush_sites_locked(SiteBlock *b) {
  if (b->count == 0 || !g_trace.is_open()) {
    b->count = b->frames = 0;
    return;
  }
  InternalScope internal;
  // Sites in the order of their frames from the outermost in, so that neighbours share callers
  // and the differences between them are mostly 0.
  uint32_t start[kSitesPerBlock];
  for (uint32_t i = 0, at = 0; i < b->count; at += b->depth[i], ++i) {
    start[i] = at;
    b->order[i] = i;
  }
  auto outer_first = [&](uint32_t x, uint32_t y) {
    for (int dx = b->depth[x] - 1, dy = b->depth[y] - 1; dx >= 0 && dy >= 0; --dx, --dy) {
      uint64_t fx = b->frame[start[x] + dx], fy = b->frame[start[y] + dy];
      if (fx != fy) return fx < fy;
    }
    return b->depth[x] < b->depth[y];
  };
  std::sort(b->order, b->order + b->count, outer_first);
  uint64_t *column = b->delta;
  for (uint32_t i = 0; i < b->count; ++i) column[i] = b->id[b->order[i]];
  unsigned char *p = byte_planes<4>(column, b->count, b->raw);
  for (uint32_t i = 0; i < b->count; ++i) *p++ = b->depth[b->order[i]];
  // Each frame as its difference from the previous site's frame at the same depth, byte planes.
  uint64_t prev[kMaxDepth] = {};
  uint32_t k = 0;
  for (uint32_t i = 0; i < b->count; ++i) {
    const uint32_t site = b->order[i], depth = b->depth[site];
    for (uint32_t d = 0; d < depth; ++d, ++k) {
      uint64_t f = b->frame[start[site] + d];
      column[k] = f - prev[d];
      prev[d] = f;
    }
    for (uint32_t d = depth; d < kMaxDepth; ++d) prev[d] = 0;
  }
  p = byte_planes<8>(column, k, p);
  size_t raw = static_cast<size_t>(p - b->raw);
  if (!b->zstd) b->zstd = ZSTD_createCCtx();
  size_t packed = b->zstd ? ZSTD_compressCCtx(b->zstd, b->packed, sizeof b->packed, b->raw, raw, 9) : 0;
  if (!b->zstd || ZSTD_isError(packed)) {
    disable("zstd could not compress a block of call sites");
  } else {
    trace::SitesHeader sh{b->count, static_cast<uint32_t>(raw), static_cast<uint32_t>(packed), 0};
    prim::Piece payload[2] = {{&sh, sizeof sh}, {b->packed, packed}};
    if (write_sealed(trace::kSites, payload, 2) != HM_OK) write_failed();
  }
  b->count = b->frames = 0;
}

void lock_sites(SiteBlock *b) { prim::spin_lock(b->lock); }
void unlock_sites(SiteBlock *b) { prim::spin_unlock(b->lock); }

void add_site(uint32_t id, const uint64_t *frames, uint32_t depth) {
  SiteBlock *b = g_site_block;
  if (!b) return;
  lock_sites(b);
  if (b->count == kSitesPerBlock) flush_sites_locked(b);
  if (b->count == 0) b->first_ns = now();
  b->id[b->count] = id;
  b->depth[b->count] = static_cast<uint8_t>(depth);
  std::memcpy(b->frame + b->frames, frames, sizeof(uint64_t) * depth);
  b->frames += depth;
  ++b->count;
  unlock_sites(b);
}

// `older_than_ns` > 0: only a block whose oldest site is at least that old (events are written
// at least once a second; the sites they name follow within a second, whole blocks compressing
// better than pieces).
void flush_sites(uint64_t older_than_ns) {
  if (SiteBlock *b = g_site_block) {
    lock_sites(b);
    if (b->count && (older_than_ns == 0 || now() - b->first_ns >= older_than_ns)) flush_sites_locked(b);
    unlock_sites(b);
  }
}

// Writes to the table's page holding slot `index` before anything reads it. A page first read is
// the kernel's shared zero page, and the write that follows must copy it and flush the other
// threads' TLBs, which stops every CPU the process runs on: about 9 us a new site in a program with
// two OpenMP threads on this VM (xtb: 6.3 ms for its 705 sites), where a first write costs 1.8 us.
inline void touch_site_page(uint32_t index) {
  const uint32_t page = index / kSlotsPerPage;
  std::atomic<uint64_t> &word = g_site_pages[page / 64];
  const uint64_t bit = uint64_t{1} << (page % 64);
  if (word.load(std::memory_order_relaxed) & bit) return;
  g_sites[index].key.fetch_or(0, std::memory_order_relaxed);  // changes nothing; faults as a write
  word.fetch_or(bit, std::memory_order_relaxed);
}

// Forgets every site (a new trace defines its own), giving back the table's and arena's pages.
void clear_sites() {
  prim::zero_pages(g_sites, kSiteTableBytes);  // page-aligned mappings of their own
  prim::zero_pages(g_site_frames, kSiteFrameWords * sizeof(uint64_t));
  for (std::atomic<uint64_t> &word : g_site_pages) word.store(0, std::memory_order_relaxed);
  g_site_frames_used = 0;
  g_site_count = 0;
}

uint32_t intern_site(const uint64_t *frames, int depth) {
  if (!g_sites || depth == 0) return 0;
  const uint64_t key = hash_frames(frames, depth);
  for (uint32_t probe = 0; probe < 64; ++probe) {
    const uint32_t index = static_cast<uint32_t>((key + probe) & (kSiteSlots - 1));
    SiteSlot &s = g_sites[index];
    touch_site_page(index);
    uint64_t k = s.key.load(std::memory_order_acquire);
    if (k == 0) {
      uint64_t expected = 0;
      if (s.key.compare_exchange_strong(expected, kBusy, std::memory_order_acq_rel)) {
        const uint32_t at = g_site_frames_used.fetch_add(static_cast<uint32_t>(depth) + 1);
        g_site_frames[at] = static_cast<uint64_t>(depth);
        std::memcpy(g_site_frames + at + 1, frames, sizeof(uint64_t) * depth);
        s.at = at;
        s.id = g_site_count.fetch_add(1) + 1;
        s.key.store(key, std::memory_order_release);
        add_site(s.id, frames, static_cast<uint32_t>(depth));
        return s.id;
      }
      k = s.key.load(std::memory_order_acquire);
    }
    while (k == kBusy) k = s.key.load(std::memory_order_acquire);
    if (k == key) {
      const uint64_t *stored = g_site_frames + s.at;
      if (stored[0] == static_cast<uint64_t>(depth) && std::memcmp(stored + 1, frames, sizeof(uint64_t) * depth) == 0)
        return s.id;
    }
  }
  return 0;  // the table is crowded here: the event keeps no call site
}

// The name hm_profile_site_name gave the calling thread's allocations (nullptr or "" when none),
// in a block of its own (prim::thread_block: not in the static TLS block, which holds only the
// pointer, read for every allocation without a __tls_get_addr call).
constexpr size_t kSiteNameBytes = 256;
__thread char *t_site_name __attribute__((tls_model("initial-exec"))) = nullptr;
prim::ThreadBlockKey g_site_name_key;

// A named site: interned by its name (two pseudo frames, a marker no return address has and the
// name's hash), its name written once, when it is first seen.
uint32_t named_site(const char *name) {
  constexpr uint64_t kNamedMarker = 1;  // address 1: never a return address
  uint64_t h = 1469598103934665603ull;
  for (const char *c = name; *c; ++c) h = (h ^ static_cast<unsigned char>(*c)) * 1099511628211ull;
  const uint64_t frames[2] = {kNamedMarker, h};
  const uint32_t before = g_site_count.load();
  const uint32_t id = intern_site(frames, 2);
  if (id > before) {  // new: this thread interned it
    const uint32_t head = id;
    write_record(trace::kSiteName, &head, sizeof head, name, std::strlen(name));
  }
  return id;
}

// The call site of an allocation of `size` bytes: a stack walk (HM_PROFILE_DEPTH frames) for one
// at least HM_PROFILE_STACK_MIN large, the caller's return address alone for a smaller one. Plans
// place only large objects, and nearly all of an allocation-heavy program's allocations are small
// (Quantum ESPRESSO: 3.1 million, 0.07% of them 4 KiB or more), where the walk was most of the
// profiler's cost.
std::atomic<int> g_hook_frames{8};  // frames of the hook and the profiler above a caller, last seen

uint32_t capture_site(const void *caller, size_t size) {
  if (t_site_name && t_site_name[0]) return named_site(t_site_name);
  int depth = g_options.depth;
  if (depth <= 0) return 0;
  if (size < g_options.stack_min && caller) {
    const uint64_t frame = reinterpret_cast<uint64_t>(caller);
    return intern_site(&frame, 1);
  }
  // Drop the profiler's and the hook's frames: everything before the hooked call's return address.
  // There are as many as the last walk found (a handful, at most 15). A walk cut short before it
  // holds the caller and `depth` frames from it walks again with room for 16, so that a call
  // stack is always the same site.
  constexpr int kRoom = 16;
  void *raw[kMaxDepth + kRoom];
  auto find_caller = [&](int n) {
    for (int i = 0; i < n; ++i)
      if (raw[i] == caller) return i;
    return -1;
  };
  int want = depth + std::min(g_hook_frames.load(std::memory_order_relaxed), kRoom - 1) + 1;
  int n = prim::stack_trace(raw, want);
  int first = find_caller(n);
  if (n == want && (first < 0 || n - first < depth) && want < depth + kRoom) {
    want = depth + kRoom;
    n = prim::stack_trace(raw, want);
    first = find_caller(n);
  }
  if (first >= 0 && first < kRoom) g_hook_frames.store(first, std::memory_order_relaxed);
  if (first < 0) first = 0;
  uint64_t frames[kMaxDepth];
  int m = 0;
  for (int i = first; i < n && m < depth; ++i) frames[m++] = reinterpret_cast<uint64_t>(raw[i]);
  if (m == 0 && caller) frames[m++] = reinterpret_cast<uint64_t>(caller);
  return intern_site(frames, m);
}

int write_header() {
  trace::FileHeader h{};
  std::memcpy(h.magic, trace::kMagic, sizeof h.magic);
  h.version = trace::kVersion;
  h.header_bytes = sizeof h;
  h.start_monotonic_ns = g_start_ns;  // fast_now_ns: CLOCK_MONOTONIC through the TSC
  h.start_unix_ns = prim::wall_ns();
  h.pid = static_cast<uint32_t>(prim::process_id());
  h.stack_depth = static_cast<uint32_t>(g_options.depth);
  h.large_threshold = g_options.large;
  h.sample_bytes = g_options.sample;
  prim::Piece piece{&h, sizeof h};
  return g_trace.write(&piece, 1);
}

// The executable segments of every loaded object, so that addresses can be symbolised offline.
int write_modules() {
  std::string payload;
  prim::for_each_loaded_object(
      [](const prim::LoadedObject &object, void *data) {
        auto *out = static_cast<std::string *>(data);
        for (int i = 0; i < object.code_segments; ++i) {
          trace::ModuleEntry e{object.code[i].start, object.code[i].end, object.bias,
                               static_cast<uint32_t>(std::strlen(object.path)), 0};
          out->append(reinterpret_cast<const char *>(&e), sizeof e);
          out->append(object.path, e.path_bytes);
        }
      },
      &payload);
  return write_record(trace::kModules, payload.data(), payload.size());
}

int open_trace(const std::string &path) {
  if (g_trace.create(path) != HM_OK)
    return fail(HM_EIO, "cannot write the trace %s: %s", path.c_str(), std::strerror(errno));
  g_trace_pid = prim::process_id();
  if (write_header() != HM_OK) {
    const int saved = errno;
    g_trace.close();
    return fail(HM_EIO, "cannot write the trace %s: %s", path.c_str(), std::strerror(saved));
  }
  return HM_OK;
}

}  // namespace

uint64_t now() { return prim::fast_now_ns() - g_start_ns; }
uint16_t current_phase() { return g_phase.load(std::memory_order_relaxed); }
void set_current_phase(uint16_t phase) { g_phase.store(phase, std::memory_order_relaxed); }
const char *failure() { return g_failure; }
uint64_t large_threshold() { return g_options.large; }

int write_record(uint32_t type, const void *payload, size_t bytes, const void *extra, size_t extra_bytes) {
  if (!g_trace.is_open()) return HM_EINVAL;
  prim::Piece pieces[2] = {{payload, bytes}, {extra, extra_bytes}};
  int rc = write_sealed(type, pieces, extra_bytes ? 2 : 1);
  if (rc != HM_OK) write_failed();
  return rc;
}

int start(const Options &options) {
  InternalScope internal;
  install_phase_trace();  // before g_mutex: phase events take the phase lock, then the profiler's
  std::lock_guard<std::mutex> guard(g_mutex);
  if (g_active.load()) return fail(HM_EINVAL, "the profiler is already recording to %s", g_options.path.c_str());
  if (options.depth < 0 || options.depth > kMaxDepth)
    return fail(HM_EINVAL, "stack depth %d out of range (0..%d)", options.depth, kMaxDepth);
  g_options = options;
  if (!g_sites) {
    void *mem = nullptr;
    if (prim::map_anon(kSiteTableBytes, prim::kPageSize, 0, &mem) != HM_OK)
      return fail(HM_ENOMEM, "cannot map the call-site table");
    g_sites = static_cast<SiteSlot *>(mem);
    if (prim::map_anon(kSiteFrameWords * sizeof(uint64_t), prim::kPageSize, 0, &mem) != HM_OK)
      return fail(HM_ENOMEM, "cannot map the call sites' frames");
    g_site_frames = static_cast<uint64_t *>(mem);
    if (prim::map_anon(sizeof(SiteBlock), prim::kPageSize, 0, &mem) != HM_OK)
      return fail(HM_ENOMEM, "cannot map the call-site block");
    g_site_block = new (mem) SiteBlock;  // likewise
  }
  if (g_tables_used) {  // a trace before this one in the same process: its sites are not this one's
    clear_sites();
    sampling_clear();
    g_tables_used = false;
  }
  if (!g_large) g_large = new std::vector<std::pair<uintptr_t, size_t>>();
  if (sampling_start(options.sample, options.large) != HM_OK)
    return fail(HM_ENOMEM, "cannot map the table of sampled allocations");
  g_start_ns = prim::fast_now_ns();
  std::string why;
  if (options.depth > 0 && prim::stack_trace_start(&why) != HM_OK)
    return fail(HM_ENOTSUP, "cannot load libunwind for call stacks: %s", why.c_str());
  int rc = open_trace(options.path);
  if (rc != HM_OK) return rc;
  write_modules();
  start_writer();
  g_failure[0] = '\0';
  g_generation.fetch_add(1);
  set_active(true);
  return HM_OK;
}

void flush(bool all) {
  if (!all) {
    if (ThreadBuffer *b = t_buffer) {
      lock(b);
      if (b->generation == g_generation.load()) flush_locked(b, true);
      unlock(b);
    }
    return;
  }
  std::lock_guard<std::mutex> guard(g_mutex);
  for (ThreadBuffer *b = g_buffers.load(); b; b = b->next) {
    lock(b);
    if (b->generation == g_generation.load()) flush_locked(b, true);
    unlock(b);
  }
}

int stop() {
  InternalScope internal;
  if (!set_active(false) && !g_trace.is_open()) return HM_OK;
  flush(true);
  flush_sites(0);
  std::lock_guard<std::mutex> guard(g_mutex);
  write_modules();  // again: libraries loaded since the start
  write_record(trace::kEnd, nullptr, 0);
  {
    // Not while the writer writes (a block handed after the flush above is dropped: closed).
    Writer *w = g_writer.load();
    std::unique_lock<std::mutex> writing;
    if (w) writing = std::unique_lock<std::mutex>(w->write_mutex);
    g_trace.close();
  }
  g_large->clear();
  // The site and sample tables are cleared by the next start, if there is one: giving their
  // pages back at the process's exit is work the exit does anyway.
  g_tables_used = true;
  return HM_OK;
}

void before_exec(const char *program) {
  InternalScope internal;
  // A vfork child shares the parent's memory and buffers; the parent's trace is not its to write.
  if (!g_active.load() || !g_trace.is_open() || prim::process_id() != g_trace_pid) return;
  flush(true);
  flush_sites(0);
  std::lock_guard<std::mutex> guard(g_mutex);
  write_modules();
  trace::ExecRecord r{now(), static_cast<uint32_t>(program ? std::strlen(program) : 0), 0};
  write_record(trace::kExec, &r, sizeof r, program, r.path_bytes);
  // The descriptor is close-on-exec: if the exec fails, recording simply goes on.
}

void before_exit() {
  if (g_trace.is_open() && prim::process_id() == g_trace_pid) stop();
}

namespace {

__attribute__((noinline)) void record_event(trace::Op op, trace::Fn fn, const void *ptr, size_t size,
                                            const void *caller) {
  ThreadBuffer *b = buffer();
  if (!b) return;
  uint32_t site = op == trace::kAlloc ? capture_site(caller, size) : 0;
  uint64_t gen = g_generation.load(std::memory_order_relaxed);
  lock(b);
  if (b->generation != gen) {  // a buffer from before a fork or an earlier trace
    b->count = 0;
    b->generation = gen;
  }
  trace::Event &e = b->events[b->count++];
  e.time_ns = now();
  e.ptr = reinterpret_cast<uint64_t>(ptr);
  e.size = size;
  e.site = site;
  e.phase = current_phase();
  e.op = op;
  e.fn = fn;
  // Full blocks go to the writer; a thread's events a second old are written by the thread, with
  // the block it handed before if the writer has not written it: a program killed later loses at
  // most its last second of events.
  if (b->count == kEventsPerBuffer) {
    block_full(b);
    b->flushed_ns = e.time_ns;
  } else if (e.time_ns - b->flushed_ns > 1000000000ull) {
    flush_locked(b, true);  // and the block handed before, if the writer is that far behind
    b->flushed_ns = e.time_ns;
  }
  unlock(b);
}

}  // namespace

void record(trace::Op op, trace::Fn fn, const void *ptr, size_t size, const void *caller) {
  if (!active()) return;
  if (op == trace::kAlloc ? !sample_allocation(ptr, size) : !sampled_free(ptr)) return;
  record_event(op, fn, ptr, size, caller);
}

void note_large(const void *ptr, size_t size) {
  InternalScope internal;
  std::lock_guard<std::mutex> guard(g_mutex);
  if (g_large) g_large->emplace_back(reinterpret_cast<uintptr_t>(ptr), size);
}

void forget_large(const void *ptr) {
  std::lock_guard<std::mutex> guard(g_mutex);
  if (!g_large) return;
  for (auto &entry : *g_large)
    if (entry.first == reinterpret_cast<uintptr_t>(ptr)) {
      entry = g_large->back();
      g_large->pop_back();
      return;
    }
}

size_t large_object_count() {
  std::lock_guard<std::mutex> guard(g_mutex);
  return g_large ? g_large->size() : 0;
}

// Snapshot of the live large objects (for the phase records).
std::vector<std::pair<uintptr_t, size_t>> large_objects() {
  InternalScope internal;
  std::lock_guard<std::mutex> guard(g_mutex);
  return g_large ? *g_large : std::vector<std::pair<uintptr_t, size_t>>{};
}

void after_fork_in_child(bool follow) {
  // The child must never write the parent's buffers or into the parent's file.
  g_generation.fetch_add(1);
  g_buffers = nullptr;
  t_buffer = nullptr;
  g_writer = nullptr;  // the parent's thread is not the child's: the child's threads write their own blocks
  new (&g_mutex) std::mutex();
  sampling_after_fork();
  if (g_site_block) {  // another thread may have held it: the parent's sites are the parent's
    g_site_block->lock.store(0);
    g_site_block->count = g_site_block->frames = 0;
  }
  g_trace.close();  // the parent's descriptor, inherited
  if (!g_active.load()) return;
  if (!follow) {
    set_active(false);
    return;
  }
  clear_sites();  // redefined in the child's trace
  g_start_ns = prim::fast_now_ns();
  std::string path = g_options.path + "." + std::to_string(prim::process_id());
  if (open_trace(path) != HM_OK) {
    set_active(false);
    return;
  }
  write_modules();
}

int watch(void (*on_change)(int active)) {
  for (auto &w : g_watchers) {
    void (*empty)(int) = nullptr;
    if (w.load() == on_change || w.compare_exchange_strong(empty, on_change)) {
      on_change(active() ? 1 : 0);
      return HM_OK;
    }
  }
  return fail(HM_ECAPACITY, "hm_profile_watch: %d watchers at most", kWatchers);
}

int set_site_name(const char *name) {
  if (name && std::strlen(name) >= kSiteNameBytes)
    return fail(HM_EINVAL, "hm_profile_site_name: a name of %zu bytes (at most %zu)", std::strlen(name),
                kSiteNameBytes - 1);
  if (!t_site_name) {
    if (!name || !*name) return HM_OK;  // nothing named yet: nothing to clear
    t_site_name = static_cast<char *>(prim::thread_block(&g_site_name_key, kSiteNameBytes));
    if (!t_site_name) return fail(HM_ENOMEM, "hm_profile_site_name: no memory for the thread's site name");
  }
  std::snprintf(t_site_name, kSiteNameBytes, "%s", name ? name : "");
  return HM_OK;
}

}  // namespace hm::profile
