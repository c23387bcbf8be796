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
- `boundary` (for controls): the limit is set to end exactly on the bonus token
  of the last step that accepted drafts and emitted everything it sampled, so
  nothing accepted is ever trimmed and every branch must match the oracle.
Greedy decoding and the ngram drafter are deterministic, so the truncating run
repeats the reference run up to the cut. Pure Python: no vLLM import.
"""

from __future__ import annotations

from typing import Any


class NoTruncationPoint(RuntimeError):
    """The reference run never accepted >= 2 drafts at a usable position."""


def choose(
    kind: str, rid: str, steps: list[dict[str, Any]], output: list[int], avoid: set[int]
) -> dict[str, Any]:
    """The cut for request `rid`: token, its output position, the step and block it came from."""
    if kind == "boundary":
        return _step_boundary(rid, steps)
    produced = 0
    for rec in steps:
        sampled = rec.get("sampled", {}).get(rid) or []
        drafts = rec.get("drafts", {}).get(rid) or []
        emitted = rec.get("emitted", {}).get(rid) or []
        accepted = max(0, len(sampled) - 1) if drafts else 0
        # Accepted drafts sampled[0..accepted-1]; the last accepted one is never the cut.
        for j in range(accepted - 1) if accepted >= 2 else ():
            token = sampled[j]
            earlier = output[: produced + j]
            if kind == "max_tokens" or (token not in earlier and token not in avoid):
                return {
                    "kind": kind,
                    "request": rid,
                    "token": int(token),
                    "position": produced + j,
                    "index_in_block": j,
                    "reference_step": rec.get("step"),
                    "reference_drafts": list(drafts),
                    "reference_sampled": list(sampled),
                    "accepted_in_block": accepted,
                    "max_tokens": produced + j + 1 if kind == "max_tokens" else None,
                }
        produced += len(emitted)
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
