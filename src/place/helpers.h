// The streaming engine's helper threads (helpers.cpp; docs/streaming.md): they copy tiles between
// their homes and the migration space; and the copy bandwidth the helper model uses.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

namespace hm::place {

// A set of copies that completes as a whole; `after`, when set, must complete before any of its
// copies starts (a copy into a staging slot waits for the slot's previous batch to be written back).
struct CopyJob {
  int left = 0;  // copies not finished (guarded by the pool's mutex)
  const CopyJob *after = nullptr;
};

struct Copy {
  void *dst;
  const void *src;
  size_t bytes;
};

// Helper threads (started on demand, kept for the life of the process) taking copies in order.
// With 0 helpers, submit() copies on the calling thread before returning.
class HelperPool {
 public:
  ~HelperPool();
  void set_helpers(int n);
  int helpers() const { return active_; }
  void submit(CopyJob *job, const std::vector<Copy> &copies);
  void wait(const CopyJob &job);
  // Seconds the helpers spent copying since the last call (and resets the count).
  double take_copy_seconds();

 private:
  struct Task {
    CopyJob *job;
    Copy copy;
  };
  void run(int index);
  void finish(CopyJob *job, uint64_t ns);
  std::mutex mutex_;
  std::condition_variable work_, done_;
  std::deque<Task> queue_;
  std::vector<std::thread> threads_;
  int active_ = 0;
  bool stop_ = false;
  uint64_t copy_ns_ = 0;
};

// Copy bandwidth in bytes/s with 1..n threads between the fast and the capacity tier, through
// hm_copy (so emulated charges count): `in` capacity -> fast, `out` fast -> capacity. Measured over
// `fast_buf` (bytes on the fast tier, which the caller owns) against a buffer of the same size on
// the capacity tier, once per machine and tier set, then read from the cache file next to the
// calibration. Empty tables when either tier is missing.
struct CopyBandwidth {
  std::vector<double> in, out;
};
const CopyBandwidth &copy_bandwidth(void *fast_buf, size_t bytes, int max_threads);
// Drops what was measured or read (a new initialisation of the library).
void copy_bandwidth_forget();

}  // namespace hm::place
