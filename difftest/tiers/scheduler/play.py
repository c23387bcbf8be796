"""Playing a scripted request to its end, without vLLM: what the oracle and the loader both need.

The scripted model's semantics (target, drafter, verifier, choice grammar) come
from `difftest.probe.scheduler.script`, shared with the probe; the scheduling
rules are written here independently of vLLM's scheduler:
- which drafts are real: the grammar-valid prefix (sync: trimmed before
  scheduling; async: k slots are scheduled and the invalid rest is -1 padding);
  none where the runner skipped drafting (a correct scheduler schedules none of
  its zero-fill); never the `-1` placeholders a new decode is padded with (#50518);
- stop handling: tokens are appended one by one until EOS, a stop token,
  max_tokens or the context (`max_model_len`), the stop token included;
- the context: a draft block is cut to the positions that still fit it.
What depends on the batch comes from the request's recorded schedule
(`schedule.RequestSchedule`): a token budget's cut of a draft block, the
recompute after a preemption, an abort in flight. Without one (the loader's
check, plain scenarios) the request runs as it would alone.
Works on the plain scenario data (`Scenario.probe_data()`), so the loader can
check a file is playable before the scenario object exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from difftest.probe.scheduler import script
from difftest.tiers.common.accounting import Verification
from difftest.tiers.common.schedule import NO_SCHEDULE, RequestSchedule

MAX_STEPS = 100_000


class ScriptViolation(ValueError):
    """The script contradicts itself (e.g. its target stream breaks its grammar)."""


@dataclass(frozen=True)
class RequestPlay:
    """A request played to its end: per sampling step (index 0: its first token) the verification
    it made (None: a step that verified no draft: its first token, a recompute after a
    preemption), and the final output."""

    rid: str
    steps: list[Verification | None]
    output: list[int]
    finish: str

    @property
    def verifications(self) -> list[Verification]:
        return [v for v in self.steps if v is not None]


def _append(
    output: list[int], sampled: list[int], max_tokens: int, stops: set[int], room: int
) -> tuple[int, str | None]:
    """Append tokens one by one until a stop; returns (tokens appended, finish reason or None).
    `room` is how many output tokens the context holds (vLLM's `check_stop`: EOS and stop tokens
    first, then the context and max_tokens, both finish `length`)."""
    for n, tok in enumerate(sampled, 1):
        output.append(tok)
        if tok in stops:
            return n, "stop"
        if len(output) >= min(max_tokens, room):
            return n, "length"
    return len(sampled), None


@dataclass(frozen=True)
class PlayData:
    """A scenario's plain data and the key its plays are remembered by (computed once)."""

    data: dict[str, Any]
    key: str

    @classmethod
    def of(cls, data: dict[str, Any]) -> PlayData:
        return cls(data, repr(sorted((k, repr(v)) for k, v in data.items() if k != "runs")))


def play_request(
    data: dict[str, Any] | PlayData, rid: str, schedule: RequestSchedule = NO_SCHEDULE
) -> RequestPlay:
    """Play one request along its schedule (memoised): without one, as it runs alone."""
    played = data if isinstance(data, PlayData) else PlayData.of(data)
    key = (played.key, rid, schedule)
    if key not in _PLAYED:
        if len(_PLAYED) > 512:
            _PLAYED.clear()
        _PLAYED[key] = _play(played.data, rid, schedule)
    return _PLAYED[key]


_PLAYED: dict[tuple[str, str, RequestSchedule], RequestPlay] = {}


def _play(data: dict[str, Any], rid: str, schedule: RequestSchedule) -> RequestPlay:
    req = next(r for r in data["requests"] if r["id"] == rid)
    k, seed, path = int(data["k"]), int(data.get("seed", 0)), data.get("draft_path", "sync")
    target = script.target_stream(req, seed)
    eos = script.token(req.get("eos") or "<eos>")
    stop_ids = {script.token(s) for s in req.get("stop") or []}
    grammar = script.grammar_for(req, eos, sorted(stop_ids))
    stops = {eos, *stop_ids}
    max_tokens = int(req["max_tokens"])
    spec_decoding = bool(data.get("spec_decoding", True))
    # The context: the scheduler cuts a draft block to what still fits, and the request ends there.
    context_set = data.get("max_model_len") is not None
    in_flight = int(data.get("in_flight") or 1)
    room = int(data.get("max_model_len") or script.MAX_MODEL_LEN) - len(
        script.tokens(req["prompt"])
    )

    output: list[int] = []
    steps: list[Verification | None] = []
    finish: str | None = None
    index = 0  # the request's sampling step; the drafts of step n were proposed after step n - 1
    #: The last verifying step's position and scheduled drafts (the cap with two in flight).
    previous: tuple[int, int] | None = None
    while finish is None:
        if index > MAX_STEPS:
            raise ScriptViolation(f"no stop after {MAX_STEPS} steps")
        shaped = schedule.at(index)
        if shaped is not None and shaped.aborted:
            finish = "abort"
            break
        position = len(output)
        if index == 0 or not spec_decoding or (shaped is not None and shaped.restart):
            # Its first token, a recompute after a preemption, or no drafter at all: one token,
            # nothing verified (a new decode's -1 padding is no draft).
            _, finish = _append(
                output, script.verify(target, position, []), max_tokens, stops, room
            )
            steps.append(None)
            index += 1
            continue
        if script.drafting_skipped(req, index - 1):
            # A correct scheduler schedules none of a skipped drafter's zero-fill: a plain decode
            # step.
            appended, finish = _append(
                output, script.verify(target, position, []), max_tokens, stops, room
            )
            steps.append(Verification(rid, 0, 0, 0, appended, drafting_skipped=True))
            index += 1
            continue
        proposed = script.propose(req, seed, k, target, position, index - 1)[:k]
        valid = grammar.valid_prefix(output, proposed) if grammar else proposed
        # Placeholders are scheduled before the drafts are known (async): k slots, the invalid
        # rest padded with -1; sync schedules the valid drafts. A token budget may cut either.
        scheduled = k if path == "async" else len(valid)
        if shaped is not None and shaped.budget_cut:
            scheduled = min(scheduled, shaped.slots)
        # Every scheduled position must fit the context (`Scheduler.schedule`'s max_model_len cap).
        scheduled = max(0, min(scheduled, room - position - 1))
        if shaped is not None and in_flight == 2 and context_set and previous is not None:
            # Scheduled while the previous step was in flight, the cap counts that step's drafts
            # as computed before its rejections are rolled back; only where that tighter cap
            # binds is the branch's recorded count taken (it depends on which step was in flight).
            optimistic = room - previous[0] - previous[1] - 2
            if optimistic < scheduled:
                scheduled = max(0, min(scheduled, shaped.slots))
        valid = valid[:scheduled]
        drafts = valid + [script.PAD_DRAFT] * (scheduled - len(valid))
        sampled = script.verify(target, position, drafts)
        appended, finish = _append(output, sampled, max_tokens, stops, room)
        steps.append(Verification(rid, len(valid), scheduled, len(sampled) - 1, appended))
        previous = (position, scheduled)
        index += 1
    if finish == "abort":
        return RequestPlay(rid, steps, output, finish)
    if grammar is not None and not grammar.accepts(output):
        raise ScriptViolation(
            f"output {script.text(output)!r} breaks the grammar {req['grammar']['choice']}"
        )
    return RequestPlay(rid, steps, output, finish)
