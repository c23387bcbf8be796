"""`difftest blame` through the CLI, on real vLLM (slow): which hunks of a branch's change make its
finding, each set of hunks applied alone on main, built, probed and judged as `run` judges.

The branches: the shipped pr-56195-style (its broken mixed batch); and branches written here as
patches on the fixture repository's scheduler - one harmful hunk among harmless ones (a comment,
a refactor, a rename), a finding that needs two hunks together, and a patch series whose second
patch does not apply without a hunk of the first, with a hunk that imports a module another hunk
adds. Every test reads what the command wrote: the evidence's `blame`, blame.md, blame.yaml.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from difftest.build.refs import read_blob
from difftest.core.blame import BlameEvidence
from difftest.core.evidence import read_evidence
from tests.e2e.cli_helpers import (
    INIT_MARKER,
    SCHEDULER,
    by_branch,
    capture_stderr,
    interrupted_when,
    run_cli,
)
from tests.factories import BASE_TAG, ROOT, shipped_branch, write_config
from tests.patching import make_patch

pytestmark = pytest.mark.slow
#: The tests that read the one blame of pr-56195-style run in one worker: it is measured once.
shipped = pytest.mark.xdist_group("blame-pr-56195")

#: The scenario whose finding is blamed: pr-56195-style loses the stats of the requests batched
#: with an all-invalid grammar request (4 of its 9 runs broken).
MIXED = "mixed-batch-invalid-async"
#: main's guard, then the grammar adjustment (`make_spec_decoding_stats`).
GUARD = (
    "        if not self.log_stats or not num_draft_tokens:\n"
    "            return None\n"
    "        if spec_decoding_stats is None:\n"
    "            spec_decoding_stats = SpecDecodingStats.new(self.num_spec_tokens)\n"
    "        if num_invalid_spec_tokens:\n"
    "            num_draft_tokens -= num_invalid_spec_tokens.get(request_id, 0)\n"
)
#: #56195's hazard in one hunk: the adjustment moved ahead of the guard.
ADJUSTED_FIRST = (
    "        if num_invalid_spec_tokens:\n"
    "            num_draft_tokens -= num_invalid_spec_tokens.get(request_id, 0)\n"
    "        if not self.log_stats or not num_draft_tokens:\n"
    "            return None\n"
    "        if spec_decoding_stats is None:\n"
    "            spec_decoding_stats = SpecDecodingStats.new(self.num_spec_tokens)\n"
)
COUNTS = "        return len(self.running), len(self.waiting) + len(self.kv_holding_waiting)\n"
#: Behaviour-preserving edits, each far enough from the others to be a hunk of its own.
COMMENT = (INIT_MARKER, INIT_MARKER + "        # A comment only: nothing the scheduler does.\n")
REFACTOR = (
    COUNTS,
    "        num_waiting = len(self.waiting) + len(self.kv_holding_waiting)\n"
    "        return len(self.running), num_waiting\n",
)
RENAME = [
    (
        "        spec_stats = spec_decoding_stats\n",
        "        step_spec_stats = spec_decoding_stats\n",
    ),
    (
        "            spec_decoding_stats=spec_stats,\n",
        "            spec_decoding_stats=step_spec_stats,\n",
    ),
]
HELPER = "vllm/v1/core/sched/blame_helper.py"
SPEC_IMPORT = "from vllm.v1.spec_decode.metrics import SpecDecodingStats\n"


def edited(text: str, *edits: tuple[str, str]) -> str:
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


@pytest.fixture(scope="session")
def scheduler_source(fixture_repo) -> str:
    return read_blob(fixture_repo, BASE_TAG, SCHEDULER).decode()


def blame(tmp: Path, branches: list[dict[str, Any]], branch: str, *extra: str) -> Path:
    """`difftest blame BRANCH -k MIXED` on a config of main and `branches`; the out folder."""
    config = write_config(tmp, [shipped_branch("main"), *branches])
    out = tmp / "out"
    with capture_stderr() as log:
        code = run_cli(
            "blame", "-c", config, branch, "-k", MIXED, "--tier", "scheduler", "--out", out, *extra
        )
    assert code == 0, log.getvalue()[-3000:]
    (out / "stderr.txt").write_text(log.getvalue())
    return out


def searched(out: Path) -> BlameEvidence:
    evidence = read_evidence(out / "evidence.json")
    assert evidence.blame is not None
    return evidence.blame


def culprit_text(search: BlameEvidence) -> str:
    (finding,) = search.findings
    return "".join(search.hunk(n).text for n in finding.minimal)


# -- the shipped pr-56195-style -------------------------------------------------------------


@pytest.fixture(scope="session")
def pr_56195(tmp_path_factory, fixture_repo) -> Path:
    return blame(
        tmp_path_factory.mktemp("pr-56195"), [shipped_branch("pr-56195-style")], "pr-56195-style"
    )


@shipped
def test_the_broken_mixed_batch_is_blamed_on_the_guard_testing_the_adjusted_count(
    pr_56195: Path,
) -> None:
    search = searched(pr_56195)
    (finding,) = search.findings
    assert (finding.scenario, finding.verdict) == (MIXED, "broken")
    assert all(any("stats-lost" in w for w in what) for what in finding.runs.values())
    culprits = [search.hunk(n) for n in finding.minimal]
    text = culprit_text(search)
    # The caller computes the adjusted count and hands it over; the guard then tests it.
    assert "adj_draft_tokens -= (" in text and "spec_row = (adj_draft_tokens" in text
    assert "num_draft_tokens is already net of grammar-invalid drafts" in text
    assert "-        if num_invalid_spec_tokens:" in text  # the adjustment after the guard goes
    # The test-only and the logging hunks are left out.
    assert all(h.file.startswith("vllm/") for h in culprits)
    left_out = [h for h in search.hunks if h.number not in finding.minimal]
    assert {h.file for h in left_out if not h.carried} == {"tests/v1/core/test_scheduler.py"}
    logging = ("SpecDecodingLogging", "mean_acceptance_length")
    assert not any(word in h.text for h in culprits for word in logging)
    assert any("mean_acceptance_length" in h.text for h in left_out)


@shipped
def test_each_blamed_hunk_is_needed(pr_56195: Path) -> None:
    search = searched(pr_56195)
    (finding,) = search.findings
    assert set(finding.needed) == set(finding.minimal)
    for hunk, proof in finding.needed.items():
        tried = search.tried(proof)
        assert hunk not in tried.hunks and set(tried.hunks) == set(finding.minimal) - {hunk}
        assert tried.outcomes[MIXED] in ("gone", "does-not-import"), tried
    culprit = search.tried(finding.culprit)
    assert culprit.outcomes[MIXED] == "reproduces" and culprit.hunks == finding.minimal


@shipped
def test_the_hunks_the_branch_needs_to_run_are_bound_and_one_hunk_makes_the_finding(
    pr_56195: Path,
) -> None:
    """#29 case 3: of the six needed hunks, five only keep the branch running (signature changes:
    without any one the scheduler crashes); one, without which the rest runs and the finding goes,
    makes it."""
    search = searched(pr_56195)
    (finding,) = search.findings
    makers = [n for n in finding.minimal if n not in finding.bound]
    assert len(makers) == 1 and len(finding.bound) == len(finding.minimal) - 1 >= 1, finding
    (maker,) = makers
    assert "completes-as-on-baseline" not in search.tried(finding.needed[maker]).details[MIXED]
    for bound in finding.bound:
        detail = search.tried(finding.needed[bound]).details[MIXED]
        assert "completes-as-on-baseline: crashed in vLLM" in detail, (bound, detail)
    markdown = (pr_56195 / "blame.md").read_text()
    assert f"#{maker} makes it, " in markdown and "are bound to it:" in markdown
    assert "Bound (without any one of them the rest does not run)" in markdown


@shipped
def test_the_search_takes_a_few_dozen_sets_each_measured_once(pr_56195: Path) -> None:
    search = searched(pr_56195)
    assert len(search.tries) <= 36 and search.probes <= len(search.tries)
    searching = [t for t in search.tries if t.phase != "again"]
    assert len({t.digest for t in searching}) == len(searching)
    # Probed again before the set is reported: the whole change and the minimal set, 3 times each.
    (finding,) = search.findings
    again = [search.tried(n) for n in finding.again]
    whole, culprit = search.tries[0], search.tried(finding.culprit)
    assert sorted(t.digest for t in again) == sorted([whole.digest, culprit.digest] * 3)
    assert all(t.probed and t.outcomes[MIXED] == "reproduces" for t in again)


@shipped
def test_the_report_names_the_hunks_and_where_the_stats_first_part(pr_56195: Path) -> None:
    markdown = (pr_56195 / "blame.md").read_text()
    assert len(markdown) < 65_536
    assert "### mixed-batch-invalid-async (scheduler)" in markdown
    assert "| vllm/v1/core/sched/scheduler.py |" in markdown
    assert "outside vllm/" in markdown and "```diff" in markdown
    assert "- with only these hunks: step 1:" in markdown
    assert "- main (none of the change): step 1:" in markdown
    reproduce = f"difftest run -c {pr_56195 / 'blame.yaml'} --tier scheduler -k {MIXED}"
    assert reproduce in markdown


@shipped
def test_the_printed_command_measures_the_culprit_hunks_again(pr_56195: Path) -> None:
    search = searched(pr_56195)
    (finding,) = search.findings
    culprit = search.tried(finding.culprit).branch
    assert culprit is not None
    again = pr_56195.parent / "again"
    argv = ["-c", pr_56195 / "blame.yaml", "--tier", "scheduler", "-k", MIXED, "--out", again]
    with capture_stderr():
        code = run_cli("run", *argv, "main", culprit)
    assert code == 1
    broken = {r["label"] for r in by_branch(again, culprit) if r["verdict"] == "broken"}
    assert broken == set(finding.runs)
    assert {r["verdict"] for r in by_branch(again, "main")} <= {"pass", "diverge"}


# -- branches written for the test -----------------------------------------------------------


def test_one_harmful_hunk_among_harmless_ones_is_blamed_alone(
    tmp_path: Path, scheduler_source: str
) -> None:
    new = edited(scheduler_source, COMMENT, REFACTOR, *RENAME, (GUARD, ADJUSTED_FIRST))
    patch = make_patch(tmp_path / "harmful.patch", SCHEDULER, scheduler_source, new)
    out = blame(tmp_path, [{"name": "harmful", "ref": "main", "patches": [str(patch)]}], "harmful")
    search = searched(out)
    (finding,) = search.findings
    assert len(search.hunks) == 5
    (culprit,) = finding.minimal
    assert "+        if num_invalid_spec_tokens:" in search.hunk(culprit).text
    assert finding.needed == {culprit: 0}  # without it nothing is left: main shows no finding


def test_a_finding_that_needs_two_hunks_is_blamed_on_both(
    tmp_path: Path, scheduler_source: str
) -> None:
    """A switch set in __init__ and read in make_spec_decoding_stats: either alone changes
    nothing."""
    switch = (INIT_MARKER, INIT_MARKER + "        self.guard_on_adjusted_count = True\n")
    reads = (
        GUARD,
        "        adjusted = num_draft_tokens\n"
        '        if getattr(self, "guard_on_adjusted_count", False) and num_invalid_spec_tokens:\n'
        "            adjusted -= num_invalid_spec_tokens.get(request_id, 0)\n"
        "        if not self.log_stats or not adjusted:\n"
        "            return None\n"
        "        if spec_decoding_stats is None:\n"
        "            spec_decoding_stats = SpecDecodingStats.new(self.num_spec_tokens)\n"
        "        if num_invalid_spec_tokens:\n"
        "            num_draft_tokens -= num_invalid_spec_tokens.get(request_id, 0)\n",
    )
    new = edited(scheduler_source, switch, REFACTOR, reads)
    patch = make_patch(tmp_path / "two.patch", SCHEDULER, scheduler_source, new)
    out = blame(tmp_path, [{"name": "two", "ref": "main", "patches": [str(patch)]}], "two")
    search = searched(out)
    (finding,) = search.findings
    assert len(search.hunks) == 3
    first, second = finding.minimal
    assert "guard_on_adjusted_count = True" in search.hunk(first).text
    assert "not adjusted" in search.hunk(second).text
    for hunk in (first, second):  # each alone was measured, and the finding went
        assert search.tried(finding.needed[hunk]).outcomes[MIXED] == "gone"


def test_a_crash_is_blamed_on_the_hunks_making_that_crash_not_on_a_probe_dying(
    tmp_path: Path, scheduler_source: str
) -> None:
    """The stats call raises IndexError where a module flag is set and ends the probe silently
    where it is not; a comment above moves the raise's line. Alone, the raising hunk kills the
    probe: another finding, so the flag is needed; the comment is not (line numbers aside)."""
    flag = (SPEC_IMPORT, SPEC_IMPORT + "_STATS_PATH_CHECKED = True\n")
    raises = (
        GUARD,
        '        if not globals().get("_STATS_PATH_CHECKED"):\n'
        '            __import__("os")._exit(0)\n'
        '        raise IndexError("draft position out of range")\n' + GUARD,
    )
    new = edited(scheduler_source, COMMENT, flag, raises)
    patch = make_patch(tmp_path / "crash.patch", SCHEDULER, scheduler_source, new)
    out = blame(tmp_path, [{"name": "crash", "ref": "main", "patches": [str(patch)]}], "crash")
    search = searched(out)
    (finding,) = search.findings
    assert finding.verdict == "broken"
    assert all(
        any(
            "IndexError: draft position out of range" in why and ":" not in why.split(" at ")[-1]
            for why in whys
        )
        for whys in finding.runs.values()
    ), finding.runs
    texts = {n: search.hunk(n).text for n in finding.minimal}
    assert len(texts) == 2 and not any("A comment only" in text for text in texts.values())
    (flag_hunk,) = [n for n, text in texts.items() if "_STATS_PATH_CHECKED = True" in text]
    without_flag = search.tried(finding.needed[flag_hunk])
    assert without_flag.outcomes[MIXED] == "gone"
    assert "without its trailer" in without_flag.details[MIXED]


def test_a_hunk_that_does_not_apply_alone_and_a_set_that_cannot_import_read_as_such(
    tmp_path: Path, scheduler_source: str
) -> None:
    """Patch 1 adds a helper module, imports it, and a placeholder line; patch 2 rewrites that line
    to call the helper before the guard (so it does not apply without it); a comment rides along.
    Without the module, the scheduler does not import; the search goes on past both."""
    helper = (
        "def adjusted_draft_count(num_draft_tokens, num_invalid_spec_tokens, request_id):\n"
        "    if num_invalid_spec_tokens:\n"
        "        return num_draft_tokens - num_invalid_spec_tokens.get(request_id, 0)\n"
        "    return num_draft_tokens\n"
    )
    placeholder = "        counted = num_draft_tokens  # rewritten by the next patch\n"
    first = edited(
        scheduler_source,
        COMMENT,
        (
            SPEC_IMPORT,
            SPEC_IMPORT + "from vllm.v1.core.sched.blame_helper import adjusted_draft_count\n",
        ),
        (GUARD, placeholder + GUARD),
    )
    second = edited(
        first,
        (
            placeholder + "        if not self.log_stats or not num_draft_tokens:\n",
            "        counted = adjusted_draft_count(num_draft_tokens, num_invalid_spec_tokens, "
            "request_id)\n"
            "        if not self.log_stats or not counted:\n",
        ),
    )
    one = make_patch(tmp_path / "1-helper.patch", SCHEDULER, scheduler_source, first)
    with one.open("a") as handle:
        handle.write(make_patch(tmp_path / "new.patch", HELPER, "", helper).read_text())
    two = make_patch(tmp_path / "2-call.patch", SCHEDULER, first, second)
    branch = {"name": "series", "ref": "main", "patches": [str(one), str(two)]}
    out = blame(tmp_path, [branch], "series")
    search = searched(out)
    (finding,) = search.findings
    assert len(search.steps) == 2 and finding.steps == [1, 2]
    outcomes = {t.outcomes[MIXED] for t in search.tries}
    assert {"does-not-apply", "does-not-import", "reproduces"} <= outcomes
    by_text = {n: search.hunk(n).text for n in finding.minimal}
    assert len(finding.minimal) == 4 and not any("A comment only" in t for t in by_text.values())
    reasons = {search.tried(finding.needed[n]).outcomes[MIXED] for n in finding.minimal}
    assert {"does-not-apply", "does-not-import"} <= reasons
    text = (out / "stderr.txt").read_text()
    assert "does-not-apply" in text and "does-not-import" in text


# -- mistakes: exit 2, the problem and the fix, nothing written --------------------------------


def blame_error(tmp_path: Path, capsys, *args: Any) -> str:
    out = tmp_path / "out"
    assert run_cli("blame", "-c", ROOT / "branches.yaml", "--out", out, *args) == 2
    assert not (out / "evidence.json").exists() and not (out / "blame.md").exists()
    err = " ".join(capsys.readouterr().err.split())
    assert "fix:" in err
    return err


def test_blaming_the_base_itself_an_unknown_branch_or_a_branch_without_change_exits_2(
    tmp_path: Path, fixture_repo, capsys
) -> None:
    assert "name the same branch" in blame_error(tmp_path, capsys, "main", "-k", MIXED)
    err = blame_error(tmp_path, capsys, "pr-99999-style", "-k", MIXED)
    assert "'pr-99999-style' is neither a branch of the config (main, pr-56137-style" in err
    err = blame_error(tmp_path, capsys, BASE_TAG, "-k", MIXED, "--tier", "scheduler")
    assert "does not differ from main" in err and "no change to blame" in err


def test_a_finding_file_that_is_not_one_exits_2(tmp_path: Path, capsys) -> None:
    err = blame_error(tmp_path, capsys, "pr-56195-style", "--finding", tmp_path / "nope.yaml")
    assert "is not a file" in err
    elsewhere = tmp_path / "notes" / "finding.yaml"
    elsewhere.parent.mkdir()
    elsewhere.write_text("k: 1\n")
    assert "names no probe tier" in blame_error(
        tmp_path, capsys, "pr-56195-style", "--finding", elsewhere
    )
    evidence = tmp_path / "scheduler" / "evidence.yaml"
    evidence.parent.mkdir()
    evidence.write_text('{"schema_version": "10", "results": []}\n')
    err = blame_error(tmp_path, capsys, "pr-56195-style", "--finding", evidence)
    assert "is not a scenario file" in err
    err = blame_error(tmp_path, capsys, "pr-56195-style", "--finding", evidence, "-k", MIXED)
    assert "-k and --finding both choose what to blame" in err


def test_the_tests_tier_cannot_be_blamed(tmp_path: Path, capsys) -> None:
    err = blame_error(tmp_path, capsys, "pr-56195-style", "--tier", "tests")
    assert "judged from test outcomes" in err


def test_a_branch_without_a_finding_of_its_own_exits_2_naming_where_to_look(
    tmp_path: Path, fixture_repo, capsys
) -> None:
    """pr-56137-style diverges on the mixed batch only as main does: nothing of its own."""
    err = blame_error(tmp_path, capsys, "pr-56137-style", "-k", MIXED, "--tier", "scheduler")
    assert f"pr-56137-style shows nothing on {MIXED} that main does not" in err
    assert "difftest run main pr-56137-style" in err


def test_ctrl_c_mid_search_stops_every_probe_and_leaves_no_report_nor_ref(
    tmp_path: Path, fixture_repo
) -> None:
    """Interrupted between two sets: exit 130 at once, no report, and neither the sets' patch
    folder nor their refs left behind (the fixture repository is the one every test shares)."""
    # A name of its own: other tests blame pr-56195-style in the same repository meanwhile.
    branch = {**shipped_branch("pr-56195-style"), "name": "interrupted"}
    config = write_config(tmp_path, [shipped_branch("main"), branch])
    out = tmp_path / "out"
    argv = ["blame", "-c", str(config), "interrupted", "-k", MIXED, "--tier", "scheduler"]
    code, rest = interrupted_when([*argv, "--out", str(out)], "blame: try 2 ")
    assert code == 130, rest
    assert re.search(r"interrupted; \d running probe\(s\) stopped, no report written", rest), rest
    assert not (out / "evidence.json").exists() and not (out / "blame.md").exists()
    assert not (out / ".blame-subsets").exists()
    refs = fixture_repo.git.for_each_ref("--format=%(refname)", "refs/heads/difftest/")
    assert "interrupted-blame-" not in refs
