#include "tier/emul.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <string>

#include "base/error.h"
#include "base/options.h"
#include "prim/prim.h"
#include "tier/calibrate.h"

namespace hm {
namespace {

// Fixed ratios to DRAM from published measurements (DESIGN.md); never tuned afterwards.
const EmulProfile kProfiles[] = {
    {"optane", 2.2, 3.5, 0.37, 0.14,
     "Optane DCPMM App Direct vs DRAM (Christgau (2021), from Peng et al. 2019)"},
    {"cxl", 2.0, 2.0, 0.50, 0.50, "CXL Type-3 expander: +70-90 ns over local DRAM (Pond), 140-410 ns (Melody)"},
    {"nvbm", 100.0 / 60.0, 100.0 / 60.0, 1.0, 1.0, "NVBM of Nguyen et al. (SC'17) Table 2: per-access latency only"},
    // Everything the emulator does except waiting: measures the bookkeeping's own cost.
    {"dram", 1.0, 1.0, 1.0, 1.0, "DRAM's own figures: the emulator's bookkeeping runs, nothing is charged"},
};
constexpr int64_t kStaleSeconds = 30 * 24 * 3600;

std::atomic<bool> g_enabled{true};
std::atomic<bool> g_paused{false};  // emul_pause_waits
std::atomic<bool> g_cal_ready{false};
std::mutex g_cal_mutex;
hm_calibration_t g_cal;

std::string cpu_model() {
  std::string cpuinfo, model = "unknown";
  if (prim::read_text("/proc/cpuinfo", &cpuinfo)) {
    auto pos = cpuinfo.find("model name");
    if (pos != std::string::npos) {
      auto colon = cpuinfo.find(':', pos), eol = cpuinfo.find('\n', pos);
      if (colon != std::string::npos && eol != std::string::npos) model = cpuinfo.substr(colon + 2, eol - colon - 2);
    }
  }
  return model;
}

// What makes a calibration another machine's: the CPU model and the number of CPUs. (Not the
// memory size: virtual machines grow and shrink their nodes, and the bandwidth stays the same.)
std::string machine_key() { return cpu_model() + "|cpus=" + std::to_string(prim::cpu_count()); }

// Files written by earlier versions append "|node0=...G" to the key: still this machine's.
bool same_machine(const std::string &recorded) {
  std::string key = machine_key();
  return recorded.compare(0, key.size(), key) == 0 && (recorded.size() == key.size() || recorded[key.size()] == '|');
}

std::string cache_path() {
  const std::string &opt = option_text(Option::kCalibration);
  if (!opt.empty()) return opt;
  const char *xdg = prim::env("XDG_CACHE_HOME");
  const char *home = prim::env("HOME");
  std::string dir = xdg && *xdg ? std::string(xdg) : std::string(home && *home ? home : "/tmp") + "/.cache";
  return dir + "/hetmem/calibration";
}

void write_row(std::string &out, const char *key, const double *v, int n) {
  out += std::string(key) + " =";
  for (int i = 0; i < n; ++i) out += " " + prim::format_number(v[i]);
  out += '\n';
}

bool parse_row(const std::string &line, const char *key, double *v, int *n) {
  size_t klen = std::strlen(key);
  if (line.compare(0, klen, key) != 0 || line.size() <= klen + 2 || line[klen] != ' ') return false;
  int i = 0;
  for (const std::string &word : prim::words(line.substr(line.find('=') + 1))) {
    double x = 0;
    if (i == 64 || !prim::parse_number(word, &x)) break;
    v[i++] = x;
  }
  *n = i;
  return i > 0;
}

bool load_cache(const std::string &path, hm_calibration_t *cal) {
  std::string text;
  if (!prim::read_text(path, &text)) return false;
  std::string machine;
  int nr = 0, nw = 0, nc = 0, nl = 0;
  double lat[64];
  bool header = false;
  cal->method = HM_CALIBRATION_UNKNOWN;
  for (const std::string &line : prim::split(text, '\n')) {
    if (line == "# hetmem calibration v1" || line == "# hetmem calibration v2") header = true;
    if (line.rfind("machine = ", 0) == 0) machine = line.substr(10);
    if (line == "method = quick") cal->method = HM_CALIBRATION_QUICK;
    if (line == "method = full") cal->method = HM_CALIBRATION_FULL;
    if (line.rfind("measured_unix = ", 0) == 0) cal->measured_unix = std::strtoll(line.c_str() + 16, nullptr, 10);
    if (line.rfind("cpu = ", 0) == 0) std::snprintf(cal->cpu, sizeof cal->cpu, "%s", line.c_str() + 6);
    parse_row(line, "read_bw_mbps", cal->read_bw_mbps, &nr);
    parse_row(line, "write_bw_mbps", cal->write_bw_mbps, &nw);
    parse_row(line, "copy_bw_mbps", cal->copy_bw_mbps, &nc);
    parse_row(line, "latency_ns", lat, &nl);
    if (line.rfind("gather_ns = ", 0) == 0) cal->gather_ns = std::strtod(line.c_str() + 12, nullptr);
  }
  if (!header || !same_machine(machine) || nr == 0 || nr != nw || nr != nc || nl != 1) return false;
  for (int i = 0; i < nr; ++i)
    if (!(cal->read_bw_mbps[i] > 0 && cal->write_bw_mbps[i] > 0 && cal->copy_bw_mbps[i] > 0)) return false;
  if (!(lat[0] > 0)) return false;
  cal->threads = nr;
  cal->latency_ns = lat[0];
  return true;
}

std::string format_time(int64_t unix_seconds) {
  if (unix_seconds <= 0) return "unknown";
  time_t t = static_cast<time_t>(unix_seconds);
  struct tm utc;
  char buf[64];
  if (!gmtime_r(&t, &utc) || std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", &utc) == 0) return "unknown";
  return buf;
}

void stamp(hm_calibration_t *cal) {
  cal->measured_unix = static_cast<int64_t>(prim::wall_seconds());
  std::snprintf(cal->cpu, sizeof cal->cpu, "%s", cpu_model().c_str());
}

bool save_cache(const hm_calibration_t &cal) {
  std::string path = cal.path;
  auto slash = path.rfind('/');
  if (slash != std::string::npos) prim::make_dirs(path.substr(0, slash));
  std::string out = "# hetmem calibration v2\n"
                    "# DRAM figures for the emulated tier; written by `hetmem tiers --bench` (full) or on first use "
                    "(quick)\n";
  out += "machine = " + machine_key() + "\n";
  out += std::string("method = ") + (cal.method == HM_CALIBRATION_FULL ? "full" : "quick") + "\n";
  out += "measured_unix = " + std::to_string(cal.measured_unix) + "\n";
  out += "measured = " + format_time(cal.measured_unix) + "\n";
  out += std::string("cpu = ") + cal.cpu + "\n";
  write_row(out, "read_bw_mbps", cal.read_bw_mbps, cal.threads);
  write_row(out, "write_bw_mbps", cal.write_bw_mbps, cal.threads);
  write_row(out, "copy_bw_mbps", cal.copy_bw_mbps, cal.threads);
  out += "latency_ns = " + prim::format_number(cal.latency_ns) + "\n";
  if (cal.gather_ns > 0) out += "gather_ns = " + prim::format_number(cal.gather_ns) + "\n";
  return prim::write_text_atomic(path, out);
}

// A quick single-thread measurement (about half a second) used when no cache exists.
void measure_quick(hm_calibration_t *cal) {
  const size_t bytes = size_t{128} << 20;  // 4x a 32 MiB last-level cache
  const size_t n = bytes / sizeof(double);
  void *a = nullptr, *b = nullptr;
  if (prim::map_anon(bytes, prim::kPageSize, 0, &a) != HM_OK || prim::map_anon(bytes, prim::kPageSize, 0, &b) != HM_OK) {
    cal->threads = 1;
    cal->read_bw_mbps[0] = cal->write_bw_mbps[0] = cal->copy_bw_mbps[0] = 10000;
    cal->latency_ns = 100;
    return;
  }
  auto *da = static_cast<double *>(a), *db = static_cast<double *>(b);
  kernels::write_fill(da, n, 1.0);
  kernels::write_fill(db, n, 2.0);
  double best_r = 0, best_w = 0, best_c = 0;
  volatile double sink = 0;
  for (int rep = 0; rep < 3; ++rep) {
    uint64_t t0 = prim::now_ns();
    sink = sink + kernels::read_sum(da, n);
    uint64_t t1 = prim::now_ns();
    kernels::write_fill(db, n, static_cast<double>(rep));
    uint64_t t2 = prim::now_ns();
    std::memcpy(db, da, bytes);
    uint64_t t3 = prim::now_ns();
    best_r = std::max(best_r, bytes * 1e3 / static_cast<double>(t1 - t0));
    best_w = std::max(best_w, bytes * 1e3 / static_cast<double>(t2 - t1));
    best_c = std::max(best_c, bytes * 1e3 / static_cast<double>(t3 - t2));
  }
  const size_t stride = 64, slots = (size_t{64} << 20) / stride, steps = size_t{1} << 21;
  const size_t gathers = size_t{1} << 21;
  uint64_t g0 = prim::now_ns();
  sink = sink + kernels::gather_sum(da, size_t{1} << 24, gathers, 7);  // 128 MiB of doubles
  uint64_t g1 = prim::now_ns();
  kernels::chase_build(a, slots, stride, 42);
  uint64_t t0 = prim::now_ns();
  void *end = kernels::chase_run(a, steps);
  uint64_t t1 = prim::now_ns();
  sink = sink + (end ? 1 : 0);
  cal->gather_ns = static_cast<double>(g1 - g0) / static_cast<double>(gathers);
  prim::unmap(a, bytes);
  prim::unmap(b, bytes);
  cal->threads = 1;
  cal->read_bw_mbps[0] = best_r;
  cal->write_bw_mbps[0] = best_w;
  cal->copy_bw_mbps[0] = best_c;
  cal->latency_ns = static_cast<double>(t1 - t0) / static_cast<double>(steps);
  cal->method = HM_CALIBRATION_QUICK;
  stamp(cal);
}

void calibration_init() {
  hm_calibration_t cal{};
  std::string path = cache_path();
  std::snprintf(cal.path, sizeof cal.path, "%s", path.c_str());
  if (load_cache(path, &cal)) {
    cal.from_cache = 1;
  } else {
    log(2, "no valid calibration in %s: measuring DRAM quickly (one thread)", path.c_str());
    measure_quick(&cal);
    cal.from_cache = 0;
    if (!save_cache(cal)) log(1, "could not write the calibration cache %s", path.c_str());
  }
  std::lock_guard<std::mutex> lock(g_cal_mutex);
  g_cal = cal;
}

}  // namespace

const EmulProfile *emul_profile(const char *name) {
  for (const auto &p : kProfiles)
    if (std::strcmp(p.name, name) == 0) return &p;
  return nullptr;
}

const char *emul_profile_names() { return "optane, cxl, nvbm, dram"; }

void emul_set_enabled(bool on) { g_enabled.store(on, std::memory_order_relaxed); }
void emul_pause_waits(bool paused) { g_paused.store(paused, std::memory_order_relaxed); }
bool emul_enabled() { return g_enabled.load(std::memory_order_relaxed); }

void EmulState::reset() {
  charged_ns = 0;
  for (int s = 0; s < kEmulSources; ++s) source_ns[s] = read_bytes[s] = write_bytes[s] = accesses[s] = 0;
}

std::string calibration_problem(const hm_calibration_t &cal) {
  const std::string fix = "; run `hetmem tiers --bench` to measure every thread count";
  const std::string what = std::string("the DRAM calibration (") + cal.path + ")";
  if (cal.method == HM_CALIBRATION_QUICK)
    return what + " is a quick one-thread measurement from " + format_time(cal.measured_unix) + fix;
  if (cal.method != HM_CALIBRATION_FULL)
    return what + " was written by an older hetmem and does not say how it was made" + fix;
  int64_t age = static_cast<int64_t>(prim::wall_seconds()) - cal.measured_unix;
  if (cal.measured_unix <= 0 || age > kStaleSeconds)
    return what + " is from " + format_time(cal.measured_unix) + ", more than 30 days ago" + fix;
  if (cal.threads < prim::cpu_count()) {
    const std::string threads = std::to_string(cal.threads);
    return what + " covers 1.." + threads + " threads of this machine's " + std::to_string(prim::cpu_count()) +
           " cores; charges for more threads use the " + threads + "-thread figures" + fix;
  }
  return "";
}

void calibration_warn_once() {
  static std::atomic<bool> warned{false};
  if (warned.load(std::memory_order_relaxed) || warned.exchange(true)) return;
  std::string problem = calibration_problem(calibration());
  if (!problem.empty()) log(0, "warning: emulated-tier charges may be off: %s", problem.c_str());
}

const hm_calibration_t &calibration() {
  if (!g_cal_ready.load(std::memory_order_acquire)) {
    static std::mutex init_mutex;
    std::lock_guard<std::mutex> lock(init_mutex);
    if (!g_cal_ready.load(std::memory_order_acquire)) {
      calibration_init();
      g_cal_ready.store(true, std::memory_order_release);
    }
  }
  return g_cal;
}

void calibration_forget() { g_cal_ready.store(false, std::memory_order_release); }

int calibration_replace(const hm_calibration_t &in) {
  calibration();
  hm_calibration_t cal = in;
  if (cal.threads < 1 || cal.threads > 64 || !(cal.latency_ns > 0))
    return fail(HM_EINVAL, "calibration: need 1..64 thread entries and a positive latency");
  for (int i = 0; i < cal.threads; ++i)
    if (!(cal.read_bw_mbps[i] > 0 && cal.write_bw_mbps[i] > 0 && cal.copy_bw_mbps[i] > 0))
      return fail(HM_EINVAL, "calibration: bandwidth for %d threads is not positive", i + 1);
  std::snprintf(cal.path, sizeof cal.path, "%s", g_cal.path);
  cal.from_cache = 0;
  if (cal.method == HM_CALIBRATION_UNKNOWN) cal.method = HM_CALIBRATION_FULL;
  stamp(&cal);
  if (!save_cache(cal)) return fail(HM_EIO, "cannot write the calibration cache %s", cal.path);
  std::lock_guard<std::mutex> lock(g_cal_mutex);
  g_cal = cal;
  return HM_OK;
}

double calibration_bw(const double *table, int filled, int threads) {
  if (filled <= 0) return 1;
  int i = threads < 1 ? 0 : (threads > filled ? filled - 1 : threads - 1);
  return table[i];
}

double emul_extra_ns(const EmulProfile &p, const hm_calibration_t &cal, int threads, uint64_t read_bytes,
                     uint64_t write_bytes, uint64_t dependent) {
  // Each of `threads` threads gets 1/threads of the aggregate device bandwidth, so a thread's
  // bytes take threads/aggregate seconds each on either device.
  double k = threads < 1 ? 1 : threads;
  double r_dram = calibration_bw(cal.read_bw_mbps, cal.threads, threads) * 1e6;
  double w_dram = calibration_bw(cal.write_bw_mbps, cal.threads, threads) * 1e6;
  double extra_s = static_cast<double>(read_bytes) * k * (1.0 / (p.read_bw * r_dram) - 1.0 / r_dram) +
                   static_cast<double>(write_bytes) * k * (1.0 / (p.write_bw * w_dram) - 1.0 / w_dram);
  double extra_ns = extra_s * 1e9 + static_cast<double>(dependent) * (p.random_latency - 1.0) * cal.latency_ns;
  return extra_ns > 0 ? extra_ns : 0;
}

namespace {
thread_local bool t_defer_charges = false;
std::atomic<uint64_t> g_owed_ns{0};
}  // namespace

void emul_defer_charges_on_this_thread() { t_defer_charges = true; }

uint64_t emul_pay_owed() {
  if (__builtin_expect(g_owed_ns.load(std::memory_order_relaxed) == 0, 1)) return 0;
  uint64_t ns = g_owed_ns.exchange(0, std::memory_order_acq_rel);
  if (ns) prim::spin_until_ns(prim::now_ns() + ns);
  return ns;
}

uint64_t emul_charge(const EmulProfile &p, EmulState &state, uint64_t read_bytes, uint64_t write_bytes,
                     uint64_t dependent, EmulSource source) {
  if (!g_enabled.load(std::memory_order_relaxed)) return 0;
  if (read_bytes == 0 && write_bytes == 0 && dependent == 0) return 0;
  state.read_bytes[source].fetch_add(read_bytes, std::memory_order_relaxed);
  state.write_bytes[source].fetch_add(write_bytes, std::memory_order_relaxed);
  state.accesses[source].fetch_add(dependent, std::memory_order_relaxed);
  if (!emul_charges(p) || g_paused.load(std::memory_order_relaxed)) return 0;
  calibration_warn_once();
  const hm_calibration_t &cal = calibration();
  if (t_defer_charges) {
    // Owed by the program, paid by its own threads (emul_pay_owed): the device time alone.
    uint64_t ns = prim::round_to_u64(emul_extra_ns(p, cal, 1, read_bytes, write_bytes, dependent));
    g_owed_ns.fetch_add(ns, std::memory_order_relaxed);
    state.charged_ns.fetch_add(ns, std::memory_order_relaxed);
    state.source_ns[source].fetch_add(ns, std::memory_order_relaxed);
    return ns;
  }
  uint64_t start = prim::now_ns();
  state.charging.fetch_add(1, std::memory_order_acq_rel);
  // Latency is not shared; bandwidth is shared by whoever charges the tier at each moment.
  // The bandwidth part is a fixed amount of device work (its cost with one thread); the wait
  // advances through it at the rate the current number of charging threads allows, so threads
  // that start or finish meanwhile change the others' share, as on a real device.
  double latency_ns = emul_extra_ns(p, cal, 1, 0, 0, dependent);
  double work = emul_extra_ns(p, cal, 1, read_bytes, write_bytes, 0);
  double done = 0, charged = latency_ns;
  uint64_t now = start;
  if (work > 0) {
    constexpr uint64_t kSliceNs = 2000;
    while (done < work) {
      int k = state.charging.load(std::memory_order_relaxed);
      double slowdown = k > 1 ? emul_extra_ns(p, cal, k, read_bytes, write_bytes, 0) / work : 1.0;
      uint64_t left = static_cast<uint64_t>((work - done) * slowdown) + 1;
      uint64_t next = now + (left < kSliceNs ? left : kSliceNs);
      prim::spin_until_ns(next);
      uint64_t t = prim::now_ns();
      double step = static_cast<double>(t - now) / slowdown;
      // The delay charged is the device time, not the overshoot of the last slice (a thread the
      // scheduler preempted there would otherwise report the preemption as charge).
      charged += (done + step > work ? work - done : step) * slowdown;
      done += step;
      now = t;
    }
  }
  prim::spin_until_ns(now + static_cast<uint64_t>(latency_ns));
  state.charging.fetch_sub(1, std::memory_order_acq_rel);
  uint64_t ns = prim::round_to_u64(charged);
  state.charged_ns.fetch_add(ns, std::memory_order_relaxed);
  state.source_ns[source].fetch_add(ns, std::memory_order_relaxed);
  return ns;
}

}  // namespace hm
