"""Joining the partial evidence of `run --shard I/N` into the evidence one whole run gives.

Each shard judged whole scenarios on every branch, so the join is a union put
back in the whole run's order: the shards must come from the same selection,
base, branches (commits, patches, environments), reading and baseline, and
hold every slice 1..N exactly once.
"""

from __future__ import annotations

from collections.abc import Callable

from difftest.core.errors import DifftestError
from difftest.core.evidence import Evidence, ProbeFiles
from difftest.core.records import ProbeRun

#: What every shard must agree on, and how to say it when one does not.
_SAME: dict[str, Callable[[Evidence], object]] = {
    "base wheel": lambda e: e.base.fingerprint,
    "branches (refs, commits, patches, environments)": lambda e: {
        name: b.model_dump(exclude={"fingerprint"}) | {"env": b.fingerprint.get("fingerprint_hash")}
        for name, b in e.branches.items()
    },
    "oracle reading": lambda e: e.reading,
    "baseline": lambda e: e.baseline,
    "shard count": lambda e: e.shard.count if e.shard else None,
    "scenario selection": lambda e: e.shard.order if e.shard else None,
}


def check_shards(parts: list[tuple[str, Evidence]]) -> None:
    """DifftestError naming the first of the (name, evidence) that is not a shard of one comparison."""
    if not parts:
        raise DifftestError("nothing to merge", "pass the evidence.json of every shard")
    for name, evidence in parts:
        if evidence.shard is None:
            raise DifftestError(f"{name} is not a shard's evidence", "pass files written by `difftest run --shard I/N`")
    first_name, first = parts[0]
    for name, evidence in parts[1:]:
        for what, value in _SAME.items():
            if value(evidence) != value(first):
                raise DifftestError(
                    f"{name} and {first_name} differ in their {what}: they are not shards of one comparison",
                    "merge the shards of one `difftest run --shard I/N` matrix, run with the same config and refs",
                )
    count = first.shard.count  # type: ignore[union-attr]
    indices = sorted(e.shard.index for _n, e in parts)  # type: ignore[union-attr]
    if indices != list(range(1, count + 1)):
        raise DifftestError(
            f"the shards given are {', '.join(map(str, indices))} of {count}: each of 1..{count} is needed once",
            "pass the evidence.json of every shard, once each",
        )


def merge_shards(parts: list[tuple[str, Evidence]], probes: Callable[[int, ProbeFiles], ProbeFiles]) -> Evidence:
    """One evidence from the shards' (name, evidence), in the whole run's order; `probes(i, files)` says
    where shard i's probe files are now."""
    check_shards(parts)
    ordered = [e for _n, e in sorted(parts, key=lambda p: p[1].shard.index)]  # type: ignore[union-attr]
    first = ordered[0]
    order = {name: i for i, name in enumerate(first.shard.order)}  # type: ignore[union-attr]

    def place(scenario: str) -> int:
        return order.get(scenario, len(order))

    scenarios = {k: v for e in ordered for k, v in e.scenarios.items()}
    runs: dict[str, list[ProbeRun]] = {}
    for evidence in ordered:
        for branch, found in (evidence.runs or {}).items():
            runs.setdefault(branch, []).extend(found)
    return first.model_copy(
        update={
            "scenarios": dict(sorted(scenarios.items(), key=lambda item: place(item[0]))),
            "results": sorted((r for e in ordered for r in e.results), key=lambda r: place(r.scenario)),
            "runs": {b: sorted(found, key=lambda r: place(r.scenario)) for b, found in runs.items()},
            "probes": [probes(e.shard.index, p) for e in ordered for p in e.probes],  # type: ignore[union-attr]
            "tests": [t for e in ordered for t in e.tests],
            "test_sources": {k: v for e in ordered for k, v in e.test_sources.items()},
            "shard": None,
        }
    )
