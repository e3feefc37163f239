# hetmem's Spack recipe: `spack repo add packaging/spack`, then install from a checkout
# (docs/install.md, "Spack").

from spack.package import *


class Hetmem(CMakePackage):
    """Tier-aware allocation, profiling and placement for simulations on heterogeneous memory
    (DRAM or HBM beside persistent memory, CXL expanders or far NUMA nodes): a C, C++, Fortran
    and numpy interface, memkind's and OpenMP's, a preload library for unchanged programs, a
    heap and phase profiler, a placement runtime and a persistent multi-version octree."""

    homepage = "https://github.com/hetmem/hetmem"
    git = "https://github.com/hetmem/hetmem.git"
    # Or from a checkout of one's own: `spack develop --path /path/to/hetmem hetmem@main` in an
    # environment (docs/install.md).
    version("main", branch="main")

    variant("fortran", default=True, description="The Fortran module (hetmem.mod) and its library")
    variant("bench", default=False,
            description="The benchmarks' programs (against memkind, p4est and hypre, run beside them)")

    depends_on("c", type="build")
    depends_on("cxx", type="build")
    depends_on("fortran", type="build", when="+fortran")
    conflicts("%gcc@:10", msg="hetmem is C++20")

    depends_on("cmake@3.25:", type="build")
    depends_on("ninja", type="build")
    depends_on("pkgconfig", type="build")
    generator("ninja")

    # The library. hwloc, libnuma and libunwind are loaded when needed (dlopen by SONAME): run
    # dependencies as well as build ones.
    depends_on("hwloc@2:")
    depends_on("numactl")
    depends_on("libunwind")
    depends_on("zstd")
    depends_on("zlib-api")
    depends_on("openssl@3:")
    depends_on("boost@1.81:", type="build")  # Boost.Unordered's flat tables, header-only
    depends_on("nlohmann-json@3:", type="build")
    depends_on("xxhash", type="build")  # the FDB store's field checksums (XXH3), header-only

    # The reference simulations (hetmem-pic over MPI with parallel HDF5 output, hetmem-amr's
    # SQLite catalogue, hetmem-mg in Fortran with OpenMP).
    depends_on("mpi")
    depends_on("hdf5@1.10:+mpi")
    depends_on("highway")
    depends_on("sqlite@3:")

    # The hetmem command (its Python package, run by this Python) and numpy arrays on tiers (NEP 49).
    extends("python")
    depends_on("python@3.11:", type=("build", "run"))
    depends_on("py-numpy", type=("build", "run"))
    depends_on("py-rich", type="run")
    depends_on("py-matplotlib", type="run")
    depends_on("py-zstandard", type="run")
    depends_on("py-argparse-manpage", type="build")  # the man pages, from the command's parsers

    with when("+bench"):
        depends_on("memkind")
        depends_on("p4est+mpi")
        depends_on("hypre+mpi")

    depends_on("googletest", type="test")

    def cmake_args(self):
        return [
            self.define_from_variant("HM_ENABLE_FORTRAN", "fortran"),
            self.define_from_variant("HM_ENABLE_BENCH", "bench"),
            self.define_from_variant("HM_ENABLE_MEMKIND", "bench"),
            # The FDB store is built against the FDB release of the Python wheels that pyfdb comes
            # with (`pip install ".[fdb]"`, docs/fields.md), not against a Spack-built FDB.
            self.define("HM_ENABLE_FDB", False),
            self.define("HM_ENABLE_TESTS", self.run_tests),
            self.define("HM_ENABLE_TSAN_TEST", False),
            self.define("Python3_EXECUTABLE", self.spec["python"].command.path),
        ]

    @run_after("install")
    @on_package_attributes(run_tests=True)
    def check_install(self):
        hetmem_tiers = Executable(self.prefix.bin.join("hetmem-tiers"))
        hetmem_tiers("--version")
