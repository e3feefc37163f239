// The C API of streamed tile containers (hm_stream_*, hm_helper_model, hm_copy_bandwidth;
// docs/streaming.md) over the engine in stream.cpp.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "alloc/phases.h"
#include "base/error.h"
#include "base/options.h"
#include "place/spaces.h"
#include "place/stream.h"
#include "prim/prim.h"
#include "tier/emul.h"

using namespace hm;
using namespace hm::place;

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
    // A fast tier that cannot hold the staging slots (a budget below the spaces' minimum, a full
    // tier) leaves this sweep at home, as a declined one: the program runs on, unstaged, and the
    // reason is the last error (HM_VERBOSE shows it).
    if (staged && ensure_staging(e) != HM_OK) staged = false;
    s->staged = staged;
    e.sweeping = s;
  }
  s->batches.clear();
  s->next_batch = 0;
  s->written_back = 0;
  s->timing_home = false;
  s->sweep_ns = prim::now_ns();
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
    s->decided_before = !s->measuring;
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
      // Whatever the model predicts, the rest of this sweep is one batch worked on at home and
      // timed: the phase at home as a sweep that does not stage runs it, which the decision is
      // then confirmed against (confirm_decision) and a staged sweep checked against.
      e.pool.wait(s->batches[0]->out);
      if (s->batches.size() > 2) {
        auto rest = std::make_unique<Batch>();
        rest->first = s->batches[2]->first, rest->last = s->batches.back()->last, rest->slot = -1;
        s->batches.resize(2);
        s->batches.push_back(std::move(rest));
        s->timing_home = true;
      }
      s->staged = false;
    } else if (s->timing_home && b == 3) {
      s->timing_home = false;
      confirm_decision(s, computed);
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
  m->t_staged_seen = d.t_staged_seen;
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
