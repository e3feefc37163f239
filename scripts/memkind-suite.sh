#!/bin/bash
# Builds part of memkind 1.14's own API test suite against hetmem's libmemkind and runs it
# (docs/memkind.md). The tests are memkind's, fetched by the caller: they are not part of hetmem.
#
#   scripts/memkind-suite.sh MEMKIND_SOURCE      # a clone of github.com/memkind/memkind (tag v1.14.0 is used)
#
# The suites that need only memkind's public interface: error messages, versioning, NULL kinds,
# kind detection (with pmem kinds in a directory that holds a hetmem file tier). Exit status: the
# test binary's.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
SRC="${1:?usage: scripts/memkind-suite.sh MEMKIND_SOURCE (a clone of github.com/memkind/memkind)}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/hetmem-memkind-suite.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
if git -C "$SRC" rev-parse --git-dir >/dev/null 2>&1; then
  git -C "$SRC" archive v1.14.0 test | tar -x -C "$WORK"
else
  cp -r "$SRC/test" "$WORK/test"
fi
SUITES=(main.cpp error_message_tests.cpp memkind_versioning_tests.cpp memkind_null_kind_test.cpp
        memkind_detect_kind_tests.cpp)
# With memkind's own copy of GoogleTest (its main uses a flag of that copy).
( cd "$WORK/test" && g++ -std=c++14 -O1 -I. -Igtest_fused -I"$ROOT/include/hetmem/memkind" "${SUITES[@]}" \
    gtest_fused/gtest/gtest-all.cc -o "$WORK/suite" -L"$BUILD_DIR/memkind" -lmemkind -L"$BUILD_DIR" -lhetmem -lpthread )
mkdir -p "$WORK/pmem"
# memkind_create_pmem gives the hetmem file tier configured in its directory.
HM_TIERS="persistent=file:$WORK/pmem/pool:256M" LD_LIBRARY_PATH="$BUILD_DIR/memkind:$BUILD_DIR" \
  "$WORK/suite" -d "$WORK/pmem" "${@:2}"
