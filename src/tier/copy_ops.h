// Copies between tiers, looked up in one table keyed by (source kind, destination kind)
// (Umpire's MemoryOperationRegistry): adding a tier kind adds rows, not branches at call sites.
#pragma once
#include <cstddef>

#include "tier/tier.h"

namespace hm {

// `src_tier`/`dst_tier` may be nullptr for memory hetmem does not own (treated as DRAM).
using CopyOp = void (*)(void *dst, const void *src, size_t n, Tier *dst_tier, Tier *src_tier);

CopyOp copy_op(hm_tier_kind_t src, hm_tier_kind_t dst);
void tier_copy(void *dst, const void *src, size_t n, Tier *dst_tier, Tier *src_tier);

// The traffic of a copy on an emulated tier `t` (reading and/or writing n bytes at addr), through
// its charge model, charged as exact volume (HM_EMUL_COPY).
void charge_copy(Tier &t, const void *addr, size_t n, bool read, bool write);
// Pages that change tier where they are (a move or split inside one node, or an emulated tier):
// read as `from` and written as `to`, each charged when emulated.
void charge_move_in_place(Tier &from, Tier &to, const void *addr, size_t n);

// memcpy for small sizes; non-temporal stores at or above the threshold (HM_NT_THRESHOLD), or for
// every copy of 4 KiB or more on a thread that asked for streaming copies (the helper threads that
// stage tiles: what they write is read once, later, by another core).
void fast_copy(void *dst, const void *src, size_t n);
void set_nt_threshold(size_t bytes);
void set_thread_streaming_copies(bool on);

}  // namespace hm
