// A persist-point crash simulator for persistent pools.
//
// It watches a pool's flushes and fences (PersistObserver) and keeps the image the medium is
// guaranteed to hold: a line becomes durable when it was flushed and a fence followed. At every
// fence (just before it takes effect) and once more after the persist returns, it records a crash
// point: the durable image plus every line whose contents differ from it. Any of those lines may
// or may not have reached the medium (flushed and waiting for the fence, or evicted from the cache
// unflushed), and each of their 8-byte words independently (a torn line). Images built from
// subsets of those lines are written to a file, recovered, and checked by the caller.
//
// A mutation removes one flush or one fence from what the simulator counts as durable, which is
// exactly what removing it from the commit path would change; the suite asserts that each one is
// caught.
#pragma once
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "persist/pool.h"

namespace hm_test {

struct Mutation {
  const char *name = "none";
  int skip_flushes_before_fence = -1;  // the flushes issued before this fence are dropped
  int skip_fence = -1;                 // index of the fence that is dropped
};

struct CrashPoint {
  std::string where;                  // "before fence 0", ..., "after the persist"
  std::vector<char> durable;          // [0, extent) as guaranteed on the medium
  std::vector<uint64_t> lines;        // offsets of lines that differ in the cache
  std::vector<std::vector<char>> now; // their contents in the cache
  bool after = false;                 // the persist had returned: only the new version is right
};

class CrashSimulator : public hm::persist::PersistObserver {
 public:
  static constexpr uint64_t kLine = 64;

  // Starts from the pool as it is: everything in it is durable (call right after a commit).
  CrashSimulator(hm::persist::Pool &pool, Mutation mutation) : pool_(pool), mutation_(mutation) {
    durable_.assign(base(), base() + pool.capacity());
    pool_.set_observer(this);
  }
  ~CrashSimulator() override { pool_.set_observer(nullptr); }

  void on_flush(uint64_t offset, uint64_t bytes) override {
    ++flushes_;
    if (fences_ == mutation_.skip_flushes_before_fence) return;
    pending_.push_back({offset, bytes});
  }
  void on_fence() override {
    capture("before fence " + std::to_string(fences_), false);
    if (fences_++ == mutation_.skip_fence) return;
    for (const auto &r : pending_) {
      uint64_t lo = r.first & ~(kLine - 1), hi = (r.first + r.second + kLine - 1) & ~(kLine - 1);
      std::memcpy(durable_.data() + lo, base() + lo, hi - lo);
    }
    pending_.clear();
  }
  // The last crash point: after the persist returned.
  void finish() {
    capture("after the persist", true);
    pool_.set_observer(nullptr);
  }

  const std::vector<CrashPoint> &points() const { return points_; }

 private:
  const char *base() const { return pool_.at<char>(0); }

  void capture(const std::string &where, bool after) {
    CrashPoint p;
    p.where = where;
    p.after = after;
    uint64_t extent = (pool_.top() + kLine - 1) & ~(kLine - 1);
    p.durable.assign(durable_.begin(), durable_.begin() + extent);
    for (uint64_t off = 0; off < extent; off += kLine) {
      if (std::memcmp(base() + off, durable_.data() + off, kLine) != 0) {
        p.lines.push_back(off);
        p.now.emplace_back(base() + off, base() + off + kLine);
      }
    }
    points_.push_back(std::move(p));
  }

  hm::persist::Pool &pool_;
  Mutation mutation_;
  std::vector<char> durable_;
  std::vector<std::pair<uint64_t, uint64_t>> pending_;  // flushed, waiting for a fence
  int flushes_ = 0, fences_ = 0;
  std::vector<CrashPoint> points_;
};

struct CrashReport {
  int images = 0;
  int bad = 0;
  std::string first_bad;  // where, which image, and why
};

// Builds crash images for every point and calls `check(path, after)`; it returns "" when the
// recovered pool is right, else why not. Up to `exhaustive_lines` differing lines every subset is
// tried; above, `samples` random subsets plus none and all. `torn` images choose each 8-byte word
// of the differing lines independently.
inline CrashReport replay(const std::vector<CrashPoint> &points, const std::string &path, uint64_t capacity,
                          const std::function<std::string(const std::string &, bool)> &check,
                          int exhaustive_lines = 10, int samples = 48, int torn = 16, unsigned seed = 1) {
  CrashReport report;
  std::mt19937_64 rng(seed);
  auto try_image = [&](const CrashPoint &p, const std::string &what,
                       const std::function<bool(size_t line, int word)> &take_new) {
    std::vector<char> image = p.durable;
    for (size_t i = 0; i < p.lines.size(); ++i)
      for (int w = 0; w < 8; ++w)
        if (take_new(i, w)) std::memcpy(image.data() + p.lines[i] + 8 * w, p.now[i].data() + 8 * w, 8);
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
    bool written = fd >= 0 && pwrite(fd, image.data(), image.size(), 0) == static_cast<ssize_t>(image.size()) &&
                   ftruncate(fd, static_cast<off_t>(capacity)) == 0;
    if (fd >= 0) close(fd);
    std::string why = written ? check(path, p.after) : "the image could not be written";
    ++report.images;
    if (!why.empty() && report.bad++ == 0) report.first_bad = p.where + ", " + what + ": " + why;
  };
  for (const CrashPoint &p : points) {
    const size_t n = p.lines.size();
    if (n <= static_cast<size_t>(exhaustive_lines)) {
      for (uint64_t mask = 0; mask < (uint64_t{1} << n); ++mask)
        try_image(p, "lines " + std::to_string(mask) + " of " + std::to_string(n),
                  [&](size_t i, int) { return (mask >> i) & 1; });
    } else {
      try_image(p, "none of " + std::to_string(n) + " lines", [](size_t, int) { return false; });
      try_image(p, "all of " + std::to_string(n) + " lines", [](size_t, int) { return true; });
      for (int s = 0; s < samples; ++s) {
        const double keep = (s % 3 + 0.5) / 3;  // few, half, most of the lines reached the medium
        std::vector<bool> pick(n);
        for (size_t i = 0; i < n; ++i) pick[i] = std::uniform_real_distribution<double>(0, 1)(rng) < keep;
        try_image(p, "random subset " + std::to_string(s), [&](size_t i, int) { return pick[i]; });
      }
    }
    for (int t = 0; t < torn && n > 0; ++t) {
      std::vector<uint8_t> words(n);
      for (auto &w : words) w = static_cast<uint8_t>(rng());
      try_image(p, "torn image " + std::to_string(t), [&](size_t i, int w) { return (words[i] >> w) & 1; });
    }
  }
  unlink(path.c_str());
  return report;
}

}  // namespace hm_test
