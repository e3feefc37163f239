// libhetmem_preload.so: the LD_PRELOAD shim. Hooks only: every malloc-family function and every
// form of operator new/delete is forwarded to the C library or to a hetmem tier (scoped modes,
// placement rules, the profiler's large objects), and reported to the profiler. The decisions and
// the recording live in libhetmem (src/place, src/profile), which has its own tests.
//
// Robustness (heaptrack, mimalloc alloc-override.c): a static buffer answers dlsym's own calloc
// during bootstrap; a thread-local flag stops recursion; a fork child drops the parent's buffers;
// a profile does not follow exec'd programs unless asked (placement does); what fails to start
// (the runtime, the rules, the profile) is said and stays off, and the shim passes those calls
// through.
//
// It carries no C++ runtime of its own (built without exceptions, no std::string): every process
// it is loaded into would otherwise make the runtime's emergency exception pool at load (a 73 KiB
// allocation) and map its unwinder and demangler. operator new's new handler and bad_alloc are the
// program's runtime's.
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <link.h>
#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <new>

#include "alloc/hook.h"
#include "preload/entry_hook.h"
#include "hetmem/hetmem.h"
#include "place/hooks.h"
#include "profile/hooks.h"
#include "profile/sampling.h"
#include "profile/trace_format.h"

#define HM_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

using namespace hm;  // trace:: constants only: the shim calls libhetmem through C functions

using MallocFn = void *(*)(size_t);
using FreeFn = void (*)(void *);
using CallocFn = void *(*)(size_t, size_t);
using ReallocFn = void *(*)(void *, size_t);
using MemalignFn = void *(*)(size_t, size_t);
using PosixMemalignFn = int (*)(void **, size_t, size_t);
using UsableFn = size_t (*)(void *);

// A function of another object, found by name at its first use and kept: threads that race at
// the first use find the same (a function-local static would need the C++ runtime's guards).
// Constant-initialised (constinit where defined), so that it works in a call that comes before
// this library's initialisers run: another library's constructor may free, close or allocate.
enum class Lookup { kNext, kDefault };  // dlsym's RTLD_NEXT or RTLD_DEFAULT

template <class Fn>
class Found {
 public:
  constexpr Found(Lookup where, const char *name) : where_(where), name_(name) {}
  Fn get() {
    if (!known_.load(std::memory_order_acquire)) {
      fn_.store(dlsym(where_ == Lookup::kNext ? RTLD_NEXT : RTLD_DEFAULT, name_), std::memory_order_relaxed);
      known_.store(true, std::memory_order_release);
    }
    return reinterpret_cast<Fn>(fn_.load(std::memory_order_relaxed));
  }

 private:
  Lookup where_;
  const char *name_;
  std::atomic<void *> fn_{nullptr};
  std::atomic<bool> known_{false};
};

struct alignas(64) Real {  // a line of its own: every call the C library takes goes through it
  MallocFn malloc;
  FreeFn free;
  CallocFn calloc;
  ReallocFn realloc;
  MemalignFn memalign;
  PosixMemalignFn posix_memalign;
  UsableFn usable;
} g_real;

// What the entry points read on every call, in one cache line: a program's own work evicts
// lines between its allocations, and each line the fast paths read is then a miss to pay.
struct alignas(64) FastPaths {
  std::atomic<int> state{0};  // the C library's functions: 0 not resolved, 1 resolving, 2 ready
  // `all -> TIER` while nothing records, owes or waits for a first placement: malloc and new place
  // on this tier themselves (-1: they do not).
  std::atomic<int> direct_tier{-1};
  // The allocator calls that need no checks, set by update_fast_paths whenever what they depend
  // on changes: an allocation smaller than libc_below, with no mode scope open, is the C
  // library's whatever its call site (no rule can place it, nothing records it, no charge is
  // owed), and so is the free of memory outside hetmem's bounds while free_direct holds. Both say
  // no until the C library's functions are known, so the entry points' fast paths need no other
  // check.
  std::atomic<size_t> libc_below{0};
  std::atomic<bool> free_direct{false};
  // A profile without rules: the small allocations its sampler skips, and the frees of what it
  // did not sample, are the C library's too (profile/sampling.h). Charges an emulated tier's
  // windows found are then paid at the next allocation the profile records (every one of
  // HM_PROFILE_SAMPLE bytes or more, and a smaller one every HM_PROFILE_SAMPLE bytes allocated on
  // average), or at a phase's end.
  std::atomic<bool> sampled_only{false};
  // This library's own image (find_self): what its code allocates is hetmem's, not the program's.
  uintptr_t self_start = 0, self_bytes = 0;
} g_fast;
static_assert(sizeof(FastPaths) == 64, "the fast paths' state is one cache line");
// Routing by scoped mode (hm_mode_push around an unchanged allocation) is always on: it costs one
// thread-local read. Profiling and rules are on when asked for.
bool g_profiling = false;
bool g_rules = false;
bool g_children = false;
// The run's first process, or a program it exec'd (the same pid): it alone writes the run summary
// and names the plan sites that never occurred (a shell's or a launcher's children run other code).
bool g_root = false;
pid_t g_root_pid = 0;      // its pid: a vfork child shares g_root with it, not its pid
bool g_finished = false;   // the run's end (the rules' report, the summary) has been written
// Iterations inferred by time windows: the window thread's emulated-tier charges are owed by the
// program and paid by its threads here, at their allocator calls.
// Set by whichever thread starts the windows (relaxed: a load is a plain load).
std::atomic<bool> g_owing{false};
// Windows kept for an emulated tier's charges alone wait for the first allocation placed there
// (windows_needed_now, below).
uint32_t g_emulated_tiers = 0;               // bit t: tier t is emulated and charged
static_assert(HM_MAX_TIERS <= 32, "g_emulated_tiers has a bit per tier");
double g_deferred_window = 0;                // HM_ITERATION_WINDOW, for the windows that wait
std::atomic<bool> g_windows_pending{false};
// How iterations were inferred: "window", "function" or "" (none).
std::atomic<const char *> g_inferred{""};
bool g_started = false;  // hm_init has run (the statistics hooks then add hetmem's bytes)
uint64_t g_large = 256 << 10;
bool g_rules_uniform = false;  // every allocation gets the same decision (`all -> TARGET` first)
// HM_SUMMARY: the run summary written at exit (hetmem compare --plan), with the wall and CPU time
// since the library was loaded.
const char *g_summary = nullptr;
timespec g_start_wall{}, g_start_cpu{};

// dlsym may allocate before the real functions are known: a small static arena answers.
alignas(64) char g_boot[64 * 1024];
std::atomic<size_t> g_boot_used{0};

void *boot_alloc(size_t n) {
  size_t need = (n + 63) & ~size_t{63};
  size_t at = g_boot_used.fetch_add(need);
  if (at + need > sizeof g_boot) return nullptr;
  return g_boot + at;
}
bool is_boot(const void *p) { return p >= g_boot && p < g_boot + sizeof g_boot; }

void update_fast_paths();

void resolve() {
  int expected = 0;
  if (!g_fast.state.compare_exchange_strong(expected, 1)) {
    while (g_fast.state.load() == 1) {
    }
    return;
  }
  g_real.malloc = reinterpret_cast<MallocFn>(dlsym(RTLD_NEXT, "malloc"));
  g_real.free = reinterpret_cast<FreeFn>(dlsym(RTLD_NEXT, "free"));
  g_real.calloc = reinterpret_cast<CallocFn>(dlsym(RTLD_NEXT, "calloc"));
  g_real.realloc = reinterpret_cast<ReallocFn>(dlsym(RTLD_NEXT, "realloc"));
  g_real.memalign = reinterpret_cast<MemalignFn>(dlsym(RTLD_NEXT, "memalign"));
  g_real.posix_memalign = reinterpret_cast<PosixMemalignFn>(dlsym(RTLD_NEXT, "posix_memalign"));
  g_real.usable = reinterpret_cast<UsableFn>(dlsym(RTLD_NEXT, "malloc_usable_size"));
  g_fast.state.store(2);
  update_fast_paths();
}

inline bool ready() {
  if (__builtin_expect(g_fast.state.load(std::memory_order_acquire) == 2, 1)) return true;
  if (g_fast.state.load() == 0) resolve();
  return g_fast.state.load() == 2;
}

// RAII for the recursion flag shared with libhetmem.
struct Inside {
  Inside() { ++hm_inside_hook; }
  ~Inside() { --hm_inside_hook; }
};

// Where the rules send an allocation of `size` from `caller` (a class rule's allocations under
// HM_CLASS_MIN stay with the C library: the rules say so).
struct RulesPlacement {
  hm_rules_target_t target = HM_RULES_LIBC;
  int tier = -1;  // the tier (HM_RULES_TIER) or the class (HM_RULES_CLASS)
};

RulesPlacement g_uniform_placement;  // g_rules_uniform's decision

RulesPlacement rules_placement(size_t size, const void *caller) {
  if (g_rules_uniform) return g_uniform_placement;
  RulesPlacement d;
  d.target = hm_rules_decide(size, caller, &d.tier);
  return d;
}

void update_fast_paths() {
  const bool resolved = g_fast.state.load(std::memory_order_acquire) == 2;
  const bool records_or_owes = g_profiling || g_owing.load(std::memory_order_relaxed);
  size_t below = SIZE_MAX;  // only mode scopes route
  if (!resolved || records_or_owes) below = 0;
  else if (g_rules) below = hm_rules_placed_from();
  g_fast.libc_below.store(below, std::memory_order_release);
  g_fast.free_direct.store(resolved && !records_or_owes, std::memory_order_release);
  g_fast.sampled_only.store(resolved && g_profiling && !g_rules, std::memory_order_release);
  const bool direct = resolved && g_rules && g_rules_uniform &&
                      g_uniform_placement.target == HM_RULES_TIER && !records_or_owes && !g_windows_pending.load();
  g_fast.direct_tier.store(direct ? g_uniform_placement.tier : -1, std::memory_order_relaxed);
}

// The C library's smallest block: a 32-byte chunk, 24 bytes of it usable. A program's request
// for less that is placed on a tier gets as much here too, so that a program tuned to the C
// library keeps its pattern without moves (sqlite grows 200,000 blocks of 16 bytes to 24 in
// place: in hetmem's 16-byte class each moved, 1.0 M first-level misses and 32 M instructions of
// its run), in no more memory than the C library gives it.
constexpr size_t kLibcSmallestUsable = 24;

inline size_t libc_sized(size_t size) { return size < kLibcSmallestUsable ? kLibcSmallestUsable : size; }

// Placement of one allocation: the scoped mode first (hm_mode_push around an unchanged ALLOCATE),
// then the rules (`decided` when the caller asked them already), then the profiler's large
// objects (own mapping, so the kernel reports their referenced bytes alone). nullptr: the C
// library takes it.
void *place(size_t size, size_t align, bool zero, const void *caller, const RulesPlacement *decided) {
  unsigned flags = HM_PREFERRED | (zero ? HM_ZERO : 0u);
  if (hm_modes_open > 0) return hm_tier_alloc(hm_mode_current(), libc_sized(size), align, flags);
  if (g_rules) {
    const RulesPlacement d = decided ? *decided : rules_placement(size, caller);
    switch (d.target) {
      case HM_RULES_TIER: return hm_tier_alloc(d.tier, libc_sized(size), align, flags);
      case HM_RULES_HUGE: return hm_alloc(HM_FAST, size, align, flags | HM_HUGE);
      case HM_RULES_CLASS:  // a plan's class: where the policy puts it; the C library if it refuses
        if (void *p = hm_class_alloc(d.tier, size, align, zero ? HM_ZERO : 0u)) return p;
        break;
      case HM_RULES_LIBC: break;
    }
  }
  if (g_profiling && size >= g_large && align <= 4096) {
    void *p = hm_alloc(HM_FAST, size, align, flags | HM_GUARDED);
    if (p) hm_profile_note_large(p, size);
    return p;
  }
  return nullptr;
}

// Frees `p` if it is hetmem's memory; false if it is not (the C library's to free).
inline bool freed_if_hetmems(void *p) { return hm_within_owned_bounds(p) && hm_direct_free(p) != 0; }

// This library's own image: its code and the C++ runtime linked into it (hm_private_runtime in
// CMakeLists.txt). What that code allocates is hetmem's, not the program's: neither placed nor
// recorded. The C++ runtime's emergency exception pool is one: its constructor runs after this
// library's own, which may have started the profiler.
void find_self() {
  dl_find_object self;
  if (_dl_find_object(reinterpret_cast<void *>(&find_self), &self) != 0) return;
  g_fast.self_start = reinterpret_cast<uintptr_t>(self.dlfo_map_start);
  g_fast.self_bytes = reinterpret_cast<uintptr_t>(self.dlfo_map_end) - g_fast.self_start;
}

inline bool from_self(const void *caller) {
  return reinterpret_cast<uintptr_t>(caller) - g_fast.self_start < g_fast.self_bytes;
}

void placed_while_windows_wait(const void *p);

// The C library's whatever its call site (g_fast.libc_below), or a small one the profile's sampler
// skips (g_fast.sampled_only). False until the C library's functions are known.
inline bool libc_takes(size_t size) {
  if (hm_modes_open != 0) return false;
  return size < g_fast.libc_below.load(std::memory_order_acquire) ||
         (g_fast.sampled_only.load(std::memory_order_relaxed) && hm::profile::skips_allocation(size));
}

// The tier of `all -> TIER` rules for an allocation of the program's (g_fast.direct_tier), or -1.
inline int direct_tier(const void *caller) {
  const int tier = g_fast.direct_tier.load(std::memory_order_relaxed);
  return tier >= 0 && hm_modes_open == 0 && !hm_inside_hook && !from_self(caller) ? tier : -1;
}

// An allocation on the direct tier, the C library's if the tier refuses it (as placement's).
inline void *placed_directly(int tier, size_t size) {
  Inside inside;
  void *p = hm_direct_alloc(tier, libc_sized(size));
  return p ? p : g_real.malloc(size);
}

// Every allocation past the entry points' fast paths (libc_takes) that the C library does not
// take directly.
__attribute__((noinline)) void *allocate(size_t size, size_t align, bool zero, trace::Fn fn, const void *caller,
                                         const RulesPlacement *decided = nullptr) {
  void *p = nullptr;
  if (!(libc_takes(size) && !decided) && !hm_inside_hook && !from_self(caller)) {
    Inside inside;
    if (g_owing.load(std::memory_order_relaxed)) hm_emul_pay_owed();
    p = place(size, align, zero, caller, decided);
    if (p && g_windows_pending.load(std::memory_order_relaxed)) placed_while_windows_wait(p);
    if (!p) {
      if (align <= 16) p = zero ? g_real.calloc(1, size) : g_real.malloc(size);
      else p = g_real.memalign(align, size);
      if (p && zero && align > 16) memset(p, 0, size);
    }
    if (p && g_profiling) hm_profile_record(trace::kAlloc, fn, p, size, caller);
    return p;
  }
  if (align <= 16) return zero ? g_real.calloc(1, size) : g_real.malloc(size);
  p = g_real.memalign(align, size);
  if (p && zero) memset(p, 0, size);
  return p;
}

// A free that nothing records or owes (g_fast.free_direct): while only a profile runs, a block it did
// not sample is one too (it is not one of the profile's large objects either, which are always
// recorded). False until the C library's functions are known.
inline bool frees_directly(const void *p) {
  return g_fast.free_direct.load(std::memory_order_acquire) ||
         (g_fast.sampled_only.load(std::memory_order_relaxed) && hm::profile::skips_free(p));
}

// The fast path of free and delete: a direct free of the C library's memory (free(NULL) included).
inline bool frees_to_libc(const void *p) { return frees_directly(p) && !hm_within_owned_bounds(p) && !is_boot(p); }

// A direct free: hetmem's memory back to hetmem (its own allocations on the way are not the
// program's: Inside), anything else but the start-up arena to the C library, with no other check.
// false: release decides.
inline bool freed_directly(void *p) {
  if (!frees_directly(p)) return false;
  if (!hm_within_owned_bounds(p)) {
    if (!is_boot(p)) g_real.free(p);
    return true;
  }
  Inside inside;
  if (!hm_direct_free(p)) g_real.free(p);
  return true;
}

__attribute__((noinline)) void release(void *p, trace::Fn fn, const void *caller) {
  if (!p || is_boot(p)) return;
  if (!hm_inside_hook && !from_self(caller)) {
    Inside inside;
    if (g_owing.load(std::memory_order_relaxed)) hm_emul_pay_owed();
    if (g_profiling) {
      // The free is recorded before the memory is released: the address cannot be reused first.
      hm_profile_record(trace::kFree, fn, p, 0, caller);
      if (hm_is_hetmems(p)) {
        hm_profile_forget_large(p);
        hm_free(p);
        return;
      }
    } else if (freed_if_hetmems(p)) {
      return;
    }
  } else if (freed_if_hetmems(p)) {
    return;
  }
  g_real.free(p);
}

// The program's C++ runtime (this library carries none): the new handler is the one the program
// set, and the bad_alloc thrown is the one its runtime throws, found by the names libstdc++ and
// libc++ both export. An exception can only be thrown by the unwinder that will catch it, so a
// program whose runtime is linked in and exports nothing (it then calls this operator new only by
// looking it up itself) is told why it ends, instead of ending in an unwinder's assertion.
void say(const char *what, const char *detail);

constinit Found<std::new_handler (*)()> g_get_new_handler{Lookup::kDefault, "_ZSt15get_new_handlerv"};
constinit Found<void (*)()> g_throw_bad_alloc{Lookup::kDefault, "_ZSt17__throw_bad_allocv"};

std::new_handler program_new_handler() {
  auto get = g_get_new_handler.get();
  return get ? get() : nullptr;
}

[[noreturn]] void program_throw_bad_alloc() {
  if (auto raise = g_throw_bad_alloc.get()) raise();
  say("operator new: out of memory, and the program has no C++ runtime to throw std::bad_alloc from",
      "it ends here (abort)");
  abort();
}

// Every operator new past its fast path (new_entry).
__attribute__((noinline)) void *new_impl(size_t size, size_t align, trace::Fn fn, const void *caller, bool nothrow) {
  for (;;) {
    void *p = nullptr;
    const size_t n = size ? size : 1;
    if (!ready()) p = boot_alloc(size);
    else if (align == 0 && libc_takes(n)) p = g_real.malloc(n);
    else if (const int tier = align == 0 ? direct_tier(caller) : -1; tier >= 0) p = placed_directly(tier, n);
    else p = allocate(n, align, false, fn, caller);
    if (p) return p;
    std::new_handler handler = program_new_handler();
    if (!handler) {
      if (nothrow) return nullptr;
      program_throw_bad_alloc();
    }
    handler();
  }
}

// An LD_PRELOAD entry of hetmem's: this library, or libhetmem.so.0 that `hetmem run` preloads
// before it (docs/profiler.md).
bool is_hetmem_entry(const char *item, size_t length) {
  const char *name = item;
  for (size_t i = 0; i < length; ++i)
    if (item[i] == '/') name = item + i + 1;
  const size_t n = length - static_cast<size_t>(name - item);
  const char kPreload[] = "libhetmem_preload", kLibrary[] = "libhetmem.so";
  if (memmem(name, n, kPreload, sizeof kPreload - 1)) return true;
  return n >= sizeof kLibrary - 1 && memcmp(name, kLibrary, sizeof kLibrary - 1) == 0;
}

void remove_self_from_ld_preload() {
  const char *value = getenv("LD_PRELOAD");
  if (!value) return;
  const size_t length = strlen(value);
  char *kept = static_cast<char *>(g_real.malloc(length + 1));
  if (!kept) return;
  size_t used = 0;
  for (const char *item = value; item <= value + length;) {
    const size_t n = strcspn(item, ": ");
    if (n > 0 && !is_hetmem_entry(item, n)) {
      if (used > 0) kept[used++] = ':';
      memcpy(kept + used, item, n);
      used += n;
    }
    item += n + 1;
  }
  kept[used] = 0;
  if (used == 0) unsetenv("LD_PRELOAD");
  else setenv("LD_PRELOAD", kept, 1);
  g_real.free(kept);
}

void child_after_fork() {
  g_root = false;  // a forked child is not the run's program, until it execs one (then preloaded anew)
  if (g_profiling) hm_profile_after_fork(g_children);
  g_profiling = hm_profile_active() != 0;
  update_fast_paths();
}

void say(const char *what, const char *detail) {
  const bool any = detail && *detail;
  char prefix[] = "hetmem preload: ", colon[] = ": ", newline[] = "\n";
  iovec parts[] = {{prefix, sizeof prefix - 1},
                   {const_cast<char *>(what), strlen(what)},
                   {colon, any ? sizeof colon - 1 : 0},
                   {const_cast<char *>(any ? detail : ""), any ? strlen(detail) : 0},
                   {newline, 1}};
  ssize_t ignored = writev(2, parts, 5);  // one line, one call
  (void)ignored;
}

// An option's text, "" when unset (hetmem's own string: nothing copied onto the stack, whose pages
// each process would otherwise fault in at its start).
const char *option(const char *name) {
  const char *text = hm_option_text(name);
  return text ? text : "";
}

// A numeric option, checked by hm_init (a size in bytes, a switch 0/1, a number in its range).
double number_option(const char *name) {
  double v = 0;
  return hm_option_number(name, &v) == HM_OK ? v : 0;
}

void iteration_entered() {
  if (hm_inside_hook) return;  // the profiler itself called it
  Inside inside;
  hm_iteration_infer_tick();
}

// Time windows serve the profile's phases, a plan's classes (static placement observes an
// iteration) and an emulated tier's charges. Otherwise no window thread is started: a program that
// runs one thread keeps the C library's single-thread fast paths (malloc and every mutex skip their
// atomic instructions while a process has one thread; a malloc+free pair took 10 ns alone, 29 ns
// beside an idle window thread). For the charges alone, the thread starts with the first allocation
// placed on an emulated tier: a process that places nothing there (a shell, a build's other
// programs, rules that match nothing) never has it.
bool windows_needed_now() { return g_profiling || hm_class_count() > 0; }

uint32_t emulated_tiers() {  // g_emulated_tiers' bits (HM_EMUL=1)
  if (number_option("HM_EMUL") != 1) return 0;
  uint32_t mask = 0;
  hm_tier_info_t tier;
  for (int t = 0; t < hm_tier_count() && t < HM_MAX_TIERS; ++t)
    if (hm_tier_info(t, &tier) == HM_OK && tier.kind == HM_KIND_EMUL) mask |= 1u << t;
  return mask;
}

void start_windows(double window) {
  if (hm_iteration_infer_start("iteration (window)", window) == HM_OK) {
    // The windows' sampled charges are owed by the program's threads, paid at their allocations;
    // without an emulated tier that charges there is nothing to pay, and nothing to ask.
    g_owing = g_emulated_tiers != 0;
    g_inferred = "window";
  } else {
    say("iterations not inferred", hm_last_error());
  }
  update_fast_paths();  // owing, or no longer waiting for a first placement (either way)
}

// After hetmem placed an allocation while windows wait: they start if it landed on an emulated tier.
void placed_while_windows_wait(const void *p) {
  hm_tier_t t = -1;
  if (hm_ptr_tier(p, &t) != HM_OK || t < 0 || t >= HM_MAX_TIERS || !(g_emulated_tiers & (1u << t))) return;
  if (g_windows_pending.exchange(false)) start_windows(g_deferred_window);
}

// An MPI launcher or one of its daemons (as the process names itself): it starts the ranks and
// serves their I/O, an event loop with no iterations of its own. Its allocations are recorded as
// any process's, but no time windows are inferred in it: each window's sample of referenced pages
// reads smaps (10-20 ms here), taken from the cores the ranks run on.
bool is_mpi_launcher() {
  static const char *const kNames[] = {"mpirun", "mpiexec", "mpiexec.hydra", "orterun", "prterun", "orted", "prted",
                                       "prte", "hydra_pmi_proxy", "srun"};
  for (const char *name : kNames)
    if (strcmp(program_invocation_short_name, name) == 0) return true;
  return false;
}

// Iterations of a program that marks none: at each entry into HM_ITERATION_AT's function, or
// every HM_ITERATION_WINDOW seconds where windows serve something. A function that cannot be hooked is
// said, and windows are used instead.
void infer_iterations() {
  if (is_mpi_launcher()) return;
  const char *const at = option("HM_ITERATION_AT");
  const double window = number_option("HM_ITERATION_WINDOW");
  g_emulated_tiers = emulated_tiers();
  // Nothing to infer (no function named, and no windows that would serve anything): no look at the
  // program's calls either, which reads every loaded object's relocations in each process.
  if (!*at && (!(window > 0) || (!windows_needed_now() && !g_emulated_tiers))) return;
  // A program built with libhetmem that marks its own phases or iterations keeps its marks (the
  // Fortran module's hm_phase_begin_f calls hm_phase_begin).
  static const char *const kMarks[] = {"hm_phase_begin", "hm_iteration_next"};
  if (preload::called_outside(kMarks, 2)) return;
  if (*at) {
    preload::EntryHookResult hooked = preload::hook_entries(at, iteration_entered);
    if (hooked.slots > 0) {
      char phase[PATH_MAX];
      snprintf(phase, sizeof phase, "iteration (at %s)", at);
      if (hm_iteration_infer_start(phase, 0) == HM_OK) g_inferred = "function";
      else say("iterations not inferred", hm_last_error());
      return;
    }
    say("--iteration-at: no call to hook, time windows used instead", hooked.detail);
  }
  if (!(window > 0)) return;
  if (windows_needed_now()) {
    start_windows(window);
    return;
  }
  if (g_emulated_tiers) {
    g_deferred_window = window;
    g_windows_pending.store(true);
  }
}

__attribute__((constructor)) void start_up() {
  ready();
  find_self();
  Inside inside;
  const char *const trace = option("HM_PROFILE"), *const rules = option("HM_RULES");
  const char *const summary = option("HM_SUMMARY");
  if (!*trace && !*rules && !*summary) return;  // only scoped modes route: no start-up work
  if (*summary) {
    g_summary = strdup(summary);  // kept to the end of the process (written at exit)
    clock_gettime(CLOCK_MONOTONIC, &g_start_wall);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &g_start_cpu);
  }
  if (hm_init() != HM_OK) {
    // Why (hm_init leaves the saying to its caller), and what it means for the program.
    say("not started, the program runs without hetmem", hm_last_error());
    return;
  }
  g_started = true;
  g_children = number_option("HM_PROFILE_CHILDREN") == 1;
  // A profile is the program's own unless children are followed; placement follows every
  // program the run execs (Rscript execs R; a script or launcher execs the real program).
  if (!g_children && *trace) remove_self_from_ld_preload();
  const char *const root_pid = option("HM_PROFILE_ROOT_PID");
  const bool first_process = !*root_pid;
  const pid_t pid = getpid();
  char pid_text[16];
  snprintf(pid_text, sizeof pid_text, "%d", static_cast<int>(pid));
  g_root = first_process || strcmp(root_pid, pid_text) == 0;
  if (g_root) g_root_pid = pid;
  if (first_process) setenv("HM_PROFILE_ROOT_PID", pid_text, 1);
  if (const double large = number_option("HM_PROFILE_LARGE"); large > 0) g_large = static_cast<uint64_t>(large);
  if (*rules) {
    char error[512] = {};
    if (hm_rules_install(rules, error, sizeof error) == HM_OK) {
      g_rules = true;
      g_rules_uniform = hm_rules_uniform(&g_uniform_placement.target, &g_uniform_placement.tier) != 0;
    } else {
      say("rules not applied", error);
    }
  }
  if (*trace) {
    const int depth = static_cast<int>(number_option("HM_PROFILE_DEPTH"));
    // Any program exec'd with --children (by a followed child, or by the first process itself)
    // writes TRACE.PID, never over the first trace. A forked child that then execs keeps its pid:
    // its trace up to the exec is TRACE.PID, the exec'd program's TRACE.PID.2 (.3 after a second
    // exec, ...).
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, first_process ? "%s" : "%s.%s", trace, pid_text);
    for (int n = 2; !first_process && access(path, F_OK) == 0 && n < 1000; ++n)
      snprintf(path, sizeof path, "%s.%s.%d", trace, pid_text, n);
    if (hm_profile_start(path, depth, g_large) == HM_OK) g_profiling = true;
    else say("not profiling", hm_last_error());
  }
  infer_iterations();
  pthread_atfork(nullptr, nullptr, child_after_fork);
  update_fast_paths();
}

double seconds_since(clockid_t clock, const timespec &t0) {
  timespec now;
  clock_gettime(clock, &now);
  return static_cast<double>(now.tv_sec - t0.tv_sec) + static_cast<double>(now.tv_nsec - t0.tv_nsec) * 1e-9;
}

// Ends the inferred iterations: the last one's sample and charges, before the summary.
void end_iterations() {
  if (*g_inferred.load() && !hm_iteration_inferred()) g_inferred = "";  // the program marked its own
  hm_iteration_infer_stop();
}

// What the run's first process writes at its end, once: the plan sites that never occurred and
// the run summary. From the destructor, or from _exit, which runs none (dash ends that way).
void finish_run() {
  if (g_finished || !g_root || getpid() != g_root_pid) return;
  g_finished = true;
  if (g_rules) hm_rules_report_unused(2);
  if (g_summary) {
    char extra[200];
    snprintf(extra, sizeof extra, "{\"seconds\": %.9f, \"cpu_seconds\": %.9f, \"iterations_inferred\": \"%s\"}",
             seconds_since(CLOCK_MONOTONIC, g_start_wall), seconds_since(CLOCK_PROCESS_CPUTIME_ID, g_start_cpu),
             g_inferred.load());
    if (hm_summary_write(g_summary, extra) != HM_OK) say("no run summary", hm_last_error());
  }
}

__attribute__((destructor)) void shut_down() {
  Inside inside;
  end_iterations();
  g_owing = false;
  finish_run();
  if (g_profiling) {
    g_profiling = false;
    hm_profile_stop();
  }
  update_fast_paths();
}

}  // namespace

// malloc, calloc, free, new and delete: the common case (libc_takes, frees_to_libc) inline, with
// no stack frame, and a jump to the C library's function; everything else out of line.
namespace {

__attribute__((noinline)) void *malloc_slow(size_t size, const void *caller) {
  if (!ready()) return boot_alloc(size);
  if (const int tier = direct_tier(caller); tier >= 0) return placed_directly(tier, size);
  return allocate(size, 0, false, trace::kMalloc, caller);
}

__attribute__((noinline)) void *calloc_slow(size_t total, const void *caller) {
  if (!ready()) return boot_alloc(total);  // static memory is zeroed
  return allocate(total, 0, true, trace::kCalloc, caller);
}

__attribute__((noinline)) void free_slow(void *p, trace::Fn fn, const void *caller) {
  if (ready() && !freed_directly(p)) release(p, fn, caller);
}

inline void *new_entry(size_t n, trace::Fn fn, const void *caller, bool nothrow) {
  if (__builtin_expect(libc_takes(n), 1))
    if (void *p = g_real.malloc(n ? n : 1)) return p;
  return new_impl(n, 0, fn, caller, nothrow);
}

}  // namespace

#define CALLER __builtin_return_address(0)

HM_EXPORT void *malloc(size_t size) {
  if (__builtin_expect(libc_takes(size), 1)) return g_real.malloc(size);
  return malloc_slow(size, CALLER);
}

HM_EXPORT void free(void *p) {
  if (__builtin_expect(frees_to_libc(p), 1)) return g_real.free(p);
  free_slow(p, trace::kFreeFn, CALLER);
}

HM_EXPORT void *calloc(size_t n, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(n, size, &total)) {
    errno = ENOMEM;
    return nullptr;
  }
  if (__builtin_expect(libc_takes(total), 1)) return g_real.calloc(n, size);
  return calloc_slow(total, CALLER);
}

namespace {
// A profiled large object (a mapping of its own) grown by moving its pages, none copied
// (hm_grow_guarded), as the C library grows a chunk it mapped: recorded as a realloc that moved,
// the old block freed (first: its address cannot be reused before), the new one allocated.
// nullptr when it cannot: the block is unchanged (recorded as allocated again), the caller copies.
void *grow_large(void *p, size_t old, size_t size, const void *caller) {
  Inside inside;
  if (!hm_growable(p)) return nullptr;
  if (g_owing.load(std::memory_order_relaxed)) hm_emul_pay_owed();
  hm_profile_record(trace::kFree, trace::kRealloc, p, 0, caller);
  hm_profile_forget_large(p);
  void *np = hm_grow_guarded(p, size);
  const bool grown = np != nullptr;
  if (!grown) np = p, size = old;
  hm_profile_note_large(np, size);
  hm_profile_record(trace::kAlloc, trace::kRealloc, np, size, caller);
  return grown ? np : nullptr;
}

// realloc by a new block where placement decides (allocate; `decided`: the rules were asked
// already) and the old one released (release), each recorded as the profiler records them;
// nullptr leaves the old block valid, as realloc promises.
void *reallocate_by_copy(void *p, size_t old, size_t size, const void *caller,
                         const RulesPlacement *decided = nullptr) {
  void *np = allocate(size, 0, false, trace::kRealloc, caller, decided);
  if (!np) return nullptr;
  memcpy(np, p, std::min(old, size));
  release(p, trace::kRealloc, caller);
  return np;
}
}  // namespace

HM_EXPORT void *realloc(void *p, size_t size) {
  if (__builtin_expect(!ready(), 0)) return boot_alloc(size);
  const void *caller = CALLER;
  if (!p) return allocate(size, 0, false, trace::kRealloc, caller);
  if (size == 0) {
    release(p, trace::kRealloc, caller);
    return nullptr;
  }
  if (is_boot(p)) {
    void *np = allocate(size, 0, false, trace::kRealloc, caller);
    if (np) memcpy(np, p, std::min<size_t>(size, g_boot + sizeof g_boot - static_cast<char *>(p)));
    return np;
  }
  if (g_profiling && !hm_inside_hook) {
    // Profiled large objects have mappings of their own (referenced bytes per object): an array
    // that grows past the threshold moves into one, and one that leaves it is recorded as freed
    // and forgotten, whichever allocator held it before.
    const bool mine = hm_is_hetmems(p);
    const size_t old = mine ? hm_usable_size(p) : g_real.usable(p);
    if (size >= g_large || (mine && old >= g_large)) {
      if (mine && size <= old && size >= old / 2) return p;  // in place, as hm_realloc would
      if (mine && size > old)
        if (void *np = grow_large(p, old, size, caller)) return np;
      return reallocate_by_copy(p, old, size, caller);
    }
  }
  const bool mine = hm_is_hetmems(p);
  if (g_rules && !mine && size >= g_fast.libc_below.load(std::memory_order_relaxed) && !hm_inside_hook &&
      !from_self(caller)) {
    // A call site that grows its objects with realloc (sqlite's allocation wrapper, a vector's
    // growth in C) is placed as the rules say: a block of the C library that a rule sends to a
    // tier or a class moves there, copied, as realloc may move it anyway.
    RulesPlacement d;
    {
      Inside inside;
      d = rules_placement(size, caller);
    }
    if (d.target != HM_RULES_LIBC) return reallocate_by_copy(p, g_real.usable(p), size, caller, &d);
  }
  const bool direct = mine && direct_tier(caller) >= 0;  // `all -> TIER` rules: the thread cache's paths
  Inside inside;
  void *np = !mine ? g_real.realloc(p, size) : direct ? hm_direct_realloc(p, size) : hm_realloc(p, size);
  if (np && g_profiling) {
    hm_profile_record(trace::kFree, trace::kRealloc, p, 0, caller);
    hm_profile_record(trace::kAlloc, trace::kRealloc, np, size, caller);
  }
  return np;
}

HM_EXPORT void *reallocarray(void *p, size_t n, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(n, size, &total)) {
    errno = ENOMEM;
    return nullptr;
  }
  return realloc(p, total);
}

HM_EXPORT int posix_memalign(void **out, size_t align, size_t size) {
  if (align < sizeof(void *) || (align & (align - 1))) return EINVAL;
  if (__builtin_expect(!ready(), 0)) {
    *out = boot_alloc(size);
    return *out ? 0 : ENOMEM;
  }
  void *p = allocate(size, align, false, trace::kPosixMemalign, CALLER);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}

// aligned_alloc and memalign: EINVAL unless the alignment is a power of two.
static void *aligned_entry(size_t align, size_t size, trace::Fn fn, const void *caller) {
  if (!align || (align & (align - 1))) {
    errno = EINVAL;
    return nullptr;
  }
  if (__builtin_expect(!ready(), 0)) return boot_alloc(size);
  return allocate(size, align, false, fn, caller);
}

HM_EXPORT void *aligned_alloc(size_t align, size_t size) {
  return aligned_entry(align, size, trace::kAlignedAlloc, CALLER);
}

HM_EXPORT void *memalign(size_t align, size_t size) { return aligned_entry(align, size, trace::kMemalign, CALLER); }

HM_EXPORT void *valloc(size_t size) {
  if (__builtin_expect(!ready(), 0)) return boot_alloc(size);
  return allocate(size, 4096, false, trace::kValloc, CALLER);
}

HM_EXPORT void *pvalloc(size_t size) {
  if (__builtin_expect(!ready(), 0)) return boot_alloc(size);
  size_t rounded = (size + 4095) & ~size_t{4095};
  return allocate(rounded ? rounded : 4096, 4096, false, trace::kPvalloc, CALLER);
}

// The C library's statistics describe its own arenas; the bytes hetmem's tiers hold for the
// program are added as mmap'd space (hblkhd), where the C library counts its own large blocks,
// so a program's "memory in use" (uordblks + hblkhd) stays whole.
namespace {
uint64_t hetmem_in_use(uint64_t *blocks) {
  uint64_t bytes = 0, count = 0;
  if (!g_started) return 0;
  Inside inside;
  for (int t = 0; t < hm_tier_count(); ++t) {
    hm_tier_stats_t st;
    if (hm_tier_stats(t, &st) != HM_OK) continue;
    bytes += st.in_use;
    count += st.allocs > st.frees ? st.allocs - st.frees : 0;
  }
  *blocks = count;
  return bytes;
}
}  // namespace

namespace {
constinit Found<struct mallinfo2 (*)()> g_mallinfo2{Lookup::kNext, "mallinfo2"};
constinit Found<struct mallinfo (*)()> g_mallinfo{Lookup::kNext, "mallinfo"};
constinit Found<int (*)(void *)> g_dlclose{Lookup::kNext, "dlclose"};
}  // namespace

HM_EXPORT struct mallinfo2 mallinfo2(void) {
  struct mallinfo2 m {};
  if (auto real = g_mallinfo2.get()) m = real();
  uint64_t blocks = 0, bytes = hetmem_in_use(&blocks);
  m.hblkhd += bytes;
  m.hblks += blocks;
  return m;
}

HM_EXPORT struct mallinfo mallinfo(void) {
  struct mallinfo m {};
  if (auto real = g_mallinfo.get()) m = real();
  uint64_t blocks = 0, bytes = hetmem_in_use(&blocks);
  // The C library's own int fields wrap modulo 2^32 beyond 2 GiB; these do likewise.
  m.hblkhd = static_cast<int>(static_cast<uint32_t>(static_cast<uint64_t>(static_cast<uint32_t>(m.hblkhd)) + bytes));
  m.hblks = static_cast<int>(static_cast<uint32_t>(static_cast<uint64_t>(static_cast<uint32_t>(m.hblks)) + blocks));
  return m;
}

HM_EXPORT size_t malloc_usable_size(void *p) {
  if (!p || is_boot(p) || !ready()) return 0;
  if (hm_is_hetmems(p)) return hm_usable_size(p);
  return g_real.usable(p);
}

// operator new and delete, every form. They do not call the C library's operator new (which
// would come back through malloc and be recorded twice).
HM_EXPORT void *_Znwm(size_t n) { return new_entry(n, trace::kNew, CALLER, false); }
HM_EXPORT void *_Znam(size_t n) { return new_entry(n, trace::kNewArray, CALLER, false); }
HM_EXPORT void *_ZnwmRKSt9nothrow_t(size_t n, const std::nothrow_t &) { return new_entry(n, trace::kNew, CALLER, true); }
HM_EXPORT void *_ZnamRKSt9nothrow_t(size_t n, const std::nothrow_t &) {
  return new_entry(n, trace::kNewArray, CALLER, true);
}
HM_EXPORT void *_ZnwmSt11align_val_t(size_t n, std::align_val_t a) {
  return new_impl(n, static_cast<size_t>(a), trace::kNew, CALLER, false);
}
HM_EXPORT void *_ZnamSt11align_val_t(size_t n, std::align_val_t a) {
  return new_impl(n, static_cast<size_t>(a), trace::kNewArray, CALLER, false);
}
HM_EXPORT void *_ZnwmSt11align_val_tRKSt9nothrow_t(size_t n, std::align_val_t a, const std::nothrow_t &) {
  return new_impl(n, static_cast<size_t>(a), trace::kNew, CALLER, true);
}
HM_EXPORT void *_ZnamSt11align_val_tRKSt9nothrow_t(size_t n, std::align_val_t a, const std::nothrow_t &) {
  return new_impl(n, static_cast<size_t>(a), trace::kNewArray, CALLER, true);
}

#define HM_DELETE(name, params, fn)                                           \
  HM_EXPORT void name params {                                                \
    if (__builtin_expect(frees_to_libc(p), 1)) return g_real.free(p);        \
    free_slow(p, trace::fn, CALLER);                                          \
  }
HM_DELETE(_ZdlPv, (void *p), kDelete)
HM_DELETE(_ZdaPv, (void *p), kDeleteArray)
HM_DELETE(_ZdlPvm, (void *p, size_t), kDelete)
HM_DELETE(_ZdaPvm, (void *p, size_t), kDeleteArray)
HM_DELETE(_ZdlPvSt11align_val_t, (void *p, std::align_val_t), kDelete)
HM_DELETE(_ZdaPvSt11align_val_t, (void *p, std::align_val_t), kDeleteArray)
HM_DELETE(_ZdlPvmSt11align_val_t, (void *p, size_t, std::align_val_t), kDelete)
HM_DELETE(_ZdaPvmSt11align_val_t, (void *p, size_t, std::align_val_t), kDeleteArray)
HM_DELETE(_ZdlPvRKSt9nothrow_t, (void *p, const std::nothrow_t &), kDelete)
HM_DELETE(_ZdaPvRKSt9nothrow_t, (void *p, const std::nothrow_t &), kDeleteArray)
HM_DELETE(_ZdlPvSt11align_val_tRKSt9nothrow_t, (void *p, std::align_val_t, const std::nothrow_t &), kDelete)
HM_DELETE(_ZdaPvSt11align_val_tRKSt9nothrow_t, (void *p, std::align_val_t, const std::nothrow_t &), kDeleteArray)

// The exec family. The C library's own execl/execvp reach execve internally, past any
// interposition, so each public entry is hooked: the trace is written out before the process
// image is replaced (events still buffered would otherwise vanish with it).
namespace {

template <class Fn>
Fn real_exec(const char *name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

// Not when this thread is already inside a hook: a signal handler that execs or _exits may have
// interrupted the profiler while it held a buffer's lock.
void before_exec(const char *program) {
  if (g_profiling && !hm_inside_hook) {
    Inside inside;
    hm_profile_before_exec(program);
  }
}

// One exec-family entry: the trace written out, then the C library's own `name` with the same
// arguments (ENOSYS, as the call itself would fail, when an older C library lacks it).
template <class... Args>
int exec_through(const char *name, const char *program, Args... args) {
  before_exec(program);
  auto real = real_exec<int (*)(Args...)>(name);
  if (!real) {
    errno = ENOSYS;
    return -1;
  }
  return real(args...);
}

// The arguments of execl/execlp/execle after `first`, up to the terminating null pointer, into
// argv (on the caller's stack: the heap may be a tier the exec is about to discard). false (E2BIG)
// when there are more than fit.
constexpr int kMaxExecArgs = 4096;

bool collect_args(const char *first, va_list *ap, const char **argv) {
  int n = 0;
  argv[n++] = first;
  while (argv[n - 1] && n <= kMaxExecArgs) argv[n++] = va_arg(*ap, const char *);
  if (!argv[n - 1]) return true;
  errno = E2BIG;
  return false;
}

}  // namespace

HM_EXPORT int execve(const char *path, char *const argv[], char *const envp[]) {
  return exec_through("execve", path, path, argv, envp);
}

HM_EXPORT int execv(const char *path, char *const argv[]) { return exec_through("execv", path, path, argv); }

HM_EXPORT int execvp(const char *file, char *const argv[]) { return exec_through("execvp", file, file, argv); }

HM_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[]) {
  return exec_through("execvpe", file, file, argv, envp);
}

HM_EXPORT int fexecve(int fd, char *const argv[], char *const envp[]) {
  return exec_through("fexecve", nullptr, fd, argv, envp);
}

HM_EXPORT int execveat(int dirfd, const char *path, char *const argv[], char *const envp[], int flags) {
  return exec_through("execveat", path, dirfd, path, argv, envp, flags);
}

// _exit and _Exit run no destructors: the trace is finished here instead (shells such as dash
// leave through _exit).
HM_EXPORT void _exit(int status) {
  if (g_profiling && !hm_inside_hook) {  // not cleared: a vfork child shares it with its parent
    Inside inside;
    hm_profile_before_exit();
  }
  if (g_started && g_root && !hm_inside_hook && getpid() == g_root_pid) {
    Inside inside;
    end_iterations();
    finish_run();
  }
  if (auto real = real_exec<void (*)(int)>("_exit")) real(status);
  syscall(SYS_exit_group, status);  // never returns
  __builtin_unreachable();
}

HM_EXPORT void _Exit(int status) { _exit(status); }

namespace {
int loaded_object_count() {
  int n = 0;
  dl_iterate_phdr([](dl_phdr_info *, size_t, void *count) { return ++*static_cast<int *>(count), 0; }, &n);
  return n;
}
}  // namespace

// A module unloaded may leave its addresses to another one: the rules' answers for call sites in
// it are forgotten and asked again. Most dlclose calls (Open MPI closes every component it opened
// to look at) only lower a reference count: the objects loaded are counted before and after.
HM_EXPORT int dlclose(void *handle) {
  auto real = g_dlclose.get();
  if (!real) {
    errno = ENOSYS;
    return -1;
  }
  const int before = g_rules ? loaded_object_count() : 0;
  int rc = real(handle);
  if (rc == 0 && g_rules && loaded_object_count() < before) hm_rules_forget_sites();
  return rc;
}

HM_EXPORT int execl(const char *path, const char *arg, ...) {
  const char *argv[kMaxExecArgs + 1];
  va_list ap;
  va_start(ap, arg);
  bool ok = collect_args(arg, &ap, argv);
  va_end(ap);
  return ok ? execv(path, const_cast<char *const *>(argv)) : -1;
}

HM_EXPORT int execlp(const char *file, const char *arg, ...) {
  const char *argv[kMaxExecArgs + 1];
  va_list ap;
  va_start(ap, arg);
  bool ok = collect_args(arg, &ap, argv);
  va_end(ap);
  return ok ? execvp(file, const_cast<char *const *>(argv)) : -1;
}

HM_EXPORT int execle(const char *path, const char *arg, ...) {
  const char *argv[kMaxExecArgs + 1];
  va_list ap;
  va_start(ap, arg);
  bool ok = collect_args(arg, &ap, argv);
  char *const *envp = ok ? va_arg(ap, char *const *) : nullptr;  // after the null pointer
  va_end(ap);
  return ok ? execve(path, const_cast<char *const *>(argv), envp) : -1;
}
