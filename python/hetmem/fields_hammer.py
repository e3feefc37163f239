"""`hetmem fields hammer`: FDB's own benchmark, fdb-hammer (FDB5's src/fdb5/tools/fdb-hammer.cc), on
either store, with its options and its output, for machines where the fdb-hammer of the FDB wheels
cannot start (docs/fields.md).

A writer archives GRIB fields made from a template (a GRIB file, or a field of --grid points): the
keys fdb-hammer sets (step, ensemble member, level, paramId from fdb-hammer's list of valid
parameters) over --nsteps x --nensembles x --nlevels x --nparams, with values drawn from a generator
seeded by those keys (the template's own with --no-randomise-data), flushing after each member of
each step, and prints fdb-hammer's lines (Fields written, Bytes written, Total duration, GRIB
duration, Writing duration, Total rate). A reader (--read) waits for each step to be visible and
retrieves it whole, checking each message's keys (--md-check) or its bytes (--full-check), and
prints fdb-hammer's read lines; --list lists. Beyond fdb-hammer, which a launcher starts once per
process: --writers N starts N writer processes (writer w archives members number + w*nensembles
onwards) and --readers M as many readers beside them, each reading every writer's fields.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from . import fields
from .lib import HetmemError

# fdb-hammer's VALID_PARAMS, the parameters --nparams takes in order (ECMWF's table 128).
VALID_PARAMS = [
    1, 2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 32, 33, 35,
    36, 37, 38, 39, 40, 41, 42, 43, 46, 53, 54, 60, 62, 63, 64, 65, 66, 67, 70, 71, 74, 75, 76, 77, 80, 81, 82, 83,
    84, 85, 86, 87, 88, 89, 90, 91, 92, 93, 94, 95, 96, 97, 98, 99, 100, 101, 102, 103, 104, 105, 106, 107, 108,
    109, 110, 111, 112, 113, 114, 115, 116, 117, 118, 119, 120, 123, 125, 126, 127, 128, 129, 130, 131, 132, 133,
    135, 138, 139, 140, 141, 145, 148, 153, 154, 155, 156, 157, 158, 159, 160, 161, 162, 163, 170, 171, 174, 183,
    184, 185, 186, 187, 188, 190, 191, 192, 193, 194, 197, 198, 199, 200, 203, 204, 205, 214, 215, 216, 217, 218,
    219, 220, 221, 222, 223, 224, 225, 226, 227, 233, 236, 237, 238, 241, 242, 243, 246, 247, 248, 249, 250, 251,
    252, 253, 254]


def make_plan(args: argparse.Namespace) -> dict[str, Any]:
    """What every process of one hammer run does, checked as fdb-hammer checks its options."""
    if args.read and args.list:
        raise HetmemError("--read and --list options are mutually exclusive")
    if args.md_check and args.full_check:
        raise HetmemError("--md-check and --full-check options are mutually exclusive")
    for name in ("nsteps", "nensembles", "nparams", "writers"):
        if getattr(args, name) < 1:
            raise HetmemError(f"--{name} {getattr(args, name)}: at least 1")
    if args.readers < 0:
        raise HetmemError(f"--readers {args.readers}: 0 or more")
    if args.nparams > len(VALID_PARAMS):
        raise HetmemError(f"--nparams {args.nparams}: requested number of parameters exceeds the {len(VALID_PARAMS)} "
                          "valid parameters")
    if args.levels:
        try:
            levels = [int(v) for v in args.levels.split(",")]
        except ValueError:
            raise HetmemError(f"--levels '{args.levels}': comma-separated level numbers") from None
    else:
        if args.nlevels < 1:
            raise HetmemError(f"--nlevels {args.nlevels}: at least 1")
        levels = [args.level + i for i in range(args.nlevels)]
    if len(args.expver) != 4:
        raise HetmemError(f"--expver '{args.expver}': MARS experiment versions have 4 characters")
    try:
        nj, ni = (int(v) for v in args.grid.lower().split("x"))
    except ValueError:
        raise HetmemError(f"--grid '{args.grid}': NJxNI, e.g. 181x360") from None
    if nj < 2 or ni < 2:
        raise HetmemError(f"--grid '{args.grid}': at least 2x2 points")
    template = None
    if args.request:  # fdb-hammer's <grib_path>
        if not Path(args.request).is_file():
            raise HetmemError(f"{args.request}: no such GRIB file (the hammer's argument is its template message)")
        template = str(Path(args.request).resolve())
    members = args.nensembles * args.writers
    return {"expver": args.expver, "class": args.klass, "steps": [args.step + i for i in range(args.nsteps)],
            "members": [args.number + i for i in range(members)], "per_writer": args.nensembles,
            "ensemble": members > 1 or args.number != 1, "levels": levels, "params": VALID_PARAMS[:args.nparams],
            "grid": [nj, ni], "template": template, "randomise": not args.no_randomise_data,
            "check": "full" if args.full_check else "md" if args.md_check else "none",
            "verbose": args.verbose, "timeout": args.timeout, "date": 20261125}


# --- the fields ------------------------------------------------------------------------------------

class Fields:
    """The messages of one plan: a template handle, cloned and set for each field."""

    def __init__(self, plan: dict[str, Any]):
        import eccodes
        import numpy as np
        self.plan, self.ec, self.np = plan, eccodes, np
        if plan["template"]:
            with open(plan["template"], "rb") as f:
                self.base = eccodes.codes_new_from_file(f, eccodes.CODES_PRODUCT_GRIB)
            if self.base is None:
                raise HetmemError(f"{plan['template']}: holds no GRIB message")
            for k, v in (("expver", plan["expver"]), ("class", plan["class"])):
                eccodes.codes_set(self.base, k, v)
        else:
            nj, ni = plan["grid"]
            message = fields.encode_field(np.zeros((nj, ni)), step=0, level=1, param=130, expver=plan["expver"],
                                          klass=plan["class"], date=plan["date"])
            self.base = eccodes.codes_new_from_message(message)
        if plan["ensemble"]:  # an ensemble forecast: GRIB2's product template 1 holds the member's number
            if eccodes.codes_get(self.base, "edition") == 2:
                eccodes.codes_set(self.base, "productDefinitionTemplateNumber", 1)
            for k, v in (("stream", "enfo"), ("type", "pf")):
                eccodes.codes_set(self.base, k, v)
        self.values = eccodes.codes_get_size(self.base, "values")

    def message(self, step: int, member: int, level: int, param: int) -> bytes:
        ec = self.ec
        h = ec.codes_clone(self.base)
        try:
            for k, v in (("step", step), ("level", level), ("paramId", param)):
                ec.codes_set(h, k, v)
            if self.plan["ensemble"]:
                ec.codes_set(h, "number", member)
            if self.plan["randomise"]:
                rng = self.np.random.default_rng([step, member, level, param])
                ec.codes_set_values(h, rng.random(self.values) * 100.0)
            return ec.codes_get_message(h)
        finally:
            ec.codes_release(h)

    def database(self) -> dict[str, str]:
        """The keys every field of the plan shares (its database and index), as FDB lists them."""
        return {k: self.ec.codes_get_string(self.base, k)
                for k in ("class", "expver", "stream", "date", "time", "domain", "type", "levtype")}

    def keys(self, message: bytes) -> tuple[int, int, int, int]:
        ec = self.ec
        h = ec.codes_new_from_message(message)
        try:
            member = ec.codes_get(h, "number") if self.plan["ensemble"] else 0
            return ec.codes_get(h, "step"), member, ec.codes_get(h, "level"), ec.codes_get(h, "paramId")
        finally:
            ec.codes_release(h)


# --- the processes ---------------------------------------------------------------------------------

def writer(plan: dict[str, Any], index: int) -> dict[str, Any]:
    fdb = fields.open_fdb(os.environ["FDB5_CONFIG_FILE"])
    made = Fields(plan)
    members = plan["members"][index * plan["per_writer"]:(index + 1) * plan["per_writer"]]
    count = written = 0
    grib_s = 0.0
    t0 = time.perf_counter()
    before_io = None
    for step in plan["steps"]:
        for member in members:
            for level in plan["levels"]:
                for param in plan["params"]:
                    if plan["verbose"]:
                        print(f"Member: {member}, step: {step}, level: {level}, param: {param}", flush=True)
                    g = time.perf_counter()
                    msg = made.message(step, member, level, param)
                    grib_s += time.perf_counter() - g
                    before_io = before_io or time.time()
                    fdb.archive(msg)
                    count += 1
                    written += len(msg)
            fdb.flush()
    total = time.perf_counter() - t0
    return {"role": "writer", "index": index, "fields": count, "bytes": written, "seconds": total, "grib_seconds": grib_s,
            "before_io": before_io, "after_io": time.time()}


def reader(plan: dict[str, Any], index: int) -> dict[str, Any]:
    from .fields import split_messages
    config = os.environ["FDB5_CONFIG_FILE"]
    made = Fields(plan)
    db = made.database()
    lister = fields.open_fdb(config)
    per_step = len(plan["members"]) * len(plan["levels"]) * len(plan["params"])
    stats = {"role": "reader", "index": index, "fields": 0, "bytes": 0, "list_attempts": 0, "list_seconds": 0.0,
             "read_seconds": 0.0, "mismatches": 0, "before_io": time.time()}
    t0 = time.perf_counter()
    for step in plan["steps"]:
        request = {**db, "step": str(step)}
        seen, listings, listing_s = fields.wait_for_fields(lister, request, per_step, plan["timeout"])
        stats["list_attempts"] += listings
        stats["list_seconds"] += listing_s
        if seen < per_step:
            raise HetmemError(f"reader {index}: step {step}: {seen} of {per_step} fields visible after "
                              f"{plan['timeout']:g} s (--timeout)")
        rt = time.perf_counter()
        fdb = fields.open_fdb(config)  # a new handle sees what was flushed since the last one
        want = {**request, "levelist": "/".join(map(str, plan["levels"])),
                "param": "/".join(map(str, plan["params"]))}
        if plan["ensemble"]:
            want["number"] = "/".join(map(str, plan["members"]))
        with fdb.retrieve(want) as h:
            data = h.read()
        stats["read_seconds"] += time.perf_counter() - rt
        messages = split_messages(data)
        stats["fields"] += len(messages)
        stats["bytes"] += len(data)
        if len(messages) != per_step:
            raise HetmemError(f"reader {index}: step {step}: retrieved {len(messages)} fields, expected {per_step}")
        if plan["check"] != "none":
            expected = {(step, m if plan["ensemble"] else 0, lev, p)
                        for m in plan["members"] for lev in plan["levels"] for p in plan["params"]}
            for msg in messages:
                key = made.keys(msg)
                if key not in expected or (plan["check"] == "full" and msg != made.message(*key)):
                    stats["mismatches"] += 1
                expected.discard(key)
            stats["mismatches"] += len(expected)
    stats["seconds"] = time.perf_counter() - t0
    stats["after_io"] = time.time()
    return stats


def lister(plan: dict[str, Any]) -> dict[str, Any]:
    db = Fields(plan).database()
    fdb = fields.open_fdb(os.environ["FDB5_CONFIG_FILE"])
    t0 = time.perf_counter()
    count = sum(1 for _ in fdb.list(db))
    return {"role": "list", "index": 0, "fields": count, "seconds": time.perf_counter() - t0}


# --- fdb-hammer's output ---------------------------------------------------------------------------

def lines(r: dict[str, Any]) -> list[str]:
    if r["role"] == "list":
        return [f"fdb-hammer - Fields listed: {r['fields']}", f"fdb-hammer - List duration: {r['seconds']:g}"]
    rate = r["bytes"] / r["seconds"] if r["seconds"] > 0 else 0.0
    stamps = [f"Timestamp before first IO: {r['before_io']:.6f}", f"Timestamp after last IO: {r['after_io']:.6f}"]
    if r["role"] == "writer":
        return [f"Fields written: {r['fields']}", f"Bytes written: {r['bytes']}", f"Total duration: {r['seconds']:g}",
                f"GRIB duration: {r['grib_seconds']:g}", f"Writing duration: {r['seconds'] - r['grib_seconds']:g}",
                f"Total rate: {rate:g} bytes / s", f"Total rate: {rate / 2**20:g} MB / s", *stamps]
    out = [f"Time spent on {r['list_attempts']} list attempts: {r['list_seconds']:g} s",
           f"Data read duration: {r['read_seconds']:g}", f"Fields read: {r['fields']}", f"Bytes read: {r['bytes']}",
           f"Total duration: {r['seconds']:g}", f"Total rate: {rate:g} bytes / s",
           f"Total rate: {rate / 2**20:g} MB / s", *stamps]
    return out + ([f"Check failures: {r['mismatches']}"] if "mismatches" in r else [])


def run(args: argparse.Namespace, config: str, say) -> int:
    """`hetmem fields hammer`: starts the writers and readers (or one reader, or one lister) as
    processes of their own, prints each one's fdb-hammer lines, then the totals."""
    plan = make_plan(args)
    roles = ([("list", 0)] if args.list else [("reader", r) for r in range(max(1, args.readers))] if args.read
             else [("writer", w) for w in range(args.writers)] + [("reader", r) for r in range(args.readers)])
    env = fields.environment(config)
    cwd = Path(__file__).resolve().parents[1]
    procs = [(role, i, subprocess.Popen([sys.executable, "-m", "hetmem.fields_hammer", role, str(i), json.dumps(plan)],
                                        env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
             for role, i in roles]
    results, failed = [], 0
    for role, i, p in procs:
        out, err = p.communicate()
        verbose = [line for line in out.splitlines() if not line.startswith("{")]
        for line in verbose:
            say(f"[{role} {i}] {line}")
        result = next((json.loads(line) for line in reversed(out.splitlines()) if line.startswith("{")), None)
        if p.returncode != 0 or result is None:
            failed += 1
            say(f"[{role} {i}] failed (status {p.returncode}): {err.strip().splitlines()[-1] if err.strip() else 'no output'}")
            continue
        results.append(result)
        for line in lines(result):
            say(f"[{role} {i}] {line}")
    writers = [r for r in results if r["role"] == "writer"]
    readers = [r for r in results if r["role"] == "reader"]
    for name, group, verb in (("writers", writers, "written"), ("readers", readers, "read")):
        if group:
            wall = max(r["after_io"] for r in group) - min(r["before_io"] for r in group)
            data = sum(r["bytes"] for r in group)
            say(f"{len(group)} {name}: {sum(r['fields'] for r in group)} fields {verb}, {data} bytes in {wall:.3f} s: "
                f"{data / wall / 2**20 if wall > 0 else 0.0:.1f} MB / s together")
    bad = sum(r.get("mismatches", 0) for r in readers)
    if bad:
        say(f"check ({plan['check']}): {bad} field(s) did not match what was written")
    if args.out:
        Path(args.out).write_text(json.dumps({"plan": plan, "results": results}, indent=1) + "\n")
        say(f"results: {args.out}")
    return 1 if failed or bad else 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    """fdb-hammer's options (same names and meaning), then hetmem's: --writers, --readers, --grid.
    fdb-hammer's <grib_path> is the command's request argument."""
    p.add_argument("--expver", default="hmhm", help="hammer: expver of the fields (default hmhm)")
    p.add_argument("--class", dest="klass", default="rd", help="hammer: class of the fields (default rd)")
    p.add_argument("--step", type=int, default=0, help="hammer: the first step (default 0)")
    p.add_argument("--number", type=int, default=1, help="hammer: the first ensemble member (default 1)")
    p.add_argument("--level", type=int, default=1, help="hammer: the first level (default 1)")
    p.add_argument("--levels", help="hammer: comma-separated levels (instead of --level and --nlevels)")
    p.add_argument("--nsteps", type=int, default=4, help="hammer: number of steps (default 4)")
    p.add_argument("--nensembles", type=int, default=1, help="hammer: ensemble members per writer (default 1)")
    p.add_argument("--nlevels", type=int, default=10, help="hammer: number of levels (default 10)")
    p.add_argument("--nparams", type=int, default=5, help="hammer: number of parameters (default 5)")
    p.add_argument("--no-randomise-data", action="store_true", help="hammer: the template's values in every field")
    p.add_argument("--md-check", action="store_true", help="hammer: readers check every field's keys")
    p.add_argument("--full-check", action="store_true", help="hammer: readers check every field's bytes")
    p.add_argument("--read", action="store_true", help="hammer: read rather than write the data")
    p.add_argument("--list", action="store_true", help="hammer: list rather than write the data")
    p.add_argument("--verbose", action="store_true", help="hammer: print each field as it is written")
    p.add_argument("--writers", type=int, default=1, help="hammer: writer processes (default 1)")
    p.add_argument("--readers", type=int, default=0,
                   help="hammer: reader processes beside the writers, or with --read (default 0; 1 with --read)")
    p.add_argument("--grid", default="181x360", help="hammer: NJxNI points of the generated template (default 181x360)")


if __name__ == "__main__":
    role, index, plan_text = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    plan_ = json.loads(plan_text)
    try:
        result = {"writer": writer, "reader": reader}[role](plan_, index) if role != "list" else lister(plan_)
    except HetmemError as exc:
        print(str(exc), file=sys.stderr)
        sys.exit(1)
    print(json.dumps(result), flush=True)
