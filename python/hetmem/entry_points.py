"""Checks, before a program starts, that `--iteration-at FUNCTION` names a function whose calls the
dynamic linker routes (a PLT slot of some object the program loads), so that the preload library
can end an inferred iteration at each of them.

The ELF files are read by the library's reader (src/prim/elf.cpp: the PLT slots and exported
functions, C++ names demangled), the one the preload library hooks with; the program's libraries
come from the dynamic loader's own list (ldd), as the loader will load them.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field

from .lib import plain_library


@dataclass
class EntryCheck:
    symbol: str = ""                       # the linker's name to hook (mangled for C++)
    callers: list[str] = field(default_factory=list)   # objects whose PLT calls it
    definers: list[str] = field(default_factory=list)  # objects that export it
    error: str = ""                        # why it cannot be hooked


def loaded_objects(program: str) -> list[str]:
    """The program and the shared libraries the loader gives it (ldd), in load order."""
    objects = [program]
    try:
        out = subprocess.run(["ldd", program], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return objects
    for line in out.splitlines():
        m = re.search(r"=>\s*(/\S+)", line) or re.match(r"\s*(/\S+)\s+\(", line)
        if m and os.path.exists(m.group(1)):
            objects.append(m.group(1))
    return objects


def check(program: str, function: str) -> EntryCheck:
    """Whether `function` (a symbol, or a demangled C++ name with or without its parameters) can be
    hooked in `program`; the symbol to hook, or the reason it cannot be."""
    result = EntryCheck()
    lib = plain_library()
    candidates: dict[str, set[str]] = {}   # symbol -> objects calling it through the PLT
    defined: dict[str, set[str]] = {}      # symbol -> objects exporting it
    for path in loaded_objects(program):
        calls, exports = lib.functions_named(path, function)
        for symbol in calls:
            candidates.setdefault(symbol, set()).add(path)
        for symbol in exports:
            defined.setdefault(symbol, set()).add(path)
    if len(candidates) > 1:
        names = ", ".join(sorted(candidates))
        result.error = f"{function} names {len(candidates)} functions ({names}): give one symbol"
        return result
    if candidates:
        result.symbol, callers = next(iter(candidates.items()))
        result.callers = sorted(callers)
        result.definers = sorted(defined.get(result.symbol, set()))
        return result
    if defined:
        symbol, where = next(iter(defined.items()))
        result.symbol, result.definers = symbol, sorted(where)
        result.error = (f"{function} is defined in {', '.join(os.path.basename(p) for p in sorted(where))}, but no "
                        "object calls it through the dynamic linker (its calls are direct, inside that object), so "
                        "hetmem cannot see them; choose a function that is called across libraries or that its "
                        "library lets be interposed (readelf -rW LIBRARY lists the JUMP_SLOT calls)")
        return result
    result.error = (f"no function named {function} is exported by {os.path.basename(program)} or the libraries it "
                    "loads (a static or inlined function, or one in a library loaded later with dlopen, cannot be "
                    "hooked)")
    return result
