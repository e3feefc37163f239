// Which allocations a profile records. Every allocation of HM_PROFILE_SAMPLE bytes or more (or of
// HM_PROFILE_LARGE or more: the objects placement is about) is recorded; a smaller one is recorded
// when a sample point of a Poisson process over the bytes the thread allocates falls inside it,
// one every HM_PROFILE_SAMPLE bytes on average, so with probability 1 - exp(-size / mean), and its
// events then stand for 1 / that many allocations of its size (the estimate of tcmalloc's and
// jemalloc's sampled heap profiles). The free of a recorded allocation is recorded; a sampled
// pointer is found again through a table of the live sampled allocations behind a counting filter,
// so an unsampled free costs one load. A mean of 0 records every allocation and every free.
#pragma once
#include <cstddef>
#include <cstdint>

// The sampler's state that the preload library's malloc and free read without a call (exported
// from libhetmem.so, not part of the public API).
extern "C" {
// Bytes the calling thread may still allocate before its next sample point (0: none drawn yet).
extern __thread int64_t hm_profile_bytes_to_sample __attribute__((visibility("default"), tls_model("initial-exec")));
// Allocations smaller than this are sampled (0: every allocation is recorded, or no profile).
extern uint64_t hm_profile_sample_below __attribute__((visibility("default")));
// The counting filter of sampled live pointers (nullptr when every free is recorded).
extern const uint8_t *hm_profile_sample_filter __attribute__((visibility("default")));
}

namespace hm::profile {

// The filter's byte for `ptr`: one per 16-byte granule of a 2 MiB window of addresses (sampling.cpp).
constexpr size_t kSampleFilterBytes = size_t{1} << 17;
inline size_t sample_filter_index(const void *ptr) {
  return (reinterpret_cast<uintptr_t>(ptr) >> 4) & (kSampleFilterBytes - 1);
}

// An allocation of `size` bytes the sampler skips: true, and its bytes counted; false when it may
// be recorded (nothing changed: sample_allocation decides).
inline bool skips_allocation(size_t size) {
  if (size >= __atomic_load_n(&hm_profile_sample_below, __ATOMIC_RELAXED)) return false;
  if (hm_profile_bytes_to_sample <= static_cast<int64_t>(size)) return false;
  hm_profile_bytes_to_sample -= static_cast<int64_t>(size);
  return true;
}

// A free whose allocation was certainly not recorded (the filter has no sampled pointer there).
inline bool skips_free(const void *ptr) {
  const uint8_t *filter = __atomic_load_n(&hm_profile_sample_filter, __ATOMIC_RELAXED);
  return filter && __atomic_load_n(filter + sample_filter_index(ptr), __ATOMIC_RELAXED) == 0;
}

// Before a trace starts recording: the mean bytes between samples (0: every allocation) and the
// size from which every allocation is recorded. HM_ENOMEM when the filter cannot be mapped.
int sampling_start(uint64_t mean_bytes, uint64_t every_from);
// Before a trace that follows another in the same process: every remembered allocation forgotten.
void sampling_clear();
// In a child after fork: another thread of the parent may have held the table.
void sampling_after_fork();

// Whether the allocation of `size` bytes at `ptr` is recorded; if so its free will be.
bool sample_allocation(const void *ptr, size_t size);
// Whether the free of `ptr` is recorded: its allocation was (it is forgotten now).
bool sampled_free(const void *ptr);

// Live sampled allocations remembered (for tests).
size_t sampled_live();

}  // namespace hm::profile
