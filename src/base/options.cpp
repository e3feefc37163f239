#include "base/options.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <atomic>
#include <mutex>
#include <string_view>

#include "base/error.h"
#include "hetmem/hetmem.h"
#include "prim/prim.h"

namespace hm {
namespace {

constexpr OptionSpec kOptions[] = {
    {Option::kTiers, "HM_TIERS", "",
     "role=tier list, e.g. fast=dram,capacity=emul:optane,persistent=file:/var/tmp/hm.pool; "
     "overrides discovery for the roles it names"},
    {Option::kFastBudget, "HM_FAST_BUDGET", "0", "bytes of the fast tier this process may hold (0 = unlimited), e.g. 2G", OptionKind::kSize},
    {Option::kCapacityBudget, "HM_CAPACITY_BUDGET", "0", "bytes of the capacity tier this process may hold (0 = unlimited)", OptionKind::kSize},
    {Option::kPersistentBudget, "HM_PERSISTENT_BUDGET", "0", "bytes of the persistent tier this process may hold (0 = unlimited)", OptionKind::kSize},
    {Option::kPoolSize, "HM_POOL_SIZE", "1G", "size of a file: pool created without an explicit size (file:PATH:SIZE)", OptionKind::kSize},
    {Option::kHugetlbPool, "HM_HUGETLB_POOL", "0",
     "bytes of 2 MiB hugetlb pages reserved at start for allocations of 2 MiB or more (first fit)", OptionKind::kSize},
    {Option::kHugetlb1G, "HM_HUGETLB_1G", "0", "bytes of 1 GiB hugetlb pages reserved at start for allocations of 1 GiB or more", OptionKind::kSize},
    {Option::kThp, "HM_THP", "1", "1: madvise(MADV_HUGEPAGE) on allocations of 2 MiB or more when no hugetlb page is free", OptionKind::kSwitch},
    {Option::kEmul, "HM_EMUL", "1", "1: charge the emulated tier's delay; 0: emulated tiers behave as DRAM", OptionKind::kSwitch},
    {Option::kPolicy, "HM_POLICY", "first-touch",
     "placement policy for object classes (hm_class_alloc); `hetmem policies` lists them"},
    {Option::kMigrationSpace, "HM_MIGRATION_SPACE", "0",
     "hetmem-static and hetmem: bytes of the fast tier kept as the migration space (staging slots for streamed "
     "tiles; 0: none under hetmem-static; under hetmem three slots of max(8, 4 x CPUs) of the largest tiles, at "
     "least 4 MiB, at most an eighth of the fast budget)", OptionKind::kSize},
    {Option::kHelpers, "HM_HELPERS", "", "helper threads that stage streamed tiles (0..max(8, 2 x CPUs); empty: the helper model "
     "decides per phase)", OptionKind::kInteger, 0, 4096},
    {Option::kPrefetchDistance, "HM_PREFETCH_DISTANCE", "", "units (particles) ahead that kernels prefetch field data (0..64, 0: none; empty: "
     "the prefetch model decides per phase under hetmem-static+prefetch and hetmem)", OptionKind::kInteger, 0,
     kMaxPrefetchDistance},
    {Option::kSampleBudget, "HM_SAMPLE_BUDGET", "0.01",
     "fraction of the run time the referenced-page sampler (profiler, emulated tier) may cost; "
     "a profile gets the first instance of every phase sampled regardless (inferred iterations: instances 1 "
     "to 4)", OptionKind::kFraction},
    {Option::kCalibration, "HM_CALIBRATION", "", "calibration cache file (default $XDG_CACHE_HOME/hetmem/calibration or ~/.cache/...)"},
    {Option::kNtThreshold, "HM_NT_THRESHOLD", "8M", "copies at least this large use non-temporal stores", OptionKind::kSize},
    {Option::kRetain, "HM_RETAIN", "256M", "freed large mappings kept per tier for reuse before being returned to the OS (hetmem's libmemkind keeps as many bytes of freed MEMKIND_DEFAULT blocks of 32 MiB or more)", OptionKind::kSize},
    {Option::kDefaultRole, "HM_DEFAULT_ROLE", "fast", "role used by hm_malloc outside any hm_mode_push scope"},
    {Option::kVerbose, "HM_VERBOSE", "0", "0: quiet; 1: log failures; 2: log discovery and decisions", OptionKind::kInteger, 0, 3},
    {Option::kProfile, "HM_PROFILE", "", "preload library: write a heap/phase trace to this file (set by `hetmem profile`)"},
    {Option::kSummary, "HM_SUMMARY", "", "preload library: write the run summary (JSON: tiers, classes, spaces, phases, iteration "
     "times) to this file at exit (set by `hetmem compare --plan`)"},
    {Option::kProfileDepth, "HM_PROFILE_DEPTH", "8", "return addresses recorded per call site (0..32)", OptionKind::kInteger, 0, kMaxProfileDepth},
    {Option::kProfileLarge, "HM_PROFILE_LARGE", "256K", "objects at least this large get their own mapping and per-phase referenced bytes", OptionKind::kSize},
    {Option::kProfileStackMin, "HM_PROFILE_STACK_MIN", "4K", "allocations smaller than this are recorded with their "
     "caller's address, not a stack walk (plans place only large objects; a walk costs 100-200 ns); 0: a stack for "
     "every allocation", OptionKind::kSize},
    {Option::kProfileSample, "HM_PROFILE_SAMPLE", "64K", "allocations smaller than this (and than HM_PROFILE_LARGE) "
     "are sampled, one every this many bytes on average, and the report estimates their counts; 0 records every one",
     OptionKind::kSize},
    {Option::kProfileChildren, "HM_PROFILE_CHILDREN", "0", "1: forked children write their own trace (TRACE.PID) and exec'd programs are preloaded", OptionKind::kSwitch},
    {Option::kProfileRootPid, "HM_PROFILE_ROOT_PID", "", "set by the preload library: the run's first process (and what it execs), whose "
     "trace is TRACE and which alone writes the run summary and names unused plan sites; every other process of the "
     "run (forked or exec'd, with HM_PROFILE_CHILDREN=1) writes TRACE.PID"},
    {Option::kIterationWindow, "HM_ITERATION_WINDOW", "0.1", "preload library: seconds per inferred iteration of a program that marks none "
     "(0: none; see HM_ITERATION_AT)", OptionKind::kNumber, 0, 3600},
    {Option::kIterationAt, "HM_ITERATION_AT", "", "preload library: a function (its symbol, or a C++ name such as ns::Class::step) whose every entry ends an inferred iteration, "
     "in place of time windows (set by `hetmem profile/run --iteration-at`)"},
    {Option::kRules, "HM_RULES", "", "preload library: placement rules file (set by `hetmem run --rules`)"},
    {Option::kClassMin, "HM_CLASS_MIN", "4K", "preload library: allocations a plan's class rule matches that are smaller "
     "than this stay with the C library (a class's cost per allocation outweighs placing a few bytes); 0: every one",
     OptionKind::kSize},
    {Option::kReplicaKey, "HM_REPLICA_KEY", "", "key file shared with a hetmem-replica server (owner-only, at least 16 bytes): a primary "
     "and the server prove to each other that they hold it. Unset: ~/.hetmem/replica.key when it exists, the server's "
     "default"},
    {Option::kPmCheck, "HM_PM_CHECK", "0", "1: persistent octrees validate every family when restored (slower; bounds are always "
     "checked)", OptionKind::kSwitch},
    {Option::kPmThp, "HM_PM_THP", "0", "1: map persistent pools with madvise(MADV_HUGEPAGE): a new pool's first writes fault once per "
     "2 MiB, but on a page-cache file every persist writes back whole 2 MiB folios (no effect on DAX)", OptionKind::kSwitch},
    {Option::kMemkind, "HM_MEMKIND", "", "hetmem's libmemkind: KIND=ROLE_OR_TIER overrides of the kind table, e.g. "
     "HBW=emul:cxl,DAX_KMEM=capacity (docs/memkind.md)"},
};
constexpr int kCount = sizeof(kOptions) / sizeof(kOptions[0]);
static_assert(kCount == static_cast<int>(Option::kCount), "every Option has a row");
constexpr bool rows_in_enum_order() {
  for (int i = 0; i < kCount; ++i)
    if (static_cast<int>(kOptions[i].id) != i) return false;
  return true;
}
static_assert(rows_in_enum_order(), "kOptions rows follow the order of enum Option");

struct Value {
  std::string text;
  OptionSource source = OptionSource::kDefault;
};
Value g_values[kCount];
std::mutex g_mutex;
std::atomic<bool> g_loaded{false};  // options_load has run (hm_init, or the first read before it)

int index_of(std::string_view name) {
  for (int i = 0; i < kCount; ++i)
    if (name == kOptions[i].name) return i;
  return -1;
}

}  // namespace

void options_load() {
  std::lock_guard<std::mutex> lock(g_mutex);
  // One pass over the environment for every option, not a getenv each (a scan of every variable
  // per option, twice in each process's start-up: 30k instructions of its 270k); the first entry
  // of a name wins, as with getenv. A value already held is not copied again.
  const char *found[kCount] = {};
  for (char *const *e = prim::environment(); e && *e; ++e) {
    if (std::strncmp(*e, "HM_", 3) != 0) continue;
    const char *eq = std::strchr(*e, '=');
    const int i = eq ? index_of(std::string_view(*e, static_cast<size_t>(eq - *e))) : -1;
    if (i >= 0 && !found[i]) found[i] = eq + 1;
  }
  for (int i = 0; i < kCount; ++i) {
    Value &value = g_values[i];
    if (value.source == OptionSource::kApi) continue;
    const OptionSource source = found[i] ? OptionSource::kEnvironment : OptionSource::kDefault;
    const char *text = found[i] ? found[i] : kOptions[i].default_value;
    if (value.source != source || value.text != text) value = {text, source};
  }
  g_loaded.store(true, std::memory_order_release);
}

void options_forget() { g_loaded.store(false, std::memory_order_release); }

int option_count() { return kCount; }
const OptionSpec &option_spec(int i) { return kOptions[i]; }
const char *option_name(Option id) { return kOptions[static_cast<int>(id)].name; }

const char *option_default(Option id) { return kOptions[static_cast<int>(id)].default_value; }

const std::string &option_text(Option id, OptionSource *source) {
  const int i = static_cast<int>(id);
  if (!g_loaded.load(std::memory_order_acquire)) options_load();  // read before hm_init
  if (source) *source = g_values[i].source;
  return g_values[i].text;
}

const std::string *option_text(const char *name, OptionSource *source) {
  int i = index_of(name);
  if (i < 0) return nullptr;
  return &option_text(static_cast<Option>(i), source);
}

bool option_find(const char *name, Option *id) {
  const int i = name ? index_of(name) : -1;
  if (i >= 0) *id = static_cast<Option>(i);
  return i >= 0;
}

void option_set(const char *name, const std::string &value) {
  std::lock_guard<std::mutex> lock(g_mutex);
  int i = index_of(name);
  if (i >= 0) g_values[i] = {value, OptionSource::kApi};
}

const char *option_source_name(OptionSource s) {
  switch (s) {
    case OptionSource::kDefault: return "default";
    case OptionSource::kEnvironment: return "environment";
    case OptionSource::kApi: return "api";
  }
  return "?";
}

bool parse_size(const std::string &text, uint64_t *bytes, std::string *error) {
  const char *s = text.c_str();
  while (std::isspace(static_cast<unsigned char>(*s))) ++s;
  if (!std::isdigit(static_cast<unsigned char>(*s)) && *s != '.') {
    *error = "expected a number with an optional unit K, M, G or T";
    return false;
  }
  char *end = nullptr;
  double v = std::strtod(s, &end);
  std::string unit(end);
  while (!unit.empty() && std::isspace(static_cast<unsigned char>(unit.back()))) unit.pop_back();
  for (auto &c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double mult = 1;
  if (unit.empty() || unit == "B") mult = 1;
  else if (unit == "K" || unit == "KB" || unit == "KIB") mult = 1024.0;
  else if (unit == "M" || unit == "MB" || unit == "MIB") mult = 1024.0 * 1024;
  else if (unit == "G" || unit == "GB" || unit == "GIB") mult = 1024.0 * 1024 * 1024;
  else if (unit == "T" || unit == "TB" || unit == "TIB") mult = 1024.0 * 1024 * 1024 * 1024;
  else {
    *error = "unknown unit '" + unit + "' (use K, M, G or T)";
    return false;
  }
  double b = v * mult;
  if (!(b >= 0) || b > 1.8e19) {
    *error = "value out of range";
    return false;
  }
  *bytes = prim::round_to_u64(b);
  return true;
}

int option_size(Option id, uint64_t *bytes) {
  const std::string &t = option_text(id);
  std::string err;
  if (!parse_size(t, bytes, &err)) return fail(HM_EFORMAT, "%s='%s': %s", option_name(id), t.c_str(), err.c_str());
  return HM_OK;
}

int option_int(Option id, long *value) {
  const std::string &t = option_text(id);
  char *end = nullptr;
  long v = std::strtol(t.c_str(), &end, 10);
  if (t.empty() || *end != '\0') return fail(HM_EFORMAT, "%s='%s': expected an integer", option_name(id), t.c_str());
  *value = v;
  return HM_OK;
}


std::string format_size(uint64_t b) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
  return buf;
}

namespace {

// The value of `text` for a numeric kind, or the reason it is not one.
bool parse_number(const OptionSpec &spec, const std::string &text, double *value, std::string *why) {
  char *end = nullptr;
  switch (spec.kind) {
    case OptionKind::kText: return true;
    case OptionKind::kSize: {
      uint64_t bytes = 0;
      if (!parse_size(text, &bytes, why)) return false;
      *value = static_cast<double>(bytes);
      return true;
    }
    case OptionKind::kSwitch:
      if (text == "0" || text == "1") {
        *value = text == "1" ? 1 : 0;
        return true;
      }
      *why = "expected 0 or 1";
      return false;
    case OptionKind::kFraction:
    case OptionKind::kInteger:
    case OptionKind::kNumber: {
      const double lo = spec.kind == OptionKind::kFraction ? 0 : spec.lo;
      const double hi = spec.kind == OptionKind::kFraction ? 1 : spec.hi;
      if (text.empty() && spec.kind == OptionKind::kInteger && !*spec.default_value) {
        *value = std::nan("");  // unset: the component decides
        return true;
      }
      double v = spec.kind == OptionKind::kInteger ? static_cast<double>(std::strtol(text.c_str(), &end, 10))
                                                   : std::strtod(text.c_str(), &end);
      if (text.empty() || *end != '\0' || !(v >= lo && v <= hi)) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "expected %s from %g to %g%s",
                      spec.kind == OptionKind::kInteger ? "an integer" : "a number", lo, hi,
                      spec.kind == OptionKind::kFraction ? " (0.01 = 1%)" : "");
        *why = buf;
        return false;
      }
      *value = v;
      return true;
    }
  }
  return true;
}

}  // namespace

int option_check(Option id, const std::string &text) {
  const OptionSpec &spec = kOptions[static_cast<int>(id)];
  double ignored = 0;
  std::string why;
  if (!parse_number(spec, text, &ignored, &why))
    return fail(HM_EFORMAT, "%s='%s': %s", spec.name, text.c_str(), why.c_str());
  return HM_OK;
}

int options_check() {
  // The defaults are the table's own, each checked by a test (Options.EveryDefaultIsAValueItsOptionAccepts):
  // only values a user gave are parsed here, in each process's start-up.
  for (int i = 0; i < kCount; ++i) {
    const Option id = static_cast<Option>(i);
    OptionSource source = OptionSource::kDefault;
    const std::string &text = option_text(id, &source);
    if (source == OptionSource::kDefault) continue;
    if (int rc = option_check(id, text); rc != HM_OK) return rc;
  }
  return HM_OK;
}

int option_number(Option id, double *value) {
  const OptionSpec &spec = kOptions[static_cast<int>(id)];
  const std::string &text = option_text(id);
  std::string why;
  if (spec.kind == OptionKind::kText) return fail(HM_EINVAL, "%s is not a numeric option", spec.name);
  if (!parse_number(spec, text, value, &why)) return fail(HM_EFORMAT, "%s='%s': %s", spec.name, text.c_str(), why.c_str());
  return HM_OK;
}

}  // namespace hm
