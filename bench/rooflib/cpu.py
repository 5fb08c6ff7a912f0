"""What the CPU announces: model, cores, SIMD width, nominal clock, L3 size; and process facts."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path


def _read(path):
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def parse_size(text):
    """'32768K' / '32 MiB' / '1M' -> bytes (0 if unreadable)."""
    text = text.strip().replace("iB", "").replace("B", "").replace(" ", "")
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    try:
        if text and text[-1].upper() in units:
            return int(float(text[:-1]) * units[text[-1].upper()])
        return int(text)
    except ValueError:
        return 0


def l3_bytes():
    """Size of the last-level (L3) cache from sysfs, else ``lscpu``'s line; 0 if unknown."""
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for index in sorted(base.glob("index*")):
        if _read(index / "level").strip() == "3":
            size = parse_size(_read(index / "size"))
            if size:
                return size
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            if line.startswith("L3 cache:"):
                return parse_size(line.split(":", 1)[1].split("(")[0])
    except (OSError, subprocess.SubprocessError):
        pass
    return 0


def cpu_info():
    """Model name, core count, SIMD width (from the flags), nominal MHz and L3 size."""
    text = _read("/proc/cpuinfo")
    fields = {}
    for line in text.splitlines():
        if ":" in line:
            key, value = (s.strip() for s in line.split(":", 1))
            fields.setdefault(key, value)
    flags = set(fields.get("flags", "").split())
    if "avx512f" in flags:
        simd, lanes = "AVX-512", 16
    elif "avx2" in flags:
        simd, lanes = "AVX2", 8
    elif "avx" in flags:
        simd, lanes = "AVX", 8
    else:
        simd, lanes = "SSE (or unknown)", 4
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 1
    mhz = float(fields["cpu MHz"]) if "cpu MHz" in fields else None
    return {
        "model": fields.get("model name") or platform.processor() or "unknown CPU",
        "cpus": os.cpu_count() or 1,
        "usable_cpus": usable,
        "simd": simd,
        "simd_bits": lanes * 32,
        "lanes_f32": lanes,
        "fma": "fma" in flags,
        "mhz": mhz,
        "l3_bytes": l3_bytes(),
    }


CPU = cpu_info()


def loadavg():
    """The 1-minute load average, or None."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def threading_layer():
    """Numba's threading layer, or "unknown" before any parallel region ran."""
    import numba

    try:
        return numba.threading_layer()
    except ValueError:
        return "unknown"
