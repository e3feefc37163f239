// hetmem-bench-alloc: the allocation and copy figures of the core, each measured side by side
// with its reference in the same run and reported as a ratio.
//   1. emulation accuracy: copying 1 GiB out of emul:optane vs the modelled time
//   2. iteration arena vs glibc malloc/free for the same small sizes
//   3. hm_free latency (no tier named), median
//   4. tier-targeted allocation 4 KiB..64 MiB vs memkind (MEMKIND_DEFAULT) and glibc
//   5. tier-to-tier copy of large buffers vs memcpy
// Prints a table and writes JSON (--json PATH, default results/hetmem-bench-alloc.json in the build tree).
//   hetmem-bench-alloc [--quick] [--json PATH]
#include <hetmem/hetmem.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#ifdef HM_HAVE_MEMKIND
#include <memkind.h>
#endif

#include "harness.h"
#include "base/options.h"
#include "tier/emul.h"

namespace {

struct Row {
  std::string name, reference;
  double value, ref_value;
  std::string unit;
  std::string target;  // the requirement, in words
  bench::Ratio ratio;  // value / reference, with the spread of the rounds
  std::string verdict;  // MET, NOT MET or cannot tell (within the spread)
};
std::vector<Row> g_rows;

void add(Row r) {
  std::printf("  %-44s %12.2f %-6s vs %-26s %12.2f   ratio %7.3f (spread %.3f-%.3f)  %s (%s)\n", r.name.c_str(),
              r.value, r.unit.c_str(), r.reference.c_str(), r.ref_value, r.ratio.value, r.ratio.low, r.ratio.high,
              r.verdict.c_str(), r.target.c_str());
  g_rows.push_back(std::move(r));
}

volatile uint64_t g_sink;

// 1. Copy 1 GiB out of the emulated Optane tier; compare with DRAM copy time + modelled extra.
void emulation_accuracy(hm_tier_t dram, hm_tier_t optane, size_t bytes, int reps) {
  auto *src = static_cast<char *>(hm_tier_alloc(optane, bytes, 64, HM_STRICT));
  auto *dst = static_cast<char *>(hm_tier_alloc(dram, bytes, 64, HM_STRICT));
  auto *src_dram = static_cast<char *>(hm_tier_alloc(dram, bytes, 64, HM_STRICT));
  if (!src || !dst || !src_dram) {
    std::printf("  emulation accuracy skipped: %s\n", hm_last_error());
    return;
  }
  std::memset(src, 1, bytes);
  std::memset(dst, 2, bytes);
  std::memset(src_dram, 3, bytes);
  std::vector<double> dram_t, emul_t;
  for (int r = 0; r < reps; ++r) {
    double t0 = bench::now();
    hm_copy(dst, src_dram, bytes);
    double t1 = bench::now();
    hm_copy(dst, src, bytes);
    double t2 = bench::now();
    dram_t.push_back(t1 - t0);
    emul_t.push_back(t2 - t1);
  }
  hm_calibration_t cal;
  hm_calibration_get(&cal);
  double extra = hm::emul_extra_ns(*hm::emul_profile("optane"), cal, 1, bytes, 0, 0) * 1e-9;
  std::vector<double> modelled_t;  // each round's DRAM copy plus the charge
  for (double t : dram_t) modelled_t.push_back(t + extra);
  const double modelled = bench::median(modelled_t), measured = bench::median(emul_t);
  const bench::Ratio r = bench::ratio(emul_t, modelled_t);
  const std::string label = "copy " + hm::format_size(bytes) + " out of emul:optane (s)";
  add({label, "modelled (DRAM copy + charge)", measured, modelled, "s", "within 5% of the model in every round", r,
       bench::between(r, 0.95, 1.05)});
  double from_cal = static_cast<double>(bytes) / (cal.copy_bw_mbps[0] * 1e6) + extra;
  std::printf("    DRAM copy %.3f s + charged %.3f s; model from the calibration alone: %.3f s\n",
              bench::median(dram_t), extra, from_cal);
  hm_free(src);
  hm_free(dst);
  hm_free(src_dram);
}

// 2. Arena bump allocation + reset vs malloc + free of the same sizes.
void arena_vs_malloc(hm_tier_t fast, int rounds) {
  const size_t n = 100000;
  std::vector<size_t> sizes(n);
  std::mt19937_64 rng(3);
  for (auto &s : sizes) s = 16 + rng() % 497;
  std::vector<void *> ptrs(n);
  hm_arena_t *arena;
  hm_arena_create(fast, 64 << 20, 0, &arena);
  std::vector<double> ta, tm;
  for (int r = 0; r < rounds; ++r) {
    double t0 = bench::now();
    for (size_t i = 0; i < n; ++i) ptrs[i] = hm_arena_alloc(arena, sizes[i], 0);
    hm_arena_reset(arena);
    double t1 = bench::now();
    for (size_t i = 0; i < n; ++i) ptrs[i] = std::malloc(sizes[i]);
    g_sink = g_sink + reinterpret_cast<uintptr_t>(ptrs[n / 2]);
    for (size_t i = 0; i < n; ++i) std::free(ptrs[i]);
    double t2 = bench::now();
    ta.push_back(t1 - t0);
    tm.push_back(t2 - t1);
  }
  hm_arena_destroy(arena);
  double arena_rate = n / bench::median(ta) / 1e6, malloc_rate = n / bench::median(tm) / 1e6;
  const bench::Ratio r = bench::ratio(tm, ta);  // rates: the inverse of the times
  add({"arena alloc+reset, 16..512 B (Mops/s)", "glibc malloc+free", arena_rate, malloc_rate, "Mop/s",
       "at least 5x glibc in every round", r, bench::at_least(r, 5)});
}

// 3. hm_free without naming the tier. Steady state: each batch allocates 1000 blocks of mixed
// sizes and frees them (timed); blocks are recycled as in an iteration loop. The cold case frees
// 10^6 blocks spread over half a GiB, which mostly measures cache misses on the blocks.
double free_batches(bool use_hm, hm_tier_t fast, int batches, bool cold) {
  const size_t batch = 1000;
  std::mt19937_64 rng(5);
  std::vector<void *> ptrs(cold ? batch * static_cast<size_t>(batches) : batch);
  auto alloc = [&](size_t n) { return use_hm ? hm_tier_alloc(fast, n, 0, 0) : std::malloc(n); };
  if (cold)
    for (auto &p : ptrs) p = alloc(16 + rng() % 1009);
  std::vector<double> per_free;
  for (int b = 0; b < batches; ++b) {
    void **base = cold ? ptrs.data() + static_cast<size_t>(b) * batch : ptrs.data();
    if (!cold)
      for (size_t i = 0; i < batch; ++i) base[i] = alloc(16 + rng() % 1009);
    double t0 = bench::now();
    if (use_hm)
      for (size_t i = 0; i < batch; ++i) hm_free(base[i]);
    else
      for (size_t i = 0; i < batch; ++i) std::free(base[i]);
    per_free.push_back((bench::now() - t0) * 1e9 / batch);
  }
  return bench::median(per_free);
}

void free_latency(hm_tier_t fast, int batches) {
  // Five rounds, hm_free and glibc's free in turns: the spread of the rounds' medians.
  std::vector<double> hm_ns, libc_ns;
  for (int round = 0; round < 5; ++round) {
    hm_ns.push_back(free_batches(true, fast, batches / 5, false));
    libc_ns.push_back(free_batches(false, fast, batches / 5, false));
  }
  add({"hm_free, no tier named, 16..1 KiB (ns)", "glibc free", bench::median(hm_ns), bench::median(libc_ns), "ns",
       "under 30 ns in every round", bench::ratio(hm_ns, libc_ns), bench::within(hm_ns, 30)});
  double cold = free_batches(true, fast, batches, true), cold_libc = free_batches(false, fast, batches, true);
  std::printf("    cold (10^6 live blocks, cache misses): hm_free %.1f ns, glibc free %.1f ns\n", cold, cold_libc);
}

// 4. Allocation + first and last byte touched + free, one size at a time; the allocators take
// turns within each repetition so that all see the same machine load.
template <class Alloc, class Free>
double pair_once(size_t size, int iters, Alloc alloc, Free release) {
  double t0 = bench::now();
  for (int i = 0; i < iters; ++i) {
    auto *p = static_cast<volatile char *>(alloc(size));
    p[0] = 1;
    p[size - 1] = 1;
    release(const_cast<char *>(p));
  }
  return (bench::now() - t0) * 1e9 / iters;
}

void tier_alloc_vs_peers(hm_tier_t fast, bool quick) {
  struct Size {
    size_t bytes;
    int iters;
  } sizes[] = {{4 << 10, 200000}, {64 << 10, 100000}, {1 << 20, 20000}, {16 << 20, 2000}, {64 << 20, 500}};
  const int reps = quick ? 3 : 7;
  for (const Size &s : sizes) {
    int iters = quick ? s.iters / 10 : s.iters;
    std::vector<double> hm_t, libc_t, mk_t;
    for (int rep = 0; rep < reps; ++rep) {
      hm_t.push_back(pair_once(s.bytes, iters, [&](size_t n) { return hm_tier_alloc(fast, n, 0, 0); }, hm_free));
      libc_t.push_back(pair_once(s.bytes, iters, [](size_t n) { return std::malloc(n); }, std::free));
#ifdef HM_HAVE_MEMKIND
      // memkind_free with a NULL kind: memkind looks the kind up, as hm_free does.
      mk_t.push_back(pair_once(s.bytes, iters, [](size_t n) { return memkind_malloc(MEMKIND_DEFAULT, n); },
                               [](void *p) { memkind_free(nullptr, p); }));
#endif
    }
    double hm_ns = bench::median(hm_t), libc_ns = bench::median(libc_t);
    std::string label = "hm_tier_alloc(dram) " +
                        (s.bytes >= (1 << 20) ? std::to_string(s.bytes >> 20) + " MiB" : std::to_string(s.bytes >> 10) + " KiB") +
                        " alloc+free (ns)";
#ifdef HM_HAVE_MEMKIND
    const bench::Ratio r = bench::ratio(hm_t, mk_t);
    add({label, "memkind MEMKIND_DEFAULT", hm_ns, bench::median(mk_t), "ns", "no slower than memkind in every round", r,
         bench::at_most(r, 1.0)});
#else
    add({label, "glibc (memkind not built)", hm_ns, libc_ns, "ns", "memkind comparison unavailable",
         bench::ratio(hm_t, libc_t), "NOT MET"});
#endif
    std::printf("    glibc malloc/free of the same size: %.1f ns\n", libc_ns);
  }
}

// 5. Large copies through the tier copy table vs memcpy.
void copy_bandwidth(hm_tier_t fast, size_t bytes, int reps) {
  auto *a = static_cast<char *>(hm_tier_alloc(fast, bytes, 64, HM_STRICT));
  auto *b = static_cast<char *>(hm_tier_alloc(fast, bytes, 64, HM_STRICT));
  std::memset(a, 1, bytes);
  std::memset(b, 2, bytes);
  std::vector<double> tm, th;
  for (int r = 0; r < reps; ++r) {
    double t0 = bench::now();
    std::memcpy(b, a, bytes);
    double t1 = bench::now();
    hm_copy(b, a, bytes);
    double t2 = bench::now();
    tm.push_back(t1 - t0);
    th.push_back(t2 - t1);
  }
  double gbs_mem = bytes / bench::median(tm) / 1e9, gbs_hm = bytes / bench::median(th) / 1e9;
  const bench::Ratio r = bench::ratio(tm, th);  // bandwidths: the inverse of the times
  add({"hm_copy dram->dram 512 MiB (GB/s)", "memcpy", gbs_hm, gbs_mem, "GB/s", "at least 90% of memcpy in every round",
       r, bench::at_least(r, 0.9)});
  hm_free(a);
  hm_free(b);
}

}  // namespace

int main(int argc, char **argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  bench::Args args(argc, argv, "usage: hetmem-bench-alloc [--quick] [--json PATH]", {"--json"}, {"--quick"});
  bool quick = args.has("--quick");
  setenv("HM_TIERS", "fast=dram,capacity=emul:optane", 0);  // the user's HM_TIERS wins
  if (hm_init() != HM_OK) {
    std::fprintf(stderr, "hetmem-bench-alloc: %s\n", hm_last_error());
    return 1;
  }
  hm_tier_t dram, optane;
  if (hm_tier_find("dram", &dram) != HM_OK || hm_tier_find("emul:optane", &optane) != HM_OK) {
    std::fprintf(stderr, "hetmem-bench-alloc: needs the tiers dram and emul:optane: %s\n", hm_last_error());
    return 1;
  }
  std::printf("hetmem allocation benchmark (%s; emulated figures are marked)\n", quick ? "quick" : "full");
  emulation_accuracy(dram, optane, quick ? size_t{256} << 20 : size_t{1} << 30, quick ? 3 : 5);
  arena_vs_malloc(dram, quick ? 5 : 21);
  free_latency(dram, quick ? 200 : 1000);
  tier_alloc_vs_peers(dram, quick);
  copy_bandwidth(dram, size_t{512} << 20, quick ? 3 : 7);

  bench::Json j;
  j.open().str("benchmark", "hetmem-bench-alloc").boolean("quick", quick).open_array("results");
  for (const Row &r : g_rows)
    j.open().str("name", r.name).num("value", r.value).str("reference", r.reference).num("reference_value", r.ref_value)
        .ratio("ratio", r.ratio)
        .str("unit", r.unit).str("target", r.target).str("verdict", r.verdict).close();
  j.close().close();
  std::string path = args.get("--json", bench::results_path("hetmem-bench-alloc.json"));
  if (j.write(path) && path != "-") std::printf("results: %s\n", path.c_str());
  return 0;
}
