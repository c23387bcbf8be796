"""How many branch probes run at once: no more than the cores suit (the tier says) and the memory
holds.

Each probe is a Python process that imports vLLM and torch; a scheduler-tier
probe peaks at several hundred MB (`bench/memory.py`). Started all at once,
40 branches would exhaust a 23 GB machine, so the default is capped by the
memory available now divided by the tier's per-probe budget (measured peak
plus a margin). `--jobs` overrides both.
"""

from __future__ import annotations

from pathlib import Path

#: Use at most this share of the memory available when the run starts (the rest: the host,
#: the page cache, other work on the machine).
MEMORY_SHARE = 0.8


def available_memory_mb(meminfo: Path = Path("/proc/meminfo")) -> float | None:
    """`MemAvailable` in MB (Linux); None where it cannot be read (then memory does not cap)."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def probes_at_once(wanted: int, per_probe_mb: float, available_mb: float | None) -> int:
    """`wanted` (the tier's default for these branches and cores), capped by memory; at least
    one."""
    if available_mb is None or per_probe_mb <= 0:
        return max(1, wanted)
    fits = int(available_mb * MEMORY_SHARE // per_probe_mb)
    return max(1, min(wanted, fits))
