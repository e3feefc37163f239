"""A producer for the tests: archives `levels` fields of each step into FDB through pyfdb, flushes
after each step and then prints `flushed STEP` (so a test knows what must be durable and visible).

    writer.py CONFIG EXPVER FIRST_STEP STEPS LEVELS N [--hold SECONDS] [--linger]

--hold: after archiving each step, print `archived STEP` and wait before flushing (a reader checks
the step is not visible meanwhile). --linger: after the last step, print `done` and keep the database
open until killed (a test that kills the producer always finds it alive, however fast the machine). The fields' values are a function of (expver, step, level), so a
reader can re-encode what must be there and compare bit for bit (field_bytes).
"""

import argparse
import time

import numpy as np

from hetmem import fields


def field_values(expver: str, step: int, level: int, n: int) -> np.ndarray:
    seed = sum(map(ord, expver))
    j, i = np.mgrid[0:n, 0:n]
    return np.sin(0.1 * i * (level + 1) + 0.05 * j * (step + 1) + seed) * 100 + step


def field_bytes(expver: str, step: int, level: int, n: int) -> bytes:
    return fields.encode_field(field_values(expver, step, level, n), step=step, level=level, param=130,
                               expver=expver, date=20261125)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("expver")
    for name in ("first", "steps", "levels", "n"):
        ap.add_argument(name, type=int)
    ap.add_argument("--hold", type=float, default=0.0)
    ap.add_argument("--linger", action="store_true")
    a = ap.parse_args()
    expver, first, steps, levels, n, hold = a.expver, a.first, a.steps, a.levels, a.n, a.hold
    fdb = fields.open_fdb(a.config)
    field_bytes(expver, first, 1, n)  # ecCodes initialises on first use: "ready" means writing starts now
    print("ready", flush=True)
    for step in range(first, first + steps):
        for level in range(1, levels + 1):
            fdb.archive(field_bytes(expver, step, level, n))
        if hold:
            print(f"archived {step}", flush=True)
            time.sleep(hold)
        fdb.flush()
        print(f"flushed {step}", flush=True)
    if a.linger:
        print("done", flush=True)
        while True:
            time.sleep(3600)


if __name__ == "__main__":
    main()
