"""How many branch probes run at once: the tier's default, capped by the memory available."""

from __future__ import annotations

from difftest import tiers
from difftest.run.probes.capacity import MEMORY_SHARE, available_memory_mb, probes_at_once

SCHEDULER_MB = tiers.get("scheduler").probe_memory_mb


def test_forty_branches_on_this_kind_of_machine_are_capped_by_memory() -> None:
    """The issue's case: 40 scheduler probes (about 520 MB each) on a 23 GB machine."""
    at_once = probes_at_once(40, SCHEDULER_MB, 23_000)
    assert at_once == int(23_000 * MEMORY_SHARE // SCHEDULER_MB) < 40
    assert at_once * SCHEDULER_MB <= 23_000 * MEMORY_SHARE


def test_few_branches_all_run_at_once_when_they_fit() -> None:
    assert probes_at_once(3, SCHEDULER_MB, 23_000) == 3


def test_at_least_one_probe_runs_however_little_memory_is_left() -> None:
    assert probes_at_once(12, SCHEDULER_MB, 100) == 1


def test_unknown_memory_does_not_cap() -> None:
    assert probes_at_once(12, SCHEDULER_MB, None) == 12


def test_available_memory_is_read_from_meminfo(tmp_path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(
        "MemTotal:       24000000 kB\nMemFree:         1000000 kB\nMemAvailable:   20480000 kB\n"
    )
    assert available_memory_mb(meminfo) == 20_000
    assert available_memory_mb(tmp_path / "missing") is None
