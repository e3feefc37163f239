"""What `hetmem compare` reports from its runs (docs/placement.md): the run summaries read
(iterations, steady state, phases, what the emulated tier charged), the margins between policies
and their verdicts against the published figures, as text tables, PNG plots, JSON and one HTML
page. compare.py runs the workload; this module only reads and writes results.
"""

from __future__ import annotations

import base64
import html
import json
import os
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from .figures import png, write_images
from .units import MiB, size_text



BASELINES = ("slow-only", "first-touch", "memory-mode", "interleave", "reactive")


# The full runtime's target against all-fast: within 1.15x per iteration.
ALL_FAST_TARGET = 1.15


# WarpX-PM (Ren et al., ICS'21), Figure 7 and §6: what WarpX-PM gained on Optane. Static placement
# alone beat memory mode by 29% on the large problems; the full runtime (static + prefetch +
# dynamic) beat Optane-only, memory mode, first-touch and IAL (the reactive baseline) by these
# averages (66.4%, 38.8%, 45.1%, 83.3%).
WARPX_PM_STATIC_VS = {"memory-mode": 1.29}


WARPX_PM_FULL_VS = {"memory-mode": 1.388, "slow-only": 1.664, "first-touch": 1.451, "reactive": 1.833}

# Figure 7's bars, as Ren et al. label them.
FIGURE7_NOTE_SHORT = ("M: memory-mode  S: hetmem-static  S+P: hetmem-static+prefetch  S+P+D: hetmem "
                      "(static, prefetch, dynamic staging); whiskers: fastest and slowest repetition")
FIGURE7_NOTE = ("Figure 7 of WarpX-PM (Ren et al., ICS'21) per phase: M is memory mode (memory-mode), S static "
                "placement (hetmem-static), S+P static placement with prefetch (hetmem-static+prefetch), S+P+D the "
                "full runtime with dynamic staging (hetmem); bars are the median repetition, whiskers the fastest "
                "and slowest.")




def whole_run(doc: dict) -> bool:
    """A run measured whole: a program that marks no iterations, whose inferred ones are time
    windows (every window lasts the window, whatever the policy) or none."""
    return "step_seconds" not in doc and (doc.get("iterations_inferred") == "window" or not doc.get("iteration_seconds"))


def iteration_times(doc: dict, key: str = "step_seconds") -> list[float]:
    """Seconds of each iteration: the PIC code's steps (wall, or CPU with key="step_cpu_seconds"),
    else the iterations the program marked or that were inferred at a function's calls, else the
    whole run as one (wall, or CPU with key="step_cpu_seconds")."""
    if key in doc:
        return doc[key]
    if whole_run(doc):
        value = doc.get("seconds" if key == "step_seconds" else "cpu_seconds")
        return [value] if value is not None else []
    if key != "step_seconds":
        return doc.get("iteration_cpu_seconds", []) if key == "step_cpu_seconds" else []
    return doc.get("iteration_seconds") or [doc.get("seconds", 0.0)]


def steady(doc: dict, key: str = "step_seconds") -> float:
    """Seconds per iteration after the first (the observed one)."""
    steps = iteration_times(doc, key)
    if not steps:
        return float("nan")
    return statistics.median(steps[1:] if len(steps) > 1 else steps)


def phase_seconds(doc: dict) -> dict[str, float]:
    """Seconds per iteration of each phase, over the same iterations as `steady`: the median of
    each phase's per-iteration times after the first when the run recorded them (a mechanism
    tried in the first iterations and withdrawn then weighs on the phase as on the iteration);
    else its total over the iterations."""
    per_iteration = doc.get("iteration_phase_seconds") or {}
    if per_iteration and not whole_run(doc):
        return {phase_name(name): statistics.median(times[1:] if len(times) > 1 else times)
                for name, times in per_iteration.items() if times}
    steps = max(1, len(iteration_times(doc)))
    return {phase_name(k): v["seconds"] / steps for k, v in doc.get("phases", {}).items()}


def phase_name(name: str) -> str:
    """A phase as the user named it: an inferred iteration's function demangled."""
    if name.startswith("iteration (at ") and name.endswith(")"):
        from .lib import plain_library
        return f"iteration (at {plain_library().demangle(name[len('iteration (at '):-1])})"
    return name


def charged_share(doc: dict) -> float:
    """The share of the run's wall time that the emulated tiers charged (device time, summed over
    threads; 0 on real tiers)."""
    charged = sum(t.get("charged_s", 0.0) for t in doc.get("tiers", []))
    seconds = doc.get("seconds") or sum(doc.get("step_seconds") or doc.get("iteration_seconds") or [0.0])
    return charged / seconds if seconds else 0.0


def margin(faster: dict, slower: dict) -> str:
    """MET when every repetition of `faster` beat every repetition of `slower` (the ratio of medians
    is then beyond the run-to-run spread); "cannot tell" when the two spreads overlap."""
    return "MET" if max(faster["runs"]) < min(slower["runs"]) else "cannot tell"


def _spread_text(row: dict) -> str:
    lo, hi = row["spread"]
    return f"{lo:.3f}-{hi:.3f} s over {len(row['runs'])}"


def _ratio(value: float | None) -> str:
    """A ratio column: '-' where there is no ratio (a CPU time not measured, or a baseline not among
    the policies run: all-fast is run for the footprint, but timed only when it is one of them)."""
    return "-" if value is None else f"{value:.3f}x"


def targets(result: dict, key: str = "seconds_per_iteration", subject: str = "hetmem-static") -> list[tuple[str, float, str]]:
    """`subject` faster than each baseline: (baseline, speedup, verdict), by wall time per iteration
    or, with key="cpu_seconds_per_iteration", by CPU time. The wall-time verdict is MET only beyond
    the run-to-run spread (every repetition faster), NOT MET when every repetition is slower, else
    "cannot tell"; the CPU verdict compares medians (one reading per run)."""
    by = {r["policy"]: r for r in result["policies"] if "skipped" not in r}
    if subject not in by:
        return []
    s = by[subject][key]
    if not s:
        return []
    out = []
    for p in BASELINES:
        if p not in by or not by[p][key]:
            continue
        if key == "seconds_per_iteration":
            verdict = margin(by[subject], by[p])
            if verdict != "MET" and min(by[subject]["runs"]) > max(by[p]["runs"]):
                verdict = "NOT MET"
        else:
            verdict = "MET" if by[p][key] > s else "NOT MET"
        out.append((p, by[p][key] / s, verdict))
    return out


def instrument_note(result: dict) -> str:
    """Whether the emulated tier could show a difference at all: slow-only against all-fast."""
    by = {r["policy"]: r for r in result["policies"] if "skipped" not in r}
    if not result.get("emulated") or "slow-only" not in by or "all-fast" not in by:
        return ""
    slow, fast = by["slow-only"], by["all-fast"]
    if margin(fast, slow) == "MET":
        return ""
    return (f"cannot tell: slow-only ({_spread_text(slow)}) is within the run-to-run spread of all-fast "
            f"({_spread_text(fast)}); the emulated tier charged {100 * slow['charged_share']:.1f}% of slow-only's run, "
            "so no placement can show a margin here (a longer run, or --iteration-at to sample per step, charges more)")


def target_lines(result: dict, subject: str) -> list[str]:
    """One line per baseline: `subject`'s margin over it (wall and CPU), its verdict against the
    spreads, and the WarpX-PM figure beside it."""
    lines = []
    cpu = {b: (x, m) for b, x, m in targets(result, "cpu_seconds_per_iteration", subject)}
    published = result["warpx_pm_full_vs"]
    if subject != "hetmem":
        published = {**published, **result["warpx_pm_static_vs"]}
    by = {r["policy"]: r for r in result["policies"] if "skipped" not in r}
    blind = bool(instrument_note(result))
    for baseline, speedup, verdict in targets(result, subject=subject):
        figure = published.get(baseline)
        label = "full runtime" if subject == "hetmem" or baseline not in result["warpx_pm_static_vs"] else "static alone"
        paper_text = f"WarpX-PM (Ren et al., ICS'21), {label}: {figure:.2f}x" if figure else "WarpX-PM: no figure"
        cpu_text = f", {cpu[baseline][0]:.3f}x CPU" if baseline in cpu else ""
        single = min(len(by[subject]["runs"]), len(by[baseline]["runs"])) < 2
        if single:
            verdict, why = "cannot tell", "one run each: no spread to judge by (--repeat 3 gives one)"
        elif blind:  # a margin (or a loss) the instrument could not have caused
            verdict, why = "cannot tell", "the emulated tier cannot show placement here (see below)"
        elif verdict == "MET":
            why = "faster in every repetition, beyond the spread"
        elif verdict == "NOT MET":
            why = "slower in every repetition"
        else:
            why = "the repetitions' spreads overlap"
        lines.append(f"{subject} vs {baseline}: {speedup:.3f}x wall ({verdict}: {why}; "
                     f"{subject} {_spread_text(by[subject])}, {baseline} {_spread_text(by[baseline])})"
                     f"{cpu_text}; {paper_text} [{'emulated' if result['emulated'] else 'real'}]")
    return lines


def all_fast_target(result: dict) -> tuple[float, str] | None:
    """hetmem's time per iteration over all-fast's, and whether it is within ALL_FAST_TARGET:
    "cannot tell" when the emulated tier could not show slow-only apart from all-fast."""
    by = {r["policy"]: r for r in result["policies"] if "skipped" not in r}
    if "hetmem" not in by or "all-fast" not in by:
        return None
    ratio = by["hetmem"]["seconds_per_iteration"] / by["all-fast"]["seconds_per_iteration"]
    if instrument_note(result):
        return ratio, "cannot tell"
    slow = by.get("slow-only")
    if ratio <= ALL_FAST_TARGET and slow and slow["seconds_per_iteration"] <= ALL_FAST_TARGET * by["all-fast"]["seconds_per_iteration"]:
        # Within the target only because nothing here is far from all-fast: not a result.
        return ratio, f"cannot tell: slow-only itself is within {ALL_FAST_TARGET}x"
    return ratio, "MET" if ratio <= ALL_FAST_TARGET else "NOT MET"



def staging_state(m: dict) -> str:
    """What the helper model's decision for a phase came to: "staged", "withdrawn" (staged, then a
    whole staged sweep took longer per interval than working at home) or "declined"."""
    if m["stage"]:
        return "staged"
    return "withdrawn" if m.get("t_staged_seen", 0) else "declined"


def helper_outcome(m: dict) -> str:
    """The helper model's decision in words (staging_state), with what was measured."""
    seen = m.get("t_staged_seen", 0)
    state = staging_state(m)
    if state == "staged":
        return "staged" + (f" (a staged sweep then took {seen * 1e3:.2f} ms an interval)" if seen else "")
    if state == "withdrawn":
        return (f"staged, then withdrawn: a staged sweep took {seen * 1e3:.2f} ms an interval against "
                f"{m['t_inplace'] * 1e3:.2f} ms at home, so tiles stay at home")
    return "tiles kept at home (staging would not pay)"

def measured_points(points: list[dict]) -> list[dict]:
    """A sweep's points that have a time (a value whose every run failed has none)."""
    return [p for p in points if p["seconds"] is not None]


def mechanism_outcomes(row: dict) -> list[str]:
    """Each mechanism of a hetmem run: applied, declined (why) or withdrawn (what was measured)."""
    out = []
    static = row["placement"].get("static")
    if static:
        out.append(f"static placement applied (settled after iteration {static['iteration']}: {static['promoted']} "
                   f"in, {static['demoted']} out" + (f"; {static['problem']}" if static.get("problem") else "") + ")")
    pf = row["placement"].get("prefetch")
    if pf:
        if pf["fast_fraction"] >= 0.999:
            out.append("prefetch declined (every hot object is on the fast tier)")
        else:
            ks = ", ".join(f"k = {p['k']}" for p in pf["phases"]) or "no phase"
            out.append(f"prefetch applied ({ks})")
    for m in row["placement"].get("streaming", {}).get("helper_models", []):
        state = staging_state(m)
        if state == "staged":
            out.append(f"staging applied in '{m['phase']}' ({m['helpers']} helper(s))")
        elif state == "withdrawn":
            out.append(f"staging withdrawn in '{m['phase']}' (measured: {m['t_staged_seen'] * 1e3:.2f} ms an interval "
                       f"staged against {m['t_inplace'] * 1e3:.2f} ms at home)")
        else:
            out.append(f"staging declined in '{m['phase']}' (predicted {m['t_predicted'] * 1e3:.2f} ms an interval "
                       f"staged against {m['t_inplace'] * 1e3:.2f} ms at home)")
    return out


def model_lines(result: dict) -> list[str]:
    """What the helper and prefetch models saw and chose in the hetmem run (the median one)."""
    lines = []
    row = next((r for r in result["policies"] if r["policy"] == "hetmem" and "skipped" not in r), None)
    if not row:
        return lines
    outcomes = mechanism_outcomes(row)
    if outcomes:
        lines.append("hetmem's mechanisms: " + "; ".join(outcomes))
    st = row["placement"].get("streaming", {})
    for m in st.get("helper_models", []):
        lines.append(f"helper model, phase '{m['phase']}': {m['helpers']} helper(s) [{m['binding']}]; per interval "
                     f"{size_text(m['data_in'])} in, {size_text(m['data_out'])} out, {m['t_comp'] * 1e3:.2f} ms computing "
                     f"staged, {m['t_inplace'] * 1e3:.2f} ms at home, copy {m['t_cp'] * 1e3:.2f} ms predicted, "
                     f"interval {m['t_predicted'] * 1e3:.2f} ms predicted; {m['thrd_comp']} of {m['thrd_max']} "
                     f"threads computing; bandwidth {m['bw_comp'] / 1e9:.1f} GB/s computing of "
                     f"{m['bw_max'] / 1e9:.1f}: " + helper_outcome(m))
    if st.get("copy_bw_in_mbps"):
        lines.append("copy bandwidth with 1, 2, ... helpers (MB/s): in " +
                     ", ".join(f"{x:.0f}" for x in st["copy_bw_in_mbps"]) + "; out " +
                     ", ".join(f"{x:.0f}" for x in st["copy_bw_out_mbps"]))
    if st.get("tiles_in"):
        lines.append(f"streaming: {st['sweeps']} sweeps, {st['tiles_in']} tiles staged ({size_text(st['bytes_in'])}), "
                     f"{st['tiles_out']} written back, waited {st['wait_seconds']:.3f} s for staging, helpers copied "
                     f"{st['copy_seconds']:.3f} s")
    pf = row["placement"].get("prefetch")
    if pf:
        ks = ", ".join(f"{p['phase']}: k = {p['k']} ({p['ns_per_unit']:.0f} ns a unit)" for p in pf["phases"])
        lines.append(f"prefetch model: alpha {pf['alpha_ns']:.1f} ns, beta1 {pf['beta1']:.3f}, beta2 {pf['beta2']:.3f} "
                     f"(latency {pf['lat_fast_ns']:.0f} / {pf['lat_slow_ns']:.0f} ns), hot data "
                     f"{100 * pf['fast_fraction']:.0f}% fast" + ("; " + ks if ks else "") +
                     ("" if pf["fast_fraction"] < 0.999 else "; not applied: every hot object is on the fast tier"))
    return lines


@dataclass
class Table:
    """One table of the report, rendered as text (compare's output) and as HTML (compare.html)."""
    title: str
    headers: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)  # sentences under it
    prose_last: bool = False  # the last column is words (left-aligned; wraps on the page)


def report_blocks(result: dict) -> list[Table | list[str]]:
    """The report in order: tables, and lists of sentences (the mechanisms, the verdicts). One
    source for the text and the page, so that the two never say different things."""
    unit = result.get("unit", "iteration")
    short = "run" if unit == "run" else "it"
    live = [r for r in result["policies"] if "skipped" not in r]
    blocks: list[Table | list[str]] = [[
        f"hetmem compare: {result['workload']}; footprint {size_text(result['footprint_bytes'])}, fast budget "
        f"{size_text(result['fast_budget_bytes'])} ({100 * result['fast_budget_bytes'] / result['footprint_bytes']:.0f}%)"
        f"; slow tier {result['slow_tier']}"]]
    rows = []
    for r in result["policies"]:
        if "skipped" in r:
            rows.append([r["policy"]] + ["-"] * 9 + [f"skipped: {r['skipped']}"])
            continue
        note = "no fast budget (upper bound)" if r["policy"] == "all-fast" else ""
        if r.get("failed"):
            note = (note + "; " if note else "") + (f"{len(r['failed'])} of {len(r['failed']) + len(r['runs'])} runs "
                                                    f"failed: {r['failed'][0]}")
        rows.append([r["policy"], f"{r['seconds_per_iteration']:.4f}", f"{r['spread'][0]:.3f}-{r['spread'][1]:.3f}",
                     _ratio(r.get("vs_hetmem_static")), _ratio(r.get("vs_all_fast")),
                     "-" if r["cpu_seconds_per_iteration"] is None else f"{r['cpu_seconds_per_iteration']:.4f}",
                     _ratio(r.get("cpu_vs_hetmem_static")), size_text(r["fast_high_water"]),
                     f"{r['charged_seconds_per_iteration']:.4f}s", f"{100 * r['charged_share']:.1f}%", note])
    if unit == "run":
        explained = ("the whole run: the program marks no iterations and its inferred ones are time windows; medians "
                     "over the repetitions; spread: the fastest and slowest repetition; CPU: the process's CPU time, "
                     "which other guests of a shared machine do not inflate; charged: the emulated device time, summed "
                     "over threads, and its share of the run's wall time")
    else:
        explained = ("medians over the iterations after the first and over the repetitions; spread: the fastest and "
                     "slowest repetition; CPU s/it: the process's CPU time, which other guests of a shared machine do "
                     "not inflate; charged/it: the emulated device time charged per iteration, summed over threads, "
                     "and its share of the run's wall time")
    blocks.append(Table("Time per policy", ["policy", f"s/{unit}", "spread (min-max)", "/static", "/all-fast",
                                            f"CPU s/{short}", "CPU /static", "fast high water", f"charged/{short}",
                                            "charged", "note"], rows, [explained], prose_last=True))
    phases = sorted({p for r in live for p in r["phase_seconds_per_iteration"]})
    blocks.append(Table(f"Per phase (s/{unit})", ["policy"] + phases,
                        [[r["policy"]] + [f"{r['phase_seconds_per_iteration'].get(p, 0):.4f}" for p in phases]
                         for r in live]))
    static = next((r for r in live if r["policy"] == "hetmem-static"), None)
    if static:
        st = static["placement"]["static"]
        blocks.append(Table("hetmem-static's spaces", ["space", "budget", "in use", "high water", "grows", "overflows"],
                            [[s["space"], size_text(s["budget"]), size_text(s["in_use"]), size_text(s["high_water"]),
                              str(s["grows"]), str(s["overflows"])] for s in static["placement"]["spaces"]],
                            [f"settled after iteration {st['iteration']}: {st['promoted']} objects in "
                             f"({size_text(st['promoted_bytes'])}), {st['demoted']} out ({size_text(st['demoted_bytes'])}), "
                             f"{st['unmovable']} unmovable{'; ' + st['problem'] if st['problem'] else ''}"]))
    # Where each class lived at its peak: what is live at the exit says little of a program that
    # frees most of its arrays before it ends (a summary from before per-tier peaks: at the end).
    peak = any(c.get("peak_on") for r in live for c in r["classes"])
    rows = []
    for r in live:
        parts = []
        for c in r["classes"]:
            on = c.get("peak_on") if peak else c["live_on"]
            if on:
                parts.append(c["name"] + " " + "/".join(f"{t} {b / MiB:.0f}" for t, b in on.items()))
        rows.append([r["policy"], "; ".join(parts)])
    blocks.append(Table("Where each class lived at its peak (MiB per tier, each tier's own peak)" if peak
                        else "Where each class lives at the end (MiB per tier)", ["policy", "classes"], rows,
                        prose_last=True))
    verdicts = model_lines(result) + target_lines(result, "hetmem-static") + target_lines(result, "hetmem")
    af = all_fast_target(result)
    if af:
        verdicts.append(f"hetmem vs all-fast: {af[0]:.3f}x the time per {unit} ({af[1]}: within {ALL_FAST_TARGET}x) "
                        f"[{'emulated' if result['emulated'] else 'real'}]")
    note = instrument_note(result)
    if note:
        verdicts.append(note)
    blocks.append(verdicts)
    for title, key in (("Figure 12, helper threads", "helper_sweep"), ("Figure 11, prefetch distance", "prefetch_sweep")):
        sw = result.get(key)
        if not sw:
            continue
        rows, notes = [], []
        for p in sw["points"]:
            if p["seconds"] is None:
                rows.append([str(p["value"]), "-", f"failed: {p['failed']}"])
                continue
            mark = "the model's choice" if p["value"] == sw.get("model") else ""
            if p["value"] == sw.get("best"):
                mark += (", " if mark else "") + "the best"
            rows.append([str(p["value"]), f"{p['seconds']:.4f}", mark])
        if sw.get("model_decision"):
            notes.append(f"the model's own run ({sw['model_decision']}): {sw['model_seconds']:.4f}")
        if sw.get("model_vs_best") is not None:
            notes.append(f"the model's choice ({sw.get('model_decision', sw.get('model'))}) is "
                         f"{sw['model_vs_best']:.3f}x the best ({'MET' if sw['model_vs_best'] <= 1.03 else 'NOT MET'}: "
                         "within 3%)")
        blocks.append(Table(f"{title} ({sw['policy']}, {sw['phase']} s/iteration)", [sw["setting"], "seconds", ""],
                            rows, notes, prose_last=True))
    return blocks


def _text_table(t: Table) -> list[str]:
    widths = [max(len(str(c)) for c in col) for col in zip(t.headers, *t.rows)]
    last = len(widths) - 1

    def line(cells: list[str]) -> str:
        out = []
        for i, (c, w) in enumerate(zip(cells, widths)):
            if i == 0 or (i == last and t.prose_last):
                out.append(c if i == last else c.ljust(w))
            else:
                out.append(c.rjust(w))
        return "  " + "  ".join(out).rstrip()
    return [t.title + ":", line(t.headers)] + [line(r) for r in t.rows] + [f"  ({n})" for n in t.notes]


def text_tables(result: dict) -> str:
    """The report as compare prints it."""
    lines: list[str] = []
    for block in report_blocks(result):
        lines += _text_table(block) if isinstance(block, Table) else block
    return "\n".join(lines)


def policies_figure(rows: list[dict], unit: str, title: str):
    """The median of each policy as a bar and every repetition as a point on it, so the spread is
    seen beside the median; policies on the y axis, where long names cannot overlap."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ys = list(range(len(rows)))
    fig, ax = plt.subplots(figsize=(7.5, 0.9 + 0.32 * len(rows)))
    ax.barh(ys, [r["seconds_per_iteration"] for r in rows], color="#4c72b0", alpha=0.8, label="median")
    for y, r in zip(ys, rows):
        ax.plot(r["runs"], [y] * len(r["runs"]), "k.", markersize=6, label="repetitions" if y == 0 else None)
    ax.set_yticks(ys, [r["policy"] for r in rows], fontsize=8)
    ax.invert_yaxis()  # the table's order, top to bottom
    ax.legend(fontsize=8)
    ax.set_xlabel(f"seconds per {unit}")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def plots(result: dict) -> dict[str, bytes]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result["policies"] if "skipped" not in r]
    tag = "emulated slow tier: " + result["capacity_tier"] if result["emulated"] else "real slow tier: " + \
        result["capacity_tier"]
    out = {}
    unit = result.get("unit", "iteration")
    names = [r["policy"] for r in rows]
    ys = list(range(len(rows)))
    fig = policies_figure(rows, unit, f"Time per iteration, fast budget {size_text(result['fast_budget_bytes'])} "
                          f"({100 * result['fast_budget_bytes'] / result['footprint_bytes']:.0f}% of footprint)\n{tag}")
    out["policies.png"] = png(fig)
    # Ren et al. (ICS'21) Figure 7: per-phase time of each policy, stacked; policies on the y axis, so
    # that their names never run into each other.
    phases = sorted({p for r in rows for p in r["phase_seconds_per_iteration"]})
    fig, ax = plt.subplots(figsize=(7.5, 0.9 + 0.32 * len(rows)))
    left = [0.0] * len(rows)
    for p in phases:
        vals = [r["phase_seconds_per_iteration"].get(p, 0) for r in rows]
        ax.barh(ys, vals, left=left, label=p)
        left = [b + v for b, v in zip(left, vals)]
    # The time per iteration's spread over the repetitions, at the end of each bar.
    ax.errorbar(left, ys, xerr=[[max(0.0, r["seconds_per_iteration"] - r["spread"][0]) for r in rows],
                                [max(0.0, r["spread"][1] - r["seconds_per_iteration"]) for r in rows]],
                fmt="none", ecolor="black", capsize=3, linewidth=1, label="spread of the repetitions")
    ax.set_xlabel(f"seconds per {unit} (phases: the median repetition)")
    ax.set_title(f"Per-phase breakdown (cf. WarpX-PM Figure 7)\n{tag}", fontsize=10)
    if phases:  # beside the bars, never over them
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    ax.set_yticks(ys, names, fontsize=8)
    ax.invert_yaxis()
    fig.tight_layout()
    out["phases.png"] = png(fig)
    # Ren et al. (ICS'21) Figure 7 proper: each phase under memory mode (M), static (S), static + prefetch
    # (S+P) and the full runtime (S+P+D).
    by = {r["policy"]: r for r in rows}
    fig7 = [(label, by[p]) for label, p in (("M", "memory-mode"), ("S", "hetmem-static"),
                                           ("S+P", "hetmem-static+prefetch"), ("S+P+D", "hetmem")) if p in by]
    if len(fig7) >= 2:
        fig, ax = plt.subplots(figsize=(7, 3.6))
        width = 0.8 / len(fig7)
        for i, (label, r) in enumerate(fig7):
            vals = [r["phase_seconds_per_iteration"].get(p, 0) for p in phases]
            spread = r.get("phase_spread", {})
            low = [max(0.0, v - spread.get(p, [v, v])[0]) for p, v in zip(phases, vals)]
            high = [max(0.0, spread.get(p, [v, v])[1] - v) for p, v in zip(phases, vals)]
            ax.bar([x + i * width for x in range(len(phases))], vals, width, label=label, yerr=[low, high],
                   capsize=2, error_kw={"linewidth": 0.8})
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(phases))], [p[:22] for p in phases], fontsize=8)
        ax.set_ylabel("seconds per iteration")
        ax.set_title(f"Per phase: M / S / S+P / S+P+D (WarpX-PM Figure 7)\n{tag}", fontsize=10)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
        fig.text(0.01, 0.01, FIGURE7_NOTE_SHORT, fontsize=7)
        fig.tight_layout(rect=(0, 0.05, 1, 1))
        out["figure7.png"] = png(fig)
    for key, name in (("helper_sweep", "figure12.png"), ("prefetch_sweep", "figure11.png")):
        sw = result.get(key)
        if not sw:
            continue
        fig, ax = plt.subplots(figsize=(6, 3.2))
        measured = measured_points(sw["points"])
        ax.plot([p["value"] for p in measured], [p["seconds"] for p in measured], "o-")
        if sw.get("model") is not None:
            ax.axvline(sw["model"], color="red", linestyle="--", label=f"model: {sw['model']}")
            ax.legend(fontsize=8)
        ax.set_xlabel(sw["setting"])
        ax.set_ylabel(f"{sw['phase']} s/iteration")
        ax.set_title(f"{'Figure 12: helper threads' if key == 'helper_sweep' else 'Figure 11: prefetch distance'} "
                     f"({sw['policy']})\n{sw.get('tier_note', tag)}", fontsize=10)
        out[name] = png(fig)
    return out


PAGE_STYLE = ("body{font-family:sans-serif;max-width:1100px;margin:auto;padding:0 8px}"
              "table{border-collapse:collapse;font-size:13px;margin:4px 0 12px}"
              "th,td{padding:2px 8px;border-bottom:1px solid #ddd;text-align:right;vertical-align:top}"
              "th:first-child,td:first-child,td.prose,th.prose{text-align:left}"
              "td.prose{overflow-wrap:anywhere;min-width:12em}"
              ".scroll{max-width:100%;overflow-x:auto}img{max-width:100%;height:auto}"
              "li{margin:3px 0;overflow-wrap:anywhere}p.note{font-size:12px;color:#444}")


def _html_table(t: Table) -> str:
    last = len(t.headers) - 1

    def cell(tag: str, i: int, text: str) -> str:
        cls = ' class="prose"' if t.prose_last and i == last else ""
        return f"<{tag}{cls}>{html.escape(text)}</{tag}>"
    head = "".join(cell("th", i, h) for i, h in enumerate(t.headers))
    body = "".join("<tr>" + "".join(cell("td", i, c) for i, c in enumerate(r)) + "</tr>" for r in t.rows)
    notes = "".join(f'<p class="note">{html.escape(n)}</p>' for n in t.notes)
    return (f"<h2>{html.escape(t.title)}</h2><div class='scroll'><table><thead><tr>{head}</tr></thead>"
            f"<tbody>{body}</tbody></table></div>{notes}")


def html_page(result: dict, images: dict[str, bytes]) -> str:
    """compare.html: the same tables and sentences as the text, as HTML tables that fit the page,
    with the plots."""
    def img(name):
        return f'<img alt="{name}" src="data:image/png;base64,{base64.b64encode(images[name]).decode()}">' \
            if name in images else ""
    parts = []
    for i, block in enumerate(report_blocks(result)):
        if isinstance(block, Table):
            parts.append(_html_table(block))
            if block.title.startswith("Time per policy"):
                parts.append(img("policies.png"))
            elif block.title.startswith("Per phase"):
                parts.append(img("phases.png") + img("figure7.png") + f"<p class='note'>{html.escape(FIGURE7_NOTE)}</p>")
        elif i == 0:
            parts.append(f"<p><b>{html.escape(block[0])}</b></p>")
        else:
            parts.append("<h2>Mechanisms and verdicts</h2><ul>" + "".join(f"<li>{html.escape(x)}</li>" for x in block)
                         + "</ul>")
    parts.append(img("figure12.png") + img("figure11.png"))
    return (f"<!doctype html><html><head><meta charset='utf-8'><meta name='viewport' content='width=device-width'>"
            f"<title>hetmem compare</title><style>{PAGE_STYLE}</style></head><body><h1>hetmem compare</h1>"
            f"{''.join(parts)}</body></html>")


def write(result: dict, out_dir: str, text: str) -> list[str]:
    images = plots(result)
    written = write_images(out_dir, images)
    Path(out_dir, "compare.json").write_text(json.dumps(result, indent=1))
    Path(out_dir, "compare.html").write_text(html_page(result, images))
    return written + [os.path.join(out_dir, "compare.json"), os.path.join(out_dir, "compare.html")]
