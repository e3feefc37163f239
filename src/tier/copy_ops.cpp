#include "tier/copy_ops.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "prim/prim.h"

namespace hm {
namespace {

size_t g_nt_threshold = size_t{8} << 20;
thread_local bool t_streaming = false;
constexpr size_t kStreamingMin = 4096;

#if defined(__x86_64__)
__attribute__((target("avx2"))) void nt_copy_avx2(char *d, const char *s, size_t n) {
  for (size_t i = 0; i < n; i += 128) {
    __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(s + i));
    __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(s + i + 32));
    __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(s + i + 64));
    __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(s + i + 96));
    _mm256_stream_si256(reinterpret_cast<__m256i *>(d + i), a);
    _mm256_stream_si256(reinterpret_cast<__m256i *>(d + i + 32), b);
    _mm256_stream_si256(reinterpret_cast<__m256i *>(d + i + 64), c);
    _mm256_stream_si256(reinterpret_cast<__m256i *>(d + i + 96), e);
  }
  _mm_sfence();
}

void nt_copy_sse2(char *d, const char *s, size_t n) {
  for (size_t i = 0; i < n; i += 64) {
    __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i *>(s + i));
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i *>(s + i + 16));
    __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i *>(s + i + 32));
    __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i *>(s + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i *>(d + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i *>(d + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i *>(d + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i *>(d + i + 48), e);
  }
  _mm_sfence();
}
#endif

void copy_plain(void *dst, const void *src, size_t n, Tier *, Tier *) { fast_copy(dst, src, n); }

void copy_from_emulated(void *dst, const void *src, size_t n, Tier *, Tier *src_tier) {
  fast_copy(dst, src, n);
  charge_copy(*src_tier, src, n, true, false);
}

void copy_to_emulated(void *dst, const void *src, size_t n, Tier *dst_tier, Tier *) {
  fast_copy(dst, src, n);
  charge_copy(*dst_tier, dst, n, false, true);
}

void copy_emulated_both(void *dst, const void *src, size_t n, Tier *dst_tier, Tier *src_tier) {
  fast_copy(dst, src, n);
  if (dst_tier == src_tier && !src_tier->charge_model) {
    emul_charge(*src_tier->profile, src_tier->emul, n, n, 0, kEmulCopy);
  } else {
    charge_copy(*src_tier, src, n, true, false);
    charge_copy(*dst_tier, dst, n, false, true);
  }
}

struct Row {
  hm_tier_kind_t src, dst;
  CopyOp op;
};

// The table. File tiers copy like memory: durability is the persistent layer's business.
constexpr Row kRows[] = {
    {HM_KIND_DRAM, HM_KIND_DRAM, copy_plain},         {HM_KIND_DRAM, HM_KIND_NUMA, copy_plain},
    {HM_KIND_DRAM, HM_KIND_FILE, copy_plain},         {HM_KIND_DRAM, HM_KIND_EMUL, copy_to_emulated},
    {HM_KIND_NUMA, HM_KIND_DRAM, copy_plain},         {HM_KIND_NUMA, HM_KIND_NUMA, copy_plain},
    {HM_KIND_NUMA, HM_KIND_FILE, copy_plain},         {HM_KIND_NUMA, HM_KIND_EMUL, copy_to_emulated},
    {HM_KIND_FILE, HM_KIND_DRAM, copy_plain},         {HM_KIND_FILE, HM_KIND_NUMA, copy_plain},
    {HM_KIND_FILE, HM_KIND_FILE, copy_plain},         {HM_KIND_FILE, HM_KIND_EMUL, copy_to_emulated},
    {HM_KIND_EMUL, HM_KIND_DRAM, copy_from_emulated}, {HM_KIND_EMUL, HM_KIND_NUMA, copy_from_emulated},
    {HM_KIND_EMUL, HM_KIND_FILE, copy_from_emulated}, {HM_KIND_EMUL, HM_KIND_EMUL, copy_emulated_both},
};

struct Table {
  CopyOp op[HM_KIND_COUNT][HM_KIND_COUNT] = {};
  constexpr Table() {
    for (const Row &r : kRows) op[r.src][r.dst] = r.op;
  }
};
constexpr Table kTable;  // built by the compiler: no code at the library's load

}  // namespace

void set_nt_threshold(size_t bytes) { g_nt_threshold = bytes; }
void set_thread_streaming_copies(bool on) { t_streaming = on; }

void charge_copy(Tier &t, const void *addr, size_t n, bool read, bool write) {
  DeviceVolume v = tier_device_range(t, addr, n, read, write);
  emul_charge(*t.profile, t.emul, v.read, v.write, v.dependent, kEmulCopy);
}

void charge_move_in_place(Tier &from, Tier &to, const void *addr, size_t n) {
  if (from.emulated()) charge_copy(from, addr, n, true, false);
  if (to.emulated()) charge_copy(to, addr, n, false, true);
}

void fast_copy(void *dst, const void *src, size_t n) {
#if defined(__x86_64__)
  if (n >= g_nt_threshold || (t_streaming && n >= kStreamingMin)) {
    char *d = static_cast<char *>(dst);
    const char *s = static_cast<const char *>(src);
    // Align the destination to 64 bytes for streaming stores; copy the ends normally.
    size_t head = (64 - (reinterpret_cast<uintptr_t>(d) & 63)) & 63;
    std::memcpy(d, s, head);
    size_t body = (n - head) & ~size_t{127};
    if (prim::cpu_has(prim::CpuFeature::kAvx2)) nt_copy_avx2(d + head, s + head, body);
    else nt_copy_sse2(d + head, s + head, body);
    std::memcpy(d + head + body, s + head + body, n - head - body);
    return;
  }
#endif
  std::memcpy(dst, src, n);
}

CopyOp copy_op(hm_tier_kind_t src, hm_tier_kind_t dst) { return kTable.op[src][dst]; }

void tier_copy(void *dst, const void *src, size_t n, Tier *dst_tier, Tier *src_tier) {
  hm_tier_kind_t sk = src_tier ? src_tier->kind : HM_KIND_DRAM;
  hm_tier_kind_t dk = dst_tier ? dst_tier->kind : HM_KIND_DRAM;
  copy_op(sk, dk)(dst, src, n, dst_tier, src_tier);
}

}  // namespace hm
