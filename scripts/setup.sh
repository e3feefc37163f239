#!/usr/bin/env bash
# Installs what hetmem needs on Debian 12 (apt and pip), configures and builds it.
# Idempotent: packages already present are not reinstalled, an existing build is reused.
#   scripts/setup.sh            # then: source nothing, the other scripts call this one
# Environment: BUILD_DIR (default build), HM_BUILD_TYPE (default RelWithDebInfo).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
VENV="$ROOT/.venv"

APT_PACKAGES=(build-essential cmake ninja-build pkg-config gfortran libnuma-dev numactl libhwloc-dev hwloc
              python3-dev libxxhash-dev libgtest-dev libmemkind-dev libp4est-dev libopenmpi-dev openmpi-bin libsqlite3-dev libhdf5-dev libhdf5-openmpi-dev nlohmann-json3-dev libunwind-dev libzstd-dev zlib1g-dev libssl-dev libhypre-dev libhwy-dev libboost1.81-dev heaptrack valgrind python3 python3-venv python3-pip
              # real programs none of us wrote (tests/realprograms, hetmem bench unchanged)
              lammps xtb glpk-utils sqlite3 python3-numpy xz-utils make quantum-espresso quantum-espresso-data gromacs
              r-base-core
              # the reference heap beside the rules (hetmem bench overhead)
              libjemalloc2
              # OpenMP memory spaces through hetmem's libmemkind (LLVM's runtime loads memkind)
              clang libomp-dev
              # compare.html checked in a browser (tests/python/test_compare.py)
              chromium
              # the real-tier guests (tests/realtier): QEMU, busybox, NVDIMM tools, kernel-module tools
              qemu-system-x86 busybox-static cpio ndctl daxctl kmod e2fsprogs xz-utils)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Python: a virtual environment inside the checkout, with the hetmem package installed editable.
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import rich, pytest, numpy, matplotlib, zstandard, argparse_manpage, openpmd_api, fdb5lib, pyfdb, eccodes, hetmem" 2>/dev/null; then
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e "$ROOT[test,fdb]"
fi
# The package compiled to bytecode, as an installed one is (an editable install is not, and with
# PYTHONDONTWRITEBYTECODE set no run writes it): every `hetmem` command, one per MPI rank under
# `mpirun hetmem run`, would otherwise compile its modules first (12 ms of its 35 ms start-up).
"$VENV/bin/python" -m compileall -q "$ROOT/python/hetmem"

cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="${HM_BUILD_TYPE:-RelWithDebInfo}" \
      -DPython3_EXECUTABLE="$VENV/bin/python" >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)"

# FDB finds the hetmem store through eckit's plugin manifests (docs/fields.md): the library and its
# manifest are linked into the FDB installation the store was built against (eckit's own
# share/plugins and lib64), so FDB's tools, its C API and pyfdb load it with no setting.
if [ -f "$BUILD_DIR/fdb/lib/libhetmem-fdb.so" ]; then
  ECKIT_HOME="$("$VENV/bin/python" -c "import eckitlib, os; print(os.path.dirname(eckitlib.__file__))")"
  mkdir -p "$ECKIT_HOME/share/plugins"
  ln -sfn "$BUILD_DIR/fdb/lib/libhetmem-fdb.so" "$ECKIT_HOME/lib64/libhetmem-fdb.so"
  # The store links libhetmem.so.0 (one hetmem runtime per process), which its run path ($ORIGIN:
  # eckit's lib64 once linked there) must find beside it. The loader keeps one copy per process
  # whichever path loads it first (the same file, the same SONAME).
  ln -sfn "$BUILD_DIR/libhetmem.so.0" "$ECKIT_HOME/lib64/libhetmem.so.0"
  ln -sfn "$BUILD_DIR/fdb/share/plugins/hetmem-fdb.yml" "$ECKIT_HOME/share/plugins/hetmem-fdb.yml"
fi
