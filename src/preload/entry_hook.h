// A hook on every entry into one function of an unchanged program, for the calls the dynamic
// linker routes: through a PLT or GOT slot of some loaded object (a call from one library into
// another, or into an exported function of the same library that the linker lets be
// interposed). The slots are pointed at a trampoline that calls `on_entry` with the
// function's arguments untouched, then jumps to the function itself. Direct calls inside one
// object (static or hidden functions, calls the compiler bound locally) are not seen.
#pragma once
#include <cstddef>

namespace hm::preload {

struct EntryHookResult {
  int slots = 0;          // GOT slots redirected
  bool defined = false;   // some loaded object defines the symbol
  char detail[256] = {};  // why nothing was hooked (slots == 0)
};

// Redirects every GOT slot that refers to `name` in the objects loaded now: a symbol (the
// linker's name), or a C++ name that the loaded objects call by exactly one symbol. `on_entry`
// runs before each call and must preserve nothing itself (the trampoline saves the argument
// registers). Call once, at start-up, before other threads run.
EntryHookResult hook_entries(const char *name, void (*on_entry)());

// Whether an object other than this library and the one that defines the `count` symbols (all in
// one library) calls any of them through the dynamic linker: a program linked with libhetmem that
// marks its own phases (hm_phase_begin). One walk of every loaded object's PLT slots, whatever
// `count` (each walk costs a program of 55 libraries, LAMMPS, 1.3 M instructions).
bool called_outside(const char *const *symbols, int count);

}  // namespace hm::preload
