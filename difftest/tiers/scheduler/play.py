"""Playing a scripted request to its end, without vLLM: what the oracle and the loader both need.

The scripted model's semantics (target, drafter, verifier, choice grammar) come
from `difftest.probe.scheduler.script`, shared with the probe; the scheduling
rules are written here independently of vLLM's scheduler:
- which drafts are real: the grammar-valid prefix (sync: trimmed before
  scheduling; async: k slots are scheduled and the invalid rest is -1 padding);
  none where the runner skipped drafting (a correct scheduler schedules none of
  its zero-fill);
- stop handling: tokens are appended one by one until EOS, a stop token or
  max_tokens, the stop token included.
Works on the plain scenario data (`Scenario.probe_data()`), so the loader can
check a file is playable before the scenario object exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from difftest.probe.scheduler import script
from difftest.tiers.common.accounting import Verification

MAX_STEPS = 100_000


class ScriptViolation(ValueError):
    """The script contradicts itself (e.g. its target stream breaks its grammar)."""


@dataclass(frozen=True)
class RequestPlay:
    """A request played to its end: every verification and the final output."""

    rid: str
    verifications: list[Verification]
    output: list[int]
    finish: str


def _append(
    output: list[int], sampled: list[int], max_tokens: int, stops: set[int]
) -> tuple[int, str | None]:
    """Append tokens one by one until a stop; returns (tokens appended, finish reason or None)."""
    for n, tok in enumerate(sampled, 1):
        output.append(tok)
        if tok in stops:
            return n, "stop"
        if len(output) >= max_tokens:
            return n, "length"
    return len(sampled), None


def play_request(data: dict[str, Any], rid: str) -> RequestPlay:
    """Play one request alone; its contribution is the same in any batch (memoised)."""
    key = (repr(sorted((k, repr(v)) for k, v in data.items() if k != "runs")), rid)
    if key not in _PLAYED:
        if len(_PLAYED) > 512:
            _PLAYED.clear()
        _PLAYED[key] = _play(data, rid)
    return _PLAYED[key]


_PLAYED: dict[tuple[str, str], RequestPlay] = {}


def _play(data: dict[str, Any], rid: str) -> RequestPlay:
    req = next(r for r in data["requests"] if r["id"] == rid)
    k, seed, path = int(data["k"]), int(data.get("seed", 0)), data.get("draft_path", "sync")
    target = script.target_stream(req, seed)
    eos = script.token(req.get("eos") or "<eos>")
    stop_ids = {script.token(s) for s in req.get("stop") or []}
    grammar = script.grammar_for(req, eos, sorted(stop_ids))
    stops = {eos, *stop_ids}
    max_tokens = int(req["max_tokens"])

    output: list[int] = []
    rows: list[Verification] = []
    _, finish = _append(
        output, script.verify(target, 0, []), max_tokens, stops
    )  # prefill samples one token
    decode_index = 0
    while finish is None:
        if decode_index > MAX_STEPS:
            raise ScriptViolation(f"no stop after {MAX_STEPS} steps")
        position = len(output)
        if script.drafting_skipped(req, decode_index):
            # A correct scheduler schedules none of a skipped drafter's zero-fill: a plain decode
            # step.
            appended, finish = _append(
                output, script.verify(target, position, []), max_tokens, stops
            )
            rows.append(Verification(rid, 0, 0, 0, appended, drafting_skipped=True))
            decode_index += 1
            continue
        proposed = script.propose(req, seed, k, target, position, decode_index)[:k]
        valid = grammar.valid_prefix(output, proposed) if grammar else proposed
        if path == "async":
            scheduled = k  # placeholders are scheduled before the drafts are known
            drafts = valid + [script.PAD_DRAFT] * (k - len(valid))
        else:
            scheduled = len(valid)
            drafts = valid
        sampled = script.verify(target, position, drafts)
        appended, finish = _append(output, sampled, max_tokens, stops)
        rows.append(Verification(rid, len(valid), scheduled, len(sampled) - 1, appended))
        decode_index += 1
    if grammar is not None and not grammar.accepts(output):
        raise ScriptViolation(
            f"output {script.text(output)!r} breaks the grammar {req['grammar']['choice']}"
        )
    return RequestPlay(rid, rows, output, finish)
