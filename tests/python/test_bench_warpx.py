"""`hetmem bench pic --warpx`: the WarpX peer's input deck, its source checks, its TinyProfiler
report read into hetmem-pic's phases, and the command's refusals. (Building and running WarpX
itself takes most of an hour on two cores; docs/pic.md gives its figures.)"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

from hetmem import bench_warpx  # noqa: E402
from hetmem.lib import HetmemError  # noqa: E402

# TinyProfiler's report as AMReX 24.10 prints it at the end of a run (regions shortened).
REPORT = """
TinyProfiler total time across processes [min...avg...max]: 12.5 ... 12.5 ... 12.5

--------------------------------------------------------------------------------------------------------
Name                                                        NCalls  Excl. Min  Excl. Avg  Excl. Max   Max %
--------------------------------------------------------------------------------------------------------
PhysicalParticleContainer::Evolve::GatherAndPush                50      5.0        5.0        5.0  40.00%
WarpXParticleContainer::DepositCurrent::CurrentDeposition       50      3.0        3.0        3.0  24.00%
--------------------------------------------------------------------------------------------------------

--------------------------------------------------------------------------------------------------------
Name                                                        NCalls  Incl. Min  Incl. Avg  Incl. Max   Max %
--------------------------------------------------------------------------------------------------------
main()                                                           1     12.5       12.5       12.5 100.00%
WarpX::Evolve()                                                  1     10.0       10.0       10.0  80.00%
PhysicalParticleContainer::Evolve::GatherAndPush                50      5.0        5.0        5.0  40.00%
WarpXParticleContainer::DepositCurrent::CurrentDeposition       50      3.5        3.5        3.5  28.00%
WarpXParticleContainer::DepositCurrent::Accumulate              50      0.25       0.25       0.25   2.00%
FiniteDifferenceSolver::EvolveE()                              50      0.5        0.5        0.5   4.00%
FiniteDifferenceSolver::EvolveB()                             100      0.5        0.5        0.5   4.00%
ParticleContainer::RedistributeCPU()                            50      0.75       0.75       0.75   6.00%
--------------------------------------------------------------------------------------------------------

BEGIN REGION WarpX::Evolve()

--------------------------------------------------------------------------------------------------------
Name                                                        NCalls  Incl. Min  Incl. Avg  Incl. Max   Max %
--------------------------------------------------------------------------------------------------------
WarpX::Evolve()                                                  1     10.0       10.0       10.0  80.00%
PhysicalParticleContainer::Evolve::GatherAndPush                50      5.0        5.0        5.0  40.00%
PhysicalParticleContainer::PushP()                               2      0.5        0.5        0.5   4.00%
WarpXParticleContainer::DepositCurrent::CurrentDeposition       50      3.5        3.5        3.5  28.00%
WarpX::SyncCurrent()                                            50      0.25       0.25       0.25   2.00%
WarpX::EvolveE()                                                50      0.5        0.5        0.5   4.00%
WarpX::EvolveB()                                               100      0.5        0.5        0.5   4.00%
ParticleContainer::RedistributeCPU()                            50      0.5        0.5        0.5   4.00%
--------------------------------------------------------------------------------------------------------

END REGION WarpX::Evolve()
Pinned Memory Usage:
--------------------------------------------------------------------------------------------------------
Name                                                        Nalloc  Nfree  AvgMem min  AvgMem avg
"""


def test_the_report_is_read_inclusively_and_into_hetmem_pics_phases():
    regions = bench_warpx.parse_tinyprofiler(REPORT)
    # The WarpX::Evolve() region's table, not the whole run's (the redistribution at start-up).
    assert regions["WarpX::Evolve()"] == 10.0 and regions["ParticleContainer::RedistributeCPU()"] == 0.5
    assert regions["WarpXParticleContainer::DepositCurrent::CurrentDeposition"] == 3.5  # the inclusive time
    assert "main()" not in regions and "Nalloc" not in regions and len(regions) == 8
    phases = bench_warpx.phases_core_ns(regions, threads=2, steps=50)
    per = bench_warpx.PARTICLES * 50 / 1e9  # seconds per ns per particle-step
    assert phases["gather+push+deposit"] == pytest.approx((5.0 + 3.5) / per * 2)
    assert phases["current reduction"] == pytest.approx(0.25 / per * 2)
    assert phases["field solve"] == pytest.approx(1.0 / per * 2)
    assert phases["redistribution"] == pytest.approx(0.5 / per * 2)
    # Without a region table, the whole run's.
    whole = bench_warpx.parse_tinyprofiler(REPORT[:REPORT.index("BEGIN REGION")])
    assert whole["main()"] == 12.5 and whole["ParticleContainer::RedistributeCPU()"] == 0.75


def test_the_deck_is_hetmem_pics_comparison_problem():
    deck = dict(line.split(" = ", 1) for line in bench_warpx.inputs(50).splitlines())
    assert deck["max_step"] == "50" and deck["amr.n_cell"] == "64 64 64"
    assert deck["electrons.num_particles_per_cell_each_dim"] == "2 2 2"
    assert (deck["algo.maxwell_solver"], deck["algo.current_deposition"], deck["algo.field_gathering"],
            deck["algo.particle_pusher"], deck["algo.particle_shape"]) == ("yee", "esirkepov", "energy-conserving",
                                                                            "boris", "1")
    assert deck["warpx.use_filter"] == "0" and not any(k.startswith("diagnostics") for k in deck)
    assert deck["geometry.prob_hi"] == "4e-05 4e-05 4e-05" and deck["electrons.density"] == "1e24"


def _tree(root: Path, warpx_version: str = "24.10", amrex_version: str = "24.10") -> Path:
    (root / "WarpX" / "Source").mkdir(parents=True)
    (root / "WarpX" / "Source" / "WarpX.cpp").write_text("")
    (root / "WarpX" / "CMakeLists.txt").write_text(f"project(WarpX VERSION {warpx_version})\n")
    (root / "amrex" / "Src" / "Base").mkdir(parents=True)
    (root / "amrex" / "Src" / "Base" / "AMReX.cpp").write_text("")
    (root / "amrex" / "CHANGES").write_text(f"# {amrex_version}\n")
    return root / "WarpX"


def test_sources_are_found_and_wrong_ones_refused_with_the_reason(tmp_path):
    warpx = _tree(tmp_path / "good")
    assert bench_warpx.locate_sources(warpx, None) == (warpx.resolve(), (tmp_path / "good" / "amrex").resolve())
    with pytest.raises(HetmemError, match="not a WarpX source tree"):
        bench_warpx.locate_sources(tmp_path, None)
    with pytest.raises(HetmemError, match="WarpX 24.08; the comparison is with WarpX 24.10"):
        bench_warpx.locate_sources(_tree(tmp_path / "old", warpx_version="24.08"), None)
    with pytest.raises(HetmemError, match="not AMReX 24.10"):
        bench_warpx.locate_sources(_tree(tmp_path / "mixed", amrex_version="24.08"), None)
    lonely = tmp_path / "lonely" / "WarpX"
    (lonely / "Source").mkdir(parents=True)
    (lonely / "Source" / "WarpX.cpp").write_text("")
    (lonely / "CMakeLists.txt").write_text("project(WarpX VERSION 24.10)\n")
    with pytest.raises(HetmemError, match="no AMReX 24.10 sources beside it"):
        bench_warpx.locate_sources(lonely, None)
    with pytest.raises(HetmemError, match="not an AMReX source tree"):
        bench_warpx.locate_sources(lonely, tmp_path)


def test_the_command_refuses_what_does_not_fit(tmp_path):
    hetmem = [sys.executable, "-m", "hetmem"]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    for args, said in ((["bench", "fields", "--warpx", "x"], "--warpx and --amrex are for `hetmem bench pic`"),
                       (["bench", "pic", "--amrex", "x"], "give --warpx too"),
                       (["bench", "pic", "--warpx", "x", "--ranks", "1,2"], "does not combine with --ranks"),
                       (["bench", "pic", "--warpx", str(tmp_path / "nothing")], "no such file or directory")):
        r = subprocess.run(hetmem + args, capture_output=True, text=True, env=env, timeout=60)
        assert r.returncode != 0 and said in r.stderr, (args, r.stderr)
