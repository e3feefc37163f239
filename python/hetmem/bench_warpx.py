"""WarpX beside hetmem-pic: `hetmem bench pic --warpx SOURCE_OR_BINARY` (docs/pic.md).

WarpX 24.10 (Vay et al.'s code, on which the WarpX-PM placement study of Ren et al., ICS'21, was
made) is built here from the sources a user gives, twice: with `-march=native` and with WarpX's own
flags (CMake's Release build, generic x86-64), both 3D, OpenMP, double precision, without MPI. The
builds are kept under the build tree, keyed by the sources and the flags, so a second run reuses
them. Each build then runs the problem hetmem-pic runs for the comparison (a uniform thermal
electron plasma: 64^3 cells, 2x2x2 particles per cell, Yee, Esirkepov, energy-conserving gather,
Boris, shape 1, no filter, 50 steps) alternating with hetmem-pic in the same rounds, and its
phases are read from AMReX's TinyProfiler.

A binary given instead of sources is run as it is; its flags are not known and are printed so.
"""

from __future__ import annotations

import collections
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .lib import HetmemError

VERSION = "24.10"
# The two builds: the flags CMake adds to WarpX's own (CMAKE_BUILD_TYPE=Release: -O3 -DNDEBUG).
BUILDS = {"native": "-march=native", "default": ""}
# CMake options for the comparison's build: 3D, OpenMP, double precision, no MPI; everything the
# problem does not use is off, so that the build is as short as WarpX allows.
CMAKE_OPTIONS = {"WarpX_DIMS": "3", "WarpX_COMPUTE": "OMP", "WarpX_PRECISION": "DOUBLE", "WarpX_MPI": "OFF",
                 "WarpX_QED": "OFF", "WarpX_EB": "OFF", "WarpX_OPENPMD": "OFF", "WarpX_FFT": "OFF",
                 "WarpX_PYTHON": "OFF", "WarpX_CCACHE": "OFF", "WarpX_IPO": "OFF", "CMAKE_BUILD_TYPE": "Release",
                 "AMReX_TINY_PROFILE": "ON"}
CELLS, PPC_EACH, LENGTH = 64, 2, 40e-6  # hetmem-pic's preset:warpx-uniform
PARTICLES = CELLS ** 3 * PPC_EACH ** 3

# WarpX's TinyProfiler regions (inclusive times within its WarpX::Evolve() region) that make up
# each of hetmem-pic's phases.
PHASES = {
    "gather+push+deposit": ["PhysicalParticleContainer::Evolve::GatherAndPush",
                            "WarpXParticleContainer::DepositCurrent::CurrentDeposition",
                            "WarpXParticleContainer::DepositCurrent::FindMaxTilesize",
                            "WarpXParticleContainer::DepositCurrent::Sorting"],
    "current reduction": ["WarpXParticleContainer::DepositCurrent::Accumulate", "WarpX::SyncCurrent()"],
    "field solve": ["WarpX::EvolveE()", "WarpX::EvolveB()", "ablastr::utils::communication::FillBoundary"],
    "redistribution": ["ParticleContainer::RedistributeCPU()"],
}
STEP_REGION = "WarpX::Evolve()"
# The two half-step momentum pushes of a WarpX run (back by dt/2 before its first step, forward at
# the end to synchronise): once a run, not per step; left out of the time per particle-step.
HALF_PUSHES = "PhysicalParticleContainer::PushP()"


@dataclass
class Peer:
    """One WarpX executable in the comparison."""

    name: str  # "native", "default" or "given"
    binary: Path
    isa: str


def inputs(steps: int) -> str:
    """WarpX's input deck for hetmem-pic's preset:warpx-uniform (apps/pic/input.cpp), no output."""
    n = f"{CELLS} {CELLS} {CELLS}"
    return f"""max_step = {steps}
amr.n_cell = {n}
amr.max_grid_size = {CELLS}
amr.blocking_factor = 8
amr.max_level = 0
geometry.dims = 3
geometry.prob_lo = 0 0 0
geometry.prob_hi = {LENGTH} {LENGTH} {LENGTH}
boundary.field_lo = periodic periodic periodic
boundary.field_hi = periodic periodic periodic
boundary.particle_lo = periodic periodic periodic
boundary.particle_hi = periodic periodic periodic
warpx.cfl = 0.99
warpx.use_filter = 0
warpx.verbose = 1
algo.maxwell_solver = yee
algo.current_deposition = esirkepov
algo.field_gathering = energy-conserving
algo.particle_pusher = boris
algo.particle_shape = 1
particles.species_names = electrons
electrons.species_type = electron
electrons.injection_style = NUniformPerCell
electrons.num_particles_per_cell_each_dim = {PPC_EACH} {PPC_EACH} {PPC_EACH}
electrons.profile = constant
electrons.density = 1e24
electrons.momentum_distribution_type = gaussian
electrons.ux_th = 0.01
electrons.uy_th = 0.01
electrons.uz_th = 0.01
"""


def native_isa() -> str:
    """What -march=native means to this machine's GCC: its CPU name and the widest vector extension
    it turns on (from `gcc -march=native -Q --help=target`, so what the build used, not only what
    the CPU has)."""
    try:
        out = subprocess.run(["gcc", "-march=native", "-Q", "--help=target"], capture_output=True, text=True).stdout
    except OSError:
        return "-march=native"
    arch = re.search(r"^\s*-march=\s*(\S+)", out, re.M)
    enabled = set(re.findall(r"^\s*-m(\S+)\s+\[enabled\]", out, re.M))
    vector = "AVX-512" if "avx512f" in enabled else "AVX2+FMA" if {"avx2", "fma"} <= enabled else \
        "AVX" if "avx" in enabled else "SSE"
    return f"-march={arch.group(1) if arch else 'native'} ({vector})"


def locate_sources(path: Path, amrex: Path | None) -> tuple[Path, Path]:
    """The WarpX and AMReX source trees: `path` is WarpX's; AMReX's is `amrex`, or a directory
    beside WarpX's (or inside it) whose name starts with "amrex"."""
    if not (path / "CMakeLists.txt").is_file() or not (path / "Source" / "WarpX.cpp").is_file():
        raise HetmemError(f"--warpx '{path}': not a WarpX source tree (no CMakeLists.txt and Source/WarpX.cpp); give "
                          f"the sources of WarpX {VERSION} or a built WarpX executable")
    version = re.search(r"project\(WarpX\s+VERSION\s+([\d.]+)", (path / "CMakeLists.txt").read_text())
    if not version or version.group(1) != VERSION:
        raise HetmemError(f"--warpx '{path}': WarpX {version.group(1) if version else '(unknown version)'}; the "
                          f"comparison is with WarpX {VERSION} (git checkout {VERSION} in WarpX and in AMReX)")
    if amrex is None:
        candidates = sorted([*path.parent.glob("amrex*"), *path.parent.glob("AMReX*"), *path.glob("amrex*")])
        amrex = next((c for c in candidates if (c / "Src" / "Base" / "AMReX.cpp").is_file()), None)
        if amrex is None:
            raise HetmemError(f"--warpx '{path}': no AMReX {VERSION} sources beside it (a directory named amrex* in "
                              f"{path.parent}); give them with --amrex DIR")
    if not (amrex / "Src" / "Base" / "AMReX.cpp").is_file():
        raise HetmemError(f"--amrex '{amrex}': not an AMReX source tree (no Src/Base/AMReX.cpp)")
    changes = amrex / "CHANGES"
    first = changes.read_text().split("\n", 1)[0] if changes.is_file() else ""
    if VERSION not in first:
        raise HetmemError(f"--amrex '{amrex}': its CHANGES begins '{first.strip()}', not AMReX {VERSION}")
    return path.resolve(), amrex.resolve()


def _build_key(warpx: Path, amrex: Path, flags: str) -> str:
    h = hashlib.sha256()
    for part in (str(warpx), str(amrex), flags, sys.platform, *(f"{k}={v}" for k, v in sorted(CMAKE_OPTIONS.items()))):
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:12]


def build(warpx: Path, amrex: Path, variant: str, cache: Path, jobs: int) -> Path:
    """The WarpX executable of `variant`, built once under `cache` and reused after."""
    flags = BUILDS[variant]
    where = cache / f"warpx-{VERSION}-{variant}-{_build_key(warpx, amrex, flags)}"
    done = where / "built"  # the executable's path, once built
    if done.is_file() and (exe := Path(done.read_text().strip())).is_file():
        return exe
    where.mkdir(parents=True, exist_ok=True)
    log = where / "build.log"
    configure = ["cmake", "-S", str(warpx), "-B", str(where / "tree"), "-G", "Ninja",
                 f"-DWarpX_amrex_src={amrex}", f"-DCMAKE_CXX_FLAGS={flags}", f"-DCMAKE_C_FLAGS={flags}",
                 *(f"-D{k}={v}" for k, v in CMAKE_OPTIONS.items())]
    print(f"  building WarpX {VERSION} ({variant}: Release{' ' + flags if flags else ', WarpX own flags'}) in "
          f"{where} with {jobs} job(s); log {log}", flush=True)
    started = time.monotonic()
    with open(log, "w") as f:
        for cmd in (configure, ["cmake", "--build", str(where / "tree"), "--parallel", str(jobs)]):
            f.write("$ " + " ".join(cmd) + "\n")
            f.flush()
            p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            last, tail = 0.0, collections.deque(maxlen=15)  # the end of the output, for an error
            for line in p.stdout:
                f.write(line)
                tail.append(line.rstrip("\n"))
                m = re.match(r"\[(\d+)/(\d+)\]", line)
                if m and time.monotonic() - last > 30:  # progress, twice a minute
                    last = time.monotonic()
                    print(f"    {variant}: {m.group(1)}/{m.group(2)} compiled, {(last - started) / 60:.0f} min",
                          flush=True)
            if p.wait() != 0:
                raise HetmemError(f"building WarpX ({variant}) failed; the end of {log}:\n" + "\n".join(tail))
    found = sorted((where / "tree" / "bin").glob("warpx.3d*"))
    exe = next((b for b in found if os.access(b, os.X_OK) and not b.is_symlink()), found[0] if found else None)
    if exe is None:
        raise HetmemError(f"building WarpX ({variant}): no warpx.3d* in {where / 'tree' / 'bin'}; see {log}")
    done.write_text(str(exe))
    print(f"    {variant}: built in {(time.monotonic() - started) / 60:.1f} min: {exe}", flush=True)
    return exe


def peers(given: str, amrex: str | None, cache: Path, jobs: int) -> list[Peer]:
    """The WarpX executables to compare with: the two builds from sources, or the binary given."""
    path = Path(given).expanduser()
    if path.is_file():
        if not os.access(path, os.X_OK):
            raise HetmemError(f"--warpx '{path}': not executable")
        return [Peer("given", path.resolve(), "as given (its build flags are not known here)")]
    if not path.is_dir():
        raise HetmemError(f"--warpx '{path}': no such file or directory (WarpX {VERSION} sources or a WarpX executable)")
    if shutil.which("cmake") is None or shutil.which("ninja") is None:
        raise HetmemError("--warpx: building WarpX needs cmake and ninja (Debian: apt-get install cmake ninja-build)")
    warpx, amrex_dir = locate_sources(path, Path(amrex).expanduser() if amrex else None)
    return [Peer("native", build(warpx, amrex_dir, "native", cache, jobs), native_isa()),
            Peer("default", build(warpx, amrex_dir, "default", cache, jobs), "x86-64 (SSE2), WarpX's flags")]


def parse_tinyprofiler(text: str) -> dict[str, float]:
    """Inclusive seconds per region (the average over ranks) from TinyProfiler's report: within
    its WarpX::Evolve() region where it prints one (what ran in the time steps), else the whole."""
    begin, end = text.find(f"BEGIN REGION {STEP_REGION}"), text.find(f"END REGION {STEP_REGION}")
    if 0 <= begin < end:
        text = text[begin:end]
    regions: dict[str, float] = {}
    tables = re.split(r"\n-+\n", text)
    inclusive = False
    for block in tables:
        head = block.strip().splitlines()[0] if block.strip() else ""
        if head.startswith("Name") and "Incl." in head:
            inclusive = True
            continue
        if inclusive:
            for line in block.strip().splitlines():
                cols = line.split()
                # Name NCalls Incl.Min Incl.Avg Incl.Max Max%
                if len(cols) >= 6 and cols[1].isdigit():
                    try:
                        regions[cols[0]] = float(cols[3])
                    except ValueError:
                        continue
            break
    return regions


def run(peer: Peer, threads: int, steps: int, tmp: str) -> dict:
    """One WarpX run of the comparison problem: core ns per particle-step in all and by phase."""
    deck = Path(tmp) / f"warpx-{steps}.inputs"
    deck.write_text(inputs(steps))
    env = {k: v for k, v in os.environ.items() if not k.startswith("HM_")}
    env.update(OMP_NUM_THREADS=str(threads), OMP_PROC_BIND="false")
    r = subprocess.run([str(peer.binary), str(deck)], capture_output=True, text=True, env=env, cwd=tmp)
    if r.returncode != 0:
        raise HetmemError(f"WarpX ({peer.name}) failed: {(r.stderr or r.stdout).strip()[-2000:]}")
    regions = parse_tinyprofiler(r.stdout)
    if STEP_REGION not in regions:
        raise HetmemError(f"WarpX ({peer.name}): no TinyProfiler report with {STEP_REGION} in its output (built "
                          "without AMReX_TINY_PROFILE?); the end of it:\n" + r.stdout.strip()[-1500:])
    wall_ns = (regions[STEP_REGION] - regions.get(HALF_PUSHES, 0.0)) / (PARTICLES * steps) * 1e9
    return {"threads": threads, "wall_ns": wall_ns, "core_ns": wall_ns * threads,
            "phases_core_ns": phases_core_ns(regions, threads, steps), "regions_s": regions,
            "half_pushes_s": regions.get(HALF_PUSHES, 0.0)}


def phases_core_ns(regions: dict[str, float], threads: int, steps: int) -> dict[str, float]:
    """hetmem-pic's phases in core ns per particle-step from WarpX's regions: the wall time of the
    regions that make up each phase, times the threads (TinyProfiler times the master thread, which
    waits for the others at the end of each parallel region)."""
    per = PARTICLES * steps
    return {name: sum(regions.get(region, 0.0) for region in names) / per * 1e9 * threads
            for name, names in PHASES.items()}
