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

namespace hm::profile {

// Before a trace starts recording: the mean bytes between samples (0: every allocation) and the
// size from which every allocation is recorded. HM_ENOMEM when the table's first pages cannot be
// mapped.
int sampling_start(uint64_t mean_bytes, uint64_t every_from);
// When a trace stops: every remembered allocation forgotten.
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
