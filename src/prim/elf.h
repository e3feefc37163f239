// ELF objects as hetmem reads them, in one place: the functions an object file defines (which
// functions a placement rule names), the functions it exports, and the calls it makes through the
// dynamic linker (its PLT slots), in a file or in an object the loader has loaded (which calls an
// entry hook can redirect). 64-bit ELF only; anything else is read as holding nothing.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include <string>
#include <type_traits>
#include <vector>

namespace hm::prim::elf {

struct Function {
  const char *name;
  uint64_t value;  // its ELF address (add the object's load bias for the running address)
  uint64_t size;
};

// A PLT slot: the function it calls and where the slot is (an ELF address, as Function::value).
struct JumpSlot {
  const char *name;
  uint64_t slot;
};

// The tables the dynamic linker uses (a file's, or a loaded object's relocated ones).
struct Dynamic {
  const void *symtab = nullptr;  // Elf64_Sym[]
  const char *strtab = nullptr;
  size_t strtab_bytes = 0;       // 0: unknown (a loaded object's, trusted)
  size_t symbols = 0;            // bound on symbol indices; 0: unknown (trusted)
  const void *jmprel = nullptr;  // Elf64_Rela[]
  size_t jump_relocations = 0;
};

// An object file's bytes (mapped by the caller, kept while the File is used), checked once.
class File {
 public:
  File(const void *data, size_t len);
  bool valid() const { return valid_; }

  enum class Table {
    kDefined,   // the full symbol table where the file keeps one, else the dynamic one
    kExported,  // the dynamic symbol table: what other objects can call
  };
  using FunctionFn = void (*)(const Function &, void *);
  void for_each_function(Table table, FunctionFn fn, void *ctx) const;
  // The dynamic linker's tables, located through the program headers (what a loader reads).
  Dynamic dynamic() const;

  template <class Fn>
  void for_each_function(Table table, Fn &&fn) const {
    using F = std::remove_reference_t<Fn>;
    for_each_function(table, [](const Function &f, void *c) { (*static_cast<F *>(c))(f); }, &fn);
  }

 private:
  // The file offset of ELF address `vaddr` holding `bytes` bytes; SIZE_MAX if no segment holds it.
  size_t offset_of(uint64_t vaddr, size_t bytes) const;
  const unsigned char *base_;
  size_t len_;
  bool valid_ = false;
};

// Every PLT slot of the tables (R_X86_64_JUMP_SLOT relocations; none on other machines).
using JumpSlotFn = void (*)(const JumpSlot &, void *);
void for_each_jump_slot(const Dynamic &tables, JumpSlotFn fn, void *ctx);
template <class Fn>
void for_each_jump_slot(const Dynamic &tables, Fn &&fn) {
  using F = std::remove_reference_t<Fn>;
  for_each_jump_slot(tables, [](const JumpSlot &s, void *c) { (*static_cast<F *>(c))(s); }, &fn);
}

// Whether symbol `symbol` is the function a user named `function`: the symbol itself, or a C++
// function that demangles to it, with or without its parameter list (LAMMPS_NS::Neighbor::decide).
bool names_function(const char *symbol, const char *function);

// The symbols that PLT slots of the loaded objects call and that are `function` (names_function),
// each once, in the order first met; objects holding `keep1` or `keep2` are passed over.
std::vector<std::string> calls_named(const char *function, const void *keep1, const void *keep2);

// Points every PLT slot that calls `symbol`, in every loaded object but those holding one of the
// `keep` addresses (nullptr: none), at `to`; with `patch` false only counts them. Returns the slots.
int redirect_calls(const char *symbol, void *to, const void *keep1, const void *keep2, bool patch);

// The PLT slots that call any of `count` symbols, in every loaded object but those holding a `keep`
// address: redirect_calls without patching, for several symbols in one walk of every object's slots.
int count_calls(const char *const *symbols, int count, const void *keep1, const void *keep2);

}  // namespace hm::prim::elf

// The reader as the preload library and the hetmem command reach it: C functions exported from
// libhetmem.so (not part of the public API).
#ifndef HM_HOOK_API
#define HM_HOOK_API extern "C" __attribute__((visibility("default")))
#endif
// hm::prim::elf::redirect_calls.
HM_HOOK_API int hm_elf_redirect_calls(const char *symbol, void *to, const void *keep1, const void *keep2, int patch);
// hm::prim::elf::count_calls.
HM_HOOK_API int hm_elf_count_calls(const char *const *symbols, int count, const void *keep1, const void *keep2);
// The symbols of the ELF file at `path` that are `function` (names_function), each once, one per
// line: those it calls through a PLT slot in `calls`, those it exports in `exports` (one reading of
// the file for both). Returns 0, or -1 (both empty) when the file cannot be read as a 64-bit ELF
// object.
HM_HOOK_API int hm_elf_functions_named(const char *path, const char *function, char *calls, size_t calls_len,
                                       char *exports, size_t exports_len);
// hm::prim::elf::calls_named, one symbol a line in `out` (cut to it, terminated). Returns how many.
HM_HOOK_API int hm_elf_calls_named(const char *function, char *out, size_t out_len, const void *keep1,
                                   const void *keep2);
// A C++ symbol demangled into `out` (the symbol itself when it is not a C++ name). Returns 0.
HM_HOOK_API int hm_elf_demangle(const char *symbol, char *out, size_t out_len);
