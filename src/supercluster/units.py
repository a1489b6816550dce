"""SI constants and the only place where numbers are turned into human units.

Everything inside the package is SI (seconds, bytes, FLOPs, watts). Decimal prefixes
for rates (GB = 1e9), binary only where a vendor means binary (GiB).
"""

from __future__ import annotations

KILO = 1e3
MEGA = 1e6
GIGA = 1e9
TERA = 1e12
PETA = 1e15
GB = 1e9
TB = 1e12
GiB = float(2**30)
MiB = float(2**20)
GBIT = 1e9 / 8  # bytes per second in one Gb/s
US = 1e-6

#: Bytes per element of each training precision's compute dtype.
DTYPE_BYTES = {"fp32": 4.0, "tf32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 0.5}


def fmt_bytes(x: float) -> str:
    """Decimal-prefix bytes, e.g. ``fmt_bytes(8.2e10) == '82.0 GB'``."""
    for unit, scale in (("PB", PETA), ("TB", TB), ("GB", GB), ("MB", MEGA), ("kB", KILO)):
        if abs(x) >= scale:
            return f"{x / scale:.1f} {unit}"
    return f"{x:.0f} B"


def fmt_ibytes(x: float) -> str:
    """Binary-prefix bytes, as GPU memory is counted, e.g. ``fmt_ibytes(3 * 2**30) == '3.0 GiB'``."""
    for unit, scale in (("TiB", 2.0**40), ("GiB", GiB), ("MiB", MiB), ("KiB", 1024.0)):
        if abs(x) >= scale:
            return f"{x / scale:.1f} {unit}"
    return f"{x:.0f} B"


def fmt_seconds(x: float) -> str:
    """Seconds in the most readable unit, e.g. ``fmt_seconds(0.0123) == '12.30 ms'``."""
    if abs(x) >= 86400:
        return f"{x / 86400:.2f} d"
    if abs(x) >= 3600:
        return f"{x / 3600:.2f} h"
    if abs(x) >= 1:
        return f"{x:.3f} s"
    if abs(x) >= 1e-3:
        return f"{x * 1e3:.2f} ms"
    return f"{x * 1e6:.1f} us"


def fmt_flops(x: float) -> str:
    """FLOP/s with a decimal prefix, e.g. ``fmt_flops(4.5e14) == '450.0 TFLOP/s'``."""
    for unit, scale in (("EFLOP/s", 1e18), ("PFLOP/s", PETA), ("TFLOP/s", TERA), ("GFLOP/s", GIGA)):
        if abs(x) >= scale:
            return f"{x / scale:.1f} {unit}"
    return f"{x:.0f} FLOP/s"


def fmt_watts(x: float) -> str:
    """Power in the unit that keeps its digits, e.g. ``fmt_watts(2.4e7) == '24.0 MW'``, ``fmt_watts(9.75e5)
    == '975.0 kW'`` (a 64-GPU cluster's power reads in kW, not as 0.1 MW)."""
    for unit, scale, digits in (("GW", GIGA, 2), ("MW", MEGA, 1), ("kW", KILO, 1)):
        if abs(x) >= scale:
            return f"{x / scale:,.{digits}f} {unit}"
    return f"{x:,.0f} W"


def fmt_watt_hours(x: float) -> str:
    """Energy in watt-hours, in the unit that keeps its digits, e.g. ``fmt_watt_hours(3.76e4) == '37.6 kWh'``."""
    return fmt_watts(x) + "h"


def fmt_usd(x: float) -> str:
    """Dollars in the unit that keeps their digits, e.g. ``fmt_usd(4.959e10) == '$49.59 B'``,
    ``fmt_usd(6.6e5) == '$660.0 k'``."""
    for unit, scale, digits in (("B", GIGA, 2), ("M", MEGA, 1), ("k", KILO, 1)):
        if abs(x) >= scale:
            return f"${x / scale:,.{digits}f} {unit}"
    return f"${x:,.0f}"


def fmt_count(x: float) -> str:
    """A count (GPU-hours, say) to read at a glance across the scales one report spans, e.g.
    ``fmt_count(2.123e7) == '21.23 M'``, ``fmt_count(4010.4) == '4,010'``, ``fmt_count(0.0243) == '0.0243'``."""
    if x >= MEGA:
        return f"{x / MEGA:,.2f} M"
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"
