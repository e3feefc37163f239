"""The hetmem store for FDB5 through FDB's own tools and pyfdb (docs/fields.md): archive, flush,
retrieve, list, wipe and purge; many writer processes at once; readers that see only flushed
steps; producers killed at random moments; damaged pools and bad configurations refused."""

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import writer
from hetmem import fields

ROOT = Path(__file__).resolve().parents[2]

N = 24  # grid points per side of the test fields (GRIB messages of about 2 KiB)


def db_request(expver):
    return {"class": "rd", "expver": expver, "stream": "oper", "date": "20261125", "time": "0000", "domain": "g"}


def field_request(expver, step, level):
    return {**db_request(expver), "type": "fc", "levtype": "ml", "step": str(step), "levelist": str(level),
            "param": "130"}


def retrieve(fdb, expver, step, level):
    with fdb.retrieve(field_request(expver, step, level)) as h:
        return h.read()


def run_writer(config, expver, first, steps, levels, *extra, **kw):
    return subprocess.Popen([sys.executable, str(Path(__file__).parent / "writer.py"), str(config), expver, str(first),
                             str(steps), str(levels), str(N), *extra], stdout=subprocess.PIPE, text=True,
                            env=fields.environment(config), **kw)


@pytest.fixture
def config(tmp_path):
    return fields.write_config(tmp_path, store="hetmem", pool_bytes=4 << 20)


def files_of(root):
    return sorted(p.name for p in Path(root).rglob("*") if p.is_file())


def test_fdb_tools_write_list_read_bit_for_bit_and_data_lives_in_pools(config, tmp_path):
    grib = tmp_path / "in.grib"
    grib.write_bytes(b"".join(writer.field_bytes("hmta", s, lv, N) for s in range(3) for lv in range(1, 4)))
    fields.run_tool("fdb-write", [str(grib)], config)
    listed = fields.run_tool("fdb-list", ["class=rd,expver=hmta,stream=oper,date=20261125,time=0000,domain=g"],
                             config).stdout
    assert listed.count("param=130") == 9, listed
    out = tmp_path / "out.grib"
    fields.run_tool("fdb-read", ["--extract", str(grib), str(out)], config)
    got = fields.split_messages(out.read_bytes())
    assert sorted(got) == sorted(fields.split_messages(grib.read_bytes()))
    names = files_of(tmp_path / "root")
    assert any(n.endswith(".hmpool") for n in names), names
    assert not any(n.endswith(".data") for n in names), "the POSIX store wrote data files: " + str(names)


def test_fdb_c_api_archive_flush_list_retrieve_purge_wipe(config):
    client = Path(os.environ.get("HETMEM_BUILD_DIR", ROOT / "build")) / "tests" / "fields_c_api"
    if not client.exists():
        pytest.skip(f"{client} is not built")
    r = subprocess.run([str(client)], env=fields.environment(config), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]


def test_pyfdb_archive_flush_list_retrieve_wipe(config, tmp_path):
    fdb = fields.open_fdb(config)
    for lv in (1, 2):
        fdb.archive(writer.field_bytes("hmtb", 0, lv, N))
    fdb.flush()
    listed = list(fdb.list(db_request("hmtb")))
    assert len(listed) == 2 and all(e.uri.path().endswith(".hmpool") for e in listed)
    for lv in (1, 2):
        assert retrieve(fdb, "hmtb", 0, lv) == writer.field_bytes("hmtb", 0, lv, N)
    report = "".join(str(w) for w in fdb.wipe(db_request("hmtb"), doit=True))
    assert ".hmpool" in report
    assert list(fdb.list(db_request("hmtb"))) == []
    assert not [n for n in files_of(tmp_path / "root") if n.endswith(".hmpool")]


def test_purge_removes_the_pools_of_rewritten_fields_and_keeps_the_newest(config, tmp_path):
    for run in range(2):
        p = run_writer(config, "hmtc", 0, 2, 2)
        assert p.wait(timeout=60) == 0
    pools = [n for n in files_of(tmp_path / "root") if n.endswith(".hmpool")]
    assert len(pools) == 2
    out = fields.run_tool("fdb-purge", [",".join(f"{k}={v}" for k, v in db_request("hmtc").items()), "--doit"],
                          config).stdout
    assert "Unlinking" in out and ".hmpool" in out, out
    assert len([n for n in files_of(tmp_path / "root") if n.endswith(".hmpool")]) == 1
    fdb = fields.open_fdb(config)
    for s in range(2):
        for lv in (1, 2):
            assert retrieve(fdb, "hmtc", s, lv) == writer.field_bytes("hmtc", s, lv, N)


def test_many_writer_processes_archive_into_one_database_at_once(config, tmp_path):
    procs = [run_writer(config, "hmtd", 10 * w, 3, 4) for w in range(4)]
    assert [p.wait(timeout=120) for p in procs] == [0] * 4
    pools = [n for n in files_of(tmp_path / "root") if n.endswith(".hmpool")]
    assert len(pools) == 4, "each writer has its own pool: " + str(pools)
    fdb = fields.open_fdb(config)
    assert len(list(fdb.list(db_request("hmtd")))) == 4 * 3 * 4
    for w in range(4):
        for s in range(10 * w, 10 * w + 3):
            for lv in range(1, 5):
                assert retrieve(fdb, "hmtd", s, lv) == writer.field_bytes("hmtd", s, lv, N)
    status = fields.status(config, db_request("hmtd"))
    assert len(status) == 1 and status[0].fields == status[0].durable == 48


def test_a_reader_sees_a_step_only_once_it_is_flushed(config):
    p = run_writer(config, "hmte", 0, 3, 3, "--hold", "0.4")
    fdb = fields.open_fdb(config)
    checked = 0
    for line in p.stdout:
        kind, step = line.split()[0], line.split()[-1]
        if kind == "archived":
            # Archived but not flushed: FDB's catalogue has not made it visible.
            steps = {e.combined_key()["step"] for e in fdb.list(db_request("hmte"))}
            assert step not in steps, f"step {step} visible before its flush"
            checked += 1
        elif kind == "flushed":
            # A new handle: an FDB handle keeps the catalogue it opened (consumers open one per step).
            fresh = fields.open_fdb(config)
            got = [retrieve(fresh, "hmte", int(step), lv) for lv in (1, 2, 3)]
            assert got == [writer.field_bytes("hmte", int(step), lv, N) for lv in (1, 2, 3)]
    assert p.wait(timeout=60) == 0 and checked == 3


def test_a_producer_killed_at_any_moment_leaves_every_flushed_field_whole_and_nothing_else(config, tmp_path):
    """At least 100 kills at random moments of archive and flush; after each, every step the
    producer reported flushed is retrievable bit for bit, no field is visible that does not match,
    and FDB's tools read the database."""
    rng = random.Random(2026)
    kills = with_flushed = 0
    for i in range(100):
        first = 100 * i
        p = run_writer(config, "hmtk", first, 50, 3, "--linger")
        assert p.stdout.readline().strip() == "ready"
        early = []
        if i % 2:
            # Half the kills come after some flushes, counted rather than timed so that the kill lands
            # inside the work however fast or slow the machine is today; the others at any moment
            # from the start (a writer that finished lingers, so every kill is a kill).
            for _ in range(rng.randrange(1, 45)):
                early.append(p.stdout.readline())
            time.sleep(rng.uniform(0.0, 0.01))
        else:
            time.sleep(rng.uniform(0.0, 0.25))
        p.send_signal(signal.SIGKILL)
        out = "".join(early) + p.communicate(timeout=30)[0]
        kills += p.returncode == -signal.SIGKILL
        flushed = [int(line.split()[1]) for line in out.splitlines() if line.startswith("flushed")]
        with_flushed += bool(flushed)
        fdb = fields.open_fdb(config)  # a handle per check: one keeps the catalogue it opened
        visible = {}
        for e in fdb.list({**db_request("hmtk"), "step": "/".join(str(s) for s in range(first, first + 50))}):
            k = e.combined_key()
            visible.setdefault(int(k["step"]), set()).add(int(k["levelist"]))
        for s in flushed:
            assert visible.get(s) == {1, 2, 3}, f"kill {i}: step {s} was flushed but is not whole: {visible.get(s)}"
        # A step may be visible without its "flushed" line (killed between the flush and the print),
        # but never in part: FDB's flush makes the whole step visible or none of it.
        for s, levels in visible.items():
            assert levels == {1, 2, 3}, f"kill {i}: step {s} is visible in part: {levels}"
            for lv in levels:
                assert retrieve(fdb, "hmtk", s, lv) == writer.field_bytes("hmtk", s, lv, N), f"kill {i}: step {s}"
        if i % 25 == 24:
            listing = fields.run_tool("fdb-list", [",".join(f"{k}={v}" for k, v in db_request("hmtk").items())],
                                      config, check=False)
            assert listing.returncode == 0, listing.stderr
    assert kills >= 100 and with_flushed >= 50
    st = fields.status(config, db_request("hmtk"))
    assert st and st[0].fields == st[0].durable


def test_a_writer_killed_before_its_first_flush_leaves_a_staging_file_the_next_writer_removes(config, tmp_path):
    p = run_writer(config, "hmtl", 0, 1, 2, "--hold", "30")
    assert p.stdout.readline().strip() == "ready"
    assert p.stdout.readline().strip() == "archived 0"
    p.kill()
    p.wait(timeout=30)
    staging = [n for n in files_of(tmp_path / "root") if n.endswith(".hmpool.creating")]
    assert len(staging) == 1, staging
    assert list(fields.open_fdb(config).list(db_request("hmtl"))) == []  # nothing of it is visible
    p = run_writer(config, "hmtl", 1, 1, 2)
    assert p.wait(timeout=60) == 0
    assert [n for n in files_of(tmp_path / "root") if n.endswith(".hmpool.creating")] == []
    assert retrieve(fields.open_fdb(config), "hmtl", 1, 2) == writer.field_bytes("hmtl", 1, 2, N)


def corrupt(path, offset, data=b"\xff\xff\xff\xff"):
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def test_a_damaged_field_or_pool_is_refused_with_a_message_never_returned(config, tmp_path):
    p = run_writer(config, "hmtf", 0, 1, 2)
    assert p.wait(timeout=60) == 0
    fdb = fields.open_fdb(config)
    element = next(e for e in fdb.list(field_request("hmtf", 0, 1)))
    pool, offset = element.uri.path(), element.offset()
    corrupt(pool, offset + 100)
    req = tmp_path / "req"
    req.write_text("retrieve," + ",".join(f"{k}={v}" for k, v in field_request("hmtf", 0, 1).items()) + "\n")
    r = fields.run_tool("fdb-read", ["--raw", str(req), str(tmp_path / "o.grib")], config, check=False)
    assert r.returncode != 0 and "checksum" in (r.stderr + r.stdout), r.stderr + r.stdout
    # The other field of the pool is intact and still served.
    assert retrieve(fdb, "hmtf", 0, 2) == writer.field_bytes("hmtf", 0, 2, N)
    corrupt(pool, 0, b"XXXXXXXX")
    r = fields.run_tool("fdb-read", ["--raw", str(req), str(tmp_path / "o.grib")], config, check=False)
    assert r.returncode != 0 and "wrong magic" in (r.stderr + r.stdout), r.stderr + r.stdout
    assert fields.pool_state(pool).state == "damaged"


READER = """
import sys
from hetmem import fields
expver, levels = sys.argv[2], int(sys.argv[3])
fdb = fields.open_fdb(sys.argv[1])
def request(level):
    return {"class": "rd", "expver": expver, "stream": "oper", "date": "20261125", "time": "0000", "domain": "g",
            "type": "fc", "levtype": "ml", "step": "0", "levelist": str(level), "param": "130"}
def read(level):
    try:
        with fdb.retrieve(request(level)) as h:
            return "bytes " + h.read().hex()
    except Exception as exc:
        return "refused " + str(exc).replace(chr(10), " ")
print(read(1), flush=True)  # the pool is opened now, before it is cut
sys.stdin.readline()
for level in range(1, levels + 1):
    print(read(level), flush=True)
"""


def status_of(config):
    return subprocess.run([sys.executable, "-m", "hetmem", "fields", "status", "--config", str(config)],
                          capture_output=True, text=True, cwd=ROOT / "python", timeout=120)


def test_a_pool_truncated_under_a_reader_refuses_the_fields_past_the_cut_and_serves_the_others(config):
    levels = 6
    assert run_writer(config, "hmtt", 0, 1, levels).wait(timeout=60) == 0
    fdb = fields.open_fdb(config)
    spots = {int(e.combined_key()["levelist"]): (e.uri.path(), e.offset(), e.length())
             for e in fdb.list(db_request("hmtt"))}
    assert len(spots) == levels and len({pool for pool, _, _ in spots.values()}) == 1, spots
    pool = spots[1][0]
    reader = subprocess.Popen([sys.executable, "-c", READER, str(config), "hmtt", str(levels)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=fields.environment(config))
    assert reader.stdout.readline().startswith("bytes "), reader.stderr.read()
    # Cut the pool in the middle of the fourth field's data, under the reader.
    cut = spots[4][1] + spots[4][2] // 2
    os.truncate(pool, cut)
    out, err = reader.communicate("go\n", timeout=120)
    assert reader.returncode == 0, f"the reader died (status {reader.returncode}): {err[-500:]}"
    answers = [line for line in out.splitlines() if line.startswith(("bytes ", "refused "))]  # not FDB's log
    assert len(answers) == levels, out[-2000:]
    for level, answer in zip(range(1, levels + 1), answers):
        if spots[level][1] + spots[level][2] <= cut:
            assert answer == "bytes " + writer.field_bytes("hmtt", 0, level, N).hex(), (level, answer[:100])
        else:
            assert answer.startswith("refused ") and "truncated" in answer and pool in answer, (level, answer)
    # The pool is DAMAGED for hetmem fields status, and its fields are not counted durable.
    r = status_of(config)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "1 DAMAGED" in r.stdout and "truncated" in r.stdout and "NOT all" in r.stdout, r.stdout


def test_a_pool_whose_only_root_slot_is_damaged_is_refused_and_reported(config, tmp_path):
    assert run_writer(config, "hmtr", 0, 1, 2).wait(timeout=60) == 0
    pool = next(e.uri.path() for e in fields.open_fdb(config).list(field_request("hmtr", 0, 1)))
    head = Path(pool).read_bytes()[:4096]
    # The header's two root slots (src/persist/pool.h): 32 bytes each from offset 56; one commit
    # wrote one of them. Its checksum is damaged.
    written = [s for s in range(2) if any(head[56 + 32 * s:56 + 32 * s + 32])]
    assert len(written) == 1, written
    corrupt(pool, 56 + 32 * written[0] + 24, b"\x5a")
    assert fields.pool_state(pool).state == "damaged"
    r = status_of(config)
    assert r.returncode == 1 and "1 DAMAGED" in r.stdout and "root slot is damaged" in r.stdout, r.stdout
    req = tmp_path / "req"
    req.write_text("retrieve," + ",".join(f"{k}={v}" for k, v in field_request("hmtr", 0, 1).items()) + "\n")
    r = fields.run_tool("fdb-read", ["--raw", str(req), str(tmp_path / "o.grib")], config, check=False)
    assert r.returncode != 0 and "root slot is damaged" in (r.stderr + r.stdout), r.stderr + r.stdout


@pytest.mark.parametrize("first", ["library", "store"])
def test_the_library_and_the_store_load_into_one_python_process_in_either_order(config, first):
    """libhetmem (hetmem fields status reads pools through it) and FDB's store plugin in one process,
    loaded in either order: each uses little of the static TLS that libraries loaded after start-up
    share (the plugin failed to load once libhetmem held 1.5 KiB of it)."""
    program = ("import sys\nfrom hetmem import fields\nfrom hetmem.lib import plain_library\n"
               "if sys.argv[2] == 'library': plain_library()\n"
               "fdb = fields.open_fdb(sys.argv[1])\nprint(len(list(fdb.list({'class': 'rd'}))))\n"
               "print(plain_library().parse_size('1K'))\n")
    r = subprocess.run([sys.executable, "-c", program, str(config), first], capture_output=True, text=True,
                       env=fields.environment(config), cwd=ROOT / "python", timeout=120)
    assert r.returncode == 0 and r.stdout.split() == ["0", "1024"], r.stderr[-800:]


def test_the_store_and_the_program_share_one_hetmem_runtime(tmp_path):
    """The store plugin links libhetmem.so: in a process that uses hetmem itself and archives
    through FDB, the store's pools are the program's runtime's (one option table, tier registry,
    calibration and error state), not a second copy linked into the plugin. Seen through the error
    state: a field too large for a pool, refused inside the store, is the last error of the
    libhetmem the program loaded."""
    small = fields.write_config(tmp_path / "small", pool_bytes=65536)
    program = ("import sys\nsys.path.insert(0, sys.argv[2])\nimport writer\nfrom hetmem import fields\n"
               "from hetmem.lib import plain_library\nlib = plain_library()\nfdb = fields.open_fdb(sys.argv[1])\n"
               "try:\n    fdb.archive(writer.field_bytes('hmto', 0, 1, 200))\n    fdb.flush()\n"
               "    print('archived')\nexcept Exception as e:\n    print('refused')\nprint('last error: ' + lib.last_error())\n")
    r = subprocess.run([sys.executable, "-c", program, str(small), str(Path(__file__).parent)], capture_output=True,
                       text=True, env=fields.environment(small), cwd=ROOT / "python", timeout=120)
    lines = r.stdout.splitlines()  # (FDB prints the exception too)
    assert r.returncode == 0 and "refused" in lines and "archived" not in lines, r.stdout + r.stderr[-800:]
    last = [line for line in lines if line.startswith("last error: ")]
    assert last and "more than a pool of 64.00 KiB" in last[0], r.stdout
    needed = subprocess.run(["readelf", "-d", str(fields.plugin_library())], capture_output=True, text=True).stdout
    assert "[libhetmem.so.0]" in needed, needed


def test_bad_configurations_and_inputs_get_a_message_and_nothing_half_written(tmp_path):
    grib = tmp_path / "f.grib"
    big = fields.encode_field(writer.field_values("hmtg", 0, 1, 200), step=0, level=1, param=130, expver="hmtg",
                              date=20261125)
    grib.write_bytes(big)
    # A field larger than a pool: the error names the field and the pool size; nothing visible.
    small = fields.write_config(tmp_path / "small", pool_bytes=65536)
    r = fields.run_tool("fdb-write", [str(grib)], small, check=False)
    said = r.stderr + r.stdout
    assert r.returncode != 0 and "more than a pool of 64.00 KiB" in said, said
    assert "(the field: step=0,param=130,levtype=ml,levelist=1)" in said, said  # its whole key
    assert "param=130" not in fields.run_tool("fdb-list", ["class=rd,expver=hmtg"], small, check=False).stdout
    # Unknown keys and values of the hetmem section.
    # Each message echoes what was written.
    for extra, expect in (("  pool_size: 1\n", "unknown key 'hetmem.pool_size'"),
                          ("  emulate: ssd\n", "hetmem.emulate = 'ssd' in the FDB configuration: not a device profile"),
                          ("  pool_bytes: 12\n", "hetmem.pool_bytes = 12 in the FDB configuration: outside 64 KiB"),
                          ("  pool_bytes: lots\n", "hetmem.pool_bytes = 'lots' in the FDB configuration: a size"),
                          ("  verify: maybe\n", "hetmem.verify = 'maybe' in the FDB configuration: true or false"),
                          ("  emulate: 5\n", "hetmem.emulate = 5 in the FDB configuration: a device profile's name"),
                          ("  tier: hbm\n", "hetmem.tier = 'hbm' in the FDB configuration: "),
                          ("  tier: 3\n", "hetmem.tier = 3 in the FDB configuration: a hetmem tier's name or role")):
        cfg = fields.write_config(tmp_path / "bad", pool_bytes=1 << 20)
        text = cfg.read_text().replace("  pool_bytes: 1048576\n", extra)
        cfg.write_text(text)
        r = fields.run_tool("fdb-write", [str(grib)], cfg, check=False)
        assert r.returncode != 0 and expect in r.stderr + r.stdout, (extra, r.stderr + r.stdout)
    # A misspelt section would leave the store on its defaults: refused.
    cfg = fields.write_config(tmp_path / "misspelt", pool_bytes=1 << 20)
    cfg.write_text(cfg.read_text().replace("hetmem:\n", "hetmen:\n"))
    r = fields.run_tool("fdb-write", [str(grib)], cfg, check=False)
    assert r.returncode != 0 and "a section 'hetmen', not 'hetmem'" in r.stderr + r.stdout, r.stderr + r.stdout
    # A size with a unit is a size.
    cfg = fields.write_config(tmp_path / "unit", pool_bytes=1 << 20)
    cfg.write_text(cfg.read_text().replace("  pool_bytes: 1048576\n", "  pool_bytes: 4M\n"))
    assert fields.run_tool("fdb-write", [str(grib)], cfg, check=False).returncode == 0
    # A root that cannot be created (a file stands where its directory would be).
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    cfg = fields.write_config(tmp_path / "noroot", root=tmp_path / "r")
    cfg.write_text(cfg.read_text().replace(str(tmp_path / "r"), str(blocker / "root")))
    r = fields.run_tool("fdb-write", [str(grib)], cfg, check=False)
    assert r.returncode != 0 and r.returncode > 0, r.stderr
    # A key missing a schema keyword (no param): refused by FDB before the store is involved.
    fdb = fields.open_fdb(fields.write_config(tmp_path / "keys"))
    with pytest.raises(Exception):
        fdb.archive(writer.field_bytes("hmtg", 0, 1, N), {"class": "rd", "expver": "hmtg"})
        fdb.flush()


def test_fdb_hammer_writes_and_reads_through_the_hetmem_store(config, tmp_path):
    alone = subprocess.run([fields.tool("fdb-hammer"), "--help"], capture_output=True, timeout=60,
                           env={k: v for k, v in os.environ.items() if k != "FDB5_CONFIG_FILE"})
    if alone.returncode < 0:
        pytest.skip(f"FDB's fdb-hammer ({fields.tool('fdb-hammer')}) dies of signal {-alone.returncode} at start-up, "
                    "with no configuration, in its libraries' initialisation before any plugin is loaded: a fault "
                    "of that build")
    template = tmp_path / "template.grib"
    template.write_bytes(writer.field_bytes("hmth", 0, 1, 64))
    common = ["--expver=hmth", "--class=rd", "--nsteps=3", "--nensembles=1", "--nlevels=4", "--nparams=2",
              str(template)]
    w = fields.run_tool("fdb-hammer", common, config, check=False)
    assert w.returncode == 0, w.stderr[-800:]
    r = fields.run_tool("fdb-hammer", ["--read"] + common, config, check=False)
    assert r.returncode == 0, r.stderr[-800:]
    assert any(n.endswith(".hmpool") for n in files_of(tmp_path / "root"))


def hammer(config, *args, timeout=300):
    return subprocess.run([sys.executable, "-m", "hetmem", "fields", "hammer", "--config", str(config), *args],
                          capture_output=True, text=True, cwd=ROOT / "python", timeout=timeout)


@pytest.mark.parametrize("store", ["hetmem", "file"])
def test_hetmem_fields_hammer_writes_and_reads_with_fdb_hammers_options_and_output(tmp_path, store):
    """fdb-hammer's benchmark on either store: 2 writer processes (each its own ensemble member) and 2
    readers beside them that wait for each step and check every field's bytes; then --read and
    --list alone, as fdb-hammer's modes."""
    config = fields.write_config(tmp_path, store=store, pool_bytes=4 << 20)
    common = ["--nsteps", "3", "--nlevels", "4", "--nparams", "2", "--grid", "19x36"]
    r = hammer(config, *common, "--writers", "2", "--readers", "2", "--full-check", "--out", str(tmp_path / "r.json"))
    assert r.returncode == 0, r.stdout + r.stderr
    for w in (0, 1):
        assert f"[writer {w}] Fields written: 24" in r.stdout, r.stdout
        for line in ("Bytes written: ", "GRIB duration: ", "Writing duration: ", "Total rate: "):
            assert f"[writer {w}] {line}" in r.stdout, r.stdout
        assert re.search(rf"\[writer {w}\] Total rate: [0-9.e+]+ MB / s", r.stdout), r.stdout
    for rd in (0, 1):  # every reader reads both writers' fields, all of them as written
        assert f"[reader {rd}] Fields read: 48" in r.stdout and f"[reader {rd}] Check failures: 0" in r.stdout
    result = json.loads((tmp_path / "r.json").read_text())
    assert sorted(x["role"] for x in result["results"]) == ["reader", "reader", "writer", "writer"]
    assert result["plan"]["members"] == [1, 2] and result["plan"]["params"] == [1, 2]
    if store == "hetmem":
        assert any(n.endswith(".hmpool") for n in files_of(tmp_path / "root"))
    # fdb-hammer's --read and --list on what is there.
    r = hammer(config, *common, "--nensembles", "2", "--read", "--md-check")
    assert r.returncode == 0 and "[reader 0] Fields read: 48" in r.stdout, r.stdout + r.stderr
    r = hammer(config, *common, "--nensembles", "2", "--list")
    assert r.returncode == 0 and "[list 0] fdb-hammer - Fields listed: 48" in r.stdout, r.stdout + r.stderr
    # A check that cannot pass says so: the fields hold random values, not the template's.
    r = hammer(config, *common, "--nensembles", "2", "--read", "--full-check", "--no-randomise-data")
    assert r.returncode == 1 and "48 field(s) did not match what was written" in r.stdout, r.stdout + r.stderr
    # A step that never comes: the reader gives up after --timeout, naming the step.
    r = hammer(config, *common, "--nensembles", "2", "--nsteps", "4", "--read", "--timeout", "1")
    assert r.returncode == 1 and "step 3: 0 of 16 fields visible after 1 s (--timeout)" in r.stdout, r.stdout


def test_hetmem_fields_hammer_refuses_bad_options_with_a_message(config, tmp_path):
    for args, message in ((["--read", "--list"], "--read and --list options are mutually exclusive"),
                          (["--nparams", "500"], "exceeds the 174 valid parameters"),
                          (["--levels", "1,x"], "comma-separated level numbers"),
                          (["--expver", "abc"], "MARS experiment versions have 4 characters"),
                          (["--writers", "0"], "--writers 0: at least 1"),
                          (["--grid", "1x5"], "at least 2x2 points"),
                          ([str(tmp_path / "none.grib")], "no such GRIB file")):
        r = hammer(config, *args, timeout=60)
        assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
    assert not files_of(tmp_path / "root"), "nothing written"


def test_hetmem_fields_status_and_stats(config):
    p = run_writer(config, "hmti", 0, 4, 2)
    assert p.wait(timeout=60) == 0
    r = subprocess.run([sys.executable, "-m", "hetmem", "fields", "stats", "class=rd,expver=hmti", "--config",
                        str(config)], capture_output=True, text=True, cwd=ROOT / "python", timeout=120)
    assert r.returncode == 0, r.stderr
    assert "8 field(s)" in r.stdout and "all" in r.stdout and "0..3 (4)" in r.stdout, r.stdout
    # follow --steps N stops after N steps, even when more are visible at once.
    r = subprocess.run([sys.executable, "-m", "hetmem", "fields", "follow", "class=rd,expver=hmti", "--steps", "3",
                        "--timeout", "30", "--config", str(config)], capture_output=True, text=True,
                       cwd=ROOT / "python", timeout=120)
    assert r.returncode == 0, r.stderr
    assert [line.split(":")[0] for line in r.stdout.splitlines() if line.startswith("step ")] == \
        ["step 0", "step 1", "step 2"], r.stdout
    # A request FDB refuses is one line, not a traceback.
    r = subprocess.run([sys.executable, "-m", "hetmem", "fields", "status", "class=zz", "--config", str(config)],
                       capture_output=True, text=True, cwd=ROOT / "python", timeout=120)
    assert r.returncode == 2 and "hetmem: error: FDB refused 'class=zz'" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    r = subprocess.run([sys.executable, "-m", "hetmem", "fields", "status", "--config", str(config) + ".missing"],
                       capture_output=True, text=True, cwd=ROOT / "python", timeout=60)
    assert r.returncode != 0 and "no such file" in r.stderr


def test_a_store_on_an_emulated_tier_keeps_and_serves_the_same_bytes(tmp_path):
    config = fields.write_config(tmp_path, emulate="optane", verify=True)
    p = run_writer(config, "hmtj", 0, 2, 2)
    assert p.wait(timeout=60) == 0
    fdb = fields.open_fdb(config)
    for s in range(2):
        for lv in (1, 2):
            assert retrieve(fdb, "hmtj", s, lv) == writer.field_bytes("hmtj", s, lv, N)
