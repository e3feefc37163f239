// Streamed tile containers (Ren et al. (ICS'21) §4.3; docs/streaming.md). A sweep walks its tiles in batches
// that each fit one of three staging slots of the migration space: while the kernel computes batch
// b in slot b % 3, the helpers copy batch b+1 into the next slot and write the modified tiles of
// batch b-1 back home; a copy into a slot waits for the slot's previous batch to be written back.
// Without staging (any policy but "hetmem", or before the spaces are sized) a tile's working copy
// is its home and the whole range is one batch.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "alloc/phases.h"
#include "base/error.h"
#include "base/options.h"
#include "place/mechanisms.h"
#include "place/models.h"
#include "place/spaces.h"
#include "place/stream.h"
#include "prim/prim.h"
#include "tier/emul.h"

using namespace hm;
using namespace hm::place;

namespace {

constexpr size_t kTileAlign = 64;
size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

enum TileState : uint8_t { kIdle = 0, kAcquired = 1, kReleased = 2 };

struct Batch {
  size_t first, last;
  int slot;
  CopyJob in, out;
};

// What the helper model decided for one phase, kept for hm_helper_model().
struct PhaseDecision {
  HelperInputs inputs;
  HelperChoice choice;
  bool overridden = false;
  bool stage = true;     // false: staging is predicted to cost more than working at home
  double t_inplace = 0;  // seconds an interval's tiles took at home (0: not measured)
};

// The process's staging area and helpers: one sweep at a time.
struct Engine {
  std::mutex mutex;
  HelperPool pool;
  char *staging = nullptr;  // three slots on the fast tier, accounted in the migration space
  size_t staging_bytes = 0;
  std::vector<hm_stream_t *> streams;  // live
  hm_stream_t *sweeping = nullptr;
  std::map<std::string, PhaseDecision> decisions;
};

Engine &engine() {
  static Engine *e = new Engine();  // lives as long as the process (helpers may outlive main)
  return *e;
}

// HM_HELPERS: -1 when unset (the model decides).
int helpers_override(int *rc) {
  *rc = HM_OK;
  if (option_text(Option::kHelpers).empty()) return -1;
  const int most = std::max(8, 2 * prim::cpu_count());
  long v = 0;
  if ((*rc = option_int(Option::kHelpers, &v)) != HM_OK) return -1;
  if (v < 0 || v > most) {
    *rc = fail(HM_EINVAL, "HM_HELPERS=%ld: the helper thread count must be between 0 and %d (0: the computing "
               "threads copy)", v, most);
    return -1;
  }
  return static_cast<int>(v);
}

bool staging_wanted() {
  return streaming_mechanism().active() && spaces().sized() && fast_tier() >= 0 && capacity_tier() >= 0 &&
         spaces().budget(HM_SPACE_MIGRATION) >= 3 * prim::kPageSize;
}

}  // namespace

struct hm_stream {
  int cls = -1;   // the tiles' class, or -1 with
  int tier = -1;  // the tier they are pinned to
  std::vector<void *> home;
  std::vector<size_t> bytes;
  std::unique_ptr<std::atomic<uint8_t>[]> state;
  std::unique_ptr<std::atomic<uint8_t>[]> modified;
  std::vector<size_t> offset;  // a tile's place in its slot while staged
  // The running sweep.
  bool active = false, staged = false, measuring = false;
  std::vector<std::unique_ptr<Batch>> batches;
  size_t next_batch = 0;  // batches handed out so far
  size_t written_back = 0;  // batches whose write-back was submitted
  std::atomic<int> acquired{0};
  std::string phase;
  uint64_t handed_ns = 0;
  double t_staged = 0;  // the measured sweep's first batch, computed staged
  int forced = -1;      // HM_HELPERS, read once at the sweep's start (-1: the model decides)
  std::mutex threads_mutex;
  std::vector<int> threads_seen;  // computing threads of the measured batch
  hm_stream_stats_t stats{};

  char *slot(int s) const { return engine().staging + static_cast<size_t>(s) * (engine().staging_bytes / 3); }
  size_t slot_bytes() const { return engine().staging_bytes / 3 / prim::kPageSize * prim::kPageSize; }
};

namespace {

// Allocates the staging slots once the migration space is sized (the engine's lock held).
int ensure_staging(Engine &e) {
  if (e.staging) return HM_OK;
  const size_t bytes = spaces().budget(HM_SPACE_MIGRATION) / (3 * prim::kPageSize) * (3 * prim::kPageSize);
  if (!spaces().reserve(HM_SPACE_MIGRATION, bytes))
    return fail(HM_EBUDGET, "streaming: the migration space (%s) cannot hold its staging slots",
                format_size(spaces().budget(HM_SPACE_MIGRATION)).c_str());
  void *p = hm_tier_alloc(fast_tier(), bytes, prim::kPageSize, HM_STRICT);
  if (!p) {
    spaces().release(HM_SPACE_MIGRATION, bytes);
    return fail(HM_EBUDGET, "streaming: the fast tier refused the migration space's %s of staging slots",
                format_size(bytes).c_str());
  }
  spaces().confirm(HM_SPACE_MIGRATION);
  e.staging = static_cast<char *>(p);
  e.staging_bytes = bytes;
  return HM_OK;
}

void release_staging(Engine &e) {
  if (!e.staging) return;
  hm_free(e.staging);
  spaces().release(HM_SPACE_MIGRATION, e.staging_bytes);
  e.staging = nullptr;
  e.staging_bytes = 0;
}

// The modified tiles of a batch go home (helpers), counted.
void write_back(hm_stream_t *s, Batch &b) {
  std::vector<Copy> copies;
  if (b.slot < 0) {  // worked on at home: nothing to copy
    engine().pool.submit(&b.out, copies);
    return;
  }
  for (size_t t = b.first; t < b.last; ++t) {
    if (!s->modified[t].load(std::memory_order_acquire) || !s->bytes[t]) continue;
    copies.push_back(Copy{s->home[t], s->slot(b.slot) + s->offset[t], s->bytes[t]});
    ++s->stats.tiles_out;
    s->stats.bytes_out += s->bytes[t];
  }
  engine().pool.submit(&b.out, copies);
}

void stage_in(hm_stream_t *s, size_t index) {
  Batch &b = *s->batches[index];
  b.in.after = index >= 3 ? &s->batches[index - 3]->out : nullptr;
  std::vector<Copy> copies;
  for (size_t t = b.first; t < b.last; ++t) {
    if (!s->bytes[t]) continue;
    copies.push_back(Copy{s->slot(b.slot) + s->offset[t], s->home[t], s->bytes[t]});
    ++s->stats.tiles_in;
    s->stats.bytes_in += s->bytes[t];
  }
  engine().pool.submit(&b.in, copies);
}

// The helper model's inputs from the measured first batch of a phase's first staged sweep.
HelperInputs model_inputs(hm_stream_t *s, double t_comp) {
  HelperInputs in;
  double staged = 0, dirty = 0;
  for (const auto &b : s->batches)
    for (size_t t = b->first; t < b->last; ++t) staged += static_cast<double>(s->bytes[t]);
  const Batch &first = *s->batches[0];
  double first_bytes = 0;
  for (size_t t = first.first; t < first.last; ++t) {
    first_bytes += static_cast<double>(s->bytes[t]);
    if (s->modified[t].load()) dirty += static_cast<double>(s->bytes[t]);
  }
  in.data_in = staged / static_cast<double>(s->batches.size());
  in.data_out = first_bytes > 0 ? in.data_in * dirty / first_bytes : 0;
  // The interval's time scaled to an average batch.
  in.t_comp = first_bytes > 0 ? t_comp * in.data_in / first_bytes : t_comp;
  // The kernel reads its staged tiles and writes the modified ones at least once: the bandwidth
  // it uses is at least that (a lower bound; docs/streaming.md).
  in.bw_comp = in.t_comp > 0 ? (in.data_in + in.data_out) / in.t_comp : 0;
  in.thrd_max = prim::cpu_count();
  in.thrd_comp = std::max<int>(1, static_cast<int>(s->threads_seen.size()));
  hm_calibration_t cal;
  if (hm_calibration_get(&cal) == HM_OK && cal.threads > 0)
    in.bw_max = calibration_bw(cal.read_bw_mbps, cal.threads, in.thrd_max) * 1e6;
  Engine &e = engine();
  const CopyBandwidth &bw = copy_bandwidth(e.staging, e.staging_bytes, std::max(2, in.thrd_max + 1));
  in.bw_in = bw.in;
  in.bw_out = bw.out;
  return in;
}

double batch_bytes(const hm_stream_t *s, const Batch &b) {
  double bytes = 0;
  for (size_t t = b.first; t < b.last; ++t) bytes += static_cast<double>(s->bytes[t]);
  return bytes;
}

// The measured sweep's first batch took t_comp staged (helpers idle), its second t_home at home.
// Returns the helper count decided; *stage says whether staging pays.
int decide(hm_stream_t *s, double t_comp, double t_home, bool *stage) {
  Engine &e = engine();
  PhaseDecision d;
  d.inputs = model_inputs(s, t_comp);
  d.choice = choose_helpers(d.inputs);
  if (s->forced >= 0) {
    d.overridden = true;
    d.choice.helpers = s->forced;
  }
  const double home_bytes = s->batches.size() > 1 ? batch_bytes(s, *s->batches[1]) : 0;
  d.t_inplace = home_bytes > 0 ? t_home * d.inputs.data_in / home_bytes : 0;
  // Staging pays when the predicted interval beats working at home by a margin (the copies then
  // hide the slow tier); HM_HELPERS stages regardless (for sweeps of the helper count).
  constexpr double kMargin = 0.95;
  d.stage = s->forced >= 0 || d.t_inplace <= 0 || d.choice.t_predicted < kMargin * d.t_inplace;
  {
    std::lock_guard<std::mutex> lock(e.mutex);
    e.decisions[s->phase] = d;
  }
  log(2, "streaming: phase '%s': %d helper(s) (%s); interval %.3f ms staged, %.3f ms at home, copy %.3f ms, "
      "%.3f ms predicted: %s", s->phase.c_str(), d.choice.helpers, d.overridden ? "HM_HELPERS" : d.choice.binding.c_str(),
      d.inputs.t_comp * 1e3, d.t_inplace * 1e3, d.choice.t_cp * 1e3, d.choice.t_predicted * 1e3,
      d.stage ? "staging" : "tiles stay at home (staging would not pay)");
  *stage = d.stage;
  return d.choice.helpers;
}

int end_sweep(hm_stream_t *s) {
  if (!s->active) return HM_OK;
  Engine &e = engine();
  // The batch being computed goes home, then everything in flight completes (a batch never
  // staged has nothing to wait for).
  if (s->staged && s->next_batch > s->written_back) write_back(s, *s->batches[s->next_batch - 1]);
  for (auto &b : s->batches) {
    e.pool.wait(b->in);
    e.pool.wait(b->out);
  }
  s->stats.copy_seconds += e.pool.take_copy_seconds();
  for (size_t t = 0; t < s->home.size(); ++t) s->state[t].store(kIdle), s->modified[t].store(0);
  s->batches.clear();
  s->active = false;
  std::lock_guard<std::mutex> lock(e.mutex);
  e.sweeping = nullptr;
  return HM_OK;
}

}  // namespace

extern "C" {

namespace {

int create(hm_class_t cls, hm_tier_t tier, size_t tiles, hm_stream_t **out) {
  if (!out) return fail(HM_EINVAL, "hm_stream_create: NULL result pointer");
  *out = nullptr;
  if (tiles == 0) return fail(HM_EINVAL, "hm_stream_create: a stream needs at least one tile");
  if (cls >= 0) {
    hm_class_info_t info;
    int rc = hm_class_info(cls, &info);
    if (rc != HM_OK) return rc;
  } else {
    hm_tier_info_t info;
    int rc = hm_tier_info(tier, &info);
    if (rc != HM_OK) return rc;
  }
  auto *s = new hm_stream();
  s->cls = cls;
  s->tier = tier;
  s->home.assign(tiles, nullptr);
  s->bytes.assign(tiles, 0);
  s->offset.assign(tiles, 0);
  s->state.reset(new std::atomic<uint8_t>[tiles]);
  s->modified.reset(new std::atomic<uint8_t>[tiles]);
  for (size_t t = 0; t < tiles; ++t) s->state[t].store(kIdle), s->modified[t].store(0);
  std::lock_guard<std::mutex> lock(engine().mutex);
  engine().streams.push_back(s);
  *out = s;
  return HM_OK;
}

}  // namespace

int hm_stream_create(hm_class_t cls, size_t tiles, hm_stream_t **out) {
  if (cls < 0) return fail(HM_EINVAL, "hm_stream_create: invalid class %d", cls);
  return create(cls, -1, tiles, out);
}

int hm_stream_create_on_tier(hm_tier_t tier, size_t tiles, hm_stream_t **out) {
  int rc = hm_init();
  if (rc != HM_OK) return rc;
  return create(-1, tier, tiles, out);
}

void hm_stream_destroy(hm_stream_t *s) {
  if (!s) return;
  end_sweep(s);
  for (void *p : s->home) hm_free(p);
  Engine &e = engine();
  {
    std::lock_guard<std::mutex> lock(e.mutex);
    e.streams.erase(std::find(e.streams.begin(), e.streams.end(), s));
    if (e.streams.empty()) release_staging(e);
  }
  delete s;
}

size_t hm_stream_tiles(const hm_stream_t *s) { return s ? s->home.size() : 0; }

void *hm_stream_resize(hm_stream_t *s, size_t tile, size_t bytes) {
  if (!s || tile >= s->home.size()) {
    fail(HM_EINVAL, "hm_stream_resize: tile %zu is past the end of the stream (%zu tiles)", tile, s ? s->home.size() : 0);
    return nullptr;
  }
  if (s->active) {
    fail(HM_EBUSY, "hm_stream_resize: tile %zu cannot change size while a sweep is running", tile);
    return nullptr;
  }
  if (bytes == 0) {
    hm_free(s->home[tile]);
    s->home[tile] = nullptr;
    s->bytes[tile] = 0;
    return nullptr;
  }
  void *p = s->cls >= 0 ? hm_class_alloc(s->cls, bytes, kTileAlign, 0) : hm_tier_alloc(s->tier, bytes, kTileAlign, 0);
  if (!p) return nullptr;
  if (s->home[tile]) {
    hm_copy(p, s->home[tile], std::min(bytes, s->bytes[tile]));
    hm_free(s->home[tile]);
  }
  s->home[tile] = p;
  s->bytes[tile] = bytes;
  return p;
}

void *hm_stream_home(const hm_stream_t *s, size_t tile) { return s && tile < s->home.size() ? s->home[tile] : nullptr; }
size_t hm_stream_bytes(const hm_stream_t *s, size_t tile) { return s && tile < s->bytes.size() ? s->bytes[tile] : 0; }

int hm_stream_sweep(hm_stream_t *s, size_t first, size_t last) {
  if (!s) return fail(HM_EINVAL, "hm_stream_sweep: NULL stream");
  if (first > last || last > s->home.size())
    return fail(HM_EINVAL, "hm_stream_sweep: tiles [%zu, %zu) are not a range of the stream's %zu tiles", first, last,
                s->home.size());
  Engine &e = engine();
  {
    std::lock_guard<std::mutex> lock(e.mutex);
    if (e.sweeping)
      return fail(HM_EBUSY, "hm_stream_sweep: another sweep is running in this process (one at a time: end it with "
                  "hm_stream_next returning 0 or hm_stream_sweep_end)");
    s->phase = open_phase_name();
    auto known = e.decisions.find(s->phase);
    bool staged = s->cls >= 0 && staging_wanted() && (known == e.decisions.end() || known->second.stage);
    if (staged) {
      int rc = ensure_staging(e);
      if (rc != HM_OK) return rc;
    }
    s->staged = staged;
    e.sweeping = s;
  }
  s->batches.clear();
  s->next_batch = 0;
  s->written_back = 0;
  s->acquired.store(0);
  s->active = true;
  ++s->stats.sweeps;
  s->stats.staging = s->staged;
  if (!s->staged) {
    auto b = std::make_unique<Batch>();
    b->first = first, b->last = last, b->slot = -1;
    s->batches.push_back(std::move(b));
    return HM_OK;
  }
  // Batches: consecutive tiles that fit one slot.
  const size_t room = s->slot_bytes();
  s->stats.slot_bytes = room;
  size_t used = 0;
  for (size_t t = first; t < last; ++t) {
    const size_t need = align_up(s->bytes[t], kTileAlign);
    if (need > room) {
      s->active = false;
      std::lock_guard<std::mutex> lock(e.mutex);
      e.sweeping = nullptr;
      return fail(HM_EBUDGET, "hm_stream_sweep: tile %zu holds %s, more than a staging slot: the migration space (%s) "
                  "is three slots of %s; set HM_MIGRATION_SPACE to at least %s", t, format_size(s->bytes[t]).c_str(),
                  format_size(spaces().budget(HM_SPACE_MIGRATION)).c_str(), format_size(room).c_str(),
                  format_size(3 * need).c_str());
    }
    if (s->batches.empty() || used + need > room) {
      auto b = std::make_unique<Batch>();
      b->first = b->last = t;
      b->slot = static_cast<int>(s->batches.size() % 3);
      s->batches.push_back(std::move(b));
      used = 0;
    }
    s->offset[t] = used;
    used += need;
    s->batches.back()->last = t + 1;
  }
  if (s->batches.empty()) return HM_OK;
  int rc;
  s->forced = helpers_override(&rc);
  if (rc != HM_OK) {
    end_sweep(s);
    return rc;
  }
  // A phase's first staged sweep measures its first interval with the helpers idle (the model's
  // T_comp); later ones use the model's choice, or HM_HELPERS.
  int chosen = 1;
  {
    std::lock_guard<std::mutex> lock(e.mutex);
    auto known = e.decisions.find(s->phase);
    s->measuring = known == e.decisions.end();
    if (!s->measuring) chosen = known->second.choice.helpers;
  }
  s->threads_seen.clear();
  e.pool.set_helpers(s->forced >= 0 ? s->forced : chosen);
  s->stats.helpers = e.pool.helpers();
  stage_in(s, 0);
  if (!s->measuring && s->batches.size() > 1) stage_in(s, 1);
  return HM_OK;
}

int hm_stream_next(hm_stream_t *s, size_t *first, size_t *last) {
  if (!s || !first || !last) return fail(HM_EINVAL, "hm_stream_next: NULL argument");
  if (!s->active) return fail(HM_EINVAL, "hm_stream_next: no sweep is running (start one with hm_stream_sweep)");
  if (int held = s->acquired.load()) {
    return fail(HM_EINVAL, "hm_stream_next: %d tile(s) of the batch are still acquired; release them first", held);
  }
  Engine &e = engine();
  const uint64_t now = prim::now_ns();
  const size_t b = s->next_batch;  // the batch to hand out now
  if (b > 0) {
    const double computed = static_cast<double>(now - s->handed_ns) * 1e-9;
    s->stats.compute_seconds += computed;
    if (s->staged && s->measuring && b == 1 && s->forced >= 0) {
      // HM_HELPERS decides: batch 0 measured the model's inputs (reported), staging goes on.
      bool stage = true;
      e.pool.set_helpers(decide(s, computed, 0, &stage));
      s->stats.helpers = e.pool.helpers();
      s->measuring = false;
      if (s->batches.size() > 1) stage_in(s, 1);
    }
    if (s->staged && s->measuring && b == 1) {
      // A phase's first staged sweep: batch 0 was computed staged with the helpers idle (the
      // model's T_comp); batch 1 is computed at home, the time staging has to beat.
      s->t_staged = computed;
      write_back(s, *s->batches[0]);
      s->written_back = 1;
      // Nothing copies while the batch at home is timed: the helpers would take CPU and device
      // bandwidth from it.
      e.pool.wait(s->batches[0]->out);
      if (s->batches.size() > 1) s->batches[1]->slot = -1;
    } else if (s->staged && s->measuring && b == 2) {
      bool stage = true;
      e.pool.set_helpers(decide(s, s->t_staged, computed, &stage));
      s->stats.helpers = e.pool.helpers();
      s->measuring = false;
      s->written_back = 2;
      if (stage) {
        if (s->batches.size() > 2) stage_in(s, 2);
        if (s->batches.size() > 3) stage_in(s, 3);
      } else {
        // Staging does not pay: the rest of the sweep is one batch worked on at home.
        e.pool.wait(s->batches[0]->out);
        if (s->batches.size() > 2) {
          auto rest = std::make_unique<Batch>();
          rest->first = s->batches[2]->first, rest->last = s->batches.back()->last, rest->slot = -1;
          s->batches.resize(2);
          s->batches.push_back(std::move(rest));
        }
        s->staged = false;
      }
    } else if (s->staged) {
      write_back(s, *s->batches[b - 1]);
      s->written_back = b;
      if (b + 1 < s->batches.size()) stage_in(s, b + 1);
    }
    for (size_t t = s->batches[b - 1]->first; t < s->batches[b - 1]->last; ++t) {
      if (s->state[t].load() == kReleased && !s->modified[t].load()) ++s->stats.released_clean;
    }
  }
  if (b >= s->batches.size()) {
    end_sweep(s);
    return 0;
  }
  if (s->staged && s->batches[b]->slot >= 0) {
    const uint64_t w0 = prim::now_ns();
    e.pool.wait(s->batches[b]->in);
    s->stats.wait_seconds += static_cast<double>(prim::now_ns() - w0) * 1e-9;
  }
  ++s->stats.batches;
  *first = s->batches[b]->first;
  *last = s->batches[b]->last;
  s->next_batch = b + 1;
  s->handed_ns = prim::now_ns();
  return 1;
}

int hm_stream_acquire(hm_stream_t *s, size_t tile, void **data) {
  if (!s || !data) return fail(HM_EINVAL, "hm_stream_acquire: NULL argument");
  if (!s->active || s->next_batch == 0)
    return fail(HM_EINVAL, "hm_stream_acquire: tile %zu: no batch has been handed out (hm_stream_next)", tile);
  const Batch &b = *s->batches[s->next_batch - 1];
  if (tile < b.first || tile >= b.last)
    return fail(HM_EINVAL, "hm_stream_acquire: tile %zu is not in the current batch [%zu, %zu)", tile, b.first, b.last);
  uint8_t idle = kIdle;
  if (!s->state[tile].compare_exchange_strong(idle, kAcquired))
    return fail(HM_EINVAL, "hm_stream_acquire: tile %zu was already acquired in this sweep", tile);
  s->acquired.fetch_add(1);
  *data = b.slot >= 0 ? (s->bytes[tile] ? s->slot(b.slot) + s->offset[tile] : nullptr) : s->home[tile];
  if (s->measuring) {
    const int me = prim::thread_id();
    std::lock_guard<std::mutex> lock(s->threads_mutex);
    if (std::find(s->threads_seen.begin(), s->threads_seen.end(), me) == s->threads_seen.end())
      s->threads_seen.push_back(me);
  }
  return HM_OK;
}

int hm_stream_release(hm_stream_t *s, size_t tile, int modified) {
  if (!s) return fail(HM_EINVAL, "hm_stream_release: NULL stream");
  if (tile >= s->home.size())
    return fail(HM_EINVAL, "hm_stream_release: tile %zu is past the end of the stream (%zu tiles)", tile, s->home.size());
  uint8_t held = kAcquired;
  if (!s->active || !s->state[tile].compare_exchange_strong(held, kReleased))
    return fail(HM_EINVAL, "hm_stream_release: tile %zu is not acquired", tile);
  if (modified) s->modified[tile].store(1, std::memory_order_release);
  s->acquired.fetch_sub(1);
  return HM_OK;
}

int hm_stream_sweep_end(hm_stream_t *s) {
  if (!s) return fail(HM_EINVAL, "hm_stream_sweep_end: NULL stream");
  if (s->acquired.load())
    return fail(HM_EINVAL, "hm_stream_sweep_end: %d tile(s) are still acquired; release them first", s->acquired.load());
  return end_sweep(s);
}

int hm_stream_stats(const hm_stream_t *s, hm_stream_stats_t *stats) {
  if (!s || !stats) return fail(HM_EINVAL, "hm_stream_stats: NULL argument");
  *stats = s->stats;
  return HM_OK;
}

int hm_helper_model(const char *phase, hm_helper_model_t *m) {
  if (!phase || !m) return fail(HM_EINVAL, "hm_helper_model: NULL argument");
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  auto it = e.decisions.find(phase);
  if (it == e.decisions.end()) return fail(HM_EINVAL, "hm_helper_model: phase '%s' has had no staged sweep", phase);
  const PhaseDecision &d = it->second;
  *m = hm_helper_model_t{};
  std::snprintf(m->phase, sizeof m->phase, "%s", phase);
  m->helpers = d.choice.helpers;
  m->overridden = d.overridden;
  m->data_in = d.inputs.data_in, m->data_out = d.inputs.data_out;
  m->t_comp = d.inputs.t_comp, m->bw_comp = d.inputs.bw_comp, m->bw_max = d.inputs.bw_max;
  m->thrd_max = d.inputs.thrd_max, m->thrd_comp = d.inputs.thrd_comp;
  m->t_cp = d.choice.t_cp, m->t_predicted = d.choice.t_predicted;
  m->stage = d.stage ? 1 : 0;
  m->t_inplace = d.t_inplace;
  std::snprintf(m->binding, sizeof m->binding, "%s", d.overridden ? "HM_HELPERS" : d.choice.binding.c_str());
  return HM_OK;
}

int hm_copy_bandwidth(double *in, double *out, int max) {
  if (!in || !out || max < 1) return fail(HM_EINVAL, "hm_copy_bandwidth: NULL tables or max < 1");
  Engine &e = engine();
  const CopyBandwidth &bw = copy_bandwidth(e.staging, e.staging_bytes, std::min(max, prim::cpu_count() + 1));
  const int n = std::min<int>(max, static_cast<int>(std::min(bw.in.size(), bw.out.size())));
  for (int i = 0; i < n; ++i) in[i] = bw.in[static_cast<size_t>(i)] * 1e-6, out[i] = bw.out[static_cast<size_t>(i)] * 1e-6;
  return n;
}

}  // extern "C"

namespace hm::place {
namespace {

std::vector<std::string> helper_model_phases() {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  std::vector<std::string> out;
  for (const auto &kv : e.decisions) out.push_back(kv.first);
  return out;
}

// The live streams' counters summed.
hm_stream_stats_t streaming_totals() {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  hm_stream_stats_t t{};
  for (const hm_stream_t *s : e.streams) {
    const hm_stream_stats_t &x = s->stats;
    t.staging |= x.staging;
    t.helpers = std::max(t.helpers, x.helpers);
    t.sweeps += x.sweeps, t.batches += x.batches, t.tiles_in += x.tiles_in, t.bytes_in += x.bytes_in;
    t.tiles_out += x.tiles_out, t.bytes_out += x.bytes_out, t.released_clean += x.released_clean;
    t.wait_seconds += x.wait_seconds, t.compute_seconds += x.compute_seconds, t.copy_seconds += x.copy_seconds;
    t.slot_bytes = std::max(t.slot_bytes, x.slot_bytes);
  }
  return t;
}

class Streaming final : public Mechanism {
 public:
  const char *name() const override { return "streaming"; }
  // Forgets the helper model's decisions and the copy bandwidth measured under the previous
  // initialisation.
  void reset() override {
    Engine &e = engine();
    {
      std::lock_guard<std::mutex> lock(e.mutex);
      e.decisions.clear();
    }
    copy_bandwidth_forget();
  }
  void summarise(nlohmann::json &placement) const override {
    using nlohmann::json;
    const hm_stream_stats_t st = streaming_totals();
    json models = json::array();
    for (const std::string &phase : helper_model_phases()) {
      hm_helper_model_t m;
      if (hm_helper_model(phase.c_str(), &m) != HM_OK) continue;
      models.push_back({{"phase", m.phase}, {"helpers", m.helpers}, {"overridden", m.overridden != 0},
                        {"data_in", m.data_in}, {"data_out", m.data_out}, {"t_comp", m.t_comp},
                        {"bw_comp", m.bw_comp}, {"bw_max", m.bw_max}, {"thrd_max", m.thrd_max},
                        {"thrd_comp", m.thrd_comp}, {"t_cp", m.t_cp}, {"t_predicted", m.t_predicted},
                        {"t_inplace", m.t_inplace}, {"stage", m.stage != 0}, {"binding", m.binding}});
    }
    double bw_in[8], bw_out[8];
    const int measured = models.empty() ? 0 : hm_copy_bandwidth(bw_in, bw_out, 8);
    placement["streaming"] = {
        {"staging", st.staging != 0}, {"helpers", st.helpers}, {"sweeps", st.sweeps}, {"batches", st.batches},
        {"tiles_in", st.tiles_in}, {"bytes_in", st.bytes_in}, {"tiles_out", st.tiles_out},
        {"bytes_out", st.bytes_out}, {"released_clean", st.released_clean}, {"wait_seconds", st.wait_seconds},
        {"compute_seconds", st.compute_seconds}, {"copy_seconds", st.copy_seconds}, {"slot_bytes", st.slot_bytes},
        {"helper_models", models},
        {"copy_bw_in_mbps", std::vector<double>(bw_in, bw_in + std::max(measured, 0))},
        {"copy_bw_out_mbps", std::vector<double>(bw_out, bw_out + std::max(measured, 0))}};
  }
};

}  // namespace

uint64_t largest_streamed_tile() {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  uint64_t most = 0;
  for (const hm_stream_t *s : e.streams)
    if (s->cls >= 0)
      for (size_t b : s->bytes) most = std::max<uint64_t>(most, b);
  return most;
}

Mechanism &streaming_mechanism() { return single<Streaming>(); }

}  // namespace hm::place
