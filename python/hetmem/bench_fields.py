"""`hetmem bench fields`: FDB5's POSIX store against the hetmem store (docs/fields.md).

1. The object store alone, as Weiland et al. (SC'19, Table 8) measure it: writer processes archive
   fields of 64 KiB, 800 KiB and 3.2 MiB, flushing after each step; GiB/s is all the data pushed
   divided by the wall time, flushes included. Side by side in one run, alternating, on each medium
   (tmpfs, the machine's disk), with 1 and 2 writers, alone and with 2 consumers that wait for each
   step and read it: flush latency, the time from a flush to a consumer holding the step, and the
   writers' step time alone and with consumers. Each round runs both stores alone and with
   consumers, in an order that turns round by round, and every ratio is paired by round (the
   consumers' cost too: a writer's step with consumers against its step alone in the same round).
   Target: the hetmem store at least as fast as the POSIX store everywhere; consumers add at most
   5% to the producer's step time.
2. The workflow of their §5.2: hetmem-mg writing its fields every step with 2 product generators
   (hetmem fields consume), to the hetmem store on an emulated persistent tier (tmpfs, charged as
   Optane) against FDB's POSIX store on the machine's disk; the model's time per step.

Every medium here is real except where "emulated" is said; this machine has no DAX mount.
On a virtual machine whose free memory is reported to its host (virtio-balloon free page
reporting), memory the guest gave back is faulted in again by the host when it is next used: about
1.5 ms per MiB here against 0.35 ms for memory the host still backs. Which store's page cache
happened to land on such memory decided the disk rows for 3.2 MiB fields (the hetmem store's
`pwritev`s of 3.2 MiB took 0.3 or 4.7 ms by where they landed; a replay with the same writes and
syncs did the same). So every worker first touches and frees `WARM_MIB` of memory, and both stores
start from memory the host backs.
Both stores are driven by the same pyfdb code, so Python's per-call cost is in both. The paper's
consumers had nodes of their own; here each writer (and hetmem-mg, on one OpenMP thread) gets a core
of its own and the consumers the cores left, where the machine has a core to spare, and the
consumers run at nice 19 in any case: sharing a writer's core, they would measure the scheduler
rather than the stores' interference (files, locks, flushes).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import fields, verdicts
from .lib import HetmemError, find_program

KIB = 1024
SIZES = {"64 KiB": 64 * KIB, "800 KiB": 800 * KIB, "3.2 MiB": 3277 * KIB}
STEP_BYTES = 8 << 20  # data per writer per step (at least 4 fields)
WARM_MIB = 256  # memory each worker touches and frees before it starts (see above)
PAGE_REPORTING = Path("/sys/module/page_reporting/parameters/reported_kib")


def fields_per_step(size: int) -> int:
    """Fields of `size` bytes a writer archives per step: STEP_BYTES, at least 4."""
    return max(4, STEP_BYTES // size)


def _db(expver: str) -> dict[str, str]:
    return {"class": "rd", "expver": expver, "stream": "oper", "date": "20261125", "time": "0000", "domain": "g",
            "type": "fc", "levtype": "ml"}


# --- the worker processes -------------------------------------------------------------------------

def _touch_and_free(mib: int) -> None:
    """Memory the host backs at the head of the guest's free lists: touched (in 2 MiB pages where
    the kernel gives them, as the page cache's large folios need) and freed again."""
    import mmap
    m = mmap.mmap(-1, mib << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(m, "madvise") and hasattr(mmap, "MADV_HUGEPAGE"):
        m.madvise(mmap.MADV_HUGEPAGE)
    for i in range(0, mib << 20, mmap.PAGESIZE):
        m[i] = 1
    m.close()


def _writer(config: str, writer: int, size: int, steps: int, start_at: float) -> None:
    fdb = fields.open_fdb(config)
    data = os.urandom(size)
    per_step = fields_per_step(size)
    key = _db("bfld")
    time.sleep(max(0.0, start_at - 0.5 - time.time()))  # just before the start: the host backs it then
    _touch_and_free(WARM_MIB)
    while time.time() < start_at:
        time.sleep(0.0005)
    out = {"start": time.time(), "steps": []}
    for step in range(steps):
        t0 = time.perf_counter()
        for f in range(per_step):
            fdb.archive(data, {**key, "step": str(step), "levelist": str(1000 * (writer + 1) + f), "param": "130"})
        t1 = time.perf_counter()
        fdb.flush()
        t2 = time.perf_counter()
        out["steps"].append({"step_s": t2 - t0, "flush_s": t2 - t1, "flushed_at": time.time()})
    out["end"] = time.time()
    print(json.dumps(out), flush=True)


def _consumer(config: str, writers: int, size: int, steps: int) -> None:
    per_step = writers * fields_per_step(size)
    key = _db("bfld")
    out = []
    _touch_and_free(WARM_MIB)
    lister = fields.open_fdb(config)  # listing sees what was flushed since; retrieving needs a new handle
    for step in range(steps):
        fields.wait_for_fields(lister, {**key, "step": str(step)}, per_step, math.inf, interval=0.002)
        seen = time.time()
        fdb = fields.open_fdb(config)
        levels = "/".join(str(1000 * (w + 1) + f) for w in range(writers) for f in range(fields_per_step(size)))
        with fdb.retrieve({**key, "step": str(step), "levelist": levels, "param": "130"}) as h:
            got = len(h.read())
        if got != per_step * size:
            raise SystemExit(f"consumer: step {step}: read {got} bytes, expected {per_step * size}")
        out.append({"seen_at": seen, "held_at": time.time()})
    print(json.dumps(out), flush=True)


# --- one configuration --------------------------------------------------------------------------

def cores(writers: int) -> tuple[list[set[int] | None], set[int] | None]:
    """A core for each writer and the cores left for the consumers, where this process may run on
    more cores than there are writers; else None for each (then all of them share every core)."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) <= writers:
        return [None] * writers, None
    return [{c} for c in cpus[:writers]], set(cpus[writers:])


def _on(cpus: set[int] | None, background: bool = False):
    """What a worker runs before it starts: its cores (when given), and for a consumer the lowest
    priority. In Weiland et al.'s workflow the product generators run on nodes of their own; on a
    core a writer uses they would take its CPU, which is not the interference (files, locks,
    flushes) the comparison is about."""
    def start() -> None:
        if cpus:
            os.sched_setaffinity(0, cpus)
        if background:
            os.nice(19)
    return start


def _worker_environment(config: Path) -> tuple[dict[str, str], Path]:
    """A worker's environment and working directory: hetmem's package importable, and the
    configuration's directory to work in, where FDB writes what it dumps on an error (a catalogue
    it could not read: `dump_of_toc.*`), not the source tree."""
    env = fields.environment(config)
    package = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package, env.get("PYTHONPATH", "")) if p)
    return env, config.parent


def _run_store(config: Path, writers: int, consumers: int, size: int, steps: int) -> dict[str, Any]:
    me = [sys.executable, "-m", "hetmem.bench_fields"]
    env, cwd = _worker_environment(config)
    start_at = time.time() + 2.0  # after every process has imported pyfdb and touched its memory
    own, left = cores(writers)
    cons = [subprocess.Popen(me + ["consumer", str(config), str(writers), str(size), str(steps)], env=env, cwd=cwd,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=_on(left, background=True))
            for _ in range(consumers)]
    wrs = [subprocess.Popen(me + ["writer", str(config), str(w), str(size), str(steps), repr(start_at)], env=env,
                            cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_on(own[w]))
           for w in range(writers)]
    store = config.parent.name  # _config's directory: the store's name
    w_out, c_out = _results(wrs, f"writer of the {store} store"), _results(cons, f"consumer of the {store} store")
    pushed = writers * steps * fields_per_step(size) * size
    wall = max(w["end"] for w in w_out) - min(w["start"] for w in w_out)
    flushed_at = [max(w["steps"][s]["flushed_at"] for w in w_out) for s in range(steps)]
    return {"gib_s": pushed / wall / 2**30,
            "flush_ms": statistics.median(s["flush_s"] for w in w_out for s in w["steps"]) * 1e3,
            "step_ms": statistics.median(s["step_s"] for w in w_out for s in w["steps"]) * 1e3,
            "to_consumer_ms": (statistics.median(c[s]["held_at"] - flushed_at[s] for c in c_out for s in range(steps))
                               * 1e3 if c_out else None)}


def _results(procs: list[subprocess.Popen], role: str) -> list[Any]:
    """The JSON each worker prints last; a worker that failed stops the benchmark with its error."""
    out = []
    for p in procs:
        text, err = p.communicate(timeout=600)
        if p.returncode != 0:
            raise HetmemError(f"bench fields: a {role} failed: {err.strip()[-500:]}")
        out.append(json.loads(text.splitlines()[-1]))
    return out


def _config(root: Path, store: str, emulate: str | None = None) -> Path:
    if root.exists():
        shutil.rmtree(root)
    return fields.write_config(root, store=store, emulate=emulate)


def _media(build_tmp: Path) -> dict[str, Path]:
    media = {}
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        media["tmpfs"] = Path(tempfile.mkdtemp(prefix="hetmem-bench-fields-", dir=shm))
    media["disk"] = Path(tempfile.mkdtemp(prefix="hetmem-bench-fields-", dir=build_tmp))
    return media


def _fs_type(path: Path) -> str:
    try:
        out = subprocess.run(["stat", "-f", "-c", "%T", str(path)], capture_output=True, text=True).stdout.strip()
        return out or "?"
    except OSError:
        return "?"


# --- the workflow (Weiland et al. §5.2) ----------------------------------------------------------

def _workflow(config: Path, consumers: int, n: int, steps: int) -> float:
    """Seconds per model step of hetmem-mg writing every step, with `consumers` product generators."""
    request = ",".join(f"{k}={v}" for k, v in {**_db("hmmg"), "date": ""}.items() if v)
    env, cwd = _worker_environment(config)
    own, left = cores(1)
    cons = [subprocess.Popen([sys.executable, "-m", "hetmem", "fields", "consume", request, "--config", str(config),
                              "--steps", str(steps), "--timeout", "600", "--product-expver", f"pg{c:02d}"], cwd=cwd,
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                             preexec_fn=_on(left, background=True))
            for c in range(consumers)]
    time.sleep(1.0 if consumers else 0)
    t0 = time.perf_counter()
    # One OpenMP thread: the model keeps one core, as it keeps its nodes in the paper's workflow.
    model = subprocess.run([find_program("hetmem-mg"), f"mg.n={n}", f"mg.steps={steps}", "mg.output_interval=1"],
                           env={**fields.environment(config), "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                           timeout=900, preexec_fn=_on(own[0]))
    wall = time.perf_counter() - t0
    if model.returncode != 0:
        raise HetmemError(f"bench fields: hetmem-mg failed: {model.stderr.strip()[-500:]}")
    for p in cons:
        _, err = p.communicate(timeout=900)
        if p.returncode != 0:
            raise HetmemError(f"bench fields: a consumer failed: {err.strip()[-500:]}")
    return wall / steps


# --- the benchmark --------------------------------------------------------------------------------

def main(out: str, quick: bool) -> int:
    if problem := fields.plugin_problem():
        raise HetmemError(problem)
    rounds = 2 if quick else 5
    steps = 4 if quick else 8
    sizes = {k: v for k, v in SIZES.items() if not quick or k != "800 KiB"}
    writer_counts = [1] if quick else [1, 2]
    build_tmp = Path(out).resolve().parent
    media = _media(build_tmp)
    result: dict[str, Any] = {"benchmark": "hetmem-bench-fields", "rounds": rounds, "steps": steps,
                              "driver": "pyfdb (the same code for both stores)", "store": [], "workflow": []}
    try:
        print(f"hetmem bench fields: FDB5 {_fdb_version()}, POSIX store (file) against the hetmem store, medians of "
              f"{rounds} alternating rounds, {steps} steps of {STEP_BYTES >> 20} MiB per writer (at least 4 fields), "
              "a flush per step; real media, nothing emulated in part 1")
        if PAGE_REPORTING.exists():
            print(f"  this machine reports free memory to its host (virtio-balloon): each worker touches and frees "
                  f"{WARM_MIB} MiB before it starts, so that neither store writes into memory the host must fault in")
        ncpu = len(os.sched_getaffinity(0))
        has_spare = {w: bool(cores(w)[1]) for w in writer_counts}
        spare = [str(w) for w, yes in has_spare.items() if yes]
        shared = [str(w) for w, yes in has_spare.items() if not yes]
        layout = []
        if spare:
            layout.append(f"with {' or '.join(spare)} writer(s) each writer has a core of its own and the consumers "
                          "(nice 19) the cores left")
        if shared:
            layout.append(f"with {' or '.join(shared)} writer(s) writers and consumers (nice 19) share them")
        print(f"  cores: {ncpu}; " + "; ".join(layout))
        result["cores"] = ncpu
        result["warm_mib"] = WARM_MIB
        result["free_page_reporting"] = PAGE_REPORTING.exists()
        head = (f"  {'medium':7s} {'field':>8s} {'wr':>2s} {'cons':>4s} {'file GiB/s':>10s} {'hetmem GiB/s':>12s} "
                f"{'hetmem / file':>26s} {'flush ms f/h':>13s} {'to consumer ms f/h':>19s}  target >= 1.0")
        print(head)
        verdict_store = []
        verdict_consumers = []
        cost_lines = []
        for medium, root in media.items():
            fs = _fs_type(root)
            for label, size in sizes.items():
                for writers in writer_counts:
                    # Each round runs both stores alone and with consumers, in an order that turns
                    # round by round, so that the consumers' cost is paired by round as the stores are.
                    cases = [(c, s) for c in (0, 2) for s in ("file", "hetmem")]
                    runs: dict[tuple, list[dict]] = {case: [] for case in cases}
                    for rnd in range(rounds):
                        for consumers, store in cases[rnd % len(cases):] + cases[:rnd % len(cases)]:
                            runs[consumers, store].append(
                                _run_store(_config(root / store, store), writers, consumers, size, steps))
                    for consumers in (0, 2):
                        pair = {s: runs[consumers, s] for s in ("file", "hetmem")}
                        r = verdicts.ratio([x["gib_s"] for x in pair["hetmem"]], [x["gib_s"] for x in pair["file"]],
                                           paired=True)
                        v = verdicts.at_least(r, 1.0)
                        verdict_store.append(v)
                        med = {s: {k: (statistics.median(x[k] for x in pair[s]) if pair[s][0][k] is not None else None)
                                   for k in pair[s][0]} for s in pair}
                        cons_text = (f"{med['file']['to_consumer_ms']:.1f}/{med['hetmem']['to_consumer_ms']:.1f}"
                                     if consumers else "-")
                        print(f"  {medium:7s} {label:>8s} {writers:2d} {consumers:4d} {med['file']['gib_s']:10.2f} "
                              f"{med['hetmem']['gib_s']:12.2f} {r.text(2):>26s} "
                              f"{med['file']['flush_ms']:6.1f}/{med['hetmem']['flush_ms']:<6.1f} {cons_text:>19s}  {v}")
                        result["store"].append({"medium": medium, "filesystem": fs, "emulated": False, "field": label,
                                                "bytes": size, "writers": writers, "consumers": consumers,
                                                "file": pair["file"], "hetmem": pair["hetmem"], **r.as_dict(),
                                                "verdict": v})
                    for store in ("file", "hetmem"):
                        alone = [x["step_ms"] for x in runs[0, store]]
                        with_consumers = [x["step_ms"] for x in runs[2, store]]
                        r = verdicts.ratio(with_consumers, alone, paired=True)
                        v = verdicts.at_most(r, 1.05)
                        if store == "hetmem":
                            verdict_consumers.append(v)
                        cost_lines.append(f"    {medium:7s} {label:>8s} {writers} writer(s) {store:7s} "
                                          f"{statistics.median(alone):8.1f} ms -> {statistics.median(with_consumers):8.1f} "
                                          f"ms  {r.text(2)}  {v}")
                        result.setdefault("consumer_cost", []).append(
                            {"medium": medium, "field": label, "writers": writers, "store": store, "alone_ms": alone,
                             "with_ms": with_consumers, "paired": True, **r.as_dict(), "verdict": v})
        print("  consumers' cost to the producer: step time with 2 consumers / alone, paired by round "
              "(target at most 1.05)")
        print("\n".join(cost_lines))
        result["store_verdict"] = verdicts.all_of(verdict_store)
        result["consumer_verdict"] = verdicts.all_of(verdict_consumers)

        # Part 2: the workflow.
        n = 32 if quick else 64
        wsteps = 3 if quick else 6
        print(f"  Weiland et al. §5.2 workflow: hetmem-mg mg.n={n}, {wsteps} steps, fields written every step; "
              "hetmem store on tmpfs charged as Optane (emulated) against the POSIX store on the disk (real)")
        emul_root = media.get("tmpfs", media["disk"])
        wf: dict[str, list[float]] = {}
        for _ in range(rounds):
            for consumers in (0, 2):
                wf.setdefault(f"file+{consumers}", []).append(
                    _workflow(_config(media["disk"] / "wf-file", "file"), consumers, n, wsteps))
                wf.setdefault(f"hetmem+{consumers}", []).append(
                    _workflow(_config(emul_root / "wf-hetmem", "hetmem", emulate="optane"), consumers, n, wsteps))
        for consumers in (0, 2):
            r = verdicts.ratio(wf[f"file+{consumers}"], wf[f"hetmem+{consumers}"], paired=True)
            print(f"    {consumers} consumers: POSIX store on disk {statistics.median(wf[f'file+{consumers}']):.3f} s "
                  f"per step, hetmem store (emulated Optane) {statistics.median(wf[f'hetmem+{consumers}']):.3f} s; "
                  f"speed-up {r.text(3)} (Weiland et al.: 1.10 alone, 1.17 with consumers, on real DCPMM vs Lustre)")
            result["workflow"].append({"consumers": consumers, "n": n, "steps": wsteps,
                                       "file_s_per_step": wf[f"file+{consumers}"],
                                       "hetmem_emulated_s_per_step": wf[f"hetmem+{consumers}"], **r.as_dict()})
        for store in ("file", "hetmem"):
            r = verdicts.ratio(wf[f"{store}+2"], wf[f"{store}+0"], paired=True)
            v = verdicts.at_most(r, 1.05)
            print(f"    {store}: model step with 2 consumers / alone {r.text(3)}  (at most 1.05: {v})")
            result["workflow"].append({"store": store, "consumer_cost": r.as_dict(), "verdict": v})
    finally:
        for root in media.values():
            shutil.rmtree(root, ignore_errors=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"hetmem store at least as fast as the POSIX store in every case: {result['store_verdict']}; "
          f"consumers add at most 5% to the producer's step (hetmem store): {result['consumer_verdict']}")
    print("  not measured here: a DAX (fsdax) mount; this machine has none (tests/realtier/guest.py pmem-fields runs a C "
          "writer for both stores on one, under QEMU)")
    print(f"results: {out}")
    return 0 if result["store_verdict"] != "NOT MET" else 1


def _fdb_version() -> str:
    try:
        import fdb5lib
        return fdb5lib.__version__
    except Exception:  # noqa: BLE001 - a version string only
        return "?"


if __name__ == "__main__":
    role = sys.argv[1]
    if role == "writer":
        _writer(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6]))
    elif role == "consumer":
        _consumer(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    else:
        raise SystemExit(f"bench_fields: unknown role {role}")
