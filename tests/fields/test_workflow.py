"""The producer/consumer workflow of Weiland et al. (SC'19, §5.2) on a small grid: hetmem-mg writes
its fields into FDB (through FDB's C API) every step while two product generators wait for each
step, retrieve it and archive their products back; every product matches its source field."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hetmem import fields

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("HETMEM_BUILD_DIR", ROOT / "build"))

N, STEPS = 16, 4
SOURCE = {"class": "rd", "expver": "hmmg", "stream": "oper", "time": "0000", "domain": "g", "type": "fc",
          "levtype": "ml"}


def test_model_and_two_consumers_every_product_matches_its_field(tmp_path):
    config = fields.write_config(tmp_path)
    request = ",".join(f"{k}={v}" for k, v in SOURCE.items())
    consumers = [subprocess.Popen([sys.executable, "-m", "hetmem", "fields", "consume", request, "--config",
                                   str(config), "--steps", str(STEPS), "--timeout", "120", "--product-expver",
                                   f"pg0{c}", "--out", str(tmp_path / f"c{c}.jsonl")], cwd=ROOT / "python",
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in (1, 2)]
    model = subprocess.run([str(BUILD / "apps" / "mg" / "hetmem-mg"), f"mg.n={N}", f"mg.steps={STEPS}",
                            "mg.output_interval=1"], env=fields.environment(config), capture_output=True, text=True,
                           timeout=120)
    assert model.returncode == 0, model.stderr
    per_step = 7 * N  # the pressure and six domain fields, N levels each
    assert f"output: {STEPS * per_step} GRIB fields" in model.stdout, model.stdout
    for c in consumers:
        out, err = c.communicate(timeout=180)
        assert c.returncode == 0, err
    fdb = fields.open_fdb(config)
    for c in (1, 2):
        records = [json.loads(line) for line in (tmp_path / f"c{c}.jsonl").read_text().splitlines()]
        assert [r["step"] for r in records] == list(range(1, STEPS + 1))
        assert all(r["fields"] == per_step for r in records)
        # Products: one per source field, the 2x2 block means of its values (24-bit packing both
        # ways: within 1e-5 of the field's range).
        for step in (1, STEPS):
            for level in (1, N):
                req = {**SOURCE, "date": _date(fdb), "step": str(step),
                       "levelist": str(level), "param": "130"}
                with fdb.retrieve(req) as h:
                    _, src = fields.decode_field(h.read())
                with fdb.retrieve({**req, "expver": f"pg0{c}"}) as h:
                    _, product = fields.decode_field(h.read())
                expect = fields.coarsen(src)
                span = max(float(np.ptp(src)), 1e-12)
                assert product.shape == (N // 2, N // 2)
                assert np.max(np.abs(product - expect)) <= 1e-5 * span + 1e-9
        stats = next(s for s in records[-1]["levels"] if s["param"] == "130" and s["level"] == "1")
        req = {**SOURCE, "date": _date(fdb), "step": str(STEPS), "levelist": "1", "param": "130"}
        with fdb.retrieve(req) as h:
            _, src = fields.decode_field(h.read())
        assert stats["mean"] == pytest.approx(float(src.mean()), rel=1e-12, abs=1e-12)
        assert stats["max"] == float(src.max())
    st = {d.key["expver"]: d for d in fields.status(config, {"class": "rd"})}
    assert st["hmmg"].fields == st["hmmg"].durable == STEPS * per_step
    assert st["pg01"].fields == st["pg02"].fields == STEPS * per_step


def _date(fdb):
    return next(iter(fdb.list({"class": "rd", "expver": "hmmg"}))).combined_key()["date"]


def test_the_model_refuses_output_settings_it_cannot_use(tmp_path):
    mg = str(BUILD / "apps" / "mg" / "hetmem-mg")
    env = {k: v for k, v in os.environ.items() if k != "FDB5_CONFIG_FILE"}
    r = subprocess.run([mg, "mg.n=8", "mg.output_interval=1"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "set FDB5_CONFIG_FILE" in r.stderr, r.stderr
    config = fields.write_config(tmp_path)
    r = subprocess.run([mg, "mg.n=8", "mg.output_interval=1", "mg.output_expver=abc"], env=fields.environment(config),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "4 characters" in r.stderr, r.stderr
    r = subprocess.run([mg, "mg.n=8", "mg.output_interval=-1"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "mg.output_interval" in r.stderr, r.stderr


def _model(config, tmp_path, name, steps, **env):
    out = tmp_path / f"{name}.json"
    r = subprocess.run([str(BUILD / "apps" / "mg" / "hetmem-mg"), f"mg.n={N}", f"mg.steps={steps}",
                        "mg.output_interval=1", f"mg.output_expver={name}", f"mg.json={out}"],
                       env={**fields.environment(config), **env}, capture_output=True, text=True, timeout=120)
    return r, (json.loads(out.read_text()) if r.returncode == 0 else None)


def test_the_model_s_fields_and_its_own_arrays_share_one_budget(tmp_path):
    """With `hetmem.tier: capacity`, the fields hetmem-mg archives are counted in the budget of the
    tier its domain arrays live on, in the one runtime the model and the store share: the tier's
    in-use bytes grow by the fields' room in the pools (64-byte record and padding per field), and
    a budget the arrays and the fields together exceed stops the archive with a message naming the
    tier, while every step flushed before it stays whole."""
    per_step = 7 * N
    plain, alone = _model(fields.write_config(tmp_path / "plain"), tmp_path, "hmb0", 2)
    assert plain.returncode == 0, plain.stderr
    counted, shared = _model(fields.write_config(tmp_path / "counted", tier="capacity"), tmp_path, "hmb1", 2)
    assert counted.returncode == 0, counted.stderr
    assert shared["output_fields"] == alone["output_fields"] == 2 * per_step
    fields_room = shared["domain_tier_in_use"] - alone["domain_tier_in_use"]
    n, data = shared["output_fields"], shared["output_bytes"]
    assert data + 64 * n <= fields_room < data + 128 * n, (fields_room, data, n)
    assert shared["domain_tier_high_water"] >= shared["domain_tier_in_use"] >= shared["domain_bytes"] + fields_room

    # A budget for the arrays and two and a half steps of fields (fields_room is two steps' worth),
    # given to a run of four steps: the third step's archive is refused half-way, never flushed.
    config = fields.write_config(tmp_path / "tight", tier="capacity")
    budget = alone["domain_tier_in_use"] + fields_room * 5 // 4
    r, _ = _model(config, tmp_path, "hmb2", 4, HM_CAPACITY_BUDGET=str(budget))
    assert r.returncode != 0, r.stdout
    assert "does not fit its budget" in r.stderr and "hetmem.tier" in r.stderr, r.stderr
    st = {d.key["expver"]: d for d in fields.status(config, {"class": "rd"})}["hmb2"]
    assert st.fields == st.durable == 2 * per_step, (st.fields, st.durable)
    fdb = fields.open_fdb(config)
    date = next(iter(fdb.list({"class": "rd", "expver": "hmb2"}))).combined_key()["date"]
    for step in (1, 2):
        with fdb.retrieve({**SOURCE, "expver": "hmb2", "date": date, "step": str(step), "levelist": str(N),
                           "param": "130"}) as h:
            _, values = fields.decode_field(h.read())
        assert values.shape == (N, N) and np.all(np.isfinite(values))
