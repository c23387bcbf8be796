"""The tier registry: the one place that maps a tier's name to its implementation.

Every other module asks `get(name)` or iterates `REGISTRY`; none compares tier
names. See `tiers.base.Tier` for what a tier provides, and `tiers.probe_tier`
and `tiers.suite_tier` for its two kinds.
"""

from __future__ import annotations

from typing import Any

from difftest.core.errors import ConfigError
from difftest.tiers.base import Tier
from difftest.tiers.engine.tier import EngineTier
from difftest.tiers.probe_tier import ProbeTier
from difftest.tiers.scheduler.tier import SchedulerTier
from difftest.tiers.tests.tier import TestsTier

REGISTRY: dict[str, Tier[Any]] = {
    tier.name: tier for tier in (SchedulerTier(), EngineTier(), TestsTier())
}


def names() -> list[str]:
    """Tier names, in the order their results are reported."""
    return list(REGISTRY)


def get(name: str) -> Tier[Any]:
    """The tier called `name`; ConfigError naming the known tiers otherwise."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise ConfigError(f"unknown tier {name!r}", f"use one of: {', '.join(REGISTRY)}") from None


def probe_tiers() -> list[ProbeTier[Any]]:
    """The tiers measured by probes, in report order (what fuzz and the memory benchmark use)."""
    return [tier for tier in REGISTRY.values() if isinstance(tier, ProbeTier)]


def probe_tier(name: str) -> ProbeTier[Any]:
    """The probe-measured tier called `name` (what fuzz, traces and re-judging need)."""
    tier = get(name)
    if not isinstance(tier, ProbeTier):
        raise ConfigError(
            f"the {name} tier is not measured by probes",
            f"use one of: {', '.join(n for n, t in REGISTRY.items() if isinstance(t, ProbeTier))}",
        )
    return tier
