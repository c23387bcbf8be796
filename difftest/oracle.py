"""What correct statistics are, computed from the scenario alone (no vLLM).

The scripted model's semantics (target, drafter, verifier, choice grammar) come
from `difftest.probe.script`, shared with the probe. Everything that decides
the numbers is here and written independently of vLLM's scheduler:
- which drafts are real: the grammar-valid prefix (sync: trimmed before
  scheduling; async: the invalid rest is -1 padding and is not real);
- rows: one per (request, step) with at least one real draft verified; under the
  lenient reading, a step whose scheduled drafts were ALL invalidated is also a
  row, with 0 draft tokens (what main and #56137 do today);
- accepted and per-position counts: verifier semantics (accepted prefix, capped
  at the real draft count);
- emitted: tokens appended after stop handling (EOS, stop token ids,
  max_tokens), stop token included, counted on rows only;
- mean acceptance length = emitted / rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from difftest.probe import script
from difftest.results import Totals

if TYPE_CHECKING:
    from difftest.scenarios import RequestSpec, Scenario

Reading = Literal["strict", "lenient"]
MAX_STEPS = 100_000


class ScriptViolation(ValueError):
    """The script contradicts itself (e.g. its target stream breaks its grammar)."""


@dataclass
class Row:
    """One verification of one request, as the oracle sees it."""

    decode_index: int
    position: int
    real_drafts: int
    scheduled_drafts: int
    accepted: int
    emitted: int
    sampled: list[int] = field(default_factory=list)


@dataclass
class RequestPlay:
    """A request played to its end: every verification step and the final output."""

    rid: str
    steps: list[Row]
    output: list[int]
    finish: str


def _stop_after(token: int, n_out: int, req: "RequestSpec", eos: int, stops: set[int]) -> str | None:
    """Why the request stops after appending `token` as its `n_out`-th output token, if it does."""
    if token == eos:
        return "stop"
    if token in stops:
        return "stop"
    if n_out >= req.max_tokens:
        return "length"
    return None


def _append(output: list[int], sampled: list[int], req: "RequestSpec", eos: int, stops: set[int]) -> tuple[int, str | None]:
    """Append tokens one by one until a stop; returns (tokens appended, finish reason or None)."""
    for n, tok in enumerate(sampled, 1):
        output.append(tok)
        reason = _stop_after(tok, len(output), req, eos, stops)
        if reason:
            return n, reason
    return len(sampled), None


def simulate_request(scenario: "Scenario", rid: str) -> RequestPlay:
    """Play one request alone; its contribution is the same in any batch (memoised: long scripts hash a lot)."""
    key = (scenario.model_dump_json(), rid)
    if key not in _PLAYED:
        if len(_PLAYED) > 512:
            _PLAYED.clear()
        _PLAYED[key] = _simulate(scenario, rid)
    return _PLAYED[key]


_PLAYED: dict[tuple[str, str], RequestPlay] = {}


def _simulate(scenario: "Scenario", rid: str) -> RequestPlay:
    req = scenario.request(rid)
    data = req.model_dump(mode="json")
    k = scenario.k
    target = script.target_stream(data, scenario.seed)
    eos = script.token(req.eos)
    stops = {script.token(s) for s in req.stop}
    grammar = script.grammar_for(data, eos, sorted(stops))

    output: list[int] = []
    rows: list[Row] = []
    _, finish = _append(output, script.verify(target, 0, []), req, eos, stops)  # prefill samples one token
    decode_index = 0
    while finish is None:
        if decode_index > MAX_STEPS:
            raise ScriptViolation(f"no stop after {MAX_STEPS} steps")
        position = len(output)
        proposed = script.propose(data, scenario.seed, k, target, position, decode_index)[:k]
        valid = grammar.valid_prefix(output, proposed) if grammar else proposed
        if scenario.draft_path == "async":
            scheduled = k  # placeholders are scheduled before the drafts are known
            drafts = valid + [script.PAD_DRAFT] * (k - len(valid))
        else:
            scheduled = len(valid)
            drafts = valid
        sampled = script.verify(target, position, drafts)
        accepted = len(sampled) - 1
        appended, finish = _append(output, sampled, req, eos, stops)
        rows.append(Row(decode_index, position, len(valid), scheduled, accepted, appended, sampled))
        decode_index += 1
    if grammar is not None and not grammar.accepts(output):
        raise ScriptViolation(f"output {script.text(output)!r} breaks the grammar {req.grammar.choice}")
    return RequestPlay(rid, rows, output, finish)


def is_row(row: Row, reading: Reading) -> bool:
    """Strict: at least one real draft. Lenient: also a step whose scheduled drafts were all invalidated."""
    if row.real_drafts > 0:
        return True
    return reading == "lenient" and row.scheduled_drafts > 0


def expected_totals(scenario: "Scenario", order: list[str], reading: Reading = "strict") -> Totals:
    """The totals a correct branch reports for a run of these requests (any order gives the same)."""
    k = scenario.k
    drafts = draft_tokens = accepted = emitted = 0
    acc_pos = [0] * k
    draft_pos = [0] * k
    for rid in order:
        for row in simulate_request(scenario, rid).steps:
            if not is_row(row, reading):
                continue
            drafts += 1
            draft_tokens += row.real_drafts
            acc = min(row.accepted, row.real_drafts)
            accepted += acc
            emitted += row.emitted
            for i in range(acc):
                acc_pos[i] += 1
            for i in range(row.real_drafts):
                draft_pos[i] += 1
    return Totals(
        num_drafts=drafts,
        num_draft_tokens=draft_tokens,
        num_accepted_tokens=accepted,
        num_accepted_tokens_per_pos=acc_pos,
        num_draft_tokens_per_pos=draft_pos,
        num_emitted_tokens=emitted,
        emitted_source="oracle",
        mean_acceptance_length=(emitted / drafts) if drafts else None,
    )


def expected_outputs(scenario: "Scenario", order: list[str]) -> dict[str, list[int]]:
    """What each request must emit in total (checks that the probe played the script right)."""
    return {rid: simulate_request(scenario, rid).output for rid in order}
