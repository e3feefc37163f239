// hetmem-bench-stream: how fast the streaming engine stages tiles, against the machine's own
// non-temporal copy bandwidth with the same number of threads (the target: at least 90%).
// Emulation off (HM_EMUL=0) so that both sides are the machine's copies, not the emulated device;
// on real tiers (HM_TIERS naming a NUMA capacity tier) the copies are real cross-node copies.
#include <hetmem/hetmem.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "base/options.h"
#include "harness.h"

namespace {

// Non-temporal copy bandwidth with `threads` threads, bytes copied per second (hm_copy between two
// buffers of the capacity and fast tiers, each thread its share, large enough for streaming stores).
double nt_copy(char *dst, const char *src, size_t bytes, int threads) {
  std::vector<double> rates;
  const size_t share = bytes / static_cast<size_t>(threads);
  for (int rep = 0; rep < 5; ++rep) {
    const double t0 = bench::now();
    std::vector<std::thread> team;
    for (int i = 0; i < threads; ++i) team.emplace_back([&, i] { hm_copy(dst + i * share, src + i * share, share); });
    for (auto &t : team) t.join();
    rates.push_back(static_cast<double>(share) * threads / (bench::now() - t0));
  }
  return bench::median(rates);
}

}  // namespace

int main(int argc, char **argv) {
  bench::Args args(argc, argv, "usage: hetmem-bench-stream [--json FILE] [--mib N] [--tile-kib K] [--max-helpers H]",
                   {"--json", "--mib", "--tile-kib", "--max-helpers"}, {});
  const std::string json_path = args.get("--json", bench::results_path("hetmem-bench-stream.json"));
  const size_t mib = std::strtoul(args.get("--mib", "256").c_str(), nullptr, 10);
  const int max_helpers = std::atoi(args.get("--max-helpers", "2").c_str());
  if (mib < 16 || max_helpers < 1) {
    std::fprintf(stderr, "hetmem-bench-stream: --mib must be at least 16 and --max-helpers at least 1\n");
    return 2;
  }
  setenv("HM_EMUL", "0", 1);
  setenv("HM_POLICY", "hetmem", 1);
  setenv("HM_MIGRATION_SPACE", "48M", 1);
  if (!std::getenv("HM_TIERS")) setenv("HM_TIERS", "capacity=emul:optane", 1);
  if (hm_init() != HM_OK) {
    std::fprintf(stderr, "hetmem-bench-stream: %s\n", hm_last_error());
    return 2;
  }
  hm_tier_t fast, cap;
  hm_role_tier(HM_FAST, &fast);
  if (hm_role_tier(HM_CAPACITY, &cap) != HM_OK) {
    std::fprintf(stderr, "hetmem-bench-stream: no capacity tier (HM_TIERS)\n");
    return 2;
  }
  hm_tier_info_t ci;
  hm_tier_info(cap, &ci);
  const bool emulated = ci.kind == HM_KIND_EMUL;

  // Tiles of 256 KiB by default (a PIC tile of 4096 particles), `mib` MiB in all.
  const size_t kTile = std::strtoul(args.get("--tile-kib", "256").c_str(), nullptr, 10) << 10;
  if (kTile < 4096 || kTile > (size_t{8} << 20)) {
    std::fprintf(stderr, "hetmem-bench-stream: --tile-kib must be from 4 to 8192\n");
    return 2;
  }
  const size_t tiles = mib * (1 << 20) / kTile;
  hm_class_t cls;
  hm_stream_t *s = nullptr;
  if (hm_class_define("bench.tiles", HM_CLASS_STREAMING, 0, &cls) != HM_OK || hm_stream_create(cls, tiles, &s) != HM_OK) {
    std::fprintf(stderr, "hetmem-bench-stream: %s\n", hm_last_error());
    return 1;
  }
  for (size_t t = 0; t < tiles; ++t) std::memset(hm_stream_resize(s, t, kTile), static_cast<int>(t), kTile);
  hm_iteration_next();  // the observed iteration ends: the spaces are sized, sweeps stage

  // The machine's non-temporal copies on the same pair of tiers, 64 MiB at a time.
  const size_t nt_bytes = size_t{64} << 20;
  auto *a = static_cast<char *>(hm_tier_alloc(cap, nt_bytes, 4096, HM_STRICT));
  auto *b = static_cast<char *>(hm_tier_alloc(fast, nt_bytes, 4096, HM_STRICT));
  if (!a || !b) {
    std::fprintf(stderr, "hetmem-bench-stream: %s\n", hm_last_error());
    return 1;
  }
  std::memset(a, 1, nt_bytes);
  std::memset(b, 2, nt_bytes);

  bench::Json j;
  j.open().str("benchmark", "hetmem-bench-stream").str("capacity_tier", ci.name).boolean("emulated", emulated)
      .boolean("emulation_charges", false).num("bytes", static_cast<double>(tiles * kTile)).num("tile_bytes", static_cast<double>(kTile)).open_array("helpers");
  std::printf("hetmem-bench-stream: %zu tiles of %zu KiB (%zu MiB) between %s and the fast tier, emulation off%s\n",
              tiles, kTile >> 10, mib, ci.name, emulated ? " (an emulated tier's memory is DRAM: these are DRAM copies)" : "");
  std::printf("%-8s %16s %16s %10s %13s %8s  %s\n", "helpers", "staging MB/s", "nt copy MB/s", "ratio", "spread", "busy",
              "target >= 0.90 in every round");
  bool all_met = true;
  for (int h = 1; h <= max_helpers; ++h) {
    hm::option_set("HM_HELPERS", std::to_string(h));
    std::vector<double> rates, busy, nts;  // busy: the helpers' share of the sweep spent copying
    for (int rep = 0; rep < 5; ++rep) {
      hm_stream_stats_t before, after;
      hm_stream_stats(s, &before);
      const double t0 = bench::now();
      hm_stream_sweep(s, 0, tiles);
      size_t first, last;
      while (hm_stream_next(s, &first, &last) == 1)
        for (size_t t = first; t < last; ++t) {
          void *p;
          hm_stream_acquire(s, t, &p);
          hm_stream_release(s, t, 1);
        }
      const double seconds = bench::now() - t0;
      hm_stream_stats(s, &after);
      rates.push_back(static_cast<double>(after.bytes_in - before.bytes_in + after.bytes_out - before.bytes_out) / seconds);
      busy.push_back((after.copy_seconds - before.copy_seconds) / (seconds * h));
      // In and out run at once on the helpers: the reference is h threads copying, counted once;
      // measured in the same round, so the ratio's spread is the rounds'.
      nts.push_back(0.5 * (nt_copy(b, a, nt_bytes, h) + nt_copy(a, b, nt_bytes, h)));
    }
    const double staging = bench::median(rates), nt = bench::median(nts);
    const bench::Ratio ratio = bench::ratio(rates, nts);
    const std::string verdict = bench::at_least(ratio, 0.90);
    all_met = all_met && verdict == "MET";
    std::printf("%-8d %16.0f %16.0f %9.3fx %13s %7.0f%%  %s\n", h, staging / 1e6, nt / 1e6, ratio.value,
                (std::to_string(ratio.low).substr(0, 5) + "-" + std::to_string(ratio.high).substr(0, 5)).c_str(),
                100 * bench::median(busy), verdict.c_str());
    j.open().num("helpers", h).num("staging_mbps", staging / 1e6).num("nt_copy_mbps", nt / 1e6).ratio("ratio", ratio)
        .num("helper_busy", bench::median(busy))
        .str("verdict", verdict).close();
  }
  j.close().boolean("all_met", all_met).close();
  hm_free(a);
  hm_free(b);
  hm_stream_destroy(s);
  if (!j.write(json_path)) {
    std::fprintf(stderr, "hetmem-bench-stream: cannot write %s\n", json_path.c_str());
    return 1;
  }
  std::printf("results: %s\n", json_path.c_str());
  return 0;
}
