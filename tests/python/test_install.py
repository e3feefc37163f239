"""hetmem as a dependency: `cmake --install` into a prefix, then a user's own tiny projects built
against it (CMake with find_package, a Makefile with pkg-config, Fortran), and the installed command
and programs run from the prefix (docs/install.md)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("HETMEM_BUILD_DIR", ROOT / "build"))

C_PROGRAM = r"""
#include <hetmem/hetmem.h>
#include <stdio.h>
#include <string.h>
int main(void) {
  if (hm_init() != HM_OK) { fprintf(stderr, "hm_init: %s\n", hm_last_error()); return 1; }
  double *a = hm_alloc(HM_CAPACITY, 1 << 20, 64, HM_ZERO);
  if (!a) { fprintf(stderr, "hm_alloc: %s\n", hm_last_error()); return 1; }
  for (int i = 0; i < (1 << 17); ++i) a[i] = i;
  double sum = 0;
  for (int i = 0; i < (1 << 17); ++i) sum += a[i];
  hm_free(a);
  printf("hetmem %s sum %.0f\n", hm_version(), sum);
  hm_finalize();
  return 0;
}
"""
SUM = (1 << 17) * ((1 << 17) - 1) // 2

FORTRAN_PROGRAM = """
program user
  use hetmem
  implicit none
  real(8), pointer :: u(:)
  integer :: stat
  if (hm_init() /= HM_OK) stop 1
  call hm_allocate(u, 1000, HM_CAPACITY, stat=stat)
  if (stat /= HM_OK) stop 2
  u = 2.0d0
  print '(a,a,a,f8.1)', 'hetmem ', trim(hm_version_f()), ' sum ', sum(u)
  call hm_deallocate(u)
  call hm_finalize()
end program user
"""

CMAKE_PROJECT = """
cmake_minimum_required(VERSION 3.25)
project(user LANGUAGES C Fortran)
find_package(hetmem 0.1 CONFIG REQUIRED COMPONENTS static fortran pm_octree)
add_executable(c_shared main.c)
target_link_libraries(c_shared PRIVATE hetmem::hetmem)
add_executable(c_static main.c)
target_link_libraries(c_static PRIVATE hetmem::hetmem_static)
add_executable(f_user user.f90)
target_link_libraries(f_user PRIVATE hetmem::fortran)
add_executable(octree pm_octree.c)
target_link_libraries(octree PRIVATE hetmem::pm_octree m)
"""

MAKEFILE = """
PC = PKG_CONFIG_PATH=$(PCDIR) pkg-config
all: c_shared c_static f_user
c_shared: main.c
\tcc -O2 $$($(PC) --cflags hetmem) main.c -o $@ $$($(PC) --libs hetmem) -Wl,-rpath,$$($(PC) --variable=libdir hetmem)
c_static: main.c
\tcc -O2 $$($(PC) --cflags hetmem-static) main.c -o $@ $$($(PC) --libs hetmem-static)
f_user: user.f90
\tgfortran -O2 $$($(PC) --cflags hetmem-fortran) user.f90 -o $@ $$($(PC) --libs hetmem-fortran) \\
\t  -Wl,-rpath,$$($(PC) --variable=libdir hetmem)
"""


def _clean_env(**extra) -> dict:
    """A user's environment: nothing that points into the source or build tree."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HETMEM_", "HM_")) and k not in ("PYTHONPATH", "LD_LIBRARY_PATH", "LD_PRELOAD")}
    env.update(extra)
    return env


def _run(cmd, cwd=None, env=None, timeout=600) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, cwd=cwd, env=env or _clean_env(), capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{' '.join(map(str, cmd))}: status {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    return r


@pytest.fixture(scope="module")
def prefix(tmp_path_factory) -> Path:
    if not (BUILD / "libhetmem.so").exists():
        pytest.fail(f"no build in {BUILD}: build the project first (scripts/setup.sh)")
    where = tmp_path_factory.mktemp("install") / "prefix"
    _run(["cmake", "--install", str(BUILD), "--prefix", str(where)])
    return where


def _user_sources(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "main.c").write_text(C_PROGRAM)
    (directory / "user.f90").write_text(FORTRAN_PROGRAM)
    shutil.copy(ROOT / "examples" / "pm_octree.c", directory / "pm_octree.c")


def _check_programs(directory: Path, names, tmp_path: Path) -> None:
    env = _clean_env(HM_TIERS="capacity=emul:cxl")
    for name in names:
        out = _run([str(directory / name)], env=env).stdout
        if name.startswith("c_"):
            assert f"hetmem 0.1.0 sum {SUM}" in out, out
        elif name == "f_user":
            assert "hetmem 0.1.0 sum   2000.0" in out, out
    if "octree" in names:
        out = _run([str(directory / "octree"), str(tmp_path / "user-octree.pool")], env=env).stdout
        assert out.strip(), "the PM-octree example printed nothing"


def test_a_cmake_project_finds_every_target_in_the_install(prefix, tmp_path):
    src, build = tmp_path / "src", tmp_path / "build"
    _user_sources(src)
    (src / "CMakeLists.txt").write_text(CMAKE_PROJECT)
    _run(["cmake", "-S", str(src), "-B", str(build), f"-DCMAKE_PREFIX_PATH={prefix}"])
    _run(["cmake", "--build", str(build)])
    _check_programs(build, ["c_shared", "c_static", "f_user", "octree"], tmp_path)
    # The static program carries the library: nothing of hetmem's is loaded at run time.
    needed = _run(["readelf", "-d", str(build / "c_static")]).stdout
    assert "libhetmem" not in needed


def test_a_cmake_project_finds_the_build_tree(tmp_path):
    src, build = tmp_path / "src", tmp_path / "build"
    _user_sources(src)
    (src / "CMakeLists.txt").write_text(CMAKE_PROJECT)
    _run(["cmake", "-S", str(src), "-B", str(build), f"-Dhetmem_DIR={BUILD / 'cmake'}"])
    _run(["cmake", "--build", str(build)])
    _check_programs(build, ["c_shared", "c_static", "f_user"], tmp_path)


def test_a_missing_component_is_named(prefix, tmp_path):
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.25)\nproject(user LANGUAGES C)\n"
        "find_package(hetmem CONFIG REQUIRED COMPONENTS gpu)\n")
    r = subprocess.run(["cmake", "-S", str(tmp_path), "-B", str(tmp_path / "b"), f"-DCMAKE_PREFIX_PATH={prefix}"],
                       capture_output=True, text=True, env=_clean_env(), timeout=300)
    assert r.returncode != 0 and "gpu" in r.stderr


@pytest.mark.parametrize("pcdir", ["install", "build"])
def test_a_makefile_project_links_through_pkg_config(prefix, tmp_path, pcdir):
    src = tmp_path / "src"
    _user_sources(src)
    (src / "Makefile").write_text(MAKEFILE)
    where = prefix / "lib" / "pkgconfig" if pcdir == "install" else BUILD / "pkgconfig"
    _run(["make", "-s", f"PCDIR={where}"], cwd=src)
    _check_programs(src, ["c_shared", "c_static", "f_user"], tmp_path)
    assert "libhetmem" not in _run(["readelf", "-d", str(src / "c_static")]).stdout


def test_the_installed_command_and_programs_run_from_the_prefix(prefix, tmp_path):
    env = _clean_env(HM_TIERS="capacity=emul:cxl")
    version = _run([str(prefix / "bin" / "hetmem"), "--version"], env=env, cwd=tmp_path).stdout
    assert version.startswith("hetmem 0.1.0") and str(prefix / "lib" / "libhetmem.so") in version, version
    for program in ("hetmem-pic", "hetmem-amr", "hetmem-replica", "hetmem-mg", "hetmem-tiers", "hetmem-run",
                    "hetmem_demo"):
        out = _run([str(prefix / "bin" / program), "--version"], env=env).stdout
        assert out.startswith(f"{program} 0.1.0"), out
    # The preload library from the prefix: the whole heap of a program on the capacity tier.
    rules = tmp_path / "all.rules"
    rules.write_text("all -> capacity\n")
    summary = tmp_path / "summary.json"
    _run([str(prefix / "bin" / "hetmem"), "run", "--rules", str(rules), "--", sys.executable, "-c",
          "x = [bytearray(1 << 16) for _ in range(100)]"], env=dict(env, HM_SUMMARY=str(summary)), cwd=tmp_path)
    assert summary.exists()
    # The same from the C launcher (each MPI rank's): the preload library beside the prefix's libhetmem.
    summary.unlink()
    out = _run([str(prefix / "bin" / "hetmem-run"), "--rules", str(rules), "--", sys.executable, "-c",
                "import os; print(os.environ['LD_PRELOAD'])"], env=dict(env, HM_SUMMARY=str(summary)), cwd=tmp_path).stdout
    assert out.startswith(f"{prefix / 'lib' / 'libhetmem.so.0'}:{prefix / 'lib' / 'libhetmem_preload.so'}"), out
    assert summary.exists()
    # numpy's handler and the package from the prefix, in a user's own script.
    script = ("from hetmem import arrays\n"
              "a = arrays.zeros((256, 1024), tier='capacity')\n"
              "print(arrays.tier_of(a), arrays.__file__)\n")
    out = _run([sys.executable, "-c", script], cwd=tmp_path,
               env=dict(env, PYTHONPATH=str(prefix / "lib" / "hetmem" / "python"))).stdout
    assert out.startswith("emul:cxl ") and str(prefix) in out, out
    # The inputs the real-program suite reads at run time are in the install too.
    out = _run([sys.executable, "-c", "from hetmem import real_programs as rp; print(len(rp.PROGRAMS), "
                "'variable n index 40' in rp.lj_input(40, 20))"], cwd=tmp_path,
               env=dict(env, PYTHONPATH=str(prefix / "lib" / "hetmem" / "python"))).stdout
    assert out.split()[1] == "True", out
    # A man page for the command and for each subcommand.
    pages = {p.name for p in (prefix / "share" / "man" / "man1").glob("*.1")}
    for name in ("hetmem.1", "hetmem-run.1", "hetmem-profile.1", "hetmem-compare.1", "hetmem-bench.1"):
        assert name in pages, sorted(pages)
    assert r".TH HETMEM\-RUN" in (prefix / "share" / "man" / "man1" / "hetmem-run.1").read_text()


def test_the_python_package_builds_from_the_repository_root(tmp_path):
    """`pip install .` from the repository's root: a wheel with the command's package and its entry
    point (the project's one pyproject.toml, at the root, maps python/hetmem)."""
    import zipfile
    # A copy of the root's pyproject.toml and the package: setuptools writes build/ beside the
    # project, which in the repository is CMake's build tree.
    source = tmp_path / "source"
    shutil.copytree(ROOT / "python" / "hetmem", source / "python" / "hetmem",
                    ignore=shutil.ignore_patterns("__pycache__", "_installed.py"))
    shutil.copy(ROOT / "pyproject.toml", source)
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                        "-w", str(tmp_path), str(source)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-800:]
    wheel = next(tmp_path.glob("hetmem-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "hetmem/cli.py" in names and "hetmem/fields.py" in names, names[:20]
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "hetmem = hetmem.cli:main" in zipfile.ZipFile(wheel).read(entry).decode()


def test_the_spack_recipe_decides_every_build_option():
    """Each HM_ENABLE_* option of the build is set by the Spack recipe (packaging/spack), so that a
    new option is not left at its default there unnoticed; Python3_EXECUTABLE is the spec's Python,
    which runs the hetmem command."""
    import re
    options = set()
    for cmakelists in (ROOT / "CMakeLists.txt", ROOT / "tests" / "CMakeLists.txt"):
        options |= set(re.findall(r"option\((HM_ENABLE_\w+)", cmakelists.read_text()))
    assert {"HM_ENABLE_FORTRAN", "HM_ENABLE_TESTS", "HM_ENABLE_BENCH"} <= options, options
    recipe = (ROOT / "packaging" / "spack" / "packages" / "hetmem" / "package.py").read_text()
    compile(recipe, "package.py", "exec")  # valid Python
    assert set(re.findall(r'define(?:_from_variant)?\("(HM_ENABLE_\w+)"', recipe)) == options
    assert 'define("Python3_EXECUTABLE"' in recipe
    assert "namespace: hetmem" in (ROOT / "packaging" / "spack" / "repo.yaml").read_text()
