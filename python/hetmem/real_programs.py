"""Real programs none of us wrote, installed from Debian, on which the path for programs that cannot
change is tested and measured: each runs plain, under `hetmem profile`, under `hetmem run --rules`
with the whole heap on the capacity tier, and under `hetmem run --plan` with its own plan, and must
give the same exit status and the same output every time.

One row per program (`PROGRAMS`): what it covers, the Debian package, the inputs it needs, its
command, and what of its output must match (the lines it prints of its results, compared exactly
or within a tolerance the program itself states). `run_suite` runs the modes; the tests
(tests/realprograms) and `hetmem bench unchanged` both use it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .lib import find_program, source_file

def lj_input(n: int, steps: int) -> str:
    """The LJ melt input shipped in examples/lammps/in.lj, with n (4 n^3 atoms) and steps set."""
    text = source_file("examples/lammps/in.lj").read_text()
    return text.replace("variable n index 16", f"variable n index {n}").replace(
        "variable steps index 40", f"variable steps index {steps}")


WATER = """3

O 0.000 0.000 0.117
H 0.000 0.757 -0.467
H 0.000 -0.757 -0.467
"""

# A numpy program with no hetmem in it (examples/unchanged_numpy.py).
NUMPY_SCRIPT = source_file("examples/unchanged_numpy.py").read_text()

MAKEFILE = """all: sorted.txt counts.txt
\tcat counts.txt sorted.txt | sha256sum

numbers.txt:
\tsh -c 'i=0; while [ $$i -lt 3000 ]; do echo $$(( (i * 7919) % 10007 )); i=$$((i + 1)); done' > $@

sorted.txt: numbers.txt
\tsort -n numbers.txt > $@

counts.txt: sorted.txt
\twc -l < sorted.txt > $@
\tawk '{ s += $$1 } END { print s }' sorted.txt >> $@
"""

SQL_SCRIPT = """CREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER, v REAL, s TEXT);
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200000)
INSERT INTO t SELECT i, (i * 7919) % 1000, (i % 977) * 0.5, printf('row%08d', i) FROM n;
CREATE INDEX tk ON t(k);
SELECT k, count(*), sum(v), min(s), max(s) FROM t GROUP BY k ORDER BY sum(v) DESC LIMIT 5;
SELECT count(DISTINCT s), total(length(s)) FROM t WHERE k BETWEEN 100 AND 600;
"""


QE_SILICON = """&control
  calculation = 'scf', prefix = 'si', outdir = './qe-scratch', pseudo_dir = './', tprnfor = .true., tstress = .true.
/
&system
  ibrav = 1, celldm(1) = 10.26, nat = 8, ntyp = 1, ecutwfc = 14.0
/
&electrons
  conv_thr = 1.0d-8
/
ATOMIC_SPECIES
Si 28.086 Si.pz-vbc.UPF
ATOMIC_POSITIONS crystal
Si 0.00 0.00 0.00
Si 0.50 0.50 0.00
Si 0.50 0.00 0.50
Si 0.00 0.50 0.50
Si 0.26 0.25 0.25
Si 0.75 0.75 0.25
Si 0.75 0.25 0.75
Si 0.25 0.75 0.75
K_POINTS automatic
2 2 2 0 0 0
"""
# The pseudopotential of Debian's quantum-espresso-data (an example of its EPW code).
QE_PSEUDO = "/usr/share/doc/quantum-espresso/examples/EPW/sic/pp/Si.pz-vbc.UPF.gz"

GMX_TOPOLOGY = """#include "oplsaa.ff/forcefield.itp"
#include "oplsaa.ff/spc.itp"

[ system ]
SPC water

[ molecules ]
"""
GMX_MINIMISE = """integrator     = steep
nsteps         = 100
cutoff-scheme  = Verlet
coulombtype    = PME
rcoulomb       = 0.9
rvdw           = 0.9
"""
GMX_MD = """integrator     = md
dt             = 0.002
nsteps         = 100
cutoff-scheme  = Verlet
nstlist        = 10
coulombtype    = PME
rcoulomb       = 0.9
rvdw           = 0.9
constraints    = h-bonds
tcoupl         = no
gen_vel        = yes
gen_temp       = 300
gen_seed       = 7
nstcalcenergy  = 50
nstenergy      = 50
nstlog         = 50
"""

R_SCRIPT = """set.seed(7)
n <- 500
a <- matrix(runif(n * n), n)
b <- solve(crossprod(a) + diag(n), rowSums(a))        # linear algebra (BLAS, LAPACK)
x <- rnorm(300000); y <- 3 * x + rnorm(300000)
fit <- lm(y ~ x)                                      # a linear model on 300,000 points
v <- numeric(0); for (i in 1:5000) v <- c(v, i)       # a vector grown element by element
l <- lapply(1:50000, function(i) list(i, as.character(i)))  # many small objects
s <- sort(runif(1e6))
cat(sprintf("%.10g %.10g %.10g %d %d %.10g\\n", sum(b), coef(fit)[2], summary(fit)$r.squared, sum(v), length(l),
            s[500000]))
"""


def _lines(pattern: str) -> Callable[[str], list[str]]:
    """The output lines that match `pattern` (the program's results, not its timings)."""
    rx = re.compile(pattern)
    return lambda text: [line.rstrip() for line in text.splitlines() if rx.search(line)]


def _lammps_thermo(text: str) -> list[str]:
    """LAMMPS's thermodynamic output: the lines between its header and "Loop time"."""
    out, inside = [], False
    for line in text.splitlines():
        if re.match(r"\s*Step\s", line):
            inside = True
        elif line.startswith("Loop time"):
            inside = False
        if inside:
            out.append(line.rstrip())
    return out


def _gromacs_energies(text: str) -> list[str]:
    """mdrun's energy blocks in its log: the lines after each "Energies (kJ/mol)" up to a blank one."""
    out, inside = [], False
    for line in text.splitlines():
        if "Energies (kJ/mol)" in line:
            inside = True
        elif inside and not line.strip():
            inside = False
        elif inside:
            out.append(line.rstrip())
    return out


def _xtb_energies(text: str) -> list[float]:
    return [float(m.group(1)) for m in re.finditer(r"TOTAL ENERGY\s+(-?\d+\.\d+) Eh", text)]


@dataclass
class Program:
    name: str
    package: str            # the Debian package that provides it
    covers: str             # what of a real code's behaviour it exercises
    command: list[str]      # run in its working directory; {mpirun} is replaced
    files: dict[str, str] = field(default_factory=dict)   # inputs written into the working directory
    results: Callable[[str], list] = _lines(r".")         # what of stdout must match
    tolerance: float = 0.0  # absolute, for numeric results; 0: exact
    tolerance_source: str = ""
    env: dict[str, str] = field(default_factory=dict)
    needs: tuple[str, ...] = ()     # executables that must exist
    per_rank: bool = False  # hetmem is started on each rank (mpirun -np 2 hetmem ... -- PROGRAM)
    sites_recur: bool = False  # deterministic: every site of its plan occurs again in a planned run
    setup: tuple[tuple[str, ...], ...] = ()  # commands that make its inputs (run once, plain, not timed)
    results_file: str = ""  # the results are read from this file it writes instead of stdout
    needs_files: tuple[str, ...] = ()  # files that must exist (inputs from a Debian package)
    # Sites its own plan must class hot or streaming (a piece of the site's function name): the
    # arrays every step of it walks.
    hot_sites: tuple[str, ...] = ()

    def missing(self) -> str:
        gone = [n for n in self.needs if not shutil.which(n)] + [f for f in self.needs_files if not Path(f).exists()]
        return f"{', '.join(gone)} not installed (Debian package {self.package}; scripts/setup.sh installs it)" \
            if gone else ""

    def same(self, a: list, b: list) -> bool:
        if len(a) != len(b):
            return False
        if not self.tolerance:
            return a == b
        return all(abs(x - y) <= self.tolerance for x, y in zip(a, b))


MPIRUN = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", "2"]

PROGRAMS = [
    Program("lammps", "lammps", "C++ molecular dynamics (LJ melt, 16384 atoms): large arrays grown with realloc, "
            "its memory report through mallinfo", ["lmp", "-in", "in.lj", "-log", "none"],
            {"in.lj": lj_input(16, 40)}, _lammps_thermo, needs=("lmp",),
            hot_sites=("LAMMPS_NS::Memory::srealloc",)),
    Program("lammps-mpi", "lammps", "the same MD code over MPI (Open MPI, 2 ranks, hetmem started on each rank)",
            MPIRUN + ["{hetmem}", "lmp", "-in", "in.lj", "-log", "none"],
            {"in.lj": lj_input(16, 40)}, _lammps_thermo, needs=("lmp", "mpirun"), per_rank=True),
    Program("xtb", "xtb", "Fortran + OpenMP quantum chemistry (GFN2-xTB geometry optimisation of water, 2 threads, "
            "OpenBLAS)", ["xtb", "water.xyz", "--opt"], {"water.xyz": WATER}, _xtb_energies,
            tolerance=5e-6, tolerance_source="xtb's energy convergence threshold for --opt (normal): 5e-6 Eh",
            # OpenBLAS (Debian's pthreads build) would start threads of its own beside the two
            # OpenMP ones: three spinning threads on a 2-core machine make even plain runs take
            # 12 ms or 270 ms by the scheduler's luck.
            env={"OMP_NUM_THREADS": "2", "OMP_STACKSIZE": "64M", "OPENBLAS_NUM_THREADS": "1"}, needs=("xtb",)),
    Program("python-numpy", "python3-numpy", "Python with numpy (Debian's): stencil steps, FFTs, an array grown by "
            "np.append, a matrix product (a main program not built position-independent)",
            ["/usr/bin/python3", "stencil.py"], {"stencil.py": NUMPY_SCRIPT}, needs=("/usr/bin/python3",),
            sites_recur=True),
    Program("make", "make", "a program that forks and execs (GNU make running sh, sort, awk, wc, sha256sum)",
            ["make", "-s", "-f", "Makefile.hm"], {"Makefile.hm": MAKEFILE}, needs=("make",)),
    Program("sqlite3", "sqlite3", "a C database engine: 200,000 rows inserted, indexed and aggregated in memory",
            ["sqlite3", ":memory:", ".read script.sql"], {"script.sql": SQL_SCRIPT}, needs=("sqlite3",)),
    Program("glpsol", "glpk-utils", "a C solver (GLPK: a transportation LP and a sudoku MIP by branch and bound)",
            ["sh", "-c", "glpsol --math /usr/share/doc/glpk-utils/examples/transp.mod && "
                         "glpsol --math /usr/share/doc/glpk-utils/examples/sudoku.mod "
                         "--data /usr/share/doc/glpk-utils/examples/sudoku.dat"],
            results=_lines(r"(Objective|OPTIMAL|\| [0-9] )"), needs=("glpsol",)),
    Program("xz", "xz-utils", "multithreaded C compression (xz -T2, 24 MB of generated text, compressed and "
            "decompressed through a pipe)",
            ["sh", "-c", "seq 1 3000000 | xz -T2 -3 -c | xz -d -c | sha256sum"], needs=("xz", "seq")),
    Program("qe-pw", "quantum-espresso, quantum-espresso-data", "Fortran plane-wave DFT (Quantum ESPRESSO pw.x: an "
            "8-atom silicon cell, SCF with forces and stress; FFTW, LAPACK, Fortran allocatables)",
            ["pw.x", "-i", "si.in"], {"si.in": QE_SILICON},
            _lines(r"^!\s+total energy|Total force|P=\s|convergence has been achieved"),
            env={"OMP_NUM_THREADS": "1"}, needs=("pw.x",), needs_files=(QE_PSEUDO,),
            setup=(("sh", "-c", f"zcat {QE_PSEUDO} > Si.pz-vbc.UPF"),)),
    Program("gromacs", "gromacs", "C++ molecular dynamics (GROMACS 2022 mdrun: 4,055 SPC waters, PME, Verlet pair "
            "lists, 100 steps on one thread, -reprod)",
            ["gmx", "-quiet", "mdrun", "-s", "md.tpr", "-nt", "1", "-reprod", "-g", "md.log", "-e", "ener.edr",
             "-o", "traj.trr", "-c", "out.gro", "-cpo", "state.cpt"],
            {"topol.top": GMX_TOPOLOGY, "em.mdp": GMX_MINIMISE, "md.mdp": GMX_MD}, _gromacs_energies,
            env={"GMX_MAXBACKUP": "-1"}, needs=("gmx",), results_file="md.log",
            hot_sites=("std::vector<nbnxn_cj_t",),
            setup=(("gmx", "-quiet", "solvate", "-cs", "spc216.gro", "-box", "5", "5", "5", "-o", "water.gro",
                    "-p", "topol.top"),
                   ("gmx", "-quiet", "grompp", "-f", "em.mdp", "-c", "water.gro", "-p", "topol.top", "-o", "em.tpr"),
                   ("gmx", "-quiet", "mdrun", "-s", "em.tpr", "-nt", "2", "-deffnm", "em"),
                   ("gmx", "-quiet", "grompp", "-f", "md.mdp", "-c", "em.gro", "-p", "topol.top", "-o", "md.tpr"))),
    Program("r", "r-base-core", "R through Rscript (a launcher that execs a shell script that execs R): linear "
            "algebra, lm() on 300,000 points, a vector grown element by element, 50,000 small objects, a sort",
            ["Rscript", "model.R"], {"model.R": R_SCRIPT}, needs=("Rscript",)),
]

MODES = ("plain", "profile", "rules", "plan")


@dataclass
class Outcome:
    program: str
    mode: str
    status: int
    results: list
    seconds: float
    problem: str = ""   # what went wrong, "" if nothing
    stderr: str = ""


def hetmem_command() -> list[str]:
    return [sys.executable, "-m", "hetmem"]


def environment(extra: dict) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("HM_TIERS", "HM_PROFILE", "HM_RULES", "LD_PRELOAD", "HM_PROFILE_ROOT_PID", "HM_POLICY")}
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra)
    return env


def prepare(program: Program, workdir: Path) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "all-capacity.rules").write_text("all -> capacity\n")
    for name, text in program.files.items():
        (workdir / name).write_text(text)
    for step in program.setup:
        made = subprocess.run(list(step), cwd=workdir, env=environment(program.env), capture_output=True, text=True,
                              timeout=600)
        if made.returncode != 0:
            raise RuntimeError(f"{program.name}: making its input failed: {' '.join(step)}: "
                               f"{(made.stderr or made.stdout).strip()[-500:]}")


def command(program: Program, mode: str, workdir: Path, tag: str) -> list[str]:
    """The command line of one mode: the program alone, or under hetmem. On each rank of an MPI
    program hetmem is the C launcher hetmem-run (docs/cli.md), what a rank should start, not a
    Python interpreter: hetmem-run for `run`, hetmem-run --profile for `profile`."""
    wrap: list[str] = []
    run = [find_program("hetmem-run")] if program.per_rank else hetmem_command() + ["run"]
    profile = [find_program("hetmem-run"), "--profile"] if program.per_rank else hetmem_command() + ["profile", "-o"]
    if mode == "profile":
        wrap = profile + [str(workdir / f"{tag}.hmtrace"), "--"]
    elif mode == "profile-every":  # every allocation recorded, small ones included (no sampling)
        wrap = profile + [str(workdir / f"{tag}.hmtrace"), "--sample", "0", "--"]
    elif mode == "rules":
        wrap = run + ["--rules", str(workdir / "all-capacity.rules"), "--"]
    elif mode == "plan":
        wrap = run + ["--plan", str(workdir / "own.plan"), "--"]
    if "{hetmem}" in program.command:
        i = program.command.index("{hetmem}")
        return program.command[:i] + wrap + program.command[i + 1:]
    return wrap + program.command


def run_once(program: Program, mode: str, workdir: Path, tag: str, timeout: float = 600,
             extra_env: dict | None = None) -> Outcome:
    env = environment({"HM_TIERS": "capacity=emul:cxl", **program.env, **(extra_env or {})})
    cmd = command(program, mode, workdir, tag)
    t0 = time.monotonic()
    # A session of its own, so that a hung run is stopped whole (mpirun's ranks, make's children).
    proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.communicate()
        return Outcome(program.name, mode, -1, [], time.monotonic() - t0, f"hung: no exit within {timeout:.0f} s")
    seconds, status = time.monotonic() - t0, proc.returncode
    problem = f"killed by signal {-status if status < 0 else status - 128}" if status < 0 or status > 128 else ""
    if program.results_file:
        written = workdir / program.results_file
        stdout = written.read_text(errors="replace") if written.exists() else ""
    return Outcome(program.name, mode, status, program.results(stdout), seconds, problem, stderr)


def traces_of(workdir: Path, tag: str) -> list[Path]:
    """The traces one profiled run wrote: TRACE, or TRACE.rankN for each MPI rank."""
    base = workdir / f"{tag}.hmtrace"
    return sorted(p for p in workdir.glob(f"{tag}.hmtrace*") if p == base or re.search(r"\.rank\d+$", p.name))


def plan_classes(plan: Path) -> list[tuple[str, str]]:
    """(class, the site's description) of each site line of a plan, commented-out ones included."""
    out = []
    for line in plan.read_text().splitlines():
        m = re.match(r"#?\s*site \S+ -> class (\S+)[^#]*#\s*(.*)", line)
        if m:
            out.append((m.group(1), m.group(2)))
    return out


def make_plan(program: Program, workdir: Path, trace: Path) -> subprocess.CompletedProcess:
    return subprocess.run(hetmem_command() + ["plan", str(trace), "-o", str(workdir / "own.plan")],
                          env=environment({}), capture_output=True, text=True, timeout=600)
