"""Weather fields on hetmem's persistent tier, through ECMWF's FDB5 (docs/fields.md).

FDB5 (the Fields DataBase of ECMWF's IFS workflow; Weiland et al., SC'19, §3.2 and §5.2) indexes
GRIB fields by their MARS keys. The hetmem store (src/fields/, an eckit plugin) keeps their data in
hetmem pools while FDB's TOC catalogue indexes them. This module is the Python side: writing an FDB
configuration, encoding and decoding fields with ecCodes, running FDB's own tools, reading pool
headers, and the ``hetmem fields`` command (list, status, follow, stats).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib
import os
import re
import struct
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from .lib import HetmemError
from .units import size_text

# FDB's three-level schema (database / index / datum) for the fields hetmem's producers write: the
# MARS keys of a model-level forecast field (Weiland et al. describe the same keys for IFS output).
SCHEMA = """\
[ class, expver, stream, date, time, domain?
  [ type, levtype
    [ step, number?, levelist?, param ]]]
"""

POOL_SUFFIX = ".hmpool"
STAGING_SUFFIX = ".hmpool.creating"
DATABASE_KEYS = ("class", "expver", "stream", "date", "time", "domain")


def _package_dir(name: str) -> Path:
    try:
        module = importlib.import_module(name)
    except ImportError as e:
        raise HetmemError(f"the Python package {name} is missing (scripts/setup.sh installs it): {e}") from None
    return Path(module.__file__).parent


def tool(name: str) -> str:
    """The path of one of FDB's tools (fdb-write, fdb-list, fdb-hammer, ...), from the FDB release the
    hetmem store is built against (PyPI fdb5lib)."""
    path = _package_dir("fdb5lib") / "bin" / name
    if not path.exists():
        raise HetmemError(f"FDB's tool {name} is not in {path.parent}")
    return str(path)


def plugin_library() -> Path:
    """The hetmem store's library as FDB loads it (a link in eckit's lib64)."""
    return (_package_dir("eckitlib") / "lib64" / "libhetmem-fdb.so").resolve()


def plugin_problem() -> str:
    """Empty when FDB loads the hetmem store; otherwise what is missing and how to fix it."""
    home = _package_dir("eckitlib")
    manifest = home / "share" / "plugins" / "hetmem-fdb.yml"
    library = home / "lib64" / "libhetmem-fdb.so"
    runtime = home / "lib64" / "libhetmem.so.0"  # what the store links, found beside it
    for p in (manifest, library, runtime):
        if not p.exists():
            return f"the hetmem store is not installed for FDB ({p} is missing; scripts/setup.sh links it)"
        if not p.resolve().exists():
            return f"{p} points to {p.resolve()}, which does not exist (rebuild: scripts/setup.sh)"
    return ""


def write_config(directory: str | Path, store: str = "hetmem", root: str | Path | None = None,
                 pool_bytes: int | None = None, emulate: str | None = None, verify: bool | None = None,
                 tier: str | None = None) -> Path:
    """Writes an FDB configuration (and its schema) into `directory`: a local FDB with FDB's TOC
    catalogue and the given store (`hetmem`, or FDB's POSIX store `file`), its databases under
    `root` (default: directory/root), and the hetmem store's options that are given (`tier`: the
    hetmem tier whose budget counts the fields a writer writes). Returns the configuration file's
    path."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    root = Path(root) if root else directory / "root"
    root.mkdir(parents=True, exist_ok=True)
    (directory / "schema").write_text(SCHEMA)
    options = {k: v for k, v in (("pool_bytes", pool_bytes), ("emulate", emulate),
                                 ("verify", None if verify is None else str(verify).lower()),
                                 ("tier", tier)) if v is not None}
    path = directory / "config.yaml"
    path.write_text(config_text(store, directory / "schema", root, options))
    return path


def config_text(store: str, schema: str | Path, root: str | Path, options: dict[str, Any] | None = None) -> str:
    """An FDB configuration: a local FDB with FDB's TOC catalogue and the given store, the schema
    file and the root its databases go under, and (for the hetmem store) its `hetmem:` options."""
    lines = ["type: local", "engine: toc", f"store: {store}", f"schema: {schema}", "spaces:",
             "- handler: Default", "  roots:", f"  - path: {root}"]
    if options and store == "hetmem":
        lines.append("hetmem:")
        lines += [f"  {k}: {v}" for k, v in options.items()]
    return "\n".join(lines) + "\n"


def environment(config: str | Path) -> dict[str, str]:
    """The environment FDB's tools and pyfdb read their configuration from."""
    env = dict(os.environ)
    env["FDB5_CONFIG_FILE"] = str(config)
    return env


def run_tool(name: str, args: list[str], config: str | Path, timeout: float = 300,
             check: bool = True) -> subprocess.CompletedProcess:
    """Runs one of FDB's tools on `config`; raises HetmemError with its output when it fails and
    `check` is set."""
    p = subprocess.run([tool(name)] + args, env=environment(config), capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise HetmemError(f"{name} {' '.join(args)} failed (status {p.returncode}): "
                          f"{(p.stderr or p.stdout).strip()[-600:]}")
    return p


def open_fdb(config: str | Path) -> Any:
    """A pyfdb.FDB on `config` (pyfdb reads FDB5_CONFIG_FILE when given no configuration)."""
    os.environ["FDB5_CONFIG_FILE"] = str(config)
    import pyfdb
    return pyfdb.FDB()


# --- fields as GRIB ----------------------------------------------------------------------------

_TEMPLATES: dict[tuple, Any] = {}


def _template(shape: tuple[int, int], klass: str, ftype: str, stream: str, expver: str, date: int,
              time_of_day: int, bits: int) -> Any:
    """A GRIB2 handle with everything but the level, step, parameter and values set, made once per
    kind of field and cloned for each message (setting the grid and MARS keys is most of the cost)."""
    import eccodes
    key = (shape, klass, ftype, stream, expver, date, time_of_day, bits)
    h = _TEMPLATES.get(key)
    if h is None:
        nj, ni = shape
        h = eccodes.codes_grib_new_from_samples("regular_ll_pl_grib2")
        # The centre, then ECMWF's local section, which holds the MARS keys.
        for k, v in (("centre", "ecmf"), ("setLocalDefinition", 1), ("localDefinitionNumber", 1), ("class", klass),
                     ("type", ftype), ("stream", stream), ("expver", expver), ("dataDate", date),
                     ("dataTime", time_of_day), ("typeOfLevel", "hybrid"), ("stepUnits", "h"), ("Ni", ni),
                     ("Nj", nj), ("latitudeOfFirstGridPointInDegrees", 90.0),
                     ("longitudeOfFirstGridPointInDegrees", 0.0), ("latitudeOfLastGridPointInDegrees", -90.0),
                     ("longitudeOfLastGridPointInDegrees", 360.0 * (ni - 1) / ni),
                     ("iDirectionIncrementInDegrees", 360.0 / ni), ("jDirectionIncrementInDegrees", 180.0 / (nj - 1)),
                     ("bitsPerValue", bits)):
            eccodes.codes_set(h, k, v)
        _TEMPLATES[key] = h
    return h


def encode_field(values: Any, *, step: int, level: int, param: int, expver: str = "hmmg", klass: str = "rd",
                 stream: str = "oper", ftype: str = "fc", date: int | None = None, time_of_day: int = 0,
                 bits: int = 24) -> bytes:
    """One horizontal slice (a 2-D numpy array, rows = latitude) as a GRIB2 message with MARS keys
    (class, expver, stream, date, time, type, levtype=ml, levelist, step, param), simple packing
    of `bits` bits per value, on a regular latitude-longitude grid."""
    import eccodes
    import numpy as np
    a = np.asarray(values, dtype=np.float64)
    if a.ndim != 2 or min(a.shape) < 2:
        raise HetmemError(f"a field is a 2-D array of at least 2x2 values, got shape {a.shape}")
    if len(expver) != 4:
        raise HetmemError(f"expver '{expver}': MARS experiment versions have 4 characters")
    date = date or int(_dt.date.today().strftime("%Y%m%d"))
    h = eccodes.codes_clone(_template(a.shape, klass, ftype, stream, expver, date, time_of_day, bits))
    try:
        for k, v in (("level", level), ("step", step), ("paramId", param)):
            eccodes.codes_set(h, k, v)
        eccodes.codes_set_values(h, a.ravel())
        return eccodes.codes_get_message(h)
    finally:
        eccodes.codes_release(h)


def decode_field(message: bytes) -> tuple[dict[str, str], Any]:
    """The MARS keys and the values (2-D numpy array) of one GRIB message."""
    import eccodes
    h = eccodes.codes_new_from_message(message)
    try:
        keys = {k: eccodes.codes_get_string(h, k) for k in ("class", "expver", "stream", "date", "time", "domain",
                                                             "type", "levtype", "levelist", "step", "param")}
        nj, ni = eccodes.codes_get(h, "Nj"), eccodes.codes_get(h, "Ni")
        return keys, eccodes.codes_get_values(h).reshape(nj, ni)
    finally:
        eccodes.codes_release(h)


def split_messages(data: bytes) -> list[bytes]:
    """GRIB messages concatenated (what a retrieve returns), one by one."""
    out, at = [], 0
    while True:
        start = data.find(b"GRIB", at)
        if start < 0:
            return out
        edition = data[start + 7]
        if edition == 2:
            length = struct.unpack(">Q", data[start + 8:start + 16])[0]
        else:
            length = int.from_bytes(data[start + 4:start + 7], "big")
        out.append(data[start:start + length])
        at = start + length


# --- pools ------------------------------------------------------------------------------------

@dataclass
class PoolState:
    path: str
    state: str            # committed, empty, creating (a writer has not flushed yet, or was killed), damaged
    bytes: int = 0        # the pool's size
    committed: int = 0    # the end of its committed data
    disk_bytes: int = 0   # what the file takes on its medium
    problem: str = ""


def pool_state(path: str | Path) -> PoolState:
    """What a hetmem pool holds, as the library reads its header (pm_inspect,
    docs/persistent-pool.md): damaged when its header or only root slot is, or when it is
    truncated below its size."""
    path = str(path)
    try:
        st = os.stat(path)
    except OSError as e:
        return PoolState(path, "damaged", problem=str(e))
    disk = st.st_blocks * 512
    if path.endswith(STAGING_SUFFIX):
        return PoolState(path, "creating", st.st_size, 0, disk)
    from .lib import plain_library
    info = plain_library().inspect_pool(path)
    return PoolState(path, info["state"], info["bytes"], info["committed_bytes"], disk, info["problem"])


@dataclass
class DatabaseStatus:
    directory: str
    key: dict[str, str]
    fields: int = 0                 # visible (indexed by FDB's catalogue)
    field_bytes: int = 0
    durable: int = 0                # visible fields lying in committed pool data
    steps: list[int] = field(default_factory=list)
    pools: list[PoolState] = field(default_factory=list)
    store: str = "hetmem"

    @property
    def disk_bytes(self) -> int:
        return sum(p.disk_bytes for p in self.pools)


def _step_number(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return -1


def status(config: str | Path, request: dict[str, str] | None = None) -> list[DatabaseStatus]:
    """Every database the request selects: its visible fields (FDB's list), which of them lie in
    committed pool data (durable), its steps, and its pools (committed, or a writer's staging file)."""
    fdb = open_fdb(config)
    by_dir: dict[str, DatabaseStatus] = {}
    committed: dict[str, PoolState] = {}
    for e in fdb.list(request or {}):
        if not e.has_location():
            continue
        path = e.uri.path()  # pyfdb gives the path without the scheme: a pool is known by its name
        store = "hetmem" if path.endswith(POOL_SUFFIX) else "file"
        directory = os.path.dirname(path)
        key = e.combined_key()
        db = by_dir.get(directory)
        if db is None:
            db = by_dir[directory] = DatabaseStatus(directory, {k: key.get(k, "") for k in DATABASE_KEYS},
                                                    store=store)
        db.fields += 1
        db.field_bytes += e.length()
        step = _step_number(key.get("step", ""))
        if step not in db.steps:
            db.steps.append(step)
        if store != "hetmem":
            db.durable += 1  # FDB's POSIX store: fdatasync'd before the catalogue's flush
            continue
        ps = committed.get(path) or committed.setdefault(path, pool_state(path))
        if ps.state == "committed" and e.offset() + e.length() <= ps.committed:
            db.durable += 1
    for db in by_dir.values():
        db.steps.sort()
        for name in sorted(os.listdir(db.directory)):
            if name.endswith(POOL_SUFFIX) or name.endswith(STAGING_SUFFIX):
                p = os.path.join(db.directory, name)
                db.pools.append(committed.get(p) or pool_state(p))
    return list(by_dir.values())


def follow(config: str | Path, request: dict[str, str], steps: int | None, timeout: float,
           interval: float = 0.05) -> Iterator[tuple[int, int, float]]:
    """Yields (step, fields, seconds since following began) for each step of the request as it
    becomes visible (its fields flushed), until `steps` were seen or `timeout` seconds passed."""
    fdb = open_fdb(config)
    seen: set[int] = set()
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout and (steps is None or len(seen) < steps):
        counts: dict[int, int] = {}
        for e in fdb.list(request):
            s = _step_number(e.combined_key().get("step", ""))
            counts[s] = counts.get(s, 0) + 1
        for s in sorted(set(counts) - seen):
            if steps is not None and len(seen) >= steps:
                return
            seen.add(s)
            yield s, counts[s], time.monotonic() - t0
        time.sleep(interval)


def wait_for_fields(fdb: Any, request: dict[str, str], count: int, timeout: float,
                    interval: float = 0.005) -> tuple[int, int, float]:
    """Lists `request` until at least `count` fields are visible (flushed) or `timeout` seconds
    have passed: (fields visible at the last listing, listings made, seconds spent listing)."""
    deadline = time.monotonic() + timeout
    listings, listing_s = 0, 0.0
    while True:
        t0 = time.perf_counter()
        seen = sum(1 for _ in fdb.list(request))
        listing_s += time.perf_counter() - t0
        listings += 1
        if seen >= count or time.monotonic() > deadline:
            return seen, listings, listing_s
        time.sleep(interval)


# --- the consumer -------------------------------------------------------------------------------

def coarsen(values: Any, factor: int = 2) -> Any:
    """Block means of `factor` x `factor` points (the product's coarser grid)."""
    nj, ni = values.shape
    nj, ni = nj - nj % factor, ni - ni % factor
    return values[:nj, :ni].reshape(nj // factor, factor, ni // factor, factor).mean(axis=(1, 3))


def consume(config: str | Path, request: dict[str, str], steps: int, timeout: float, product_expver: str,
            log: Any = None) -> list[dict[str, Any]]:
    """A product generator (PGEN in Weiland et al.'s workflow): waits for each step of `request` to
    become visible, retrieves its fields, computes per-level statistics (min, max, mean, standard
    deviation) and a 2x2-coarsened field, and archives the coarsened fields back into FDB under
    `product_expver`, flushing once per step. Returns one record per step (seconds from the step
    becoming visible to holding all its fields, and to its products being flushed)."""
    if len(product_expver) != 4:
        raise HetmemError(f"product expver '{product_expver}': MARS experiment versions have 4 characters")
    records = []
    for step, count, seen_at in follow(config, request, steps, timeout):
        t0 = time.monotonic()
        fdb = open_fdb(config)  # a handle per step: a handle keeps the catalogue it first opened
        # A retrieve names every key: the values the step's fields have, from the catalogue.
        values: dict[str, set[str]] = {}
        for e in fdb.list({**request, "step": str(step)}):
            for k, v in e.combined_key().items():
                values.setdefault(k, set()).add(v)
        full = {k: "/".join(sorted(v)) for k, v in values.items()}
        with fdb.retrieve(full) as h:
            data = h.read()
        messages = split_messages(data)
        held = time.monotonic() - t0
        stats = []
        for msg in messages:
            keys, values = decode_field(msg)
            stats.append({"param": keys["param"], "level": keys["levelist"], "min": float(values.min()),
                          "max": float(values.max()), "mean": float(values.mean()), "std": float(values.std())})
            product = encode_field(coarsen(values), step=step, level=int(keys["levelist"]), param=int(keys["param"]),
                                   expver=product_expver, klass=keys["class"], stream=keys["stream"],
                                   date=int(keys["date"]), time_of_day=int(keys["time"]))
            fdb.archive(product)
        fdb.flush()
        record = {"step": step, "fields": len(messages), "listed": count, "seconds_to_hold": held,
                  "seconds_to_products": time.monotonic() - t0, "visible_after_s": seen_at,
                  "levels": stats}
        records.append(record)
        if log:
            log(record)
    return records


# --- the command --------------------------------------------------------------------------------

def parse_request(text: str) -> dict[str, str]:
    """`class=rd,expver=hmmg` (FDB's tool syntax) as a dict; values may be lists (`step=1/2/3`)."""
    out: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        k, eq, v = part.partition("=")
        if not eq or not k or not v:
            raise HetmemError(f"request '{text}': key=value pairs separated by commas, e.g. class=rd,expver=hmmg")
        out[k.strip()] = v.strip()
    return out


def _config_of(args: argparse.Namespace) -> str:
    config = args.config or os.environ.get("FDB5_CONFIG_FILE", "")
    if not config:
        raise HetmemError("no FDB configuration: pass --config PATH or set FDB5_CONFIG_FILE")
    if not Path(config).is_file():
        raise HetmemError(f"--config '{config}': no such file")
    if problem := plugin_problem():
        raise HetmemError(problem)
    return config


def main(args: argparse.Namespace, console: Any) -> int:
    try:
        return _main(args, console)
    except HetmemError:
        raise
    except RuntimeError as exc:  # what FDB refuses (pyfdb raises eckit's exceptions as RuntimeError)
        text = re.sub(r"^(?:\w+: )+", "", str(exc).strip().splitlines()[0] if str(exc).strip() else "")
        raise HetmemError(f"FDB refused '{args.request or 'all'}': {text or type(exc).__name__}") from None


def _main(args: argparse.Namespace, console: Any) -> int:
    config = _config_of(args)
    if args.action == "hammer":
        from .fields_hammer import run
        return run(args, config, lambda text: console.print(text, highlight=False, markup=False))
    request = parse_request(args.request or "")
    if args.action == "list":
        fdb = open_fdb(config)
        n = 0
        for e in fdb.list(request):
            key = e.combined_key()
            where = f"  {e.uri.path()} +{e.offset()} ({e.length()} bytes)" if args.location else ""
            console.print(",".join(f"{k}={v}" for k, v in key.items()) + where, highlight=False)
            n += 1
        console.print(f"{n} field(s)")
        return 0
    if args.action == "consume":
        import json
        out = open(args.out, "w") if args.out else None

        def log(r: dict[str, Any]) -> None:
            console.print(f"step {r['step']}: {r['fields']} field(s) held {r['seconds_to_hold']:.3f} s after "
                          f"visible, products flushed after {r['seconds_to_products']:.3f} s", highlight=False)
            if out:
                out.write(json.dumps(r) + "\n")
                out.flush()
        records = consume(config, request, args.steps or 1, args.timeout, args.product_expver, log)
        if out:
            out.close()
        return 0 if len(records) == (args.steps or 1) else 1
    if args.action == "follow":
        for step, fields, at in follow(config, request, args.steps, args.timeout):
            console.print(f"step {step}: {fields} field(s) visible at {at:.3f} s", highlight=False)
        return 0
    dbs = status(config, request)
    if not dbs:
        console.print("no database matches the request")
        return 0
    from rich.table import Table
    table = Table(title=f"FDB databases ({config})")
    for col in ("database", "store", "fields", "data", "durable", "steps", "pools", "on medium"):
        table.add_column(col)
    bad = 0
    for db in dbs:
        pools = [p for p in db.pools]
        staging = sum(p.state == "creating" for p in pools)
        damaged = [p for p in pools if p.state == "damaged"]
        bad += len(damaged) + (db.fields - db.durable)
        steps = (f"{db.steps[0]}..{db.steps[-1]} ({len(db.steps)})" if len(db.steps) > 1 else
                 ",".join(map(str, db.steps)))
        pool_text = f"{len(pools) - staging} committed" + (f", {staging} being written" if staging else "") + \
            (f", {len(damaged)} DAMAGED" if damaged else "")
        durable = "all" if db.durable == db.fields else f"{db.durable} of {db.fields} (NOT all)"
        table.add_row(os.path.basename(db.directory), db.store, str(db.fields), size_text(db.field_bytes), durable,
                      steps, pool_text if db.store == "hetmem" else "-", size_text(db.disk_bytes))
        for p in damaged:
            console.print(f"damaged pool {p.path}: {p.problem}", highlight=False)
    console.print(table)
    if args.action == "stats":
        fields = sum(d.fields for d in dbs)
        data = sum(d.field_bytes for d in dbs)
        disk = sum(d.disk_bytes for d in dbs)
        console.print(f"{len(dbs)} database(s), {fields} field(s), {size_text(data)} of field data, "
                      f"{size_text(disk)} on the medium in {sum(len(d.pools) for d in dbs)} pool(s)", highlight=False)
    return 1 if bad else 0


def add_parser(sub: Any, handler: Any) -> None:
    f = sub.add_parser("fields", help="weather fields in FDB5 on hetmem's persistent tier: list, status (visible "
                       "and durable), follow new steps, stats")
    f.add_argument("action", choices=["list", "status", "follow", "stats", "consume", "hammer"],
                   help="list: the fields; status: per database, fields visible and durable, steps, pools; follow: "
                        "print each step as it becomes visible; stats: status plus totals; consume: a product "
                        "generator (per-level statistics and a coarsened field, archived back) for each new step; "
                        "hammer: FDB's fdb-hammer benchmark (its options and output), with writer and reader processes")
    f.add_argument("request", nargs="?", default="", help="MARS keys, e.g. class=rd,expver=hmmg (default: all); "
                   "hammer: the template GRIB file (fdb-hammer's <grib_path>; default: a generated field)")
    f.add_argument("--config", help="the FDB configuration (default: $FDB5_CONFIG_FILE)")
    f.add_argument("--location", action="store_true", help="list: each field's pool, offset and length")
    f.add_argument("--steps", type=int, help="follow, consume: stop after this many steps")
    f.add_argument("--product-expver", default="hmpg", help="consume: the expver of the products (default hmpg)")
    f.add_argument("--out", help="consume: write one JSON line per step (timings, statistics) here; hammer: the "
                   "plan and every process's results as JSON")
    f.add_argument("--timeout", type=float, default=3600.0,
                   help="follow, consume: stop after this many seconds; hammer: a reader's wait for a step (default 3600)")
    from .fields_hammer import add_arguments
    add_arguments(f)
    f.set_defaults(func=handler)
