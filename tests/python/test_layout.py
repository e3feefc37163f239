"""The project's shape: benchmark binaries that refuse what they do not know and write nothing into
the directory they run in, and a source tree that holds no run outputs."""

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("HETMEM_BUILD_DIR", ROOT / "build"))
BENCH_BINARIES = ["hetmem-bench-alloc", "hetmem-bench-tiers", "hetmem-bench-stream", "hetmem-bench-octree",
                  "hetmem-validate-emul"]


@pytest.mark.parametrize("name", BENCH_BINARIES)
def test_benchmark_binaries_print_usage_and_refuse_unknown_options(name, tmp_path):
    binary = BUILD / "bench" / name
    if not binary.exists():
        pytest.skip(f"{binary} not built (HM_ENABLE_BENCH=OFF)")
    ok = subprocess.run([str(binary), "--help"], capture_output=True, text=True, cwd=tmp_path, timeout=30)
    assert ok.returncode == 0 and "usage:" in ok.stdout, ok.stderr
    bad = subprocess.run([str(binary), "--no-such-option"], capture_output=True, text=True, cwd=tmp_path, timeout=30)
    assert bad.returncode == 2
    assert "unknown option '--no-such-option'" in bad.stderr and "usage:" in bad.stderr
    assert list(tmp_path.iterdir()) == [], "a refused command line wrote a file"


def test_no_run_outputs_are_tracked():
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    tracked = subprocess.run(["git", "ls-files"], capture_output=True, text=True, cwd=ROOT, check=True).stdout.split()
    outputs = [f for f in tracked if f.startswith("diags/") or ("/" not in f and f.endswith(".json"))
               or f.endswith((".hmtrace", ".csv"))]
    assert outputs == [], f"run outputs committed: {outputs}"
