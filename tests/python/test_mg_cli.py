"""hetmem-mg, the Fortran multigrid solver: second-order discretisation against a manufactured
solution, grid-independent convergence below 0.15 per V-cycle on the model problem, bitwise
identical results for 1 and 2 threads and under every placement policy, the domain steered to the
capacity tier by hm_mode_push around a plain ALLOCATE, and bad input refused with status 2."""

import json
import math
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("HETMEM_BUILD_DIR", ROOT / "build"))
MG = BUILD / "apps" / "mg" / "hetmem-mg"

pytestmark = pytest.mark.skipif(not MG.exists(), reason="Fortran disabled in this build")


def mg(tmp_path, *args, threads=2, env_extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HM_")}
    env["OMP_NUM_THREADS"] = str(threads)
    if "HM_CALIBRATION" in os.environ:
        env["HM_CALIBRATION"] = os.environ["HM_CALIBRATION"]
    env.update(env_extra or {})
    out = tmp_path / f"mg-{len(list(tmp_path.iterdir()))}.json"
    r = subprocess.run([str(MG), *args, f"mg.json={out}"], capture_output=True, text=True, env=env, timeout=600)
    return r, (json.loads(out.read_text()) if r.returncode == 0 else None)


@pytest.mark.parametrize("bc", ["dirichlet", "periodic"])
def test_discretisation_error_falls_as_h_squared(tmp_path, bc):
    errors = []
    for n in (16, 32, 64):
        r, res = mg(tmp_path, f"mg.n={n}", f"mg.bc={bc}", "mg.tol=1e-10")
        assert r.returncode == 0, r.stderr
        errors.append(res["error_max"])
    orders = [math.log2(errors[i] / errors[i + 1]) for i in range(2)]
    assert all(abs(p - 2) < 0.1 for p in orders), (errors, orders)


def test_convergence_factor_below_0_15_and_grid_independent(tmp_path):
    factors = []
    for n in (16, 32, 64):
        r, res = mg(tmp_path, f"mg.n={n}", "mg.coefficients=constant")
        assert r.returncode == 0, r.stderr
        factors.append(res["factor"])
    assert max(factors) < 0.15, factors
    assert max(factors) / min(factors) < 1.2, factors
    # The PALM-like variable coefficient converges too (its factor is reported, not bounded here).
    r, res = mg(tmp_path, "mg.n=32")
    assert r.returncode == 0 and res["reduction"] <= 1e-8 and res["factor"] < 0.25, res


def test_one_and_two_threads_are_bitwise_identical(tmp_path):
    results = [mg(tmp_path, "mg.n=32", "mg.bc=periodic", threads=t)[1] for t in (1, 2)]
    assert results[0]["checksum"] == results[1]["checksum"]
    assert results[0]["cycles"] == results[1]["cycles"] and results[0]["reduction"] == results[1]["reduction"]
    w = [mg(tmp_path, "mg.n=32", "mg.cycle=W", threads=t)[1] for t in (1, 2)]
    assert w[0]["checksum"] == w[1]["checksum"] and w[0]["cycles"] < results[0]["cycles"]


def test_every_policy_gives_the_same_result(tmp_path):
    reference = None
    from hetmem.lib import Library
    policies = [name for name, _ in Library(init=False).policies()]  # every policy the library has
    assert len(policies) >= 9
    for policy in policies:
        r, res = mg(tmp_path, "mg.n=32", env_extra={"HM_POLICY": policy, "HM_FAST_BUDGET": "4M"})
        assert r.returncode == 0, (policy, r.stderr)
        assert f"policy {policy}" in r.stdout
        key = (res["checksum"], res["cycles"], res["reduction"])
        reference = reference or key
        assert key == reference, policy


def test_the_domain_lands_on_the_capacity_tier(tmp_path):
    r, _ = mg(tmp_path, "mg.n=16")
    assert r.returncode == 0, r.stderr
    assert "domain arrays: on the capacity tier" in r.stdout, r.stdout


@pytest.mark.parametrize("args,message", [
    (["mg.n=48"], "must be a power of two, at least 4"),
    (["mg.n=2"], "must be a power of two, at least 4"),
    (["mg.n=0"], "must be a power of two, at least 4"),
    (["mg.n=1073741824"], "at most 16384 cells per direction"),
    (["mg.tol=0"], "mg.tol = '0': must be in (0, 1)"),
    (["mg.tol=-1e-3"], "must be in (0, 1)"),
    (["mg.tol=small"], "mg.tol = 'small': a number"),
    (["mg.cycle=F"], "mg.cycle = 'F': V or W"),
    (["mg.bc=neumann"], "dirichlet or periodic"),
    (["mg.colour=red"], "unknown key 'mg.colour'"),
    (["preset=Z"], "S (64^3), W (128^3)"),
    (["mg.max_cycles=2.5"], "a whole number"),
    (["mg.n"], "arguments are key=value"),
])
def test_bad_input_is_named_with_status_2(tmp_path, args, message):
    r = subprocess.run([str(MG), *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and message in r.stderr, (args, r.stderr)


def test_a_problem_over_budget_with_strict_placement_is_refused(tmp_path):
    r, _ = mg(tmp_path, "mg.n=64", "hetmem.strict=1", env_extra={"HM_FAST_BUDGET": "1M"})
    assert r.returncode == 2 and "the multigrid hierarchy needs" in r.stderr and "fast tier" in r.stderr, r.stderr


def test_compare_runs_hetmem_mg_and_shows_its_phases(tmp_path):
    import sys
    env = {k: v for k, v in os.environ.items() if not k.startswith("HM_") or k == "HM_CALIBRATION"}
    env["PYTHONPATH"] = str(ROOT / "python")
    r = subprocess.run([sys.executable, "-m", "hetmem", "compare", "--iterations", "2", "--repeat", "1", "--policies",
                        "all-fast,hetmem-static", "--out", str(tmp_path / "cmp"), "mg", "mg.n=16"],
                       capture_output=True, text=True, env=env, timeout=900)
    assert r.returncode == 0, r.stderr
    assert "hetmem-mg mg.n=16" in r.stdout and "mg.smooth0" in r.stdout and "hetmem-static" in r.stdout


def test_bench_mg_quick_reports_the_peer_pages_and_the_study(tmp_path):
    import sys
    env = {k: v for k, v in os.environ.items() if not k.startswith("HM_") or k == "HM_CALIBRATION"}
    env["PYTHONPATH"] = str(ROOT / "python")
    out = tmp_path / "mg.json"
    r = subprocess.run([sys.executable, "-m", "hetmem", "bench", "mg", "--quick", "--out", str(out)],
                       capture_output=True, text=True, env=env, timeout=900)
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    assert res["hetmem_mg"]["cycles"] > 0 and set(res["pages"]) >= {"4 KiB pages", "transparent huge pages"}
    if res["hypre"]:
        assert res["same_problem"] is True, "hypre solves the same discretised problem"
        assert "hetmem-mg:" in r.stdout and ("MET" in r.stdout)
    study = res["memory_mode_study"]["S"]
    assert study["emulated"] is True and study["memory_mode_slowdown"]["total"] > 0
    assert "[emulated]" in r.stdout


def test_huge_pages_do_not_change_the_result(tmp_path):
    plain = mg(tmp_path, "mg.n=32", env_extra={"HM_THP": "0"})[1]
    thp = mg(tmp_path, "mg.n=32", env_extra={"HM_THP": "1"})[1]
    pool = mg(tmp_path, "mg.n=32", env_extra={"HM_HUGETLB_POOL": "16M"})[1]  # THP when no page can be reserved
    assert plain["checksum"] == thp["checksum"] == pool["checksum"]
