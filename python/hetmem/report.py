"""`hetmem report TRACE`: tables, PNG plots and one self-contained HTML page from a trace.

The analyses follow Ren et al. (ICS'21) §3: allocations and frees per iteration (Figure 1), the lifetime x
size table (Table 2), time per phase (Table 3), the object x phase referenced-bytes matrix, the
top allocation sites, and a suggested class (metadata, temporary, hot, streaming, cold) for each
large site with the evidence for it.
"""

from __future__ import annotations

import base64
import html
import json
import os
import shutil
import subprocess
from bisect import bisect_right
from pathlib import Path

import numpy as np

from .figures import png, write_images
from .units import MiB, size_text
from .trace import ALLOC, FREE, FUNCTIONS, Trace

BIN_EDGES = [0, 1, 2, 4, 8, 16, 32, 64]  # MiB; the last bin is [64, inf)
BIN_LABELS = ["(0,1)", "[1,2)", "[2,4)", "[4,8)", "[8,16)", "[16,32)", "[32,64)", "[64,inf)"]
RUNTIME_MODULES = ("libc.so", "libstdc++", "libgfortran", "libhetmem", "ld-linux", "libgomp", "libpython")


# ------------------------------------------------------------------------------------------------
# Symbolisation (offline, with addr2line from binutils)

class Symbolizer:
    def __init__(self, modules: list[tuple[int, int, int, str]]):
        self.modules = sorted(modules)
        self.starts = [m[0] for m in self.modules]
        self.cache: dict[int, dict] = {}
        self.addr2line = shutil.which("addr2line")

    def module_of(self, addr: int):
        i = bisect_right(self.starts, addr) - 1
        if i >= 0 and self.modules[i][0] <= addr < self.modules[i][1]:
            return self.modules[i]
        return None

    def resolve(self, addrs: list[int]) -> None:
        todo: dict[str, list[tuple[int, int]]] = {}
        for a in addrs:
            if a in self.cache:
                continue
            m = self.module_of(a)
            if not m:
                self.cache[a] = {"address": hex(a), "module": "?", "offset": a, "function": "??", "file": "", "line": 0}
                continue
            # A return address points after the call: look up the call instruction itself.
            todo.setdefault(m[3], []).append((a, a - m[2] - 1))
        for module, items in todo.items():
            names = [("??", "??:0")] * len(items)
            if self.addr2line and os.path.exists(module):
                try:
                    out = subprocess.run([self.addr2line, "-f", "-C", "-e", module] + [hex(o) for _, o in items],
                                         capture_output=True, text=True, timeout=120).stdout.splitlines()
                    names = [(out[2 * i], out[2 * i + 1]) for i in range(len(items)) if 2 * i + 1 < len(out)]
                except (OSError, subprocess.TimeoutExpired):
                    pass
            for (a, offset), (fn, loc) in zip(items, names + [("??", "??:0")] * (len(items) - len(names))):
                file, _, line = loc.partition(":")
                line = line.split(" ")[0]
                self.cache[a] = {"address": hex(a), "module": module, "offset": offset + 1, "function": fn,
                                 "file": "" if file == "??" else file, "line": int(line) if line.isdigit() else 0}

    def frame(self, addr: int) -> dict:
        if addr not in self.cache:
            self.resolve([addr])
        return self.cache[addr]


def in_runtime(frame: dict) -> bool:
    """Whether a frame is in a runtime library (the C library, hetmem, ...) rather than the program."""
    return any(r in os.path.basename(frame["module"]) for r in RUNTIME_MODULES)


def named_frame(name: str) -> dict:
    """A site the program named (hm_profile_site_name: "file.py:42") as a frame of the report."""
    file, _, line = name.rpartition(":")
    if not file or not line.isdigit():
        file, line = name, "0"
    return {"function": "<python>" if file.endswith(".py") else "<named>", "file": file, "line": int(line),
            "module": file, "offset": 0, "address": name, "named": True}


def site_frame(frames: list[dict]) -> dict:
    """The frame that names an allocation site: the first one in the program, not in a runtime."""
    for f in frames:
        if not in_runtime(f) and f["function"] != "??":
            return f
    for f in frames:
        if not in_runtime(f):
            return f
    return frames[0] if frames else {"function": "??", "file": "", "line": 0, "module": "?", "offset": 0,
                                     "address": "0x0"}


def direct_caller(frames: list[dict]) -> dict | None:
    """The frame that called the allocator, when it is in the program's own objects (not a runtime
    library): what a site rule matches."""
    if frames and frames[0]["module"] != "?" and not in_runtime(frames[0]):
        return frames[0]
    return None


# ------------------------------------------------------------------------------------------------
# Analyses

def pair_events(ev: np.ndarray):
    """Matches every allocation with the free of the same address that follows it.
    Returns (alloc_index, free_index or -1)."""
    order = np.lexsort((ev["time_ns"], ev["ptr"]))
    ptr, op = ev["ptr"][order], ev["op"][order]
    allocs = np.nonzero(op == ALLOC)[0]
    nxt = allocs + 1
    ok = nxt < len(order)
    freed = np.full(len(allocs), -1, dtype=np.int64)
    valid = ok.copy()
    valid[ok] = (op[nxt[ok]] == FREE) & (ptr[nxt[ok]] == ptr[allocs[ok]])
    freed[valid] = order[nxt[valid]]
    return order[allocs], freed


REALLOC_FN = 3  # trace function code of realloc (trace.FUNCTIONS)
INFERRED_PREFIX = "iteration ("


def inferred_iterations(trace: Trace) -> dict:
    """How the trace's iterations were found: marked by the program, inferred by the preload
    library (time windows or entries into a named function), or none."""
    names = [n for n in trace.phase_names.values() if n.startswith(INFERRED_PREFIX)]
    count = len(trace.iterations) + 1 if trace.iterations else (1 if trace.phases else 0)
    if names and names[0] == "iteration (window)":
        spans = [(p["end_ns"] - p["begin_ns"]) * 1e-9 for p in trace.phases]
        window = float(np.median(spans)) if spans else 0.0
        return {"how": "window", "unit": "window", "count": count, "window_s": window,
                "text": f"{count} iteration(s) inferred as time windows of {window:.3g} s: the program marks "
                        "none (hetmem profile --iteration-at FUNCTION ends one at each call of FUNCTION instead)"}
    if names:
        from .lib import plain_library
        function = plain_library().demangle(names[0][len("iteration (at "):-1])
        return {"how": "function", "unit": "iteration", "count": count, "function": function,
                "text": f"{count} iteration(s), one per call of {function} (--iteration-at)"}
    if trace.iterations:
        return {"how": "marked", "unit": "iteration", "count": count,
                "text": f"{count} iteration(s) marked by the program (hm_iteration_next)"}
    return {"how": "none", "unit": "run", "count": count,
            "text": "no iterations: the program marks none and none were inferred (HM_ITERATION_WINDOW=0, or an "
                    "MPI launcher or daemon, in which none are)"}


def iteration_of(times: np.ndarray, trace: Trace) -> np.ndarray:
    if not trace.iterations:
        return np.zeros(len(times), dtype=np.int64)
    marks = np.array([t for _, t in trace.iterations], dtype=np.uint64)
    numbers = np.array([i for i, _ in trace.iterations], dtype=np.int64)
    idx = np.searchsorted(marks, times, side="right")
    return np.where(idx > 0, numbers[np.maximum(idx - 1, 0)], 0)


def peak_live(times_alloc, sizes, times_free) -> int:
    """Peak of the bytes alive at once, for allocations with their free times (-1: never freed).
    `sizes` may be estimates (a sampled allocation's size times its weight)."""
    if len(sizes) == 0:
        return 0
    t = np.concatenate([times_alloc, times_free[times_free >= 0]])
    d = np.concatenate([sizes.astype(np.float64), -sizes[times_free >= 0].astype(np.float64)])
    order = np.lexsort((d, t))  # at equal times, frees (negative) first
    return int(round(float(np.cumsum(d[order]).max(initial=0))))



# A class resting on fewer samples than this, or on samples from the run's first START_SHARE only,
# says so: a short run with the default budget may be sampled only while it starts up, when its
# steady-state arrays are not yet in use.
MIN_SAMPLES = 3
START_SHARE = 0.1


def _sampling_doubt(sampled: list[dict], span: tuple[int, int], unit: str) -> str | None:
    """Why a site's class may not describe its steady state, or None."""
    hint = "(a longer run, --iteration-at, or a larger HM_SAMPLE_BUDGET samples more)"
    if len(sampled) < MIN_SAMPLES:
        return f"few samples: {len(sampled)} sampled {unit}(s) saw it, fewer than {MIN_SAMPLES} {hint}"
    first, last = span
    if last > first:
        latest = max(p["begin_ns"] for p in sampled)
        if latest - first < START_SHARE * (last - first):
            return (f"start-up only: every sample that saw it came from the run's first "
                    f"{100 * START_SHARE:.0f}% {hint}")
    return None


def _counts(bins: np.ndarray, weights: np.ndarray, n: int) -> list[int]:
    return [int(round(c)) for c in np.bincount(bins, weights=weights, minlength=n)] if n else []


def _recording(trace: Trace, ev: np.ndarray, a_weight: np.ndarray) -> dict:
    """How the trace recorded allocations: every one, or small ones sampled (counts estimated)."""
    if not trace.sampled:
        return {"sampled": False, "text": "every allocation and free recorded"}
    every_from = min(trace.sample_bytes, trace.large_threshold or trace.sample_bytes)
    recorded = int((ev["op"] == ALLOC).sum())
    return {"sampled": True, "sample_bytes": trace.sample_bytes, "every_from": every_from,
            "recorded_allocations": recorded,
            "text": f"allocations of {size_text(every_from)} or more recorded, smaller ones sampled (one every "
                    f"{size_text(trace.sample_bytes)} allocated on average): {recorded} recorded stand for about "
                    f"{int(round(a_weight.sum()))}; counts and bytes of small allocations are estimates "
                    "(hetmem profile --sample 0 records every one)"}


def analyse(trace: Trace, top: int = 10) -> dict:
    ev = trace.events
    sym = Symbolizer(trace.modules)
    alloc_idx, free_idx = pair_events(ev)
    a_time = ev["time_ns"][alloc_idx].astype(np.int64)
    a_size = ev["size"][alloc_idx].astype(np.int64)
    a_site = ev["site"][alloc_idx]
    f_time = np.where(free_idx >= 0, ev["time_ns"][np.maximum(free_idx, 0)].astype(np.int64), -1)
    # How many allocations each recorded one stands for (1 unless small ones were sampled), and
    # the same weight on every event: a free weighs what its allocation does.
    a_weight = trace.allocation_weights(a_size)
    a_bytes = a_size * a_weight
    ev_weight = np.ones(len(ev))
    ev_weight[alloc_idx] = a_weight
    ev_weight[free_idx[free_idx >= 0]] = a_weight[free_idx >= 0]
    a_iter = iteration_of(a_time.astype(np.uint64), trace)
    f_iter = np.where(free_idx >= 0, iteration_of(np.maximum(f_time, 0).astype(np.uint64), trace), -1)
    # A block that realloc moves lives on at its new address: the move is not the object's end.
    moved = (free_idx >= 0) & (ev["fn"][np.maximum(free_idx, 0)] == REALLOC_FN)
    short = (free_idx >= 0) & (f_iter == a_iter) & ~moved
    # What an object weighs in its site's class: its bytes times its lifetime (to the end of the
    # trace when never freed). A container's growth copies are many and short-lived, but the bytes
    # of the one it keeps live the whole run: the site is not temporary.
    t_end = int(ev["time_ns"].max(initial=0)) if len(ev) else 0
    byte_life = a_bytes * np.maximum(np.where(f_time >= 0, f_time, t_end) - a_time, 1)
    inference = inferred_iterations(trace)

    # Figure 1: allocations and frees per iteration.
    iters = iteration_of(ev["time_ns"], trace)
    n_iter = int(iters.max(initial=0)) + 1 if len(ev) else 0
    per_iter = {
        "iteration": list(range(n_iter)),
        "allocations": _counts(iters[ev["op"] == ALLOC], ev_weight[ev["op"] == ALLOC], n_iter),
        "frees": _counts(iters[ev["op"] == FREE], ev_weight[ev["op"] == FREE], n_iter),
    }

    # Table 2: lifetime x size.
    mib = a_size / MiB
    bins = np.clip(np.searchsorted(np.array(BIN_EDGES[1:], dtype=float), mib, side="right"), 0, len(BIN_LABELS) - 1)
    table2 = []
    for b, label in enumerate(BIN_LABELS):
        m = bins == b
        table2.append({
            "size_mib": label,
            "short_lived": int(round(a_weight[m & short].sum())),
            "long_lived": int(round(a_weight[m & ~short].sum())),
            "accumulated_bytes": int(round(a_bytes[m].sum())),
            "peak_bytes": peak_live(a_time[m], a_bytes[m], f_time[m]),
        })

    # Table 3: time per phase.
    phase_rows: dict[str, dict] = {}
    for p in trace.phases:
        name = trace.phase_names.get(p["phase"], f"phase {p['phase']}")
        row = phase_rows.setdefault(name, {"phase": name, "calls": 0, "seconds": 0.0})
        row["calls"] += 1
        row["seconds"] += (p["end_ns"] - p["begin_ns"]) * 1e-9
    if trace.iterations and len(trace.iterations) > 1:
        span = (trace.iterations[-1][1] - trace.iterations[0][1]) * 1e-9
    else:
        span = float(ev["time_ns"].max(initial=0)) * 1e-9 if len(ev) else 0.0
    # Allocations made inside each phase (the innermost one open at the time).
    alloc_mask = ev["op"] == ALLOC
    for pid, name in trace.phase_names.items():
        m = alloc_mask & (ev["phase"] == pid)
        row = phase_rows.setdefault(name, {"phase": name, "calls": 0, "seconds": 0.0})
        row["allocations"] = int(round(ev_weight[m].sum()))
        row["bytes_allocated"] = int(round((ev["size"][m] * ev_weight[m]).sum()))
    top_level = sum(r["seconds"] for r in phase_rows.values())
    for r in phase_rows.values():
        r["share"] = r["seconds"] / max(top_level, span, 1e-12)
    phases_table = sorted(phase_rows.values(), key=lambda r: -r["seconds"])

    # Allocation sites: call stacks grouped by the frame that called the allocator (the first frame
    # in the program), so that one source line is one site however it was reached.
    uniq = np.unique(a_site)
    sym.resolve([a for s in uniq if int(s) not in trace.site_names for a in trace.sites.get(int(s), [])])
    group_of: dict[int, int] = {}
    frames_of: dict[int, list[dict]] = {}
    key_to_group: dict[tuple, int] = {}
    for s in uniq:
        name = trace.site_names.get(int(s))
        if name:  # named by the program (an interpreter's source line): one frame of that name
            frames = [named_frame(name)]
            key = ("named", name)
            g = key_to_group.setdefault(key, int(s))
            group_of[int(s)] = g
            frames_of.setdefault(g, frames)
            continue
        frames = [sym.frame(a) for a in trace.sites.get(int(s), [])]
        where = site_frame(frames)
        # A site is what a rule can name: the allocator's direct caller when that is in the
        # program's own objects (one call instruction), else the first frame in the program.
        direct = direct_caller(frames)
        key = ((direct["module"], direct["offset"]) if direct else
               (where["module"], where["offset"]) if frames else ("?", int(s)))
        g = key_to_group.setdefault(key, int(s))
        group_of[int(s)] = g
        frames_of.setdefault(g, frames)
    a_group = np.array([group_of[int(s)] for s in a_site], dtype=np.int64) if len(a_site) else np.zeros(0, np.int64)
    sites = {}
    for g in sorted(set(group_of.values())):
        m = a_group == g
        frames = frames_of[g]
        named = bool(frames) and frames[0].get("named", False)
        where = site_frame(frames)
        direct = None if named else direct_caller(frames)
        sites[g] = {
            "site": g, "count": int(round(a_weight[m].sum())), "bytes": int(round(a_bytes[m].sum())),
            "recorded": int(m.sum()),
            "peak_bytes": peak_live(a_time[m], a_bytes[m], f_time[m]),
            "largest": int(a_size[m].max(initial=0)),
            "short_lived_fraction": float(a_weight[m & short].sum() / a_weight[m].sum()) if m.any() else 0.0,
            "short_lived_byte_share": float(byte_life[m & short].sum() / byte_life[m].sum())
            if m.any() and byte_life[m].sum() > 0 else 0.0,
            "stacks": int(sum(1 for s, gg in group_of.items() if gg == g)),
            "function": where["function"], "file": where["file"], "line": where["line"],
            "module": where["module"],
            # Rules match the allocation's direct caller: a site reached through a runtime library
            # (printf's buffer, a C++ container) cannot be named by one. A direct caller in the
            # program's own objects is named even when it has no symbol (a stripped library's
            # allocation wrapper, numpy's for every array): the rule then covers what it allocates.
            "rule_site": ("" if named else f"{direct['module']}+{hex(direct['offset'])}" if direct
                          else f"{where['module']}+{hex(where['offset'])}" if where["module"] != "?" else ""),
            "named": named,
            "rule_site_direct": direct is not None,
            "via": os.path.basename(frames[0]["module"]) if frames and not direct else "",
            "stack": [f"{f['function']} ({os.path.basename(f['file']) or os.path.basename(f['module'])}"
                      f"{':' + str(f['line']) if f['line'] else ''})" for f in frames],
        }
    # Object x phase referenced bytes for the largest objects.
    objects: dict[int, dict] = {}
    for p in trace.phases:
        name = trace.phase_names.get(p["phase"], f"phase {p['phase']}")
        for ptr, size, ref in p["objects"]:
            o = objects.setdefault(ptr, {"ptr": hex(ptr), "size": size, "phases": {}})
            o["phases"].setdefault(name, []).append(ref / size if size else 0.0)
    # Attribute objects to their allocation sites (latest allocation at that address).
    ptr_site_raw = {int(p): int(s) for p, s in zip(ev["ptr"][alloc_idx], a_site)}
    matrix = []
    for o in sorted(objects.values(), key=lambda o: -o["size"])[:top]:
        matrix.append({"object": o["ptr"], "size": o["size"], "site": group_of.get(ptr_site_raw.get(int(o["ptr"], 16), 0), 0),
                       "referenced_fraction": {k: float(np.mean(v)) for k, v in o["phases"].items()}})

    top_sites = {
        "by_peak_bytes": sorted(sites.values(), key=lambda r: -r["peak_bytes"])[:top],
        "by_bytes": sorted(sites.values(), key=lambda r: -r["bytes"])[:top],
        "by_count": sorted(sites.values(), key=lambda r: -r["count"])[:top],
    }

    # Suggested classes for large sites, from what every sampled phase instance (or inferred
    # iteration) saw of the site's live objects: the share of their bytes referenced in it.
    site_windows: dict[int, dict[int, list[int]]] = {}  # site -> sample -> [referenced, bytes]
    for k, p in enumerate(trace.phases):
        for ptr, size, ref in p["objects"]:
            s = group_of.get(ptr_site_raw.get(int(ptr), 0), 0)
            acc = site_windows.setdefault(s, {}).setdefault(k, [0, 0])
            acc[0] += min(ref, size)
            acc[1] += size
    classes = []
    threshold = trace.large_threshold or MiB
    run_span = (min((p["begin_ns"] for p in trace.phases), default=0), max((p["end_ns"] for p in trace.phases), default=0))
    for r in sorted(sites.values(), key=lambda r: -r["peak_bytes"]):
        if r["largest"] < threshold:
            continue
        shares = np.array([ref / size for ref, size in site_windows.get(r["site"], {}).values() if size])
        evidence = [f"{r['count']} allocation(s), largest {r['largest'] / MiB:.1f} MiB, peak {r['peak_bytes'] / MiB:.1f} MiB",
                    f"{100 * r['short_lived_fraction']:.0f}% freed within their {inference['unit']}, holding "
                    f"{100 * r['short_lived_byte_share']:.0f}% of its bytes x lifetime"]
        if r["short_lived_byte_share"] >= 0.8:
            cls = "temporary"
        elif not len(shares):
            cls = "unknown"
            evidence.append(f"no sampled {inference['unit']} saw it live (a longer run, or a larger HM_SAMPLE_BUDGET, "
                            "samples more)")
        else:
            evidence.append(f"{100 * float(shares.mean()):.0f}% of its bytes referenced per sampled "
                            f"{inference['unit']} (min {100 * float(shares.min()):.0f}%, {len(shares)} sample(s))")
            doubt = _sampling_doubt([trace.phases[k] for k in site_windows.get(r["site"], {})], run_span,
                                    inference["unit"])
            if doubt:
                evidence.append(doubt)
            if shares.max() < 0.05:
                cls = "cold"
            elif float(np.median(shares)) >= 0.5:
                cls = "hot"
            else:
                cls = "streaming"
        # A hot site's priority: the share of its bytes referenced per sampled phase or iteration,
        # in percent (the more of it every step touches, the more the fast tier gains by holding it).
        priority = max(1, round(100 * float(shares.mean()))) if cls == "hot" else 0
        classes.append({"site": r["site"], "function": r["function"], "file": r["file"], "line": r["line"],
                        "class": cls, "priority": priority, "evidence": evidence, "rule_site": r["rule_site"],
                        "rule_site_direct": r["rule_site_direct"], "via": r["via"], "named": r["named"]})
    small_long = [r for r in sites.values() if r["largest"] < threshold and r["short_lived_fraction"] < 0.2
                  and r["count"] > 0]
    for r in sorted(small_long, key=lambda r: -r["peak_bytes"])[:3]:
        classes.append({"site": r["site"], "function": r["function"], "file": r["file"], "line": r["line"],
                        "class": "metadata", "priority": 0, "rule_site": r["rule_site"],
                        "rule_site_direct": r["rule_site_direct"], "via": r["via"], "named": r["named"],
                        "evidence": [f"{r['count']} small allocation(s) (largest {r['largest']} B), "
                                     f"{100 * (1 - r['short_lived_fraction']):.0f}% live beyond their iteration"]})

    return {
        "trace": trace.path, "pid": trace.pid, "partial": trace.partial, "problems": trace.problems,
        "execs": [{"time_s": t / 1e9, "program": program} for t, program in trace.execs],
        "iterations": inference,
        "sampled": {"instances": len(trace.phases), "sampled": sum(1 for p in trace.phases if p.get("sampled", True))},
        "recording": _recording(trace, ev, a_weight),
        "totals": {"events": int(len(ev)), "allocations": int(round(a_weight.sum())),
                   "frees": int(round(ev_weight[ev["op"] == FREE].sum())), "bytes_allocated": int(round(a_bytes.sum())),
                   "threads": int(len(np.unique(ev["thread"]))) if len(ev) else 0,
                   "iterations": n_iter, "functions": {FUNCTIONS.get(int(f), str(f)): int(c) for f, c in
                                                       zip(*np.unique(ev["fn"], return_counts=True))}},
        "per_iteration": per_iter, "lifetime_size": table2, "phases": phases_table,
        "object_phase_referenced": matrix, "top_sites": top_sites, "suggested_classes": classes,
        "sites": list(sites.values()),
    }


# ------------------------------------------------------------------------------------------------
# Output

def plots(result: dict) -> dict[str, bytes]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = {}
    pi = result["per_iteration"]
    if pi["iteration"]:
        fig, ax = plt.subplots(figsize=(7, 3.2))
        ax.plot(pi["iteration"], pi["allocations"], label="allocations", marker=".")
        ax.plot(pi["iteration"], pi["frees"], label="frees", marker=".")
        ax.set_xlabel("iteration")
        ax.set_ylabel("count")
        ax.set_title("Allocations and frees per iteration")
        ax.legend()
        out["per_iteration.png"] = png(fig)
    rows = result["lifetime_size"]
    fig, ax = plt.subplots(figsize=(7, 3.2))
    x = np.arange(len(rows))
    ax.bar(x - 0.2, [r["short_lived"] for r in rows], 0.4, label="short-lived")
    ax.bar(x + 0.2, [r["long_lived"] for r in rows], 0.4, label="long-lived")
    ax.set_xticks(x, [r["size_mib"] for r in rows])
    ax.set_xlabel("size (MiB)")
    ax.set_ylabel("objects")
    ax.set_yscale("symlog")
    ax.set_title("Objects by size and lifetime")
    ax.legend()
    out["lifetime_size.png"] = png(fig)
    if result["phases"]:
        fig, ax = plt.subplots(figsize=(7, 3.2))
        names = [r["phase"] for r in result["phases"]]
        ax.barh(names, [r["seconds"] for r in result["phases"]])
        ax.set_xlabel("seconds")
        ax.set_title("Time per phase")
        out["phases.png"] = png(fig)
    m = result["object_phase_referenced"]
    if m:
        phase_names = sorted({p for o in m for p in o["referenced_fraction"]})
        grid = np.array([[o["referenced_fraction"].get(p, 0.0) for p in phase_names] for o in m])
        fig, ax = plt.subplots(figsize=(1.2 + 0.9 * len(phase_names), 1 + 0.35 * len(m)))
        im = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto")
        ax.set_xticks(range(len(phase_names)), phase_names, rotation=30, ha="right")
        ax.set_yticks(range(len(m)), [f"{o['object']} ({o['size'] / MiB:.0f} MiB)" for o in m])
        ax.set_title("Referenced fraction per object and phase")
        fig.colorbar(im, ax=ax)
        out["object_phase.png"] = png(fig)
    return out


def _table(headers: list[str], rows: list[list]) -> str:
    h = "".join(f"<th>{html.escape(str(c))}</th>" for c in headers)
    b = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{h}</tr>{b}</table>"


def html_page(result: dict, images: dict[str, bytes]) -> str:
    def img(name):
        if name not in images:
            return ""
        return f'<img alt="{name}" src="data:image/png;base64,{base64.b64encode(images[name]).decode()}">'

    t = result["totals"]
    parts = [f"<h1>hetmem report: {html.escape(result['trace'])}</h1>"]
    if result["partial"]:
        parts.append('<p class="warn">PARTIAL TRACE: ' + html.escape("; ".join(result["problems"])) + "</p>")
    parts.append(f"<p>{t['allocations']} allocations, {t['frees']} frees, {t['bytes_allocated'] / MiB:.1f} MiB "
                 f"allocated, {t['threads']} thread(s), {t['iterations']} iteration(s).</p>")
    if result.get("recording"):
        parts.append(f"<p>{html.escape(result['recording']['text'])}.</p>")
    if result.get("iterations"):
        parts.append(f"<p>{html.escape(result['iterations']['text'])}</p>")
    parts.append("<h2>Allocations and frees per iteration</h2>" + img("per_iteration.png"))
    parts.append("<h2>Lifetime and size (Ren et al. (ICS'21) Table 2)</h2>" + _table(
        ["size MiB", "short-lived", "long-lived", "accumulated MiB", "peak MiB"],
        [[r["size_mib"], r["short_lived"], r["long_lived"], f"{r['accumulated_bytes'] / MiB:.2f}",
          f"{r['peak_bytes'] / MiB:.2f}"] for r in result["lifetime_size"]]) + img("lifetime_size.png"))
    parts.append("<h2>Time per phase (Ren et al. (ICS'21) Table 3)</h2>" + _table(
        ["phase", "calls", "seconds", "share", "allocations", "MiB allocated"],
        [[r["phase"], r["calls"], f"{r['seconds']:.4f}", f"{100 * r['share']:.1f}%", r.get("allocations", 0),
          f"{r.get('bytes_allocated', 0) / MiB:.2f}"] for r in result["phases"]])
        + img("phases.png"))
    parts.append("<h2>Referenced bytes per object and phase</h2>" + img("object_phase.png"))
    for key, title in (("by_peak_bytes", "peak bytes"), ("by_bytes", "bytes allocated"), ("by_count", "count")):
        parts.append(f"<h2>Top allocation sites by {title}</h2>" + _table(
            ["site", "function", "file:line", "count", "MiB allocated", "peak MiB", "short-lived"],
            [[r["site"], r["function"], f"{r['file']}:{r['line']}" if r["file"] else r["module"], r["count"],
              f"{r['bytes'] / MiB:.2f}", f"{r['peak_bytes'] / MiB:.2f}", f"{100 * r['short_lived_fraction']:.0f}%"]
             for r in result["top_sites"][key]]))
    parts.append("<h2>Suggested classes</h2>" + _table(
        ["site", "function", "class", "evidence", "rule"],
        [[c["site"], c["function"], c["class"], "; ".join(c["evidence"]), f"site {c['rule_site']} -> ..."]
         for c in result["suggested_classes"]]))
    style = ("body{font-family:sans-serif;max-width:1100px;margin:auto}table{border-collapse:collapse;margin:8px 0}"
             "td,th{border:1px solid #bbb;padding:3px 6px;font-size:13px}.warn{color:#b00;font-weight:bold}")
    return f"<!doctype html><html><head><meta charset='utf-8'><title>hetmem report</title><style>{style}</style>" \
           f"</head><body>{''.join(parts)}</body></html>"


def text_report(result: dict) -> str:
    lines = []
    t = result["totals"]
    if result["partial"]:
        lines.append("PARTIAL TRACE: " + "; ".join(result["problems"]))
    lines.append(f"trace {result['trace']} (pid {result['pid']}): {t['allocations']} allocations, {t['frees']} frees, "
                 f"{t['bytes_allocated'] / MiB:.1f} MiB allocated, {t['threads']} thread(s), "
                 f"{t['iterations']} iteration(s)")
    if result.get("recording", {}).get("sampled"):
        lines.append(result["recording"]["text"])
    it = result.get("iterations")
    if it:
        lines.append(it["text"])
        sm = result.get("sampled", {})
        if sm.get("instances"):
            lines.append(f"referenced pages sampled in {sm['sampled']} of {sm['instances']} phase instance(s) "
                         "(HM_SAMPLE_BUDGET bounds the sampler's cost; a page counts once per sample)")
    for e in result.get("execs", []):
        lines.append(f"the process exec'd {e['program'] or '(a file descriptor)'} at {e['time_s']:.3f} s: every event "
                     "before it is here; the new program's are in its own trace with --children (TRACE.PID)")
    lines.append("\nlifetime x size (short-lived: freed within the iteration it was allocated in)")
    lines.append(f"  {'size MiB':<10} {'short':>9} {'long':>9} {'accum MiB':>11} {'peak MiB':>10}")
    for r in result["lifetime_size"]:
        lines.append(f"  {r['size_mib']:<10} {r['short_lived']:>9} {r['long_lived']:>9} "
                     f"{r['accumulated_bytes'] / MiB:>11.2f} {r['peak_bytes'] / MiB:>10.2f}")
    if result["phases"]:
        lines.append("\ntime per phase")
        for r in result["phases"]:
            lines.append(f"  {r['phase']:<24} {r['calls']:>6} calls {r['seconds']:>10.4f} s {100 * r['share']:>6.1f}% "
                         f"{r.get('allocations', 0):>9} allocations {r.get('bytes_allocated', 0) / MiB:>9.2f} MiB")
    if result["object_phase_referenced"]:
        lines.append("\nreferenced fraction per large object and phase")
        for o in result["object_phase_referenced"]:
            fr = ", ".join(f"{k} {100 * v:.0f}%" for k, v in sorted(o["referenced_fraction"].items()))
            lines.append(f"  {o['object']} {o['size'] / MiB:8.1f} MiB site {o['site']}: {fr}")
    lines.append("\ntop allocation sites by peak bytes")
    for r in result["top_sites"]["by_peak_bytes"]:
        where = f"{os.path.basename(r['file'])}:{r['line']}" if r["file"] else os.path.basename(r["module"])
        lines.append(f"  site {r['site']:>4} {r['function'][:40]:<40} {where:<28} {r['count']:>8}x "
                     f"{r['bytes'] / MiB:>9.2f} MiB peak {r['peak_bytes'] / MiB:>8.2f} MiB")
    if result["suggested_classes"]:
        lines.append("\nsuggested classes")
        for c in result["suggested_classes"]:
            lines.append(f"  site {c['site']:>4} {c['function'][:40]:<40} {c['class']:<10} {'; '.join(c['evidence'])}")
    return "\n".join(lines)


def plan_text(result: dict) -> str:
    """A plan (docs/placement.md): the suggested classes as rules of call sites -> class, to edit
    and apply with `hetmem run --plan FILE -- PROGRAM`."""
    lines = [f"# hetmem plan from {result['trace']} (pid {result['pid']}): call sites -> object class.",
             "# Edit freely: KIND is metadata, temporary, hot (with a priority: higher goes fast first),",
             "# streaming or cold. Apply with: hetmem run --plan THIS_FILE [--policy hetmem-static] -- PROGRAM",
             "# Sites move when the program is rebuilt: profile again and write a new plan then."]
    if result["partial"]:
        lines.append("# WARNING: made from a partial trace: " + "; ".join(result["problems"]))
    written = set()
    for c in result["suggested_classes"]:
        where = f"{c['function']} ({c['file']}:{c['line']})" if c["file"] else c["function"]
        evidence = "; ".join(c["evidence"])
        if c.get("named"):
            lines.append(f"# {where}: a source line the program named (an interpreter's), which a site rule cannot "
                         f"match; place it in the program (hetmem.arrays.placed); {c['class']}: {evidence}")
            continue
        if not c["rule_site"]:
            lines.append(f"# {where}: no call site to name (unknown module); {c['class']}: {evidence}")
            continue
        if c["rule_site"] in written:
            continue
        written.add(c["rule_site"])
        if c["class"] == "unknown":
            lines.append(f"# site {c['rule_site']} -> class ?   # {where}: {evidence}")
            continue
        if c["class"] == "metadata":
            # Small long-lived objects the plan leaves with the C library stay in DRAM, where the
            # metadata space would put them; a class would add its cost to each of many allocations.
            lines.append(f"# site {c['rule_site']} -> class metadata   # {where}: {evidence}; left to the C library "
                         "(in DRAM already; uncomment to place it as a class)")
            continue
        if not c.get("rule_site_direct", True):
            lines.append(f"# site {c['rule_site']} -> class {c['class']}   # {where}: allocated inside {c['via']}, "
                         "which a site rule cannot name (it sees the direct caller only)")
            continue
        target = f"class {c['class']}" + (f" {c['priority']}" if c["class"] == "hot" else "")
        lines.append(f"site {c['rule_site']} -> {target}   # {where}: {evidence}")
    return "\n".join(lines) + "\n"


def write_report(result: dict, out_dir: str) -> list[str]:
    images = plots(result)
    written = write_images(out_dir, images)
    Path(out_dir, "report.html").write_text(html_page(result, images))
    Path(out_dir, "report.json").write_text(json.dumps(result, indent=1))
    written += [os.path.join(out_dir, "report.html"), os.path.join(out_dir, "report.json")]
    return written
