"""`hetmem compare` end to end on the smallest PIC preset: every policy runs, the report says the
slow tier is emulated, the files are written, the fast budget is the asked fraction of the
footprint; and bad input gets a message."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def hetmem(*args, timeout=600):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HM_") or k == "HM_CALIBRATION"}
    env["PYTHONPATH"] = str(ROOT / "python")
    return subprocess.run([sys.executable, "-m", "hetmem", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def test_every_policy_runs_and_the_report_says_what_was_emulated(tmp_path):
    out = tmp_path / "cmp"
    r = hetmem("compare", "--iterations", "2", "--threads", "1", "--out", str(out), "preset:L0")
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((out / "compare.json").read_text())
    assert doc["emulated"] and "emul:optane" in doc["slow_tier"]
    assert abs(doc["fast_budget_bytes"] - 0.25 * doc["footprint_bytes"]) <= 1
    rows = {p["policy"]: p for p in doc["policies"]}
    from hetmem import compare
    assert list(rows) == compare.policy_order()  # every policy of the library's registry, all-fast first
    for name, row in rows.items():
        assert "skipped" not in row, row
        assert row["seconds_per_iteration"] > 0 and row["cpu_seconds_per_iteration"] > 0
        if name != "all-fast":
            assert row["fast_high_water"] <= doc["fast_budget_bytes"], name
    assert rows["all-fast"]["charged_seconds_per_iteration"] == 0, "all-fast touches no emulated memory"
    assert rows["slow-only"]["charged_seconds_per_iteration"] > rows["hetmem-static"]["charged_seconds_per_iteration"]
    assert rows["memory-mode"]["placement"]["dram_cache"]["misses"] > 0
    static = rows["hetmem-static"]["placement"]
    assert static["static"]["settled"] and all(s["sized"] for s in static["spaces"])
    for s in static["spaces"]:
        assert s["in_use"] <= s["budget"], s
    fields = next(c for c in rows["hetmem-static"]["classes"] if c["name"] == "pic.fields")
    assert list(fields["live_on"]) == ["dram"], "hetmem-static keeps the hot fields fast"
    assert "emulated" in r.stdout and "hetmem-static vs memory-mode" in r.stdout
    # Every margin line carries its verdict, and a "cannot tell" its reason (one run each, or an
    # emulated tier that could not show slow-only apart from all-fast on a busy machine).
    verdicts = re.findall(r"^\S+ vs \S+: [0-9.]+x wall \((MET|NOT MET|cannot tell)(: [^;]+)?;", r.stdout, re.M)
    assert len(verdicts) >= 5, r.stdout
    assert all(v in ("MET", "NOT MET") or why for v, why in verdicts), verdicts
    # The full runtime: particle tiles at home on the capacity tier, the second step's sweep staged
    # and measured by the helper model, whose inputs the report prints.
    streaming = rows["hetmem"]["placement"]["streaming"]
    assert streaming["tiles_in"] > 0 and streaming["tiles_out"] == streaming["tiles_in"], streaming
    model = streaming["helper_models"][0]
    assert model["phase"] == "gather+push+deposit" and model["helpers"] >= 1 and model["t_comp"] > 0
    assert "helper model, phase 'gather+push+deposit'" in r.stdout and "hetmem vs all-fast" in r.stdout
    # Each mechanism says what became of it, and the per-phase times are over the same iterations
    # as the time per iteration (phases inside an iteration never add up to more than it).
    assert "hetmem's mechanisms: static placement applied" in r.stdout and "staging " in r.stdout
    for name, row in rows.items():
        assert sum(row["phase_seconds_per_iteration"].values()) <= 1.01 * row["seconds_per_iteration"], name
    assert rows["reactive"]["placement"]["reactive"]["rounds"] >= 1
    for name in ("compare.html", "policies.png", "phases.png", "figure7.png"):
        assert (out / name).stat().st_size > 1000, name
    page = (out / "compare.html").read_text()
    assert "emulated" in page and "<pre" not in page and page.count("<table>") >= 4
    assert "S+P+D the full runtime" in page, "figure 7's bars are explained on the page"
    _fits_the_window(out / "compare.html", tmp_path)
    # Not on a terminal (a batch job's log): a line per run on stderr, as the bar would show.
    runs = [line for line in r.stderr.splitlines() if line.startswith("hetmem compare: ")]
    assert runs and runs[-1].startswith(f"hetmem compare: {len(runs)}/{len(runs)} runs done"), r.stderr


def _fits_the_window(page: Path, tmp_path: Path, width: int = 1400) -> None:
    """The page in headless Chromium at `width` pixels: neither the page nor any of its tables is
    wider than the window (a table that does not fit would scroll inside its box)."""
    import shutil
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        pytest.fail("chromium is not installed (scripts/setup.sh installs it)")
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace("</body>", (
        "<script>const over = Math.max(0, ...[...document.querySelectorAll('.scroll')].map("
        "e => e.scrollWidth - e.clientWidth));"
        "document.title = `page=${document.documentElement.scrollWidth} window=${innerWidth} over=${over}`;"
        "</script></body>")))
    r = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--window-size={width},900", "--dump-dom", probe.as_uri()],
                       capture_output=True, text=True, timeout=120)
    m = re.search(r"<title>page=(\d+) window=(\d+) over=(\d+)</title>", r.stdout)
    assert m, (r.stdout[-500:], r.stderr[-1000:])
    page_width, window, over = map(int, m.groups())
    assert page_width <= window and over == 0, f"wider than the window: page {page_width} px, window {window}, " \
                                                f"a table {over} px over its box"


def test_the_helper_and_prefetch_sweeps_mark_the_models_choice(tmp_path):
    out = tmp_path / "sweep"
    r = hetmem("compare", "--iterations", "3", "--threads", "1", "--policies", "all-fast,hetmem",
               "--sweep-helpers", "0,1", "--sweep-prefetch", "0,1", "--out", str(out), "preset:L0")
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((out / "compare.json").read_text())
    helpers = doc["helper_sweep"]
    assert [p["value"] for p in helpers["points"]] == [0, 1] and all(p["seconds"] > 0 for p in helpers["points"])
    assert helpers["model_vs_best"] >= 1.0 and "model_decision" in helpers
    pf = doc["prefetch_sweep"]
    assert pf["model"] is not None and any(p["value"] == pf["model"] for p in pf["points"]), pf
    assert "Figure 12, helper threads" in r.stdout and "Figure 11, prefetch distance" in r.stdout
    for name in ("figure11.png", "figure12.png"):
        assert (out / name).stat().st_size > 1000, name
    bad = hetmem("compare", "--sweep-helpers", "1,x", "--out", str(tmp_path / "b"), "preset:L0")
    assert bad.returncode == 2 and "--sweep-helpers '1,x'" in bad.stderr
    bad = hetmem("compare", "--sweep-prefetch", "99", "--out", str(tmp_path / "b"), "preset:L0")
    assert bad.returncode == 2 and "from 0 to 64" in bad.stderr


def test_a_budget_that_holds_the_footprint_is_called_meaningless(tmp_path):
    r = hetmem("compare", "--iterations", "2", "--threads", "1", "--budget", "4G", "--policies",
               "all-fast,first-touch", "--out", str(tmp_path / "c"), "preset:L0")
    assert r.returncode == 0, r.stderr
    assert "not meaningful" in r.stdout


def test_a_ratio_to_a_policy_that_was_not_timed_is_a_dash(tmp_path):
    """all-fast always runs once for the footprint, but is timed only when it is one of the policies:
    without it the /all-fast column says '-', not a ratio of 0."""
    r = hetmem("compare", "--iterations", "2", "--threads", "1", "--policies", "hetmem-static", "--out",
               str(tmp_path / "c"), "preset:L0")
    assert r.returncode == 0, r.stdout + r.stderr
    row = next(line.split() for line in r.stdout.splitlines() if line.split()[:1] == ["hetmem-static"])
    assert row[3:5] == ["1.000x", "-"], row


def test_bad_input_gets_a_message(tmp_path):
    r = hetmem("compare", "--policies", "all-fast,fastest", "--out", str(tmp_path / "c"), "preset:L0")
    assert r.returncode == 2 and "fastest" in r.stderr and "hetmem-static" in r.stderr
    r = hetmem("compare", "--iterations", "1", "--out", str(tmp_path / "c"), "preset:L0")
    assert r.returncode == 2 and "at least 2" in r.stderr
    r = hetmem("compare", "--budget", "lots", "--out", str(tmp_path / "c"), "preset:L0")
    assert r.returncode == 2 and "'lots' is not a size" in r.stderr
    r = hetmem("compare", "--out", str(tmp_path / "c"), "preset:L9")
    assert r.returncode == 2 and "preset 'L9' is unknown" in r.stderr


def test_memory_mode_on_a_real_capacity_tier_is_skipped_with_its_reason(tmp_path):
    r = hetmem("compare", "--iterations", "2", "--threads", "1", "--tiers", "fast=dram,capacity=dram",
               "--policies", "all-fast,memory-mode,hetmem-static", "--out", str(tmp_path / "c"), "preset:L0")
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "c" / "compare.json").read_text())
    mm = next(p for p in doc["policies"] if p["policy"] == "memory-mode")
    assert "Memory Mode" in mm["skipped"]
    assert not doc["emulated"] and doc["slow_tier"].startswith("real")


def test_an_unchanged_program_with_a_plan_is_compared_too(tmp_path):
    programs = Path(os.environ.get("HETMEM_BUILD_DIR", ROOT / "build")) / "tests" / "programs"
    trace, plan = tmp_path / "p.hmtrace", tmp_path / "p.plan"
    env_tiers = {"HM_TIERS": "capacity=emul:optane"}
    r = subprocess.run([sys.executable, "-m", "hetmem", "profile", "-o", str(trace), "--",
                        str(programs / "prog_plan_probe")], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT / "python"), **env_tiers})
    assert r.returncode == 0, r.stderr
    assert hetmem("plan", str(trace), "-o", str(plan)).returncode == 0
    out = tmp_path / "c"
    r = hetmem("compare", "--plan", str(plan), "--policies", "all-fast,hetmem-static,slow-only", "--iterations", "2",
               "--out", str(out), "--", str(programs / "prog_plan_probe"))
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((out / "compare.json").read_text())
    assert "prog_plan_probe" in doc["workload"] and doc["emulated"]
    assert doc["footprint_bytes"] >= (24 + 96 + 16) << 20, "the plan's sites hold the footprint"
    rows = {p["policy"]: p for p in doc["policies"]}
    assert set(rows) == {"all-fast", "hetmem-static", "slow-only"}
    hot = next(c for c in rows["hetmem-static"]["classes"] if c["kind"] == "hot")
    assert list(hot["allocated_on"]) == ["dram"], "hetmem-static put the plan's hot site on the fast tier"
    assert rows["slow-only"]["charged_seconds_per_iteration"] > rows["hetmem-static"]["charged_seconds_per_iteration"]
    assert rows["hetmem-static"]["seconds_per_iteration"] > 0


def test_an_unchanged_program_keeps_its_thread_setting_and_a_refusal_is_quoted(tmp_path, monkeypatch):
    """compare --plan leaves OMP_NUM_THREADS as the program's environment has it (GROMACS refuses one
    that differs from its -nt); with --threads it is set, and a run that fails says why in the
    program's own words, not its last line (a row of dashes)."""
    programs = Path(os.environ.get("HETMEM_BUILD_DIR", ROOT / "build")) / "tests" / "programs"
    plan = tmp_path / "p.plan"
    plan.write_text("all -> class cold\n")
    script = tmp_path / "picky.sh"
    script.write_text('#!/bin/sh\nif [ "$OMP_NUM_THREADS" != 3 ]; then\n'
                      '  echo "-----------" >&2; echo "Fatal error:" >&2\n'
                      '  echo "OMP_NUM_THREADS ($OMP_NUM_THREADS) differs from -nt 3" >&2; echo "" >&2\n'
                      '  echo "see the documentation" >&2; echo "-----------" >&2; exit 1\nfi\n'
                      f'exec {programs / "prog_plan_probe"}\n')
    script.chmod(0o755)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    out = tmp_path / "c"
    r = hetmem("compare", "--plan", str(plan), "--policies", "all-fast,hetmem-static", "--iterations", "2",
               "--out", str(out), "--", str(script))
    assert r.returncode == 0, r.stdout + r.stderr
    rows = {p["policy"]: p for p in json.loads((out / "compare.json").read_text())["policies"]}
    assert all("skipped" not in row for row in rows.values()), rows
    r = hetmem("compare", "--plan", str(plan), "--policies", "all-fast,hetmem-static", "--iterations", "2",
               "--threads", "2", "--out", str(out), "--", str(script))
    rows = {p["policy"]: p for p in json.loads((out / "compare.json").read_text())["policies"]} if r.returncode == 0 \
        else {}
    said = r.stdout + r.stderr + json.dumps(rows)
    assert "Fatal error: OMP_NUM_THREADS (2) differs from -nt 3" in said, said


def test_a_plan_without_a_program_is_refused(tmp_path):
    plan = tmp_path / "p.plan"
    plan.write_text("all -> class cold\n")
    r = hetmem("compare", "--plan", str(plan), "--out", str(tmp_path / "c"))
    assert r.returncode == 2 and "needs a program" in r.stderr
    r = hetmem("compare", "--plan", str(plan), "--out", str(tmp_path / "c"), "--", str(tmp_path / "nonexistent"))
    assert r.returncode == 2 and "program not found" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_policies_plot_shows_every_repetition_and_no_label_overlaps():
    """policies.png: each repetition is a point beside its policy's median bar, and the policy names
    (hetmem-static+prefetch beside hetmem-static) do not overlap."""
    import matplotlib
    matplotlib.use("Agg")
    from hetmem import compare, compare_report
    rows = [{"policy": p, "seconds_per_iteration": 1.0 + 0.1 * i, "runs": [0.9 + 0.1 * i, 1.0 + 0.1 * i, 1.2 + 0.1 * i]}
            for i, p in enumerate(compare.policy_order())]
    fig = compare_report.policies_figure(rows, "iteration", "test")
    ax = fig.axes[0]
    points = [line for line in ax.get_lines() if line.get_marker() == "."]
    assert sum(len(line.get_xdata()) for line in points) == 3 * len(rows)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in ax.get_yticklabels() if t.get_text()]
    assert len(boxes) == len(rows)
    for a, b in zip(boxes, boxes[1:]):
        assert not a.overlaps(b), "policy names overlap"


def test_verdict_lines_say_why_and_never_contradict_themselves():
    """Each 'X vs Y' line gives its verdict with the reason that fits it: beyond the spread only
    for MET, a loss in every repetition for NOT MET, and 'cannot tell' with why otherwise (overlap,
    a single run, an instrument that cannot see placement)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
    from hetmem import compare_report

    def row(policy, runs, charged=0.0):
        return {"policy": policy, "runs": runs, "spread": [min(runs), max(runs)],
                "seconds_per_iteration": sorted(runs)[len(runs) // 2], "cpu_seconds_per_iteration": None,
                "charged_share": charged}

    def lines(static, others, emulated=False, fast=None):
        pols = [row("hetmem-static", static)] + [row(p, r) for p, r in others.items()]
        if fast:
            pols.append(row("all-fast", fast))
        result = {"policies": pols, "emulated": emulated, "warpx_pm_full_vs": {}, "warpx_pm_static_vs": {}}
        return {line.split(":")[0]: line for line in compare_report.target_lines(result, "hetmem-static")}

    got = lines([1.0, 1.01, 1.02], {"slow-only": [1.2, 1.21, 1.22], "first-touch": [0.9, 0.91, 0.92],
                                    "interleave": [1.0, 1.05, 1.1]})
    assert "(MET: faster in every repetition, beyond the spread;" in got["hetmem-static vs slow-only"]
    assert "(NOT MET: slower in every repetition;" in got["hetmem-static vs first-touch"]
    assert "(cannot tell: the repetitions' spreads overlap;" in got["hetmem-static vs interleave"]
    one = lines([1.0], {"slow-only": [1.5]})
    assert "(cannot tell: one run each: no spread to judge by" in one["hetmem-static vs slow-only"]
    # slow-only within all-fast's spread on an emulated tier: nothing can be judged, win or loss.
    blind = lines([1.0, 1.01, 1.02], {"slow-only": [1.03, 1.04, 1.05], "first-touch": [0.9, 0.91, 0.92]},
                  emulated=True, fast=[1.0, 1.03, 1.06])
    assert all("(cannot tell: the emulated tier cannot show placement here" in line for line in blind.values())
    for line in list(got.values()) + list(one.values()) + list(blind.values()):
        assert "cannot tell: faster" not in line and "NOT MET: faster" not in line
