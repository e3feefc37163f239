#include "preload/entry_hook.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstring>

#include "prim/elf.h"

namespace hm::preload {
namespace {

void (*g_on_entry)() = nullptr;  // called before every redirected call

}  // namespace
}  // namespace hm::preload

extern "C" __attribute__((visibility("hidden"), used)) void hm_preload_entry_called() {
  if (hm::preload::g_on_entry) hm::preload::g_on_entry();
}

extern "C" {
__attribute__((visibility("hidden"), used)) void *hm_preload_entry_target = nullptr;
}

#if defined(__x86_64__)
// The trampoline: the argument registers (integer, vector, rax for varargs, r10 for static
// chains) are saved around the call of hm_preload_entry_called, whose ABI keeps the rest; then a
// jump (not a call) to the function, so its return goes straight back to the program.
asm(R"(
  .text
  .p2align 4
  .type hm_preload_entry_trampoline, @function
hm_preload_entry_trampoline:
  pushq %rdi
  pushq %rsi
  pushq %rdx
  pushq %rcx
  pushq %r8
  pushq %r9
  pushq %rax
  pushq %r10
  subq $136, %rsp
  movdqu %xmm0, 0(%rsp)
  movdqu %xmm1, 16(%rsp)
  movdqu %xmm2, 32(%rsp)
  movdqu %xmm3, 48(%rsp)
  movdqu %xmm4, 64(%rsp)
  movdqu %xmm5, 80(%rsp)
  movdqu %xmm6, 96(%rsp)
  movdqu %xmm7, 112(%rsp)
  call hm_preload_entry_called
  movdqu 0(%rsp), %xmm0
  movdqu 16(%rsp), %xmm1
  movdqu 32(%rsp), %xmm2
  movdqu 48(%rsp), %xmm3
  movdqu 64(%rsp), %xmm4
  movdqu 80(%rsp), %xmm5
  movdqu 96(%rsp), %xmm6
  movdqu 112(%rsp), %xmm7
  addq $136, %rsp
  popq %r10
  popq %rax
  popq %r9
  popq %r8
  popq %rcx
  popq %rdx
  popq %rsi
  popq %rdi
  jmpq *hm_preload_entry_target(%rip)
  .size hm_preload_entry_trampoline, .-hm_preload_entry_trampoline
)");
extern "C" void hm_preload_entry_trampoline();
#define HM_HAVE_TRAMPOLINE 1
#endif

namespace hm::preload {

namespace {

// The symbol a C++ name (`LAMMPS_NS::Neighbor::decide`, with or without its parameters) stands
// for: the one the loaded objects call through the dynamic linker by that name. False, saying why
// in `detail`, when none or several are.
bool symbol_of_cxx_name(const char *name, char *symbol, size_t symbol_len, char (&detail)[256]) {
  char found[1024];
  const int n = hm_elf_calls_named(name, found, sizeof found, reinterpret_cast<void *>(&hook_entries), nullptr);
  if (n == 1) {
    const size_t len = std::strcspn(found, "\n");
    if (len >= symbol_len) {
      std::snprintf(detail, sizeof detail, "%.160s: its symbol is longer than %zu characters", name, symbol_len - 1);
      return false;
    }
    std::memcpy(symbol, found, len);
    symbol[len] = '\0';
    return true;
  }
  for (char *c = found; *c; ++c)
    if (*c == '\n') *c = c[1] ? ',' : '\0';
  if (n > 1)
    std::snprintf(detail, sizeof detail, "%.50s names %d functions the program calls (%.120s): give one symbol", name,
                  n, found);
  else
    std::snprintf(detail, sizeof detail, "no loaded object calls a function named %.160s through the dynamic linker",
                  name);
  return false;
}

}  // namespace

EntryHookResult hook_entries(const char *name, void (*on_entry)()) {
  EntryHookResult result;
  // A C++ name is resolved here, in the program, where `hetmem run` resolves it before the start:
  // any launcher (hetmem-run on each MPI rank, a bare LD_PRELOAD) may pass it.
  char cxx_symbol[512];
  const char *symbol = name;
  if (std::strpbrk(name, ":( ")) {
    if (!symbol_of_cxx_name(name, cxx_symbol, sizeof cxx_symbol, result.detail)) return result;
    symbol = cxx_symbol;
  }
  void *target = dlsym(RTLD_DEFAULT, symbol);
  result.defined = target != nullptr;
  if (!target) {
    std::snprintf(result.detail, sizeof result.detail, "no loaded object exports a function named %.200s", symbol);
    return result;
  }
#ifdef HM_HAVE_TRAMPOLINE
  g_on_entry = on_entry;
  hm_preload_entry_target = target;
  // This library's own calls are left alone (the trampoline would call itself).
  result.slots = hm_elf_redirect_calls(symbol, reinterpret_cast<void *>(&hm_preload_entry_trampoline),
                                       reinterpret_cast<void *>(&hook_entries), nullptr, 1);
  if (!result.slots)
    std::snprintf(result.detail, sizeof result.detail,
                  "%.100s is defined, but no loaded object calls it through the dynamic linker (its calls are "
                  "direct, inside the object that defines it)", symbol);
#else
  (void)on_entry;
  std::snprintf(result.detail, sizeof result.detail, "entry hooks exist for x86-64 only");
#endif
  return result;
}

bool called_outside(const char *const *symbols, int count) {
#ifdef HM_HAVE_TRAMPOLINE
  // The library that defines the symbols calls its own functions as it likes; this one too.
  return hm_elf_count_calls(symbols, count, reinterpret_cast<void *>(&hook_entries), dlsym(RTLD_DEFAULT, symbols[0])) >
         0;
#else
  (void)symbols;
  (void)count;
  return false;
#endif
}

}  // namespace hm::preload
