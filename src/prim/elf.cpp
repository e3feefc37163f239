#include "prim/elf.h"

#include <cxxabi.h>
#include <elf.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "prim/prim.h"

namespace hm::prim::elf {
namespace {

#if defined(__x86_64__)
constexpr uint32_t kJumpSlot = R_X86_64_JUMP_SLOT;
#else
constexpr uint32_t kJumpSlot = ~0u;  // no PLT slots are read elsewhere
#endif

const Elf64_Ehdr *header(const unsigned char *base) { return reinterpret_cast<const Elf64_Ehdr *>(base); }

}  // namespace

File::File(const void *data, size_t len) : base_(static_cast<const unsigned char *>(data)), len_(len) {
  if (!data || len < sizeof(Elf64_Ehdr)) return;
  const Elf64_Ehdr *eh = header(base_);
  valid_ = std::memcmp(eh->e_ident, ELFMAG, SELFMAG) == 0 && eh->e_ident[EI_CLASS] == ELFCLASS64 &&
           eh->e_shoff <= len && static_cast<size_t>(eh->e_shnum) * sizeof(Elf64_Shdr) <= len - eh->e_shoff &&
           eh->e_phoff <= len && static_cast<size_t>(eh->e_phnum) * sizeof(Elf64_Phdr) <= len - eh->e_phoff;
}

void File::for_each_function(Table table, FunctionFn fn, void *ctx) const {
  if (!valid_) return;
  const Elf64_Ehdr *eh = header(base_);
  auto *sh = reinterpret_cast<const Elf64_Shdr *>(base_ + eh->e_shoff);
  // kDefined: the full symbol table, else the dynamic one (a stripped file keeps only that).
  for (uint32_t want : {table == Table::kDefined ? uint32_t{SHT_SYMTAB} : uint32_t{SHT_DYNSYM}, uint32_t{SHT_DYNSYM}}) {
    bool found = false;
    for (int i = 0; i < eh->e_shnum; ++i) {
      if (sh[i].sh_type != want || sh[i].sh_link >= eh->e_shnum) continue;
      const Elf64_Shdr &strs = sh[sh[i].sh_link];
      if (sh[i].sh_offset > len_ || sh[i].sh_size > len_ - sh[i].sh_offset || strs.sh_offset > len_ ||
          strs.sh_size > len_ - strs.sh_offset)
        continue;
      found = true;
      auto *syms = reinterpret_cast<const Elf64_Sym *>(base_ + sh[i].sh_offset);
      const size_t n = sh[i].sh_size / sizeof(Elf64_Sym);
      const char *names = reinterpret_cast<const char *>(base_ + strs.sh_offset);
      for (size_t k = 0; k < n; ++k) {
        const Elf64_Sym &s = syms[k];
        if (ELF64_ST_TYPE(s.st_info) != STT_FUNC || s.st_value == 0 || s.st_shndx == SHN_UNDEF || s.st_name >= strs.sh_size ||
            !memchr(names + s.st_name, '\0', strs.sh_size - s.st_name))
          continue;
        fn(Function{names + s.st_name, s.st_value, s.st_size}, ctx);
      }
    }
    if (found || table == Table::kExported) break;
  }
}

size_t File::offset_of(uint64_t vaddr, size_t bytes) const {
  const Elf64_Ehdr *eh = header(base_);
  auto *ph = reinterpret_cast<const Elf64_Phdr *>(base_ + eh->e_phoff);
  for (int i = 0; i < eh->e_phnum; ++i) {
    if (ph[i].p_type != PT_LOAD || vaddr < ph[i].p_vaddr || vaddr - ph[i].p_vaddr > ph[i].p_filesz ||
        bytes > ph[i].p_filesz - (vaddr - ph[i].p_vaddr))
      continue;
    const uint64_t off = ph[i].p_offset + (vaddr - ph[i].p_vaddr);
    if (off <= len_ && bytes <= len_ - off) return off;
  }
  return SIZE_MAX;
}

Dynamic File::dynamic() const {
  Dynamic out;
  if (!valid_) return out;
  const Elf64_Ehdr *eh = header(base_);
  auto *ph = reinterpret_cast<const Elf64_Phdr *>(base_ + eh->e_phoff);
  const Elf64_Dyn *dyn = nullptr;
  size_t entries = 0;
  for (int i = 0; i < eh->e_phnum; ++i)
    if (ph[i].p_type == PT_DYNAMIC && ph[i].p_offset <= len_ && ph[i].p_filesz <= len_ - ph[i].p_offset) {
      dyn = reinterpret_cast<const Elf64_Dyn *>(base_ + ph[i].p_offset);
      entries = ph[i].p_filesz / sizeof(Elf64_Dyn);
    }
  uint64_t symtab = 0, strtab = 0, jmprel = 0, strsz = 0, pltrelsz = 0;
  bool rela = false;
  for (size_t i = 0; dyn && i < entries && dyn[i].d_tag != DT_NULL; ++i) {
    switch (dyn[i].d_tag) {
      case DT_SYMTAB: symtab = dyn[i].d_un.d_ptr; break;
      case DT_STRTAB: strtab = dyn[i].d_un.d_ptr; break;
      case DT_STRSZ: strsz = dyn[i].d_un.d_val; break;
      case DT_JMPREL: jmprel = dyn[i].d_un.d_ptr; break;
      case DT_PLTRELSZ: pltrelsz = dyn[i].d_un.d_val; break;
      case DT_PLTREL: rela = dyn[i].d_un.d_val == DT_RELA; break;
      default: break;
    }
  }
  const size_t str_off = offset_of(strtab, strsz), rel_off = offset_of(jmprel, pltrelsz);
  const size_t sym_off = offset_of(symtab, sizeof(Elf64_Sym));
  if (!rela || !strsz || !pltrelsz || str_off == SIZE_MAX || rel_off == SIZE_MAX || sym_off == SIZE_MAX) return out;
  out.strtab = reinterpret_cast<const char *>(base_ + str_off);
  out.strtab_bytes = strsz;
  out.symtab = base_ + sym_off;
  out.symbols = (len_ - sym_off) / sizeof(Elf64_Sym);  // what the file can hold from there
  out.jmprel = base_ + rel_off;
  out.jump_relocations = pltrelsz / sizeof(Elf64_Rela);
  return out;
}

void for_each_jump_slot(const Dynamic &t, JumpSlotFn fn, void *ctx) {
  if (!t.symtab || !t.strtab || !t.jmprel) return;
  auto *rels = static_cast<const Elf64_Rela *>(t.jmprel);
  auto *syms = static_cast<const Elf64_Sym *>(t.symtab);
  for (size_t i = 0; i < t.jump_relocations; ++i) {
    if (ELF64_R_TYPE(rels[i].r_info) != kJumpSlot) continue;
    const size_t index = ELF64_R_SYM(rels[i].r_info);
    if (t.symbols && index >= t.symbols) continue;
    const uint32_t name = syms[index].st_name;
    if (t.strtab_bytes && (name >= t.strtab_bytes || !memchr(t.strtab + name, '\0', t.strtab_bytes - name))) continue;
    fn(JumpSlot{t.strtab + name, rels[i].r_offset}, ctx);
  }
}

bool names_function(const char *symbol, const char *function) {
  if (std::strcmp(symbol, function) == 0) return true;
  if (std::strncmp(symbol, "_Z", 2) != 0) return false;
  // Each word of the name appears in the mangled symbol (but `std` and `operator`, which mangling
  // abbreviates): most symbols are left without demangling.
  const std::string_view mangled(symbol);
  auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  for (const char *p = function; *p;) {
    while (*p && !word(*p)) ++p;
    const char *q = p;
    while (*q && word(*q)) ++q;
    const std::string_view w(p, static_cast<size_t>(q - p));
    if (!w.empty() && w != "std" && w != "operator" && mangled.find(w) == std::string_view::npos) return false;
    p = q;
  }
  int status = 0;
  char *pretty = abi::__cxa_demangle(symbol, nullptr, nullptr, &status);
  if (!pretty) return false;
  const size_t n = std::strlen(function);
  const bool same = std::strncmp(pretty, function, n) == 0 && (pretty[n] == '\0' || pretty[n] == '(');
  std::free(pretty);
  return same;
}

namespace {

struct Redirect {
  const char *const *symbols;  // the slots calling any of them
  int count;
  void *to;
  const void *keep[2];
  bool patch;
  int slots;
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

// A loaded object's tables, from its dynamic section as the loader relocated it.
Dynamic loaded_dynamic(const dl_phdr_info *info, uintptr_t *relro_start, uintptr_t *relro_end) {
  Dynamic out;
  const ElfW(Dyn) *dyn = nullptr;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr) &ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_DYNAMIC) dyn = reinterpret_cast<const ElfW(Dyn) *>(info->dlpi_addr + ph.p_vaddr);
    if (ph.p_type == PT_GNU_RELRO) {
      *relro_start = info->dlpi_addr + ph.p_vaddr;
      *relro_end = *relro_start + ph.p_memsz;
    }
  }
  if (!dyn) return out;
  const uintptr_t base = info->dlpi_addr;
  bool rela = false;
  Dynamic found;
  for (const ElfW(Dyn) *d = dyn; d->d_tag != DT_NULL; ++d) {
    switch (d->d_tag) {
      case DT_SYMTAB: found.symtab = reinterpret_cast<const void *>(dyn_address(d->d_un.d_ptr, base)); break;
      case DT_STRTAB: found.strtab = reinterpret_cast<const char *>(dyn_address(d->d_un.d_ptr, base)); break;
      case DT_JMPREL: found.jmprel = reinterpret_cast<const void *>(dyn_address(d->d_un.d_ptr, base)); break;
      case DT_PLTRELSZ: found.jump_relocations = d->d_un.d_val / sizeof(ElfW(Rela)); break;
      case DT_PLTREL: rela = d->d_un.d_val == DT_RELA; break;
      default: break;
    }
  }
  return rela ? found : out;
}

int redirect_in_object(dl_phdr_info *info, size_t, void *data) {
  auto *r = static_cast<Redirect *>(data);
  for (const void *keep : r->keep)
    if (keep && inside(info, keep)) return 0;
  uintptr_t relro_start = 0, relro_end = 0;
  const Dynamic tables = loaded_dynamic(info, &relro_start, &relro_end);
  const uintptr_t base = info->dlpi_addr;
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  for_each_jump_slot(tables, [&](const JumpSlot &s) {
    auto named = [&](const char *name) { return std::strcmp(s.name, name) == 0; };
    if (std::none_of(r->symbols, r->symbols + r->count, named)) return;
    if (r->patch) {
      const uintptr_t slot = base + s.slot;
      void *slot_page = reinterpret_cast<void *>(slot & ~(page - 1));
      const bool in_relro = slot >= relro_start && slot < relro_end;
      if (in_relro && mprotect(slot_page, page, PROT_READ | PROT_WRITE) != 0) return;
      __atomic_store_n(reinterpret_cast<void **>(slot), r->to, __ATOMIC_RELEASE);
      if (in_relro) mprotect(slot_page, page, PROT_READ);
    }
    ++r->slots;
  });
  return 0;
}

struct Named {
  const char *function;
  const void *keep[2];
  std::vector<std::string> symbols;
};

int named_in_object(dl_phdr_info *info, size_t, void *data) {
  auto *n = static_cast<Named *>(data);
  for (const void *keep : n->keep)
    if (keep && inside(info, keep)) return 0;
  uintptr_t relro_start = 0, relro_end = 0;
  for_each_jump_slot(loaded_dynamic(info, &relro_start, &relro_end), [&](const JumpSlot &s) {
    const bool seen = std::find(n->symbols.begin(), n->symbols.end(), s.name) != n->symbols.end();
    if (!seen && names_function(s.name, n->function)) n->symbols.emplace_back(s.name);
  });
  return 0;
}

}  // namespace

std::vector<std::string> calls_named(const char *function, const void *keep1, const void *keep2) {
  Named n{function, {keep1, keep2}, {}};
  dl_iterate_phdr(named_in_object, &n);
  return n.symbols;
}

int redirect_calls(const char *symbol, void *to, const void *keep1, const void *keep2, bool patch) {
  Redirect r{&symbol, 1, to, {keep1, keep2}, patch, 0};
  dl_iterate_phdr(redirect_in_object, &r);
  return r.slots;
}

int count_calls(const char *const *symbols, int count, const void *keep1, const void *keep2) {
  Redirect r{symbols, count, nullptr, {keep1, keep2}, false, 0};
  dl_iterate_phdr(redirect_in_object, &r);
  return r.slots;
}

}  // namespace hm::prim::elf

using namespace hm::prim;

HM_HOOK_API int hm_elf_redirect_calls(const char *symbol, void *to, const void *keep1, const void *keep2, int patch) {
  return symbol ? elf::redirect_calls(symbol, to, keep1, keep2, patch != 0) : 0;
}

HM_HOOK_API int hm_elf_count_calls(const char *const *symbols, int count, const void *keep1, const void *keep2) {
  return symbols && count > 0 ? elf::count_calls(symbols, count, keep1, keep2) : 0;
}

namespace {
// Each symbol once, a line each, cut to the buffer (terminated).
void write_lines(const std::vector<std::string> &symbols, char *out, size_t out_len) {
  if (!out || !out_len) return;
  std::string text;
  for (const std::string &s : symbols) text += s + "\n";
  const size_t n = std::min(text.size(), out_len - 1);
  std::memcpy(out, text.data(), n);
  out[n] = '\0';
}
}  // namespace

HM_HOOK_API int hm_elf_functions_named(const char *path, const char *function, char *calls, size_t calls_len,
                                       char *exports, size_t exports_len) {
  std::vector<std::string> called, exported;
  write_lines(called, calls, calls_len);
  write_lines(exported, exports, exports_len);
  if (!path || !function) return -1;
  void *map = nullptr;
  size_t len = 0;
  if (map_file_readonly(path, &map, &len) != 0) return -1;
  const elf::File file(map, len);
  auto add = [function](std::vector<std::string> *to, const char *name) {
    if (elf::names_function(name, function) && std::find(to->begin(), to->end(), name) == to->end())
      to->emplace_back(name);
  };
  if (file.valid()) {
    elf::for_each_jump_slot(file.dynamic(), [&](const elf::JumpSlot &s) { add(&called, s.name); });
    file.for_each_function(elf::File::Table::kExported, [&](const elf::Function &f) { add(&exported, f.name); });
  }
  unmap(map, len);
  write_lines(called, calls, calls_len);
  write_lines(exported, exports, exports_len);
  return file.valid() ? 0 : -1;
}

HM_HOOK_API int hm_elf_calls_named(const char *function, char *out, size_t out_len, const void *keep1,
                                   const void *keep2) {
  if (!function) return 0;
  const std::vector<std::string> symbols = elf::calls_named(function, keep1, keep2);
  write_lines(symbols, out, out_len);
  return static_cast<int>(symbols.size());
}

HM_HOOK_API int hm_elf_demangle(const char *symbol, char *out, size_t out_len) {
  if (!out || !out_len) return 0;
  int status = 0;
  char *pretty = symbol && std::strncmp(symbol, "_Z", 2) == 0 ? abi::__cxa_demangle(symbol, nullptr, nullptr, &status)
                                                                : nullptr;
  const char *text = pretty ? pretty : symbol ? symbol : "";
  const size_t n = std::min(std::strlen(text), out_len - 1);
  std::memcpy(out, text, n);
  out[n] = '\0';
  std::free(pretty);
  return 0;
}
