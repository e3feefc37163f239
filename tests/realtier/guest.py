#!/usr/bin/env python3
"""Real-tier tests: boots a small QEMU guest (TCG) whose memory has real tiers and runs hetmem's
tests inside it, returning their result as this program's exit status.

    guest.py [--build-dir DIR] [--timeout S] [--keep] [--rounds N] RECIPE

Recipes (see docs/realtier.md):
  numa  node 0 with the CPUs, node 1 with memory only; ACPI HMAT gives node 1 higher latency and
        lower bandwidth. hetmem must find node 1 as the capacity tier by itself.
  pmem  an NVDIMM turned into a devdax device and onlined as system RAM (KMEM-DAX, as Optane App
        Direct memory is used as a NUMA node), and a second NVDIMM as an fsdax namespace under an
        ext4 file system mounted with -o dax, for file: pools with MAP_SYNC.

The guest is built from Debian packages: the stock kernel (downloaded, not installed), busybox,
ndctl/daxctl/mke2fs and their libraries, the kernel modules the recipe needs, and hetmem's test
binaries with their libraries. The guest reports through isa-debug-exit, so that a crash, a panic
or a hang (stopped by the timeout) can never pass.

Exit status: 0 pass, 1 fail (the tail of the guest's serial log is printed), 77 skipped (what is
missing is printed: no QEMU and no way to install it, for example).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
from hetmem import bench_fields, fields  # noqa: E402  (the FDB schema, configuration and sizes of pmem-fields)

SKIP = 77
PACKAGES = {  # command -> Debian package
    "qemu-system-x86_64": "qemu-system-x86",
    "busybox": "busybox-static",
    "cpio": "cpio",
    "ndctl": "ndctl",
    "daxctl": "daxctl",
    "depmod": "kmod",
    "mke2fs": "e2fsprogs",
}
HETMEM_BINARIES = {  # path in the build tree -> name in the guest
    "hetmem-tiers": "hetmem-tiers",
    "tests/test_realtier": "test_realtier",
    "tests/test_alloc": "test_alloc",
    "tests/test_prim": "test_prim",
    "tests/test_persist": "test_persist",
    "bench/hetmem-bench-tiers": "hetmem-bench-tiers",
    "tests/programs/prog_plan_probe": "prog_plan_probe",
}
# Built only where clang is installed; the NUMA guest runs it when it is there.
OPTIONAL_BINARIES = {"tests/programs/omp_spaces": "omp_spaces"}
HMAT_NODE0 = [
    "-numa", "hmat-lb,initiator=0,target=0,hierarchy=memory,data-type=access-latency,latency=80",
    "-numa", "hmat-lb,initiator=0,target=0,hierarchy=memory,data-type=access-bandwidth,bandwidth=100G",
]


def hmat_node1(latency: int, bandwidth: str) -> list[str]:
    return ["-numa", f"hmat-lb,initiator=0,target=1,hierarchy=memory,data-type=access-latency,latency={latency}",
            "-numa", f"hmat-lb,initiator=0,target=1,hierarchy=memory,data-type=access-bandwidth,bandwidth={bandwidth}"]


# Both NVDIMM recipes: the 1 GiB NVDIMM onlined as KMEM-DAX memory on node 1, the 512 MiB one an
# ext4 file system mounted -o dax on /mnt/pmem.
PMEM_SETUP = r"""
# The 1 GiB NVDIMM becomes KMEM-DAX memory on node 1, the 512 MiB one an fsdax namespace.
ns_of_size() { for d in /sys/bus/nd/devices/namespace*; do
  [ "$(cat $d/size)" = "$1" ] && basename $d && return; done; }
KMEM_NS=$(ns_of_size 1073741824); FS_NS=$(ns_of_size 536870912)
echo "namespaces: kmem=$KMEM_NS fsdax=$FS_NS"
ndctl create-namespace -f -e "$KMEM_NS" -m devdax -a 2M > /tmp/kmem.json || status=$((status + 1))
cat /tmp/kmem.json
DAX_DEV=$(sed -n 's/.*"chardev":"\([^"]*\)".*/\1/p' /tmp/kmem.json)
run daxctl reconfigure-device -m system-ram -f "$DAX_DEV"
ndctl create-namespace -f -e "$FS_NS" -m fsdax --map=mem > /tmp/fsdax.json || status=$((status + 1))
cat /tmp/fsdax.json
PMEM_DEV=$(sed -n 's/.*"blockdev":"\([^"]*\)".*/\1/p' /tmp/fsdax.json)
mkdir -p /mnt/pmem
run /opt/bin/mke2fs -q -F -t ext4 -b 4096 "/dev/$PMEM_DEV"  # not busybox's applet
run mount -t ext4 -o dax "/dev/$PMEM_DEV" /mnt/pmem
grep /mnt/pmem /proc/mounts
cat /sys/devices/system/node/online
"""


# What of test_persist the pmem guest runs on its DAX mount (TMPDIR=/mnt/pmem), and why: each of
# these maps, flushes, fences, reopens or fills a pool file, so its answer depends on the medium
# (MAP_SYNC mappings, cache-line write-backs reaching a DAX page, ext4 -o dax block allocation).
# Exhaustive properties whose answer does not depend on the medium (every single-byte damage,
# two-thread equivalence, balance on two threads, the crash simulator's subsets of pending lines,
# the mutation tests of that harness) run in the host suite only: under TCG they took most of the
# guest's time limit. Each pattern must match at least one test (checked on the host before boot),
# so a renamed test cannot drop out of the guest unseen.
PMEM_PERSIST_TESTS = {
    "PoolTest.*": "the pool file itself: MAP_SYNC mapping, commit order, torn root slots, reopening, "
                  "a full medium, staging files",
    "OctreeDims/*.RestoreReturnsTheLastPersistedVersion": "an octree persisted to and restored from a DAX pool",
    "OctreeDims/*.TheCommittedVersionIsNeverWritten": "copy-on-write: the committed version's pages untouched",
    "OctreeDims/*.RestoreRefusesAPoolHoldingSomethingElse": "restore's refusal of a foreign pool on the medium",
    "OctreeDims/*.SnapshotRoundTripAndDamagedSnapshotsAreRefused": "snapshot files written on the DAX file system",
    "OctreeDims/*.KilledAtAnyInstantRecoversAPersistedVersion": "kill -9 of a writer mapping the pool with MAP_SYNC",
    "PmApi.CreateRefinePersistRestoreDeleteIn2DAnd3D": "the C API's whole life cycle on a DAX pool",
    "PmApi.BadArgumentsAndPoolsGetClearErrors": "bad pool files on the medium",
    "PmApi.RestoreFromTheReplicaWhenThePoolIsGone": "a replica file on the DAX file system",
    "PmApi.InspectAndTheNoteKeptAtCreation": "inspection of a DAX pool",
    "Tiers/*.C0GivesTheSameTreesAsThePoolAlone": "the DRAM C0 level above a pool on the medium",
    "Tiers/*.PersistFreesWhatOnlyTheOldVersionUsed": "block reuse in a DAX pool",
    "Tiers/*.ReplicaGetsDeltasAndRestoresALostPool": "deltas written to a replica on the medium",
    "Tiers/*.ARemoteReplicaGetsDeltasAndRestoresALostPool": "the replica server over the guest's loopback",
}

RECIPES = {
    "numa": {
        "qemu": ["-M", "q35,hmat=on", "-m", "2G",
                 "-object", "memory-backend-ram,id=m0,size=1G", "-object", "memory-backend-ram,id=m1,size=1G",
                 "-numa", "node,nodeid=0,cpus=0-1,memdev=m0,initiator=0",
                 "-numa", "node,nodeid=1,memdev=m1,initiator=0",
                 "-numa", "dist,src=0,dst=1,val=20", *HMAT_NODE0, *hmat_node1(250, "30G")],
        "modules": [],
        "tools": [],
        "steps": r"""
export HM_GUEST_SLOW_NODE=1 HM_GUEST_EXPECT_HMAT=1
run hetmem-tiers
run test_realtier
run test_alloc --gtest_filter='Kinds/*:AllocApi.*:Arena.*'
run test_prim
run hetmem-bench-tiers --size-mib 16 --reps 2 --json /tmp/bench-tiers.json --no-store
# An unchanged program under the preload library with the plan its host profile gave: each planned
# class on the right node, page by page (the hot field on node 0, streamed and cold data on node 1).
run env LD_PRELOAD=/lib/libhetmem_preload.so HM_RULES=/plan_probe.plan HM_POLICY=hetmem-static \
    HM_FAST_BUDGET=64M HM_PROBE_NODES="field=0 particles=1 log=1" prog_plan_probe
# OpenMP memory spaces through hetmem's libmemkind (clang, LLVM's runtime): large-capacity memory on
# the slow node, high-bandwidth memory on node 0, page by page.
if [ -x /bin/omp_spaces ]; then
  run env LD_LIBRARY_PATH=/lib/hetmem-memkind HM_PROBE_NODES="large_cap=1 high_bw=0" omp_spaces
else
  echo "== guest: omp_spaces not built (no clang on the host): OpenMP spaces not checked"
fi
""",
        "plan_probe": True,
    },
    "pmem": {
        "qemu": ["-M", "q35,nvdimm=on,hmat=on", "-m", "2G,slots=4,maxmem=8G",
                 "-object", "memory-backend-ram,id=m0,size=2G",
                 "-numa", "node,nodeid=0,cpus=0-1,memdev=m0,initiator=0",
                 "-numa", "node,nodeid=1,initiator=0", *HMAT_NODE0, *hmat_node1(300, "10G"),
                 "-object", "memory-backend-ram,id=nv1,size=1G", "-device", "nvdimm,id=nvdimm1,memdev=nv1,node=1",
                 "-object", "memory-backend-ram,id=nv2,size=512M",
                 "-device", "nvdimm,id=nvdimm2,memdev=nv2,node=1"],
        "modules": ["libnvdimm", "nfit", "nd_btt", "nd_pmem", "dax_pmem", "device_dax", "kmem",
                    "crc16", "crc32c_generic", "mbcache", "jbd2", "ext4"],
        "tools": ["ndctl", "daxctl", "mke2fs"],
        "steps": PMEM_SETUP + r"""
export HM_GUEST_SLOW_NODE=1 HM_GUEST_EXPECT_HMAT=1 HM_GUEST_EXPECT_PMEM=1 HM_GUEST_DAX_DIR=/mnt/pmem
run hetmem-tiers
run test_realtier
run test_alloc --gtest_filter='Kinds/*numa1*'
# the persistent pool and octree on a DAX mapping: the tests whose answer depends on the medium
TMPDIR=/mnt/pmem run test_persist --gtest_filter='@PMEM_PERSIST_FILTER@'
""",
        "filters": {"@PMEM_PERSIST_FILTER@": ("tests/test_persist", PMEM_PERSIST_TESTS)},
    },
}

# Not a test (not in CTest): the PM-octree's restart benchmark on the DAX mount and on the guest's
# RAM file system, the DAX figure the development machines cannot give otherwise. TCG figures:
# comparable with each other within the guest, not with hardware. At --quick size (2*10^5
# octants), without p8est_load (the guest has no MPI runtime).
RECIPES["pmem-restart"] = {
    **RECIPES["pmem"],
    "binaries": {"bench/hetmem-bench-octree": "hetmem-bench-octree"},
    "steps": PMEM_SETUP + r"""
run hetmem-bench-octree --restart-only --quick --no-p4est --dir /mnt/pmem --json /tmp/restart-dax.json
run hetmem-bench-octree --restart-only --quick --no-p4est --dir /tmp --json /tmp/restart-ram.json
""",
}

# The hetmem store inside FDB on the DAX mount (a CTest entry: every run checks its data and
# MAP_SYNC). The store's C API test, then the C writer (tests/fields/c_api_bench.c) for FDB's POSIX
# store and the hetmem store alternately, rounds (--rounds: three for the table; the CTest entry's
# check takes one, since a round under TCG takes 30-90 s of the guest's limit on a busy machine)
# of hetmem bench fields' field sizes and fields per step, the pool mapped with MAP_SYNC (checked
# in /proc/self/smaps). TCG figures: the two stores compare with each other here, not with
# hardware. The FDB configurations and schema
# are hetmem.fields' own, with the databases on the DAX mount.
FIELD_SIZES = [(size, bench_fields.fields_per_step(size)) for size in bench_fields.SIZES.values()]
RECIPES["pmem-fields"] = {
    **RECIPES["pmem"],
    "binaries": {"tests/fields_c_api": "fields_c_api", "tests/fields_c_bench": "fields_c_bench"},
    "fdb_plugin": True,
    "texts": {**{f"fdb/{store}/config.yaml": fields.config_text(store, "/fdb/schema", f"/mnt/pmem/fdb-{store}")
                 for store in ("file", "hetmem")}, "fdb/schema": fields.SCHEMA},
    "steps": PMEM_SETUP + r"""
export HM_EXPECT_MAP_SYNC=1
mkdir -p /mnt/pmem/fdb-file /mnt/pmem/fdb-hetmem
run env FDB5_CONFIG_FILE=/fdb/hetmem/config.yaml fields_c_api
rm -rf /mnt/pmem/fdb-hetmem/*
for round in @ROUNDS@; do
  for size in @FIELD_SIZES@; do
    for store in file hetmem; do
      run env FDB5_CONFIG_FILE=/fdb/$store/config.yaml fields_c_bench $store ${size%x*} ${size#*x} 8
      rm -rf /mnt/pmem/fdb-$store/*
    done
  done
done
""".replace("@FIELD_SIZES@", " ".join(f"{b}x{n}" for b, n in FIELD_SIZES)),
}


def fdb_plugin_files() -> dict[str, str]:
    """FDB's store plugin where eckit looks for it (beside libeckit, as the wheels install it):
    the manifest, the plugin and the libhetmem it links, at their paths on the host."""
    import importlib.util
    spec = importlib.util.find_spec("eckitlib")
    if spec is None or not spec.submodule_search_locations:
        raise Skip("the FDB wheels (eckitlib) are not installed in this Python")
    home = Path(list(spec.submodule_search_locations)[0])
    files = {}
    for rel in ("share/plugins/hetmem-fdb.yml", "lib64/libhetmem-fdb.so", "lib64/libhetmem.so.0"):
        path = home / rel
        if not path.exists():
            raise Skip(f"{path} is missing (the FDB store is not built or not installed beside FDB)")
        files[str(path).lstrip("/")] = str(path.resolve())
    return files


def bench_report(text: str, out: Path) -> None:
    """The pmem-fields guest's writer lines as a table: each store's median GiB/s per size and the
    hetmem store over the POSIX store round by round, written to `out` as JSON too."""
    runs: dict[tuple[int, str], list[dict]] = {}
    for m in re.finditer(r"^c_api_bench: (.*)$", text, re.M):
        row = dict(kv.split("=", 1) for kv in m.group(1).split())
        runs.setdefault((int(row["bytes"]), row["store"]), []).append(row)
    if not runs:
        return
    rounds = max(len(v) for v in runs.values())
    print("hetmem store against FDB's POSIX store on ext4 -o dax (fsdax NVDIMM, QEMU TCG: figures compare with "
          f"each other only), 8 steps of 8 MiB, a flush per step; medians of {rounds} round(s)"
          + ("" if rounds > 1 else " (one round has no spread: run with --rounds 3 for one)"))
    print(f"  {'field':>9} {'file GiB/s':>10} {'hetmem GiB/s':>12} {'hetmem / file':>27} {'flush ms f/h':>14} "
          f"{'MAP_SYNC':>8}")
    rows = []
    for size in sorted({b for b, _ in runs}):
        f, h = runs.get((size, "file"), []), runs.get((size, "hetmem"), [])
        if not f or not h or len(f) != len(h):
            continue
        ratios = [float(a["gib_s"]) / float(b["gib_s"]) for a, b in zip(h, f)]
        med = lambda rs, k: statistics.median(float(r[k]) for r in rs)  # noqa: E731
        ratio = statistics.median(ratios)
        print(f"  {size / 1024:>7.0f} K {med(f, 'gib_s'):>10.3f} {med(h, 'gib_s'):>12.3f} "
              f"{ratio:>8.2f}x (spread {min(ratios):.2f}-{max(ratios):.2f}) "
              f"{med(f, 'flush_ms'):>6.2f}/{med(h, 'flush_ms'):<6.2f} {','.join(sorted({r['map_sync'] for r in h})):>8}")
        rows.append({"bytes": size, "file": f, "hetmem": h, "ratio": ratio, "spread": [min(ratios), max(ratios)]})
    out.write_text(json.dumps({"medium": "ext4 -o dax on an fsdax NVDIMM namespace (QEMU TCG)", "rows": rows},
                              indent=1))


INIT = """#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/opt/bin:/bin:/sbin HOME=/root TMPDIR=/tmp HM_CALIBRATION=/tmp/calibration GTEST_COLOR=no
mkdir -p /proc /sys /dev /tmp /root /mnt
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mkdir -p /dev/shm && mount -t tmpfs shm /dev/shm  # LLVM's OpenMP runtime registers itself there
ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up  # the replica tests talk over localhost
status=0
uptime_s() { read up rest < /proc/uptime; echo "$up"; }
run() {
  echo "== guest: $*"
  t0=$(uptime_s)
  "$@"
  rc=$?
  echo "== guest: step took $(awk -v a="$t0" -v b="$(uptime_s)" 'BEGIN { printf "%.1f", b - a }') s: $*"
  if [ $rc -ne 0 ]; then echo "== guest: FAILED (exit $rc): $*"; status=$((status + 1)); fi
}
echo "== guest: kernel $(uname -r), nodes online $(cat /sys/devices/system/node/online)"
for f in /sys/devices/system/node/node*/access0/initiators/read_latency; do echo "$f: $(cat $f)"; done
for m in $(cat /modules.order 2>/dev/null); do insmod /modules/$m || echo "insmod $m failed"; done
@STEPS@
echo "== guest: $status step(s) failed"
/bin/guest-exit $status
echo "== guest: isa-debug-exit did not stop the guest"
poweroff -f
"""


class Skip(Exception):
    pass


def log(msg: str) -> None:
    print(f"realtier: {msg}", flush=True)


def ensure_packages() -> None:
    missing = sorted({pkg for cmd, pkg in PACKAGES.items() if not shutil.which(cmd) and
                      not Path(f"/sbin/{cmd}").exists() and not Path(f"/usr/sbin/{cmd}").exists()})
    if not Path("/bin/busybox").exists():
        missing.append("busybox-static")
    if not missing:
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise Skip(f"missing {', '.join(missing)} and cannot install them (needs root and apt-get)")
    log(f"installing {' '.join(missing)}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing]):
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if r.returncode != 0:
            raise Skip(f"cannot install {', '.join(missing)}: {r.stderr.strip()[-300:]}")


def which(cmd: str) -> str:
    for candidate in (shutil.which(cmd), f"/sbin/{cmd}", f"/usr/sbin/{cmd}"):
        if candidate and Path(candidate).exists():
            return candidate
    raise Skip(f"{cmd} not found")


def fetch_kernel(cache: Path) -> tuple[Path, Path, str]:
    """The stock Debian kernel, downloaded and unpacked (not installed): vmlinuz, modules, version."""
    r = subprocess.run(["apt-cache", "depends", "linux-image-amd64"], capture_output=True, text=True)
    m = re.search(r"Depends: (linux-image-(\S+)-amd64)", r.stdout)
    if not m:
        raise Skip("apt-cache cannot resolve linux-image-amd64 (run apt-get update?)")
    package, version = m.group(1), m.group(2) + "-amd64"
    root = cache / package
    vmlinuz = root / "boot" / f"vmlinuz-{version}"
    moddir = root / "lib" / "modules" / version
    if not vmlinuz.exists():
        cache.mkdir(parents=True, exist_ok=True)
        for old in cache.glob("*.deb"):
            old.unlink()
        log(f"downloading {package}")
        r = subprocess.run(["apt-get", "download", package], cwd=cache, capture_output=True, text=True)
        debs = list(cache.glob(f"{package}_*.deb"))
        if r.returncode != 0 or not debs:
            raise Skip(f"cannot download {package}: {r.stderr.strip()[-300:]}")
        subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(root)], check=True)
        debs[0].unlink()
    if not (moddir / "modules.dep").exists():
        subprocess.run([which("depmod"), "-b", str(root), version], check=True)
    return vmlinuz, moddir, version


def module_order(moddir: Path, names: list[str]) -> list[str]:
    """Module files (relative to moddir) for `names` and their dependencies, dependencies first."""
    deps: dict[str, list[str]] = {}
    by_name: dict[str, str] = {}
    for line in (moddir / "modules.dep").read_text().splitlines():
        path, _, rest = line.partition(":")
        deps[path] = rest.split()
        by_name[Path(path).name.split(".ko")[0].replace("-", "_")] = path
    order: list[str] = []

    def visit(path: str) -> None:
        for d in deps.get(path, []):
            visit(d)
        if path not in order:
            order.append(path)

    for name in names:
        if name not in by_name:
            raise Skip(f"kernel module {name} not found in {moddir}")
        visit(by_name[name])
    return order


def library_deps(binary: str) -> list[str]:
    r = subprocess.run(["ldd", binary], capture_output=True, text=True)
    if "not a dynamic executable" in r.stdout + r.stderr:
        return []
    libs = []
    for line in r.stdout.splitlines():
        m = re.search(r"(/\S+) \(0x", line)
        if m:
            libs.append(m.group(1))
    return libs


def loaded_when_needed(build_dir: Path) -> list[str]:
    """The libraries hetmem loads when it needs them (hwloc, libunwind), which no ldd lists: their
    paths as the loader finds them (ldconfig's cache)."""
    sonames = (build_dir / "loaded-when-needed.txt").read_text().split()
    cache = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    paths = []
    for soname in sonames:
        m = re.search(rf"^\s*{re.escape(soname)} \(libc6,x86-64[^)]*\) => (\S+)$", cache, re.M)
        if not m:
            raise Skip(f"{soname}, which hetmem loads when it needs it, is not in ldconfig's cache")
        paths.append(m.group(1))
    return paths


def probe_plan(build_dir: Path) -> str:
    """The plan `hetmem plan` makes from a host profile of prog_plan_probe, its sites named by the
    program's file name (the guest has it as /bin/prog_plan_probe; a site rule matches a path's end)."""
    probe = build_dir / "tests/programs/prog_plan_probe"
    with tempfile.TemporaryDirectory(prefix="hetmem-guest-plan-") as tmp:
        trace, plan = Path(tmp, "probe.hmtrace"), Path(tmp, "probe.plan")
        env = {k: v for k, v in os.environ.items() if k not in ("HM_TIERS", "HM_POLICY", "LD_PRELOAD")}
        env["HM_TIERS"] = "capacity=emul:cxl"
        for step in (["profile", "-o", str(trace), "--", str(probe)], ["plan", str(trace), "-o", str(plan)]):
            r = subprocess.run([sys.executable, "-m", "hetmem", *step], env=env, capture_output=True, text=True)
            if r.returncode != 0:
                raise RuntimeError(f"hetmem {step[0]} of prog_plan_probe on the host failed: {r.stderr.strip()[-300:]}")
        return plan.read_text().replace(str(probe.resolve()), probe.name).replace(str(probe), probe.name)


def gtest_filter(build_dir: Path, binary: str, patterns: dict[str, str]) -> str:
    """The --gtest_filter for `patterns`, each checked on the host to match at least one test."""
    path = build_dir / binary
    if not path.exists():
        raise Skip(f"{path} is not built")
    for pattern in patterns:
        r = subprocess.run([str(path), "--gtest_list_tests", f"--gtest_filter={pattern}"],
                           capture_output=True, text=True, timeout=60)
        if r.returncode != 0 or not any(line.startswith("  ") for line in r.stdout.splitlines()):
            raise RuntimeError(f"{binary}: the guest's pattern {pattern!r} matches no test "
                               "(renamed? update the list in tests/realtier/guest.py)")
    return ":".join(patterns)


def steps_of(recipe: dict, build_dir: Path) -> str:
    steps = recipe["steps"]
    for marker, (binary, patterns) in recipe.get("filters", {}).items():
        steps = steps.replace(marker, gtest_filter(build_dir, binary, patterns))
    return steps


def step_times(serial_text: str) -> list[tuple[float, str]]:
    """(seconds, command) of each step the guest timed, in order."""
    return [(float(m.group(1)), m.group(2)) for m in re.finditer(r"== guest: step took ([\d.]+) s: (.*)", serial_text)]


# A guest that uses more than this share of its limit fails scripts/test: a drift shows long
# before a slower or busier machine stops it.
LIMIT_SHARE = 0.60


def report_time(recipe_name: str, elapsed: float, limit: int, steps: list[tuple[float, str]], out: Path) -> None:
    """Prints the guest's time per step against its limit and writes it as JSON (scripts/test reads it)."""
    for seconds, cmd in steps:
        log(f"  {seconds:7.1f} s  {cmd[:100]}")
    share = elapsed / limit
    note = f" -- over {LIMIT_SHARE:.0%} of the limit" if share > LIMIT_SHARE else ""
    log(f"'{recipe_name}' guest: {elapsed:.1f} s of its {limit} s limit ({share:.0%}){note}")
    out.write_text(json.dumps({"recipe": recipe_name, "elapsed_s": round(elapsed, 1), "limit_s": limit,
                               "share": round(share, 3), "limit_share": LIMIT_SHARE,
                               "steps": [{"seconds": s, "command": c} for s, c in steps]}, indent=1) + "\n")


def build_initramfs(recipe: dict, build_dir: Path, moddir: Path, out: Path) -> None:
    stage = Path(tempfile.mkdtemp(prefix="hetmem-guest-"))
    try:
        files: dict[str, str] = {"bin/busybox": "/bin/busybox", "bin/guest-exit": str(build_dir / "tests/guest-exit")}
        for src, name in {**HETMEM_BINARIES, **recipe.get("binaries", {})}.items():
            path = build_dir / src
            if not path.exists():
                raise Skip(f"{path} is not built")
            files[f"bin/{name}"] = str(path)
        if recipe.get("plan_probe"):
            files["lib/libhetmem_preload.so"] = str(build_dir / "libhetmem_preload.so")
            for src, name in OPTIONAL_BINARIES.items():
                if (build_dir / src).exists():
                    files[f"bin/{name}"] = str(build_dir / src)
                    memkind = str((build_dir / "memkind" / "libmemkind.so.0").resolve())
                    files["lib/hetmem-memkind/libmemkind.so.0"] = memkind  # the names OpenMP runtimes load
                    files["lib/hetmem-memkind/libmemkind.so"] = memkind
        for tool in recipe["tools"]:  # before busybox's applets of the same name (mke2fs)
            files[f"opt/bin/{tool}"] = str(Path(which(tool)).resolve())
        for lib in loaded_when_needed(build_dir):
            files[lib.lstrip("/")] = str(Path(lib).resolve())
        if recipe.get("fdb_plugin"):
            files.update(fdb_plugin_files())
        for dest, src in list(files.items()):
            for lib in library_deps(src):
                resolved = Path(lib).resolve()
                # hetmem's own libraries go where its binaries' relative run path finds them from
                # /bin ($ORIGIN/../lib), as in an install; the system's keep their paths.
                mine = resolved.is_relative_to(build_dir.resolve())
                files[f"lib/{Path(lib).name}" if mine else lib.lstrip("/")] = str(resolved)
        for dest, src in files.items():
            target = stage / dest
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)
            if dest.startswith(("bin/", "opt/bin/")) and dest not in ("bin/busybox", "bin/guest-exit"):
                subprocess.run(["strip", "--strip-debug", str(target)], capture_output=True)
        order = module_order(moddir, recipe["modules"])
        (stage / "modules").mkdir()
        for rel in order:
            src = moddir / rel
            name = Path(rel).name
            if name.endswith(".xz"):
                subprocess.run(f"xz -dc '{src}' > '{stage / 'modules' / name[:-3]}'", shell=True, check=True)
                name = name[:-3]
            else:
                shutil.copy2(src, stage / "modules" / name)
        (stage / "modules.order").write_text("\n".join(Path(r).name.removesuffix(".xz") for r in order) + "\n")
        if recipe.get("plan_probe"):
            (stage / "plan_probe.plan").write_text(probe_plan(build_dir))
        for dest, text in recipe.get("texts", {}).items():
            (stage / dest).parent.mkdir(parents=True, exist_ok=True)
            (stage / dest).write_text(text)
        init = stage / "init"
        init.write_text(INIT.replace("@STEPS@", steps_of(recipe, build_dir)))
        init.chmod(0o755)
        names = subprocess.run("find . -print0", shell=True, cwd=stage, capture_output=True).stdout
        archive = subprocess.run(["cpio", "--null", "-o", "-H", "newc", "--quiet"], cwd=stage, input=names,
                                 capture_output=True, check=True).stdout
        out.write_bytes(gzip.compress(archive, compresslevel=1))
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def boot_once(cmd: list, timeout: int, boot_timeout: int, serial_log: Path) -> tuple:
    """Run QEMU once; (exit code or -1 on a stop, whether the guest's init started)."""
    started = False
    deadline = time.time() + timeout
    with serial_log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        t0 = time.time()
        while True:
            try:
                return proc.wait(timeout=1), True
            except subprocess.TimeoutExpired:
                pass
            started = started or "== guest: kernel" in serial_log.read_text(errors="replace")
            now = time.time()
            if not started and now - t0 > boot_timeout:
                why = f"the guest's init did not start within {boot_timeout} s"
            elif now > deadline:
                why = f"the guest did not finish within {timeout} s"
            else:
                continue
            proc.kill()
            proc.wait()
            out.write(f"\n== host: {why} and was stopped\n")
            return -1, started


def boot(recipe: dict, vmlinuz: Path, initrd: Path, timeout: int, boot_timeout: int,
         serial_log: Path) -> tuple[int, float]:
    """Boot the guest; QEMU's exit code (-1: stopped by a time limit) and the seconds the last boot took.

    Under TCG on a loaded host a boot occasionally hangs before init runs; that is the emulator,
    not a result, so such a boot is retried once. A guest whose init started is never retried."""
    cmd = ["qemu-system-x86_64", "-accel", "tcg", "-cpu", "max", "-smp", "2", *recipe["qemu"],
           "-device", "isa-debug-exit,iobase=0xf4,iosize=0x04", "-net", "none", "-nographic", "-no-reboot",
           "-kernel", str(vmlinuz), "-initrd", str(initrd), "-append", "console=ttyS0 panic=-1 quiet"]
    t0 = time.time()
    rc, started = boot_once(cmd, timeout, boot_timeout, serial_log)
    if rc == -1 and not started:
        first = serial_log.with_suffix(".first-boot.log")
        serial_log.replace(first)
        log(f"the guest did not boot within {boot_timeout} s (log: {first}); booting it again")
        t0 = time.time()
        rc, started = boot_once(cmd, timeout, boot_timeout, serial_log)
    return rc, time.time() - t0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("recipe", choices=sorted(RECIPES))
    p.add_argument("--build-dir", type=Path, default=Path(__file__).resolve().parents[2] / "build")
    p.add_argument("--timeout", type=int, default=300, help="seconds before a hung guest is stopped")
    p.add_argument("--boot-timeout", type=int, default=120,
                   help="seconds for the guest's init to start before the boot is retried once")
    p.add_argument("--keep", action="store_true", help="keep the initramfs and serial log")
    p.add_argument("--rounds", type=int, default=3,
                   help="pmem-fields: rounds of the stores' comparison (3 for its table; the test suite runs 1)")
    args = p.parse_args()
    if args.rounds < 1:
        p.error(f"--rounds {args.rounds}: give 1 or more")
    recipe = dict(RECIPES[args.recipe])
    recipe["steps"] = recipe["steps"].replace("@ROUNDS@", " ".join(str(r + 1) for r in range(args.rounds)))
    work = args.build_dir / "realtier"
    work.mkdir(parents=True, exist_ok=True)
    try:
        ensure_packages()
        vmlinuz, moddir, version = fetch_kernel(work / "kernel")
        initrd = work / f"{args.recipe}.initrd.gz"
        build_initramfs(recipe, args.build_dir, moddir, initrd)
    except Skip as why:
        print(f"realtier {args.recipe}: SKIPPED: {why}")
        return SKIP
    except RuntimeError as why:
        log(f"'{args.recipe}' guest not started: {why}")
        return 1
    serial = work / f"{args.recipe}.serial.log"
    log(f"booting the '{args.recipe}' guest (kernel {version}, initramfs {initrd.stat().st_size >> 10} KiB, TCG)")
    rc, elapsed = boot(recipe, vmlinuz, initrd, args.timeout, args.boot_timeout, serial)
    text = serial.read_text(errors="replace")
    print(text)
    report_time(args.recipe, elapsed, args.timeout, step_times(text), work / f"{args.recipe}.timing.json")
    bench_report(text, work / f"{args.recipe}.json")
    # isa-debug-exit: QEMU exits with (status << 1) | 1; 0 means the guest stopped without reporting.
    if rc == 1:
        log(f"'{args.recipe}' guest passed in {elapsed:.1f} s")
        return 0
    if rc > 0 and rc & 1:
        log(f"'{args.recipe}' guest: {rc >> 1} step(s) failed ({elapsed:.1f} s); serial log: {serial}")
    else:
        log(f"'{args.recipe}' guest stopped without reporting a result (QEMU exit {rc}, {elapsed:.1f} s); "
            f"last lines of the serial log:\n" + "\n".join(text.splitlines()[-40:]))
    return 1


if __name__ == "__main__":
    sys.exit(main())
