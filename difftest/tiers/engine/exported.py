"""The generated-token metrics a vLLM server exports, against what its requests returned.

A scraper reads `vllm:generation_tokens_total` and the finished requests'
`vllm:request_generation_tokens` histogram; an operator sets them beside the
usage a client was billed (the completion's token ids). The probe reads both
through vLLM's own Prometheus registry (`LLM.get_metrics()`), before and after
each run (`probe.engine.capture.prometheus_token_counters`); the oracle is the
tokens each request returned. vLLM 0.32's output processor counts a step's
tokens before it matches stop strings, so the tokens after a stop string,
dropped from the response, are still counted: every branch differs there.
An aborted request returns what it had and is no finished request.
"""

from __future__ import annotations

from typing import Any

from difftest.core.records import Difference, ProbeRun
from difftest.probe.protocol import TOKEN_COUNTERS, TOKEN_COUNTERS_NOTE

#: The prefix of these differences' counter names.
PREFIX = "prometheus."


def expected_token_counters(run: ProbeRun) -> dict[str, int]:
    """What each counter must move by over the run: the tokens the requests returned."""
    finished = [rid for rid, why in run.finish_reasons.items() if why != "abort"]
    return {
        "generation_tokens": sum(len(run.outputs.get(rid, [])) for rid in run.order),
        "request_generation_tokens_sum": sum(len(run.outputs.get(rid, [])) for rid in finished),
        "request_generation_tokens_count": len(finished),
    }


def token_counter_differences(run: ProbeRun) -> list[Difference]:
    """Each generated-token metric that moved by other than the tokens returned."""
    moved: Any = run.notes.get(TOKEN_COUNTERS_NOTE)
    want = expected_token_counters(run)
    out = []
    for name in TOKEN_COUNTERS:
        got = moved.get(name) if isinstance(moved, dict) else None
        if got != want[name]:
            out.append(
                Difference(
                    counter=PREFIX + name,
                    measured=got,
                    expected=want[name],
                    explanation=_why(name, got, want[name]),
                )
            )
    return out


def _why(name: str, got: Any, want: int) -> str:
    if got is None:
        return f"{name} was not read from the branch's Prometheus registry"
    if name == "request_generation_tokens_count":
        return f"{got} finished request(s) observed, {want} finished by a stop rule"
    return (
        f"the server counted {got} generated token(s), the requests returned {want} "
        f"({got - want:+d})"
    )
