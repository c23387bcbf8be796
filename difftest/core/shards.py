"""Joining the partial evidence of `run --shard I/N` into the evidence one whole run gives.

Each shard judged whole scenarios on every branch, so the join is a union put
back in the whole run's order: the shards must come from the same difftest
(version and evidence schema: this one, since the merge judges their runs
again), selection, base, branches (commits, patches, environments), reading,
baseline and reference branches, and hold every slice 1..N exactly once, each
slice exactly the scenarios `run --shard` gives it. What the shards say their
verdicts were is never taken: the merge judges every shard's runs again
(`run.rejudge`) and joins those results and runs. The tests tier keeps its
outcomes in the evidence only, with nothing to check them against, so a shard
holding it is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from difftest import __version__
from difftest.core.coverage import merge_coverage
from difftest.core.errors import DifftestError
from difftest.core.evidence import Evidence, ProbeFiles, ShardEvidence
from difftest.core.records import ProbeRun, Result


@dataclass(frozen=True)
class Shard:
    """One shard's evidence, as read from its file."""

    #: How messages name it (its path).
    name: str
    evidence: Evidence
    #: The schema version the file was written in, before any upgrade (`evidence.written_version`).
    schema: str

    @property
    def shard(self) -> ShardEvidence:
        """Its evidence's `shard` part, once `check_shards` has refused evidence without one."""
        assert self.evidence.shard is not None, f"{self.name} was not checked by check_shards"
        return self.evidence.shard


#: What every shard must agree on, and how to say it when one does not.
_SAME: dict[str, Callable[[Shard], object]] = {
    "difftest version": lambda s: s.evidence.difftest_version,
    "evidence schema version": lambda s: s.schema,
    "base wheel": lambda s: s.evidence.base.fingerprint,
    "branches (refs, commits, patches, environments)": lambda s: {
        name: b.model_dump(exclude={"fingerprint"}) | {"env": b.fingerprint.get("fingerprint_hash")}
        for name, b in s.evidence.branches.items()
    },
    "oracle reading": lambda s: s.evidence.reading,
    "baseline": lambda s: s.evidence.baseline,
    "reference branches": lambda s: sorted(s.evidence.reference_branches),
    "probe environment (the variables that reach the probes)": lambda s: (
        s.evidence.probe_environ_sha256
    ),
    "probe confinement": lambda s: (
        s.evidence.protection.confined if s.evidence.protection else None
    ),
    "shard count": lambda s: s.evidence.shard.count if s.evidence.shard else None,
    "scenario selection": lambda s: s.evidence.shard.order if s.evidence.shard else None,
}


def check_shards(parts: list[Shard]) -> None:
    """DifftestError naming the first shard that is not a shard of one comparison this difftest can
    judge."""
    if not parts:
        raise DifftestError("nothing to merge", "pass the evidence.json of every shard")
    for part in parts:
        if part.evidence.shard is None:
            raise DifftestError(
                f"{part.name} is not a shard's evidence",
                "pass files written by `difftest run --shard I/N`",
            )
        if part.evidence.tests or part.evidence.test_sources:
            raise DifftestError(
                f"{part.name} holds results of the tests tier, whose outcomes are kept in the "
                "evidence only (no hashed records): a merge cannot judge them again",
                "run the tests tier without --shard (`difftest run --tier tests`), and shard the "
                "other tiers",
            )
    first = parts[0]
    for part in parts[1:]:
        for what, value in _SAME.items():
            if value(part) != value(first):
                raise DifftestError(
                    f"{part.name} and {first.name} differ in their {what}: they are not shards of "
                    "one comparison",
                    "merge the shards of one `difftest run --shard I/N` matrix, run with the same "
                    "difftest, config and refs",
                )
    if first.evidence.difftest_version != __version__:
        raise DifftestError(
            f"{first.name} was written by difftest {first.evidence.difftest_version}; this is "
            f"difftest {__version__}, and a merge judges the shards' runs again with its own "
            "oracle and reader",
            f"merge with difftest {first.evidence.difftest_version}, or run the shards again with "
            "this one",
        )
    count = first.shard.count
    indices = sorted(p.shard.index for p in parts)
    if indices != list(range(1, count + 1)):
        raise DifftestError(
            f"the shards given are {', '.join(map(str, indices))} of {count}: each of 1..{count} "
            "is needed once",
            "pass the evidence.json of every shard, once each",
        )
    order = first.shard.order
    for part in parts:
        index = part.shard.index
        slice_ = order[index - 1 :: count]
        if sorted(part.evidence.scenarios) != sorted(slice_):
            raise DifftestError(
                f"{part.name} holds the scenarios "
                f"{', '.join(sorted(part.evidence.scenarios)) or '(none)'}, but shard "
                f"{index}/{count} of its selection is {', '.join(sorted(slice_)) or '(none)'}",
                "use the evidence.json `difftest run --shard` wrote, unedited",
            )


def merge_shards(
    parts: list[Shard],
    probes: Callable[[int, ProbeFiles], ProbeFiles],
    results: Mapping[int, list[Result]],
    runs: Mapping[int, Mapping[str, list[ProbeRun]]],
) -> Evidence:
    """One evidence from the shards, in the whole run's order, holding the `results` and `runs` each
    shard's records were judged again into (by shard index: the shards' own are not read);
    `probes(i, files)` says where shard i's probe files are now."""
    check_shards(parts)
    ordered = sorted(parts, key=lambda p: p.shard.index)
    first = ordered[0].evidence
    order = {name: i for i, name in enumerate(ordered[0].shard.order)}

    def place(scenario: str) -> int:
        return order.get(scenario, len(order))

    indices = [p.shard.index for p in ordered]
    scenarios = {k: v for p in ordered for k, v in p.evidence.scenarios.items()}
    joined: dict[str, list[ProbeRun]] = {}
    for index in indices:
        for branch, found in runs[index].items():
            joined.setdefault(branch, []).extend(found)
    return first.model_copy(
        update={
            "scenarios": dict(sorted(scenarios.items(), key=lambda item: place(item[0]))),
            "results": sorted(
                (r for i in indices for r in results[i]), key=lambda r: place(r.scenario)
            ),
            # The evidence keeps runs without their steps (those stay in the probe files).
            "runs": {
                b: [
                    r.model_copy(update={"steps": []})
                    for r in sorted(found, key=lambda r: place(r.scenario))
                ]
                for b, found in joined.items()
            },
            "probes": [
                probes(i, f)
                for i, p in zip(indices, ordered, strict=True)
                for f in p.evidence.probes
            ],
            "shard": None,
            "coverage": merge_coverage([p.evidence.coverage for p in ordered]),
        }
    )
