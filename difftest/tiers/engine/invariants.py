"""Invariants of engine runs, per branch and across branches.

Per run (the generic checks of `tiers.common.invariants`): accepted <=
draft tokens, per-position sums, emitted bounds per step, stats silently lost;
plus what only the engine has:
- the three stats views agree: the stat logger saw exactly the scheduler's
  per-step stats, and the Prometheus counters (deltas over the run) equal the
  summed SpecDecodingStats;
- the tokens emitted step by step add up to each request's final output;
- a truncation was applied the way it was asked (EOS: finish `stop` with no
  stop_reason; stop token: stop_reason = the token; max_tokens: `length`; a
  stop string: stop_reason = the string, and the response agrees with itself
  there: its token ids end on the token completing the string, its text at the
  string's end or just before it, as `include_stop_str_in_output` says);
  with `min_tokens` past an EOS / stop token cut, the token is held back: not
  in the first `min_tokens` tokens, and the request does not end before them.
- an abort held: a request aborted after its `abort`-th step was
  not scheduled again.
Across runs of one branch: batch orders agree and a batch is the sum of its
requests alone, compared only where every request generated the same tokens
(a real model may legitimately change a near-tie with the batch shape) and
was scheduled alike (`schedule.shapes`: a prefix hit padded because its twin
computed the prompt in the same step, a preemption, a draft block cut by the
token budget depend on the batch; the oracle judges each such run alone).
Across branches: every run must generate exactly the baseline's tokens, finish
the same way and choose the same truncation point; a metrics fix that changes
what the model emits is broken.
"""

from __future__ import annotations

from typing import Any

from difftest.core.records import ProbeRun, Violation
from difftest.probe.protocol import COUNTER_TABLE, prometheus_fields
from difftest.tiers.common import invariants as base
from difftest.tiers.common.schedule import shapes as request_shapes

ByLabel = base.ByLabel
#: The counters the engine also exports to Prometheus: both readings must agree on each.
PROMETHEUS_COMPARED = tuple(prometheus_fields(COUNTER_TABLE).values())


def check(runs: list[ProbeRun], budget: int | None = None) -> ByLabel:
    """Violations per run label (every measured run gets a key, reference runs included);
    `budget` is the engine's `max_num_batched_tokens` where the folder sets one."""
    found = base.per_run_checks(runs)
    for run in base.measured(runs):
        found[run.label] += (
            _views_agree(run)
            + _outputs_consistent(run)
            + _truncation_applied(run)
            + _abort_applied(run)
        )
    batches, alone = base.batches_and_alone(runs)
    comparable = [r for r in batches if _same_outputs(r, batches, alone)]
    base.across_orders(found, comparable, alone, lambda run: request_shapes(run, budget))
    return found


def across_branches(runs_by_branch: dict[str, list[ProbeRun]], baseline: str) -> dict[str, ByLabel]:
    """Per branch (baseline excluded): runs whose generated tokens or truncation differ from the
    baseline's."""
    base_runs = {r.label: r for r in runs_by_branch.get(baseline, []) if r.status == "ok"}
    out: dict[str, ByLabel] = {}
    for branch, runs in runs_by_branch.items():
        if branch == baseline:
            continue
        found: ByLabel = {}
        for run in runs:
            ref = base_runs.get(run.label)
            if run.status != "ok" or ref is None:
                continue
            found[run.label] = _differs_from(run, ref, baseline)
        out[branch] = found
    return out


def _v(
    invariant: str,
    run: ProbeRun,
    detail: str,
    counter: str | None = None,
    measured: Any = None,
    expected: Any = None,
) -> Violation:
    return Violation(
        invariant=invariant,
        label=run.label,
        detail=detail,
        counter=counter,
        measured=measured,
        expected=expected,
    )


def _views_agree(run: ProbeRun) -> list[Violation]:
    out: list[Violation] = []
    notes, totals = run.notes, run.totals
    assert totals is not None
    if notes.get("stat_logger_matches_scheduler") is False:
        out.append(
            _v(
                "stat-logger-vs-scheduler",
                run,
                "the stat logger's per-step SpecDecodingStats differ from the scheduler's",
            )
        )
    prom = notes.get("prometheus")
    if prom is None:
        out.append(_v("prometheus-missing", run, "no Prometheus counters were read (get_metrics)"))
        return out
    for field in PROMETHEUS_COMPARED:
        got, want = prom.get(field), getattr(totals, field)
        if isinstance(want, list):
            got = list(got or []) + [0] * (len(want) - len(got or []))
        if got != want:
            out.append(
                _v(
                    "prometheus-vs-stat-logger",
                    run,
                    f"Prometheus {field}={got}, summed SpecDecodingStats={want}",
                    field,
                    got,
                    want,
                )
            )
    return out


def _outputs_consistent(run: ProbeRun) -> list[Violation]:
    """The tokens emitted step by step are the response's; only a stop string, matched by the
    output processor after the step, may end the response before the scheduler's last token, and
    only inside the step that emitted the response's last token (no later step emits for it)."""
    stop_strings = run.notes.get("stop_reasons") or {}
    out = []
    for rid, toks in run.outputs.items():
        per_step = [step.emitted[rid] for step in run.steps if rid in step.emitted]
        scheduled = [t for emitted in per_step for t in emitted]
        if scheduled == toks:
            continue
        if isinstance(stop_strings.get(rid), str) and _trimmed_in_last_step(per_step, toks):
            continue
        out.append(
            _v(
                "emitted-vs-output",
                run,
                f"request {rid}: tokens emitted step by step {scheduled} != final output {toks}",
            )
        )
    return out


def _trimmed_in_last_step(per_step: list[list[int]], output: list[int]) -> bool:
    """The output is the tokens of every step but the last, then a non-empty prefix of the
    last's: a stop string matched inside the last step, and nothing emitted after it."""
    earlier = [t for emitted in per_step[:-1] for t in emitted]
    last = per_step[-1] if per_step else []
    kept = output[len(earlier) :]
    return (
        output[: len(earlier)] == earlier
        and 0 < len(kept) < len(last)
        and last[: len(kept)] == kept
    )


def _truncation_applied(run: ProbeRun) -> list[Violation]:
    out = []
    for rid, cut in (run.notes.get("truncation") or {}).items():
        kind, token = cut.get("kind"), cut.get("token")
        finish, reason = cut.get("finish_reason"), cut.get("stop_reason")
        want = {
            "eos": ("stop", None),
            "stop": ("stop", token),
            "max_tokens": ("length", None),
            "boundary": ("length", None),
            "stop_string": ("stop", cut.get("stop_string")),
        }.get(kind)
        ignored = kind == "eos" and bool(cut.get("ignore_eos"))
        if ignored:
            want = ("length", None)
        if kind in ("eos", "stop") and cut.get("min_tokens"):
            out += _held_back(run, rid, cut)
            continue
        if want is not None and (finish, reason) != want:
            out.append(
                _v(
                    "truncation-applied",
                    run,
                    f"request {rid}: cut {kind} at token {token} ended as "
                    f"finish={finish}, stop_reason={reason}; expected {want}",
                )
            )
        output = run.outputs.get(rid, [])
        if kind == "stop_string" and (
            len(output) != int(cut.get("position", -2)) + 1 or output[-1:] != [token]
        ):
            out.append(
                _v(
                    "truncation-applied",
                    run,
                    f"request {rid}: the stop string {cut.get('stop_string')!r} did not end the "
                    f"response on token {token} at position {cut.get('position')} (it holds "
                    f"{len(output)} tokens)",
                )
            )
        position = int(cut.get("position", -1))
        if ignored:
            if not (len(output) > position + 1 and output[position : position + 1] == [token]):
                out.append(
                    _v(
                        "truncation-applied",
                        run,
                        f"request {rid}: its ignored EOS {token} at position {position} ended it "
                        f"(the response holds {len(output)} tokens)",
                    )
                )
        elif kind in ("eos", "stop") and (
            not output or output[-1] != token or token in output[:-1]
        ):
            out.append(
                _v(
                    "truncation-applied",
                    run,
                    f"request {rid}: output does not end at the first {kind} token {token}",
                )
            )
        if kind == "stop_string":
            out += _response_at_stop_string(run, rid, cut)
    return out


def _held_back(run: ProbeRun, rid: str, cut: dict[str, Any]) -> list[Violation]:
    """`min_tokens` past an EOS / stop token placed inside accepted drafts: the token is masked
    (vLLM's min-tokens logits processor, also on the drafts' positions), so the first
    `min_tokens` output tokens never hold it and the request does not end before them; after
    that, the token ends it where it is sampled first."""
    kind, token, held = cut.get("kind"), cut.get("token"), int(cut["min_tokens"])
    output = run.outputs.get(rid, [])
    finish, reason = cut.get("finish_reason"), cut.get("stop_reason")
    problems = []
    if token in output[:held]:
        problems.append(f"emitted its {kind} token {token} at position {output.index(token)}")
    if finish == "stop" and (output[-1:] != [token] or len(output) <= held):
        problems.append(f"stopped after {len(output)} tokens, not on its {kind} token")
    if finish == "stop" and kind == "stop" and reason != token:
        problems.append(f"stop_reason {reason!r}, not {token}")
    if finish != "stop" and len(output) < held:
        problems.append(f"ended ({finish}) after {len(output)} tokens")
    return [
        _v(
            "min-tokens-held",
            run,
            f"request {rid}: min_tokens {held} holds back its {kind} token {token} (drafted at "
            f"output position {cut.get('position')}), yet it {problem}",
        )
        for problem in problems
    ]


def _response_at_stop_string(run: ProbeRun, rid: str, cut: dict[str, Any]) -> list[Violation]:
    """The response's text is the reference run's (the same detokenizer, the same tokens) cut
    where the stop string first ends, or just before it, as `include_stop_str_in_output` says."""
    stop, text, reference = str(cut.get("stop_string")), cut.get("text"), cut.get("reference_text")
    if not isinstance(text, str) or not isinstance(reference, str):
        return [_v("response-at-stop", run, f"request {rid}: the probe recorded no response text")]
    found = reference.find(stop)
    include = bool(cut.get("include_stop_str_in_output"))
    want = reference[: found + len(stop)] if include else reference[:found]
    if found < 0 or text != want:
        return [
            _v(
                "response-at-stop",
                run,
                f"request {rid}: its text ends {text[-40:]!r}, but cut at the stop string "
                f"{stop!r} it would end {want[-40:]!r} (include_stop_str_in_output={include})",
            )
        ]
    return []


def _abort_applied(run: ProbeRun) -> list[Violation]:
    """Each abort held: the request was not scheduled again after it (an abort that never landed
    is the scenario's to fix: the probe fails that run, which reads "could not measure")."""
    out = []
    for rid, abort in (run.notes.get("abort") or {}).items():
        after = abort.get("after_step")
        if after is not None and any(rid in s.scheduled for s in run.steps if s.step > after):
            out.append(_v("abort-applied", run, f"request {rid} was scheduled after its abort"))
    return out


def _same_outputs(run: ProbeRun, batches: list[ProbeRun], alone: dict[str, ProbeRun]) -> bool:
    """Every request generated the same tokens in this run as in every other order and alone."""
    for rid, toks in run.outputs.items():
        if rid in alone and alone[rid].outputs.get(rid) != toks:
            return False
        if any(other.outputs.get(rid) != toks for other in batches):
            return False
    return True


def _differs_from(run: ProbeRun, ref: ProbeRun, baseline: str) -> list[Violation]:
    out = []
    for rid in sorted(set(run.outputs) | set(ref.outputs)):
        if run.outputs.get(rid) != ref.outputs.get(rid):
            out.append(
                _v(
                    "generated-tokens-differ",
                    run,
                    f"request {rid}: generated tokens differ from {baseline}'s",
                    "outputs",
                    run.outputs.get(rid),
                    ref.outputs.get(rid),
                )
            )
    if run.finish_reasons != ref.finish_reasons:
        out.append(
            _v(
                "finish-differs",
                run,
                f"finish reasons differ from {baseline}'s",
                "finish_reasons",
                run.finish_reasons,
                ref.finish_reasons,
            )
        )
    for key in ("truncation_choice", "truncation"):
        mine, theirs = _cut_tokens(run.notes.get(key)), _cut_tokens(ref.notes.get(key))
        if mine != theirs:
            out.append(
                _v("truncation-differs", run, f"{key} differs from {baseline}'s", key, mine, theirs)
            )
    return out


def _cut_tokens(value: Any) -> Any:
    """The part of a truncation note that must match across branches (not how the request ended)."""
    if not value:
        return None
    if "token" in value:
        return {
            k: value.get(k)
            for k in ("kind", "token", "position", "max_tokens", "stop_string", "span")
        }
    return {rid: _cut_tokens(v) for rid, v in value.items()}
