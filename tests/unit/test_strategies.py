"""The scheduler tier's fuzz strategies (`tiers/scheduler/strategies.py`): valid by construction,
and covering the whole scenario space the tier supports.

Validity is checked with the loader itself (`parse_scenario`: schema, then the
script played once), and through a written file, as `difftest run` reads what
`fuzz` writes. Coverage is checked on what the oracle's player says happened
(`play.play_request`): a stop really inside accepted drafts, really on the
bonus, drafts really all grammar-invalid - not on what the strategy meant to do.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, seed, settings

from difftest.tiers.common.scenario import scenario_file_text
from difftest.tiers.scheduler import strategies
from difftest.tiers.scheduler.play import play_request
from difftest.tiers.scheduler.scenario import Scenario, load_scenario, parse_scenario


def fast(examples: int) -> settings:
    """Generation only (no shrinking: these tests expect no failure), no example database."""
    return settings(
        max_examples=examples,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.generate],
    )


def features(scenario: Scenario) -> set[str]:
    """What a scenario exercises, read from the script as the oracle plays it."""
    found = {f"k={scenario.k}", scenario.draft_path, f"requests={len(scenario.requests)}"}
    found.add(
        "orders="
        + (scenario.batch_orders if isinstance(scenario.batch_orders, str) else "explicit")
    )
    data = scenario.probe_data()
    for spec in scenario.requests:
        found.add(
            "grammar"
            if spec.grammar
            else "random-target"
            if not isinstance(spec.target, str)
            else "scripted-target"
        )
        found.add(f"drafter={spec.drafter.kind}")
        if spec.eos != "<eos>":
            found.add("other-eos")
        if spec.stop:
            found.add("stop-token")
        played = play_request(data, spec.id)
        for i, v in enumerate(played.verifications):
            last = i == len(played.verifications) - 1
            if v.real_drafts and v.emitted < v.accepted + 1:
                found.add(f"cut-inside-accepted-drafts-by-{played.finish}")
            if (
                last
                and v.real_drafts
                and v.accepted
                and v.emitted == v.accepted + 1
                and played.finish == "stop"
            ):
                found.add("stop-on-bonus")
            if v.scheduled_drafts and not v.real_drafts and spec.grammar:
                found.add("fully-grammar-invalid")
            if 0 < v.real_drafts < v.scheduled_drafts and spec.grammar:
                found.add("partially-grammar-invalid")
    return found


def test_every_generated_scenario_is_accepted_by_the_loader_and_survives_its_file(
    tmp_path: Path,
) -> None:
    seen: Counter[str] = Counter()

    @seed(0)
    @fast(400)
    @given(strategies.scenarios())
    def check(raw: dict) -> None:
        scenario = parse_scenario({**raw, "name": "generated"}, "<generated>")
        path = tmp_path / "generated.yaml"
        path.write_text(scenario_file_text(raw, ["a comment", "another"]))
        assert load_scenario(path).probe_data() == scenario.probe_data()
        seen.update(features(scenario))

    check()
    wanted = (
        {f"k={k}" for k in range(1, 8)}
        | {"sync", "async"}
        | {f"requests={n}" for n in range(1, 7)}
        | {"orders=listed", "orders=all", "orders=explicit"}
        | {
            "grammar",
            "random-target",
            "scripted-target",
            "drafter=scripted",
            "drafter=random",
            "other-eos",
            "stop-token",
        }
        | {
            "cut-inside-accepted-drafts-by-stop",
            "cut-inside-accepted-drafts-by-length",
            "stop-on-bonus",
        }
        | {"fully-grammar-invalid", "partially-grammar-invalid"}
    )
    assert wanted <= set(seen), f"never generated: {sorted(wanted - set(seen))}"


def test_all_orders_only_for_small_batches() -> None:
    @seed(1)
    @fast(200)
    @given(strategies.scenarios())
    def check(raw: dict) -> None:
        if raw["orders"] == "all":
            assert len(raw["requests"]) <= strategies.ALL_ORDERS_UP_TO

    check()


def test_the_file_text_starts_with_its_comments_and_reads_back() -> None:
    raw = {
        "statement": "s",
        "k": 1,
        "requests": [
            {
                "id": "r0",
                "prompt": "no",
                "max_tokens": 2,
                "target": "yes",
                "drafter": {"kind": "scripted", "steps": [""], "then": "none"},
            }
        ],
    }
    text = scenario_file_text(raw, ["first line\nsecond line", ""])
    assert text.startswith("# first line\n# second line\n#\nstatement: s\n")
    import yaml

    assert yaml.safe_load(text) == raw, "YAML-special strings ('no', 'yes', '') stay strings"
