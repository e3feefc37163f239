// The streaming engine (stream.cpp; its C API is stream_api.cpp): a stream's tiles and its
// running sweep, the process's staging area and helpers, and the steps of a sweep. Internal to
// place/.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "hetmem/hetmem.h"
#include "place/models.h"
#include "place/helpers.h"
#include "prim/prim.h"

namespace hm::place {


constexpr size_t kTileAlign = 64;
inline size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

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
  bool stage = true;     // false: staging is predicted, or was seen, to cost more than working at home
  bool checked = false;  // a staged sweep after the decision was timed against working at home
  double t_staged_seen = 0;  // seconds an interval took in that sweep (0: not timed)
  double t_inplace = 0;  // seconds an interval's tiles took at home (0: not measured)
  double t_home_batch = 0;  // the measuring sweep's second batch alone, scaled to an interval
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
  // What staging_declined() answers, kept beside the decisions (under the lock) so that it is read
  // without the lock: static placement asks between iterations, under the phase lock, which a
  // sweep takes while it holds this one.
  std::atomic<bool> declined{false};
  // Once declined everywhere, the sweep that declined frees the staging slots as it ends and gives
  // the migration space's budget to the free space (static placement then fills it between two
  // iterations).
  std::atomic<bool> migration_returned{false};
  void decisions_changed() {
    bool all_home = !decisions.empty();
    for (const auto &kv : decisions) all_home = all_home && !kv.second.stage;
    declined.store(all_home, std::memory_order_release);
  }
};

Engine &engine();

// HM_HELPERS: -1 when unset (the model decides); *rc says why a set value is refused.
int helpers_override(int *rc);
// Whether a sweep stages its batches: under a policy that streams, once the spaces are sized.
bool staging_wanted();
// Whether the helper model has decided for at least one phase and, for every phase it decided,
// that tiles stay at home (declined, or withdrawn after a staged sweep was timed).
bool staging_declined();
// Whether, staging declined everywhere, the migration space has been given to the free space.
bool migration_returned();
// Allocates the staging slots once the migration space is sized (the engine's lock held).
int ensure_staging(Engine &e);
void release_staging(Engine &e);
// The modified tiles of a batch go home (helpers), counted.
void write_back(hm_stream_t *s, Batch &b);
void stage_in(hm_stream_t *s, size_t index);
// The measured sweep's first batch took t_comp staged (helpers idle), its second t_home at home.
// Returns the helper count decided; *stage says whether staging is predicted to pay.
int decide(hm_stream_t *s, double t_comp, double t_home, bool *stage);
// The rest of the measuring sweep (its third batch on, worked on at home as one batch) took
// `seconds`: the interval at home becomes that, and the decision is taken again against it.
void confirm_decision(hm_stream_t *s, double seconds);
int end_sweep(hm_stream_t *s);
// Staging declined in every phase and no sweep running (the engine's lock held): the staging
// slots go and the migration space's room returns to the free space, once, for static placement
// to fill between two iterations.
void return_migration_if_declined(Engine &e);

// The largest tile of the live streams of a class (the migration space's default follows it).
uint64_t largest_streamed_tile();

}  // namespace hm::place

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
  std::vector<std::unique_ptr<hm::place::Batch>> batches;
  size_t next_batch = 0;  // batches handed out so far
  size_t written_back = 0;  // batches whose write-back was submitted
  std::atomic<int> acquired{0};
  std::string phase;
  uint64_t handed_ns = 0;
  double t_staged = 0;  // the measured sweep's first batch, computed staged
  uint64_t sweep_ns = 0;         // when the sweep started
  bool decided_before = false;   // the sweep started with the phase's decision made (not measuring)
  bool timing_home = false;      // the measuring sweep's rest is being worked on at home, timed
  int forced = -1;      // HM_HELPERS, read once at the sweep's start (-1: the model decides)
  std::mutex threads_mutex;
  std::vector<int> threads_seen;  // computing threads of the measured batch
  hm_stream_stats_t stats{};

  char *slot(int s) const {
    const hm::place::Engine &e = hm::place::engine();
    return e.staging + static_cast<size_t>(s) * (e.staging_bytes / 3);
  }
  size_t slot_bytes() const {
    return hm::place::engine().staging_bytes / 3 / hm::prim::kPageSize * hm::prim::kPageSize;
  }
};
