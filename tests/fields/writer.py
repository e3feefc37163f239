"""A producer for the tests: archives `levels` fields of each step into FDB through pyfdb, flushes
after each step and then prints `flushed STEP` (so a test knows what must be durable and visible).

    writer.py CONFIG EXPVER FIRST_STEP STEPS LEVELS N [--hold SECONDS]

--hold: after archiving each step, print `archived STEP` and wait before flushing (a reader checks
the step is not visible meanwhile). The fields' values are a function of (expver, step, level), so a
reader can re-encode what must be there and compare bit for bit (field_bytes).
"""

import sys
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
    config, expver, first, steps, levels, n = sys.argv[1:7]
    first, steps, levels, n = int(first), int(steps), int(levels), int(n)
    hold = float(sys.argv[8]) if len(sys.argv) > 8 and sys.argv[7] == "--hold" else 0.0
    fdb = fields.open_fdb(config)
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


if __name__ == "__main__":
    main()
