#include "preload/entry_hook.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

namespace hm::preload {
namespace {

void (*g_on_entry)() = nullptr;  // called before every redirected call

}  // namespace
}  // namespace hm::preload

extern "C" __attribute__((visibility("hidden"), used)) void hm_preload_entry_called() {
  if (hm::preload::g_on_entry) hm::preload::g_on_entry();
}

extern "C" __attribute__((visibility("hidden"), used)) void *hm_preload_entry_target = nullptr;

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
#define HM_JUMP_SLOT R_X86_64_JUMP_SLOT
#endif

namespace hm::preload {
namespace {

struct Search {
  const char *symbol;
  int slots;
  const void *skip[2];  // addresses inside objects whose slots are left alone (this library, ...)
  bool patch;           // false: count the slots only
};

// The dynamic section's addresses: relocated in place by the C library's loader on most targets,
// file-relative elsewhere (and in the vDSO).
uintptr_t dyn_address(uintptr_t value, uintptr_t base) { return value < base ? value + base : value; }

bool inside(const dl_phdr_info *info, const void *addr) {
  auto a = reinterpret_cast<uintptr_t>(addr);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr) &ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_LOAD && a >= info->dlpi_addr + ph.p_vaddr && a < info->dlpi_addr + ph.p_vaddr + ph.p_memsz)
      return true;
  }
  return false;
}

#ifdef HM_HAVE_TRAMPOLINE
int patch_object(dl_phdr_info *info, size_t, void *data) {
  auto *search = static_cast<Search *>(data);
  for (const void *skip : search->skip)
    if (skip && inside(info, skip)) return 0;
  const ElfW(Dyn) *dyn = nullptr;
  uintptr_t relro_start = 0, relro_end = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr) &ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_DYNAMIC) dyn = reinterpret_cast<const ElfW(Dyn) *>(info->dlpi_addr + ph.p_vaddr);
    if (ph.p_type == PT_GNU_RELRO) {
      relro_start = info->dlpi_addr + ph.p_vaddr;
      relro_end = relro_start + ph.p_memsz;
    }
  }
  if (!dyn) return 0;
  const uintptr_t base = info->dlpi_addr;
  const ElfW(Sym) *symtab = nullptr;
  const char *strtab = nullptr;
  const ElfW(Rela) *jmprel = nullptr;
  size_t jmprel_bytes = 0;
  bool rela = false;
  for (const ElfW(Dyn) *d = dyn; d->d_tag != DT_NULL; ++d) {
    switch (d->d_tag) {
      case DT_SYMTAB: symtab = reinterpret_cast<const ElfW(Sym) *>(dyn_address(d->d_un.d_ptr, base)); break;
      case DT_STRTAB: strtab = reinterpret_cast<const char *>(dyn_address(d->d_un.d_ptr, base)); break;
      case DT_JMPREL: jmprel = reinterpret_cast<const ElfW(Rela) *>(dyn_address(d->d_un.d_ptr, base)); break;
      case DT_PLTRELSZ: jmprel_bytes = d->d_un.d_val; break;
      case DT_PLTREL: rela = d->d_un.d_val == DT_RELA; break;
      default: break;
    }
  }
  if (!symtab || !strtab || !jmprel || !rela) return 0;
  const long page = sysconf(_SC_PAGESIZE);
  for (size_t i = 0; i < jmprel_bytes / sizeof(ElfW(Rela)); ++i) {
    const ElfW(Rela) &r = jmprel[i];
    if (ELF64_R_TYPE(r.r_info) != HM_JUMP_SLOT) continue;
    const ElfW(Sym) &sym = symtab[ELF64_R_SYM(r.r_info)];
    if (std::strcmp(strtab + sym.st_name, search->symbol) != 0) continue;
    if (!search->patch) {
      ++search->slots;
      continue;
    }
    auto slot = base + r.r_offset;
    auto *slot_page = reinterpret_cast<void *>(slot & ~static_cast<uintptr_t>(page - 1));
    bool in_relro = slot >= relro_start && slot < relro_end;
    if (in_relro && mprotect(slot_page, static_cast<size_t>(page), PROT_READ | PROT_WRITE) != 0) continue;
    __atomic_store_n(reinterpret_cast<void **>(slot), reinterpret_cast<void *>(&hm_preload_entry_trampoline),
                     __ATOMIC_RELEASE);
    if (in_relro) mprotect(slot_page, static_cast<size_t>(page), PROT_READ);
    ++search->slots;
  }
  return 0;
}
#endif

}  // namespace

EntryHookResult hook_entries(const char *symbol, void (*on_entry)()) {
  EntryHookResult result;
  void *target = dlsym(RTLD_DEFAULT, symbol);
  result.defined = target != nullptr;
  if (!target) {
    std::snprintf(result.detail, sizeof result.detail, "no loaded object exports a function named %s", symbol);
    return result;
  }
#ifdef HM_HAVE_TRAMPOLINE
  g_on_entry = on_entry;
  hm_preload_entry_target = target;
  Search search{symbol, 0, {reinterpret_cast<void *>(&hook_entries), nullptr}, true};
  dl_iterate_phdr(patch_object, &search);
  result.slots = search.slots;
  if (!result.slots)
    std::snprintf(result.detail, sizeof result.detail,
                  "%s is defined, but no loaded object calls it through the dynamic linker (its calls are direct, "
                  "inside the object that defines it)", symbol);
#else
  (void)on_entry;
  std::snprintf(result.detail, sizeof result.detail, "entry hooks exist for x86-64 only");
#endif
  return result;
}

bool called_outside(const char *symbol) {
#ifdef HM_HAVE_TRAMPOLINE
  // The library that defines the symbol calls its own functions as it likes; this one too.
  Search search{symbol, 0, {reinterpret_cast<void *>(&hook_entries), dlsym(RTLD_DEFAULT, symbol)}, false};
  dl_iterate_phdr(patch_object, &search);
  return search.slots > 0;
#else
  (void)symbol;
  return false;
#endif
}

}  // namespace hm::preload
