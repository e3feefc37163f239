// Helpers shared by the test suites: reconfigure hetmem with a given HM_TIERS and temporary pool
// files, and read accounting.
#pragma once
#include <gtest/gtest.h>
#include <hetmem/hetmem.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace hm_test {

// Every placement policy the library has, in its registry's order: what "under every policy" loops
// over, so that a new policy is tested without touching the tests.
inline std::vector<std::string> policies() {
  std::vector<std::string> out;
  for (int i = 0; i < hm_policy_count(); ++i) {
    const char *name = nullptr, *doc = nullptr;
    if (hm_policy_info(i, &name, &doc) == HM_OK) out.emplace_back(name);
  }
  return out;
}

// The smaps block (header line and fields) of the mapping that contains addr; "" if none does.
inline std::string smaps_of(const void *addr) {
  std::ifstream in("/proc/self/smaps");
  std::string line, block;
  bool inside = false;
  const auto a = reinterpret_cast<uintptr_t>(addr);
  while (std::getline(in, line)) {
    unsigned long lo, hi;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2) {  // a mapping's header line
      if (inside) break;
      inside = a >= lo && a < hi;
    }
    if (inside) block += line + "\n";
  }
  return block;
}

inline std::string temp_path(const std::string &stem) {
  const char *dir = std::getenv("TMPDIR");
  return std::string(dir && *dir ? dir : "/tmp") + "/hetmem-test-" + stem + "-" + std::to_string(getpid());
}

// Re-initialises hetmem with HM_TIERS=`tiers` (and nothing else from a previous test).
inline int configure(const std::string &tiers, const char *extra_name = nullptr, const char *extra_value = nullptr) {
  hm_finalize();
  for (const char *v : {"HM_TIERS", "HM_FAST_BUDGET", "HM_CAPACITY_BUDGET", "HM_PERSISTENT_BUDGET",
                        "HM_HUGETLB_POOL", "HM_HUGETLB_1G", "HM_DEFAULT_ROLE", "HM_POOL_SIZE", "HM_PROFILE_SAMPLE"})
    unsetenv(v);
  if (!tiers.empty()) setenv("HM_TIERS", tiers.c_str(), 1);
  if (extra_name) setenv(extra_name, extra_value, 1);
  return hm_init();
}

inline hm_tier_stats_t stats(hm_tier_t t) {
  hm_tier_stats_t s{};
  EXPECT_EQ(hm_tier_stats(t, &s), HM_OK);
  return s;
}

inline hm_tier_t tier(const char *name) {
  hm_tier_t t = -1;
  EXPECT_EQ(hm_tier_find(name, &t), HM_OK) << hm_last_error();
  return t;
}

// A file's bytes, whole ("" when it cannot be read), and a file replaced by `data`.
inline std::vector<char> read_file(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

inline void write_file(const std::string &path, const std::vector<char> &data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

}  // namespace hm_test
