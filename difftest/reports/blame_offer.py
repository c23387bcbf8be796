"""Which branches a report offers `difftest blame` for, and the command that blames each.

A branch is offered where it shows what its baseline does not (`core.blame.finding_of`: broken,
or diverging other than the baseline does) - the findings blame can attribute to the branch's
own hunks; where the baseline's results are not in the evidence (it was measured only as the
reference), a broken scenario only, as the gate holds a broken run against any branch. The
command names the scenario (its tier too: `-k` matches parts of names) and the config, reading
and base the report's command used, so it blames the very finding the report shows. Blame measures
probe tiers only, so a test outcome is never offered; nor is a command with a word a shell or a
Markdown reader would take for something else (a name from an edited evidence file, a path with
spaces).
"""

from __future__ import annotations

import re

from difftest import tiers
from difftest.core.blame import finding_of
from difftest.core.evidence import Evidence
from difftest.core.records import Result
from difftest.reports.views import branch_names, scenario_names

#: Options of the report's command that the blame command repeats (they choose what was measured).
_REPEATED = ("-c", "--config", "--reading")
#: A word of an offered command: nothing a shell quotes, nothing Markdown or HTML reads.
_PLAIN = re.compile(r"^[A-Za-z0-9._/:=+,@%-]+$")


def blame_offers(evidence: Evidence) -> list[str]:
    """One `difftest blame` command per branch with a finding of its own (none for blame's own
    evidence, nor for the baseline)."""
    if evidence.blame is not None:
        return []
    baseline = evidence.baseline
    known = any(r.branch == baseline for r in evidence.results)
    order = scenario_names(evidence)
    offers = []
    for branch in branch_names(evidence):
        if branch == baseline:
            continue
        chosen = _scenario(evidence.results, branch, baseline if known else None, order)
        words = _command(evidence, branch, *chosen) if chosen is not None else []
        if words and all(_PLAIN.match(word) for word in words):
            offers.append(" ".join(words))
    return offers


def _scenario(
    results: list[Result], branch: str, baseline: str | None, order: list[str]
) -> tuple[str, str] | None:
    """(scenario, tier) of the branch's most telling finding: most broken runs, else the first."""
    found = []
    probed = {t.name for t in tiers.probe_tiers()}
    for name in order:
        mine = [
            r for r in results if r.branch == branch and r.scenario == name and r.tier in probed
        ]
        theirs = [r for r in results if r.branch == baseline and r.scenario == name]
        if not mine:
            continue
        if baseline is None:
            if any(r.verdict == "broken" for r in mine):
                found.append((sum(r.verdict == "broken" for r in mine), name, mine[0].tier))
            continue
        finding = finding_of(mine, theirs)
        if finding is not None:
            found.append((len(finding[1]) if finding[0] == "broken" else 0, name, mine[0].tier))
    if not found:
        return None
    _count, name, tier = max(found, key=lambda f: f[0])  # the first of the most broken
    return name, tier


def _command(evidence: Evidence, branch: str, scenario: str, tier: str) -> list[str]:
    words = ["difftest", "blame", branch, "-k", scenario, "--tier", tier]
    command = evidence.command
    for index, word in enumerate(command):
        option, equals, value = word.partition("=")
        if option in _REPEATED:
            if equals:
                words += [option, value]
            elif index + 1 < len(command):
                words += [option, command[index + 1]]
    if "gate" in command[1:2] and evidence.baseline:
        words += ["--against", evidence.baseline]
    return words
