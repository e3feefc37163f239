"""Byte sizes as every report of the hetmem command writes them. (Sizes are parsed by the library,
`Library.parse_size`, as every HM_* option reads them.)"""

MiB = 1 << 20


def size_text(n: float) -> str:
    """4096 -> '4.0 KiB', 3 << 30 -> '3.0 GiB'; bytes below 1 KiB as a whole number."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
