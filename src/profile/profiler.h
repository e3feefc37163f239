// The heap and phase profiler core: per-thread event buffers written as compressed blocks, call
// sites interned once, phases and iterations, per-object referenced bytes. The preload library
// calls it from its hooks; tests call it directly.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "profile/trace_format.h"

namespace hm::profile {

struct Options {
  std::string path;           // the trace file
  int depth = 8;              // return addresses recorded per call site (0: none)
  uint64_t large = 1 << 20;   // objects at least this large: per-phase referenced bytes
  uint64_t stack_min = 4096;  // smaller allocations: the caller's address only, no stack walk
  uint64_t sample = 0;        // mean bytes between recorded smaller allocations (0: every one; sampling.h)
};

extern std::atomic<bool> g_active;
inline bool active() { return g_active.load(std::memory_order_relaxed); }

// Subscribes the profiler to phase and iteration events (alloc/phases.h); idempotent.
void install_phase_trace();
// Opens the trace and starts recording. HM_EIO if the file cannot be written.
int start(const Options &options);
// Flushes every thread's buffer, writes the module map and the end record, closes the trace.
int stop();
// Flushes the calling thread's buffer (and, with all = true, every thread's).
void flush(bool all);
// Records an event. `caller` is the return address of the hooked call (the first frame that
// belongs to the program), used to drop the profiler's own frames from the call stack.
void record(trace::Op op, trace::Fn fn, const void *ptr, size_t size, const void *caller);
// hm_profile_site_name: names the calling thread's allocation sites until NULL.
int set_site_name(const char *name);
// Calls on_change(1 or 0) now and at each start and stop of recording (hm_profile_watch).
int watch(void (*on_change)(int active));
// Large objects whose referenced bytes each phase reports.
void note_large(const void *ptr, size_t size);
void forget_large(const void *ptr);
uint64_t large_threshold();
std::vector<std::pair<uintptr_t, size_t>> large_objects();  // a snapshot
size_t large_object_count();
// In a child after fork: the parent's buffers are dropped; with follow = true the child starts its
// own trace (path.PID), else it records nothing.
void after_fork_in_child(bool follow);
// Before an exec-family call: the buffered events, the loaded objects and an exec record written,
// so that the trace is whole if the exec succeeds (and goes on if it fails).
void before_exec(const char *program);
// Before _exit (which runs no destructors): the trace finished as by stop(), unless this process
// is a vfork child sharing its parent's trace.
void before_exit();
// Writes one record (head + payload + extra) with a single write. Used by phases.
int write_record(uint32_t type, const void *payload, size_t bytes, const void *extra = nullptr, size_t extra_bytes = 0);
uint64_t now();  // ns since the trace started (or since the process loaded the profiler)
uint16_t current_phase();
void set_current_phase(uint16_t phase);
// Whether the last stop or a failed write disabled recording, and why.
const char *failure();

}  // namespace hm::profile
