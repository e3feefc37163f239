// Multithreaded stress: 2 threads, N mixed operations in all (allocate, free, realloc, free by the
// other thread) over two tiers, with data checks; the accounting must be exact at the end.
// Usage: test_stress [operations]   (default 1000000). Exit status 0 on success.
#include <hetmem/hetmem.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

namespace {

struct Block {
  uint64_t *p;
  size_t size;
  uint64_t tag;
};

std::mutex g_handoff_mutex;
std::vector<Block> g_handoff;  // blocks one thread allocated and the other frees
std::atomic<int> g_errors{0};

size_t pick_size(std::mt19937_64 &rng) {
  uint64_t r = rng() % 1000;
  if (r < 700) return 8 + rng() % 256;          // small
  if (r < 950) return 256 + rng() % 32768;      // up to the largest class
  if (r < 995) return 32768 + rng() % 900000;   // medium
  return (1 << 20) + rng() % (3 << 20);         // large
}

bool check(const Block &b) {
  return b.p[0] == b.tag && b.p[b.size / 8 - 1] == ~b.tag;
}

void stamp(Block &b) {
  b.p[0] = b.tag;
  b.p[b.size / 8 - 1] = ~b.tag;
}

void worker(int id, long ops, hm_tier_t tiers[2]) {
  std::mt19937_64 rng(1234 + id);
  std::vector<Block> live;
  for (long i = 0; i < ops; ++i) {
    uint64_t r = rng() % 100;
    if (r < 50 || live.empty()) {
      size_t size = (pick_size(rng) + 15) & ~size_t{15};
      Block b{static_cast<uint64_t *>(hm_tier_alloc(tiers[rng() & 1], size, 0, HM_PREFERRED)), size,
              rng() | 1};
      if (!b.p) {
        std::fprintf(stderr, "allocation failed: %s\n", hm_last_error());
        ++g_errors;
        return;
      }
      stamp(b);
      live.push_back(b);
    } else if (r < 85) {
      size_t k = rng() % live.size();
      if (!check(live[k])) ++g_errors;
      hm_free(live[k].p);
      live[k] = live.back();
      live.pop_back();
    } else if (r < 95) {
      size_t k = rng() % live.size();
      Block &b = live[k];
      if (!check(b)) ++g_errors;
      size_t size = (pick_size(rng) + 15) & ~size_t{15};
      auto *np = static_cast<uint64_t *>(hm_realloc(b.p, size));
      if (!np) {
        ++g_errors;
        return;
      }
      if (np[0] != b.tag) ++g_errors;
      b.p = np;
      b.size = size;
      stamp(b);
    } else {
      size_t k = rng() % live.size();
      std::lock_guard<std::mutex> lock(g_handoff_mutex);
      g_handoff.push_back(live[k]);
      live[k] = live.back();
      live.pop_back();
      if (g_handoff.size() > 64) {  // free what the other thread handed over
        for (size_t j = 0; j < g_handoff.size() / 2; ++j) {
          if (!check(g_handoff[j])) ++g_errors;
          hm_free(g_handoff[j].p);
        }
        g_handoff.erase(g_handoff.begin(), g_handoff.begin() + static_cast<long>(g_handoff.size() / 2));
      }
    }
  }
  for (const Block &b : live) {
    if (!check(b)) ++g_errors;
    hm_free(b.p);
  }
}

}  // namespace

int main(int argc, char **argv) {
  long ops = argc > 1 ? std::atol(argv[1]) : 1000000;
  if (ops <= 0) {
    std::fprintf(stderr, "usage: %s [operations > 0]\n", argv[0]);
    return 2;
  }
  setenv("HM_TIERS", "fast=dram,capacity=emul:cxl", 1);
  setenv("HM_EMUL", "0", 1);  // accounting, not timing, is under test
  if (hm_init() != HM_OK) {
    std::fprintf(stderr, "hm_init: %s\n", hm_last_error());
    return 1;
  }
  hm_tier_t tiers[2];
  hm_role_tier(HM_FAST, &tiers[0]);
  hm_role_tier(HM_CAPACITY, &tiers[1]);
  std::thread a(worker, 0, ops / 2, tiers), b(worker, 1, ops - ops / 2, tiers);
  a.join();
  b.join();
  for (const Block &blk : g_handoff) {
    if (!check(blk)) ++g_errors;
    hm_free(blk.p);
  }
  g_handoff.clear();
  g_handoff.shrink_to_fit();
  int bad = 0;
  for (hm_tier_t t : tiers) {
    hm_tier_stats_t s;
    hm_tier_stats(t, &s);
    std::printf("tier %d: allocs %llu frees %llu in_use %llu high_water %llu reserved %llu\n", t,
                (unsigned long long)s.allocs, (unsigned long long)s.frees, (unsigned long long)s.in_use,
                (unsigned long long)s.high_water, (unsigned long long)s.reserved);
    if (s.in_use != 0 || s.allocs != s.frees) ++bad;
  }
  hm_finalize();
  if (g_errors || bad) {
    std::printf("stress: FAILED (%d data errors, %d tiers with inexact accounting)\n", g_errors.load(), bad);
    return 1;
  }
  std::printf("stress: %ld operations on 2 threads, accounting exact\n", ops);
  return 0;
}
