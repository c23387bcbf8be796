"""The conclusion: which branch is right, and why, in one sentence per branch
(generated, never written).

Every report ends (terminal) or opens (Markdown, HTML) with it. Per branch:
its standing (the most severe verdict it got) and its most severe finding -
- broken: the scenario where most runs broke, those runs, and which requests
  lost their stats in each (the invariants name them where they can);
- could not measure: how many runs, and the first reason;
- diverge: the counter that differs from the oracle in the most scenarios, by
  how much, and the oracle's reading of it (`tiers.common.accounting.RULES`);
  an emitted count above the oracle where the oracle saw stop handling cut a
  step is called what it is, an overcount on truncation; a row count is put
  down to the oracle's reading (`READINGS`) only where the scenario's own
  oracle shows it: the other reading counts exactly the branch's rows (a
  request whose drafts are all grammar-invalid). That takes the scenario
  objects (and, for a tier whose oracle reads the steps, the recorded runs);
  without them no reading is named;
- pass.
Then one sentence ranking the branches that measured something (a branch that
could not measure any run is right about nothing): nothing broken first, then
fewest runs that could not be measured, then fewest that diverge. Last, for each
branch broken or worse than the baseline, the `difftest blame` command that finds
which of its hunks make it (`blame_offer`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from difftest import tiers
from difftest.core.evidence import BranchCoverage, Evidence
from difftest.core.records import ProbeRun, Reading, Result, Verdict
from difftest.core.verdicts import MAL, first_reason
from difftest.reports.blame_offer import blame_offers
from difftest.reports.views import (
    SEVERITY,
    branch_names,
    run_index,
    run_name,
    scenario_names,
    severity,
)
from difftest.tiers.common.accounting import READINGS, RULES, truncated
from difftest.tiers.common.request_metrics import GROUP as REQUEST_GROUP
from difftest.tiers.common.request_metrics import PREFIX as REQUEST_PREFIX
from difftest.tiers.common.scenario import ScenarioBase
from difftest.tiers.probe_tier import ProbeTier

#: How many scenario names a sentence lists before "and N more".
LISTED = 3
#: How many broken runs a sentence names before "and N more runs".
NAMED_RUNS = 6


@dataclass(frozen=True)
class Standing:
    """One branch's place in the conclusion."""

    branch: str
    #: The most severe verdict of its runs (`SEVERITY`).
    verdict: Verdict
    counts: dict[str, int]
    total: int
    #: Its most severe finding, as a sentence without the branch's name.
    headline: str
    #: Further findings, shorter.
    also: list[str] = field(default_factory=list)
    #: What its probes executed of the lines it changes, in one line ("" when not traced).
    coverage: str = ""
    #: It passes, but changes code its runs did not all execute (or cannot say): never shown as a
    #: plain pass.
    unverified: bool = False

    @property
    def mark(self) -> str:
        """The verdict its mark shows: `unverified` for a pass that is not a checked one."""
        return "unverified" if self.unverified else self.verdict


@dataclass(frozen=True)
class Shared:
    """A further finding several branches have word for word (what no PR changes): said once."""

    #: The finding, without "also".
    text: str
    #: Who has it, in words: "every branch", "every branch but X", or the names.
    who: str


@dataclass(frozen=True)
class Conclusion:
    reading: str
    standings: list[Standing]
    #: Which branch is right (or closest), in one sentence.
    verdict: str
    #: The `difftest blame` command of each branch with a finding of its own (`blame_offer`).
    blame: list[str] = field(default_factory=list)
    #: Further findings two or more branches share, taken out of their `also` lines.
    shared: list[Shared] = field(default_factory=list)


#: (branch, scenario, run label): the key of a recorded run.
RunKey = tuple[str, str, str]


class _Readings:
    """Whether the oracle's reading explains a run's row count: a fact of the scenario,
    asked of its tier.

    The two readings differ only on a step whose scheduled drafts were all
    grammar-invalidated, so the tier's oracle under both readings says whether
    a scenario has one, with no scenario name or statement read. Without the
    scenario object (or, for an oracle that reads the steps, the run with them)
    the answer is no: a reason nobody can check is not given.
    """

    def __init__(
        self,
        scenarios: Mapping[str, ScenarioBase],
        recorded: Mapping[RunKey, ProbeRun],
        runs: Mapping[RunKey, ProbeRun],
    ) -> None:
        self.scenarios, self.recorded, self.runs = scenarios, recorded, runs

    def explain(self, result: Result) -> bool:
        """The other reading's oracle counts exactly the branch's rows,
        and this reading's does not."""
        scenario, tier = self.scenarios.get(result.scenario), tiers.REGISTRY.get(result.tier)
        if result.measured is None or scenario is None or not isinstance(tier, ProbeTier):
            return False
        run = self._run(result, scenario)
        if run is None:
            return False
        other: Reading = "lenient" if result.reading == "strict" else "strict"
        this_rows = tier.expected(scenario, run, result.reading).num_drafts
        other_rows = tier.expected(scenario, run, other).num_drafts
        return this_rows != other_rows and result.measured.num_drafts == other_rows

    def _run(self, result: Result, scenario: ScenarioBase) -> ProbeRun | None:
        """The run as recorded (with steps), else as the evidence keeps it,
        else as the scenario plans it."""
        key = (result.branch, result.scenario, result.label)
        found = self.recorded.get(key, self.runs.get(key))
        if found is not None:
            return found
        planned = next((r for r in scenario.runs() if r["label"] == result.label), None)
        if planned is None:
            return None
        return ProbeRun(
            scenario=result.scenario,
            tier=result.tier,
            label=result.label,
            role=planned["role"],
            order=planned["order"],
        )


def conclude(
    evidence: Evidence,
    scenarios: Mapping[str, ScenarioBase] | None = None,
    recorded: Mapping[RunKey, ProbeRun] | None = None,
) -> Conclusion:
    """The conclusion of `evidence`. `scenarios` (by name, the objects the evidence was made from)
    and `recorded` (runs with their steps) are the facts a row count is put down to the reading by.
    """
    runs = run_index(evidence)
    readings = _Readings(scenarios or {}, recorded or {}, runs)
    order = scenario_names(evidence)
    standings = []
    #: Explanations already given, and by which branch's line: given once, referred to after.
    said: dict[str, str] = {}
    for branch in branch_names(evidence):
        results = [r for r in evidence.results if r.branch == branch]
        if not results:
            continue
        counts = Counter(r.verdict for r in results)
        top = min(counts, key=severity)
        if top == "broken":
            headline, also = _broken(branch, results, runs, order)
        elif top == "error":
            headline, also = _unmeasured(results, order)
        elif top == "diverge":
            headline, also = _diverge(results, order, evidence.reading, readings, said, branch)
        else:
            headline, also = f"passes all {len(results)} runs", []
        coverage = changed_coverage(evidence, branch)
        unverified = top == "pass" and coverage is not None and coverage.status in UNVERIFIED
        if unverified and coverage is not None:
            headline += f", {coverage.status}: its changed code is not all checked"
        if top in ("broken", "error") and counts["diverge"]:
            # An `also` line may be folded away (report.md's short form): a later line must not
            # refer to an explanation only it gives.
            also.append(
                "also "
                + _diverge(results, order, evidence.reading, readings, dict(said), branch)[0]
            )
        standings.append(
            Standing(
                branch,
                top,
                {v: counts[v] for v in SEVERITY},
                len(results),
                headline,
                also,
                coverage=coverage.summary
                if coverage is not None and coverage.status != "unchanged"
                else "",
                unverified=unverified,
            )
        )
    holds = {
        branch: _short_lines([r for r in evidence.results if r.branch == branch], order, readings)
        for branch in branch_names(evidence)
    }
    shared = _shared(standings, holds)
    return Conclusion(
        evidence.reading, standings, _ranking(standings), blame_offers(evidence), shared
    )


def _shared(standings: list[Standing], holds: Mapping[str, set[str]]) -> list[Shared]:
    """Take the `also` lines two or more branches have word for word out of their standings (a
    finding no PR changes, repeated per branch, pushed why they differ off the screen). Who has
    it is read from every effect of each branch (`holds`), so a branch whose headline it is, or
    whose `also` folds it into one line, is named too."""
    listed: dict[str, list[str]] = {}
    for standing in standings:
        for line in standing.also:
            if line.startswith("also ") and standing.branch not in listed.get(line, []):
                listed.setdefault(line, []).append(standing.branch)
    holders = {
        line: [s.branch for s in standings if s.branch in names or line in holds.get(s.branch, ())]
        for line, names in listed.items()
    }
    common = {line: names for line, names in holders.items() if len(listed[line]) >= 2}
    for standing in standings:
        standing.also[:] = [line for line in standing.also if line not in common]
    everyone = [s.branch for s in standings]
    return [
        Shared(line.removeprefix("also "), _who(names, everyone)) for line, names in common.items()
    ]


def _who(names: list[str], everyone: list[str]) -> str:
    missing = [name for name in everyone if name not in names]
    if not missing:
        return "every branch"
    if len(missing) == 1:
        return f"every branch but {missing[0]}"
    return ", ".join(names)


#: Coverage statuses that keep a pass from being a checked one.
UNVERIFIED = ("not verified", "unknown")


def changed_coverage(evidence: Evidence, branch: str) -> BranchCoverage | None:
    """What the branch's probes executed of the lines it changes (None: not traced, or the
    baseline)."""
    if evidence.coverage is None:
        return None
    return next((c for c in evidence.coverage.branches if c.branch == branch), None)


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:LISTED])
    return shown + (f" and {len(names) - LISTED} more" if len(names) > LISTED else "")


def _by_scenario(results: list[Result], order: list[str]) -> dict[str, list[Result]]:
    grouped: dict[str, list[Result]] = {}
    for r in sorted(
        results, key=lambda r: order.index(r.scenario) if r.scenario in order else len(order)
    ):
        grouped.setdefault(r.scenario, []).append(r)
    return grouped


def _broken(
    branch: str, results: list[Result], runs: dict, order: list[str]
) -> tuple[str, list[str]]:
    grouped = _by_scenario([r for r in results if r.verdict == "broken"], order)
    scenario = max(grouped, key=lambda s: len(grouped[s]))  # the first of the largest
    broken = grouped[scenario]
    total = sum(r.scenario == scenario for r in results)
    parts = []
    for r in broken:
        name = run_name(runs.get((branch, scenario, r.label)), r.label)
        lost = list(
            dict.fromkeys(
                q for v in r.violations if v.invariant == "stats-lost" for q in v.requests
            )
        )
        if lost:
            parts.append(f"{name} loses {', '.join(lost)}")
        elif r.violations:
            parts.append(f"{name}: {first_reason(r)}")
        else:
            parts.append(name)
    lost_any = any(v.invariant == "stats-lost" for r in broken for v in r.violations)
    what = "requests lose their stats" if lost_any else "invariants break"
    count = sum(r.verdict == "broken" for r in results)
    listed = "; ".join(parts[:NAMED_RUNS]) + (
        f"; and {len(parts) - NAMED_RUNS} more runs" if len(parts) > NAMED_RUNS else ""
    )
    headline = (
        f"is broken in {count}/{len(results)} runs; in {scenario} ({len(broken)}/{total} runs) "
        f"{what}: {listed}"
    )
    also = [f"also broken in {s} ({len(rs)} runs)" for s, rs in grouped.items() if s != scenario]
    return headline, also


def _unmeasured(results: list[Result], order: list[str]) -> tuple[str, list[str]]:
    errors = [r for r in results if r.verdict == "error"]
    scenarios = list(_by_scenario(errors, order))
    return (
        (
            f"could not be measured in {len(errors)}/{len(results)} runs ({_names(scenarios)}): "
            f"{first_reason(errors[0])}"
        ),
        [],
    )


def _runs(results: list[Result]) -> str:
    return f"{sum(r.verdict == 'diverge' for r in results)}/{len(results)} runs"


@dataclass
class _Group:
    """The runs that differ from the oracle on one counter in one direction, for one cause."""

    counter: str
    sign: int
    cause: str
    scenarios: list[str] = field(default_factory=list)
    runs: int = 0
    largest: float = 0
    largest_in: str = ""
    implied: bool = False
    #: The per-request metrics' figures that differ (one group for all of them).
    figures: list[str] = field(default_factory=list)


def _diverge(
    results: list[Result],
    order: list[str],
    reading: str,
    readings: _Readings,
    said: dict[str, str],
    branch: str,
) -> tuple[str, list[str]]:
    effects = _ranked_effects(results, order, readings)
    if not effects:
        return f"diverges in {_runs(results)}", []
    top, *rest = effects
    also = [_short(effect) for effect in rest]
    return f"diverges in {_runs(results)}, " + _sentence(top, reading, said, branch), also


def _short_lines(results: list[Result], order: list[str], readings: _Readings) -> set[str]:
    """Every effect of a branch's diverging runs in its short form, its headline's too: what a
    line that several branches share is matched against."""
    return {_short(effect) for effect in _ranked_effects(results, order, readings)}


def _ranked_effects(
    results: list[Result], order: list[str], readings: _Readings
) -> list[list[_Group]]:
    """The diverging runs' differences grouped into effects, the most telling first."""
    groups: dict[tuple[str, int, str], _Group] = {}
    for r in sorted(
        results, key=lambda r: order.index(r.scenario) if r.scenario in order else len(order)
    ):
        if r.verdict != "diverge":
            continue
        counted = [d for d in r.differences if d.counter != MAL] or r.differences
        in_run: set[tuple[str, int, str]] = set()
        for d in counted:
            delta = _delta(d.measured, d.expected)
            sign = (delta > 0) - (delta < 0)
            key = (d.counter, sign, _cause(r, d.counter, readings))
            if d.counter.startswith(REQUEST_PREFIX):
                # One finding for every figure of the responses' own metrics; its size is the
                # mean's, the figure a user reads.
                key = (REQUEST_GROUP, 1, "")
                figure = d.counter[len(REQUEST_PREFIX) :]
                group = groups.setdefault(key, _Group(*key))
                if figure not in group.figures:
                    group.figures.append(figure)
                delta = delta if figure == "mean_acceptance_length" else 0
            group = groups.setdefault(key, _Group(*key))
            if r.scenario not in group.scenarios:
                group.scenarios.append(r.scenario)
            group.runs += key not in in_run
            in_run.add(key)
            group.implied |= bool(r.measured and r.measured.emitted_source == "implied")
            if abs(delta) > abs(group.largest):
                group.largest, group.largest_in = delta, r.scenario
    drafts_signs = {g.sign for g in groups.values() if g.counter == "num_drafts"}
    # An emitted count that differs because the rows do is the rows' finding, not one of its own.
    findings = [g for g in groups.values() if not (g.cause == "rows" and g.sign in drafts_signs)]
    ranked = sorted(findings, key=lambda g: (-len(g.scenarios), -g.runs, _counter_rank(g.counter)))
    return _effects(ranked)


def _effects(ranked: list[_Group]) -> list[list[_Group]]:
    """The groups as effects: counters that move together (the same direction and cause in the
    same scenarios, e.g. a skipped drafter's zero-fill counted as a row and its k draft tokens)
    are one effect, named together on one line; in the order of their most telling group."""
    effects: dict[tuple[tuple[str, ...], int, str], list[_Group]] = {}
    for group in ranked:
        alone = group.counter if _truncation(group) or group.counter == REQUEST_GROUP else ""
        effects.setdefault((tuple(group.scenarios), group.sign, alone), []).append(group)
    return list(effects.values())


def _cause(result: Result, counter: str, readings: _Readings) -> str:
    """Why an emitted count differs: the branch's rows differ, or the oracle saw stop handling cut a
    step. Why a row count differs: extra rows WITH draft tokens (e.g. a skipped drafter's zero-fill
    counted as drafts) are not a question of the reading, which is about rows without any real
    draft; rows without are the reading's only where the scenario shows it (`_Readings`)."""
    if result.measured is None or result.expected is None:
        return ""
    if counter == "num_drafts":
        if result.measured.num_draft_tokens != result.expected.num_draft_tokens:
            return "tokens"
        return "reading" if readings.explain(result) else ""
    if counter != "num_emitted_tokens":
        return ""
    if result.measured.num_drafts != result.expected.num_drafts:
        return "rows"
    return "truncation" if truncated(result.expected) > 0 else ""


def _delta(measured: Any, expected: Any) -> float:
    if isinstance(measured, list) or isinstance(expected, list):
        m, e = list(measured or []), list(expected or [])
        width = max(len(m), len(e))
        m, e = m + [0] * (width - len(m)), e + [0] * (width - len(e))
        return sum(a - b for a, b in zip(m, e, strict=True))
    if isinstance(measured, (int, float)) and isinstance(expected, (int, float)):
        return measured - expected
    return 1 if measured is not None else -1  # a value where the oracle has none (or the reverse)


def _counter_rank(counter: str) -> int:
    return list(RULES).index(counter) if counter in RULES else len(RULES)


def _value(group: _Group) -> str:
    value = group.largest
    if isinstance(value, float) and not value.is_integer():
        return f"{value:+.4f}"
    return f"{int(value):+d}"


def _amount(group: _Group) -> str:
    """`+3` in one scenario or where the scenarios are listed; `up to +5 (where)` over many."""
    text = _value(group)
    return f"up to {text} ({group.largest_in})" if len(group.scenarios) > 2 else text


PER_POS = "_per_pos"


def _amounts(effect: list[_Group]) -> str:
    """One counter: `num_drafts: up to +2 (drafter-skip)`; several moving together:
    `num_drafts +2, num_draft_tokens +6 (drafter-skip)`, each its largest difference."""
    lead = effect[0]
    if lead.counter == REQUEST_GROUP:
        return _request_figures(lead)
    totals = {g.counter: g.largest for g in effect}
    # A per-position count that adds up to its total's own difference says nothing more.
    shown = [
        g
        for g in effect
        if not (g.counter.endswith(PER_POS) and totals.get(g.counter[: -len(PER_POS)]) == g.largest)
    ]
    if len(shown) == 1:
        return f"{shown[0].counter}: {_amount(shown[0])}"
    values = ", ".join(f"{g.counter} {_value(g)}" for g in shown)
    return f"{values} ({lead.largest_in})" if len(lead.scenarios) > 2 else values


def _request_figures(group: _Group) -> str:
    """`per-request metrics: mean_acceptance_length +2, acceptance_histogram`."""
    named = [
        f"{figure} {_value(group)}"
        if figure == "mean_acceptance_length" and group.largest
        else figure
        for figure in group.figures
        if figure != "missing"
    ]
    if "missing" in group.figures:
        named.append("none returned for a finished request")
    return "per-request metrics: " + ", ".join(named)


def _where(group: _Group) -> str:
    n = len(group.scenarios)
    if n <= 2:
        return "in " + " and ".join(group.scenarios)
    return f"in {n} scenarios"


def _truncation(group: _Group) -> bool:
    return group.counter == "num_emitted_tokens" and group.cause == "truncation"


def _sentence(effect: list[_Group], reading: str, said: dict[str, str], branch: str) -> str:
    """The most severe difference of a diverging branch, with the oracle's reading of it (in full
    the first time; after, which branch's line gives it)."""
    group = effect[0]

    def once(key: str, full: str, short: str) -> str:
        first = said.setdefault(key, branch)
        return full if first == branch else short.format(first=first)

    if _truncation(group):
        verb = "overcounting" if group.sign > 0 else "undercounting"
        text = f"{verb} emitted tokens on truncation: {_amount(group)} {_where(group)}"
        if group.implied and group.sign > 0:
            text += once(
                "implied",
                " (no emitted counter: its mean acceptance length assumes accepted + 1 per row)",
                " (no emitted counter, as for {first})",
            )
        return text
    text = f"on {_amounts(effect)} {_where(group)}"
    if group.cause == "rows":
        return text + ", with its rows"
    if group.counter == "num_drafts" and group.cause == "reading" and reading in READINGS:
        return (
            text
            + "; "
            + once(
                f"reading:{reading}",
                f"{reading} reading: {READINGS[reading]}",
                f"the {reading} reading",
            )
        )
    if group.counter in RULES:
        text += "; " + once(
            f"rule:{group.counter}",
            f"the oracle: {RULES[group.counter]}",
            "the oracle's rule, as for {first}",
        )
    return text


def _short(effect: list[_Group]) -> str:
    group = effect[0]
    if _truncation(group):
        return (
            f"also {'over' if group.sign > 0 else 'under'}counts emitted tokens on truncation "
            f"{_where(group)}"
        )
    return f"also {_amounts(effect).replace(':', '', 1)} {_where(group)}"


def _ranking(everyone: list[Standing]) -> str:
    """Which branch is right, or closest: nothing broken, then fewest unmeasured, then fewest
    diverging runs. Only branches that measured a run are ranked: one that measured nothing is not
    close to anything."""
    standings = [s for s in everyone if s.counts["error"] < s.total]
    if not standings:
        if not everyone:
            return "nothing was measured"
        return (
            "nothing was measured: no run of "
            + " or ".join(s.branch for s in everyone)
            + " could be measured"
        )

    def key(s: Standing) -> tuple[int, int, int]:
        return (s.counts["broken"], s.counts["error"], s.counts["diverge"])

    best = min(key(s) for s in standings)
    leaders = [s for s in standings if key(s) == best]
    names = " and ".join(s.branch for s in leaders)
    broken = [s.branch for s in standings if s.counts["broken"]]
    lead = leaders[0]
    if best == (0, 0, 0):
        text = f"{names} {'passes' if len(leaders) == 1 else 'pass'} every run"
        unverified = [s.branch for s in leaders if s.unverified]
        if unverified:
            text += (
                f"; not verified: {_names(unverified)} (changed code that no run executed, or "
                "whose coverage is unknown)"
            )
    elif best[0]:
        every = "every measured branch" if len(standings) < len(everyone) else "every branch"
        text = f"{every} is broken somewhere; fewest broken runs: {names}"
    else:
        parts = []
        if lead.counts["diverge"]:
            parts.append(f"{lead.counts['diverge']}/{lead.total} runs diverge")
        if lead.counts["error"]:
            parts.append(f"{lead.counts['error']}/{lead.total} could not be measured")
        text = f"closest to the oracle: {names} (nothing broken; {', '.join(parts)})"
    others = [b for b in broken if b not in {s.branch for s in leaders}]
    if others and not best[0]:
        text += f"; broken: {', '.join(others)}"
    return text
