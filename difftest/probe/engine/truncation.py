"""Choosing where to cut a real model's output so the cut lands inside accepted drafts.

A random tiny model's output is only known after running it, so the probe first
runs the request greedily without a cut (the reference run) and picks, from its
step records, the first step where the request had >= 2 drafts accepted and the
first accepted draft of that block, other than the block's last accepted one,
that the cut can use, so the truncating run's step samples drafts past the stop:
- `stop` / `eos`: the token becomes a stop token id / the EOS id. It must not
  occur earlier in the output (or the request would stop there instead). A
  token new to the output can only be drafted from the prompt, so truncation
  scenarios use prompts that already contain the model's own loop;
- `max_tokens`: the request's limit is set to end on that same token;
- `stop_string`: the text of the last `span` output tokens ending on that token
  becomes the request's stop string (`SamplingParams.stop`); it must be new in
  the output's text, completed only by that token. Stop strings are matched by
  the engine's output processor, after the step's stats exist (#49); with
  `span` 2 and the token first in its block, the string spans two steps;
- `boundary` (for controls): the limit is set to end exactly on the bonus token
  of the last step that accepted drafts and emitted everything it sampled, so
  nothing accepted is ever trimmed and every branch must match the oracle.
With `place: bonus` (#49), an EOS, stop token or stop string goes on the bonus
token instead: the first step that accepted >= 1 draft and whose bonus token is
new in the output; the step emits all it sampled, nothing accepted is trimmed,
and every branch must match the oracle there too.
Greedy decoding and the ngram drafter are deterministic, so the truncating run
repeats the reference run up to the cut. Pure Python: no vLLM import.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

#: Token ids -> their text, as the engine's tokenizer decodes them.
Decode = Callable[[list[int]], str]


class NoTruncationPoint(RuntimeError):
    """The reference run never accepted >= 2 drafts at a usable position."""


def choose(
    kind: str,
    rid: str,
    steps: list[dict[str, Any]],
    output: list[int],
    avoid: set[int],
    decode: Decode | None = None,
    span: int = 1,
    text: str | None = None,
    place: str = "accepted",
) -> dict[str, Any]:
    """The cut for request `rid`: token, its output position, the step and block it came from
    (`stop_string`: with the string, from `decode`, new in `text`, the reference run's response
    text as the engine's own detokenizer wrote it)."""
    if kind == "boundary":
        return _step_boundary(rid, steps)
    candidates = _bonus_tokens if place == "bonus" else _accepted_drafts
    if kind == "stop_string":
        if decode is None:
            raise ValueError("a stop_string cut needs the tokenizer's decode")
        return _stop_string(rid, steps, output, decode, span, text, candidates)
    for candidate in candidates(rid, steps):
        token, position = candidate.token, candidate.position
        earlier = output[:position]
        if kind == "max_tokens" or (token not in earlier and token not in avoid):
            return {
                "kind": kind,
                **candidate.described(rid),
                "max_tokens": position + 1 if kind == "max_tokens" else None,
            }
    if place == "bonus":
        raise NoTruncationPoint(
            f"request {rid!r}: the reference run has no step that accepted a draft, emitted all "
            "it sampled and whose bonus token is new in the output; change the prompt or raise "
            "max_tokens"
        )
    raise NoTruncationPoint(
        f"request {rid!r}: the reference run has no step with >= 2 accepted drafts whose first "
        "accepted token is new in the output; change the prompt or raise max_tokens"
    )


def _step_boundary(rid: str, steps: list[dict[str, Any]]) -> dict[str, Any]:
    """The end of the last whole verification step with accepted drafts: a limit that cuts
    nothing."""
    produced, chosen = 0, None
    for rec in steps:
        sampled = rec.get("sampled", {}).get(rid) or []
        drafts = rec.get("drafts", {}).get(rid) or []
        emitted = rec.get("emitted", {}).get(rid) or []
        produced += len(emitted)
        if drafts and len(sampled) >= 2 and emitted == sampled:
            chosen = {
                "kind": "boundary",
                "request": rid,
                "token": int(sampled[-1]),
                "position": produced - 1,
                "reference_step": rec.get("step"),
                "reference_drafts": list(drafts),
                "reference_sampled": list(sampled),
                "accepted_in_block": len(sampled) - 1,
                "max_tokens": produced,
            }
    if chosen is None:
        raise NoTruncationPoint(
            f"request {rid!r}: the reference run never accepted a draft in a step it emitted whole"
        )
    return chosen


def _stop_string(
    rid: str,
    steps: list[dict[str, Any]],
    output: list[int],
    decode: Decode,
    span: int,
    text: str | None,
    candidates: Callable[[str, list[dict[str, Any]]], Iterator[_Candidate]],
) -> dict[str, Any]:
    """The first accepted draft (not its block's last accepted one) whose last `span` tokens'
    text is a stop string the response's text completes there first. Positions in the text are
    found from its end (the text of the tokens from a position on), so whatever the detokenizer
    wrote before the output's own text cannot shift them."""
    engine_text = text if text is not None else decode(output)
    for candidate in candidates(rid, steps):
        position = candidate.position
        first = position - span + 1
        if first < 0 or position >= len(output):
            continue
        stop = decode(output[first : position + 1])
        starts = len(engine_text) - len(decode(output[first:]))
        ends = len(engine_text) - len(decode(output[position + 1 :]))
        found = engine_text.find(stop)
        # The string starts within its first token's text and is first completed by the chosen
        # token; each spanned token adds text of its own.
        if (
            stop.strip()
            and "\ufffd" not in stop
            and starts <= found
            and found + len(stop) == ends
            and all(decode([t]) for t in output[first : position + 1])
        ):
            return {
                "kind": "stop_string",
                **candidate.described(rid),
                "stop_string": stop,
                "span": span,
                # What the response's text must be in a cut run (the same detokenizer, cut where
                # it first completes the string).
                "reference_text": engine_text,
                # The string starts in an earlier step's tokens.
                "spans_steps": first < candidate.produced,
                "max_tokens": None,
            }
    raise NoTruncationPoint(
        f"request {rid!r}: the reference run has no accepted draft (other than its block's last) "
        f"whose last {span} token(s) form a text new in the output; change the prompt, "
        "raise max_tokens or lower stop_string_tokens"
    )


@dataclass(frozen=True)
class _Candidate:
    """An accepted draft that is not its block's last accepted one: where a cut may go."""

    token: int
    #: Its position in the output, the tokens emitted before its step, its index in the block.
    position: int
    produced: int
    index: int
    step: Any
    drafts: list[int]
    sampled: list[int]
    accepted: int

    def described(self, rid: str) -> dict[str, Any]:
        return {
            "request": rid,
            "token": self.token,
            "position": self.position,
            "index_in_block": self.index,
            "reference_step": self.step,
            "reference_drafts": self.drafts,
            "reference_sampled": self.sampled,
            "accepted_in_block": self.accepted,
        }


def _bonus_tokens(rid: str, steps: list[dict[str, Any]]) -> Iterator[_Candidate]:
    """The bonus token of every step that accepted >= 1 draft and emitted all it sampled, in
    output order: a stop there trims nothing accepted."""
    produced = 0
    for rec in steps:
        sampled = rec.get("sampled", {}).get(rid) or []
        drafts = rec.get("drafts", {}).get(rid) or []
        emitted = rec.get("emitted", {}).get(rid) or []
        if drafts and len(sampled) >= 2 and emitted == sampled:
            index = len(sampled) - 1
            yield _Candidate(
                int(sampled[index]),
                produced + index,
                produced,
                index,
                rec.get("step"),
                list(drafts),
                list(sampled),
                index,
            )
        produced += len(emitted)


def _accepted_drafts(rid: str, steps: list[dict[str, Any]]) -> Iterator[_Candidate]:
    """Every accepted draft of `rid` in output order, but each block's last accepted one (a cut
    there would trim nothing accepted)."""
    produced = 0
    for rec in steps:
        sampled = rec.get("sampled", {}).get(rid) or []
        drafts = rec.get("drafts", {}).get(rid) or []
        emitted = rec.get("emitted", {}).get(rid) or []
        accepted = max(0, len(sampled) - 1) if drafts else 0
        # Accepted drafts are sampled[0..accepted-1]; only those the step returned (a limit may
        # have ended the reference run inside the block).
        for j in range(min(accepted - 1, len(emitted))) if accepted >= 2 else ():
            yield _Candidate(
                int(sampled[j]),
                produced + j,
                produced,
                j,
                rec.get("step"),
                list(drafts),
                list(sampled),
                accepted,
            )
        produced += len(emitted)
