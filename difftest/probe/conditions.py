"""The serving conditions, one table: each condition's scenario key, where it sits in each tier's
files, the words reports use for it, the vLLM knob it drives and what difftest checks under it.

Read by both tiers' scenario loaders (`conditions` in reports and listings, the keys' hints in
loader errors), by the probes (which refuse a job whose scenario sets a condition of their tier
they do not play) and by fuzz (a test holds each strategy to drawing every condition of its
tier). A condition both tiers have has ONE key in both; only where it sits differs (an engine
setting sits in the scenario's `engine:` block, as every scenario of a job shares one engine).

A contract like `protocol`: the probe runs inside branch environments, so this module uses only
the standard library.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Tier = Literal["scheduler", "engine"]
#: Where a key sits in a tier's scenario file: the scenario itself, its `engine:` block, or each
#: request (a condition of the scenario when any request sets it).
Level = Literal["scenario", "engine", "request"]


@dataclass(frozen=True)
class Condition:
    """One serving condition."""

    key: str
    #: Per tier that has it: where the key sits.
    levels: Mapping[Tier, Level]
    #: The value that means "not under this condition" (the plain case).
    plain: Any
    #: The words for a value, in reports and listings.
    words: Callable[[Any], str]
    #: What the key means, for loader errors and the scenarios guide.
    hint: str
    #: The vLLM setting or call it drives.
    knob: str
    #: What difftest checks under it.
    check: str
    #: Tiers whose fuzz strategy does not draw it yet, and why (empty: every tier's does).
    not_fuzzed: Mapping[Tier, str] = field(default_factory=dict)


def _words(text: str) -> Callable[[Any], str]:
    return lambda _value: text


_NO_ENGINE_FUZZ = "the engine tier has no fuzz strategy yet"

CONDITIONS: tuple[Condition, ...] = (
    Condition(
        "spec_decoding",
        {"scheduler": "scenario"},
        True,
        _words("spec decoding off"),
        "`true` (default) or `false`: a control with speculative decoding off",
        "no `SpeculativeConfig` at all",
        "no step reports spec stats (`stats-without-drafts`), the log never prints nan",
    ),
    Condition(
        "in_flight",
        {"scheduler": "scenario"},
        1,
        _words("two steps in flight"),
        "`1` (lockstep) or `2` (two steps in flight, as EngineCore.step_with_batch_queue; needs "
        "`draft_path: async`)",
        "`EngineCore.step_with_batch_queue`: schedule() of step N+1 before update_from_output() "
        "of step N",
        "a step in flight when its request stopped is no row; stale output counts once",
    ),
    Condition(
        "async_scheduling",
        {"engine": "engine"},
        False,
        _words("async scheduling"),
        "`true`: the engine's AsyncScheduler with its batch queue",
        "`async_scheduling=True`",
        "every counter and response check, as without it",
        {"engine": _NO_ENGINE_FUZZ},
    ),
    Condition(
        "prefix_caching",
        {"scheduler": "scenario", "engine": "engine"},
        False,
        _words("prefix caching"),
        "`true` or `false` (default): vLLM's prefix cache",
        "`CacheConfig(enable_prefix_caching=True)`",
        "a cache hit's padded new decode is no draft round (#50518)",
        {"engine": _NO_ENGINE_FUZZ},
    ),
    Condition(
        "kv_connector",
        {"scheduler": "scenario"},
        "none",
        lambda value: (
            "P/D decode node, async KV load" if value == "decode-node-async" else "P/D decode node"
        ),
        "`none` (default), `decode-node` or `decode-node-async`: a P/D decode node whose KV "
        "connector loads every prompt but its last token (async: the request waits for it)",
        "a `KVConnectorBase_V1` with `kv_role: kv_consumer` (async: `load_kv_async`, "
        "`KVConnectorOutput.finished_recving`)",
        "the padded decode after the load is no draft round (#50518)",
    ),
    Condition(
        "kv_blocks",
        {"scheduler": "scenario", "engine": "engine"},
        None,
        lambda value: f"{value} KV blocks",
        "the KV pool in blocks (small: requests get preempted)",
        "`num_gpu_blocks` (engine: `num_gpu_blocks_override`)",
        "a preempted request's recompute is no row; stale in-flight output counts once",
        {"engine": _NO_ENGINE_FUZZ},
    ),
    Condition(
        "max_num_batched_tokens",
        {"scheduler": "scenario", "engine": "engine"},
        None,
        lambda value: f"token budget {value}",
        "the token budget of one step (small: chunked prefill, cut decodes)",
        "`SchedulerConfig.max_num_batched_tokens`",
        "a cut draft block counts only the drafts scheduled; a prefill chunk samples nothing",
        {"engine": _NO_ENGINE_FUZZ},
    ),
    Condition(
        "max_model_len",
        {"scheduler": "scenario"},
        None,
        lambda value: f"max_model_len {value}",
        "the context length in tokens (a draft block is cut to what fits; a full context ends "
        "the request)",
        "`ModelConfig.max_model_len` and `Scheduler.schedule`'s cap",
        "only the drafts that fit are real; the request ends `length` on its last token",
    ),
    Condition(
        "per_request_metrics",
        {"scheduler": "scenario", "engine": "scenario"},
        "none",
        lambda value: f"per-request metrics ({value})",
        "`none` (default), `summary` or `detailed`: each finished request returns its own "
        "spec-decode metrics",
        "`ObservabilityConfig.per_request_spec_decode_metrics`",
        "each request's figures against the oracle's rows of that request (`request_metrics.*`)",
        {"engine": _NO_ENGINE_FUZZ},
    ),
    Condition(
        "log_every",
        {"scheduler": "scenario"},
        None,
        lambda value: f"a log line every {value} step(s)",
        "log the branch's spec-decode line every N engine steps",
        "`SpecDecodingLogging.log` and `reset`, as a server's `LoggingStatLogger` on its timer",
        "each interval's logged figures against the oracle's rows of its steps (`log_interval.*`)",
    ),
    Condition(
        "reset_prefix_cache",
        {"scheduler": "scenario"},
        None,
        lambda value: f"prefix cache reset after step {value}",
        "the step (a schedule() call, from 0) after whose output the prefix cache is reset "
        "with its running requests",
        "`Scheduler.reset_prefix_cache(reset_running_requests=True)` (`drop_stale_output`)",
        "the dropped in-flight step is no row and emits nothing; the recompute is no row",
        {
            "scheduler": "a reset is a step of the batch, and every run of an example (each "
            "request alone too) must reach it; drawing it also moved the seeded search onto "
            "async KV-load examples the probe cannot finish yet (#49's note)"
        },
    ),
    Condition(
        "arrive",
        {"scheduler": "request"},
        0,
        _words("staggered arrivals"),
        "the engine step (a turn of the engine core's loop) before which the request is added "
        "(0: at the start)",
        "`Scheduler.add_request` between engine steps",
        "every counter, as for a batch that arrives at once",
    ),
    Condition(
        "abort",
        {"scheduler": "request", "engine": "request"},
        None,
        _words("aborts"),
        "abort the request once it has received the tokens of N sampling steps (scheduler: "
        "while its step N, from 0, is in flight; engine: right after its N-th step, N >= 1)",
        "`Scheduler.finish_requests(..., FINISHED_ABORTED)` / `LLMEngine.abort_request`",
        "the aborted request's undelivered step is no row; it returns what it had (`abort-held`)",
        {"engine": _NO_ENGINE_FUZZ},
    ),
)


def of_tier(tier: Tier) -> tuple[Condition, ...]:
    """The conditions a tier plays, in the table's order."""
    return tuple(c for c in CONDITIONS if tier in c.levels)


def keys(tier: Tier, level: Level | None = None) -> frozenset[str]:
    """The keys of a tier's conditions (at one level only, where given)."""
    return frozenset(c.key for c in of_tier(tier) if level is None or c.levels[tier] == level)


def values(tier: Tier, data: Mapping[str, Any]) -> list[tuple[Condition, Any]]:
    """The conditions a scenario's plain data (`probe_data()`) sets, with their values (a request
    condition: the first value a request sets), in the table's order."""
    found = []
    for condition in of_tier(tier):
        level = condition.levels[tier]
        if level == "request":
            set_by = [
                r[condition.key]
                for r in data.get("requests") or ()
                if r.get(condition.key, condition.plain) not in (None, condition.plain)
            ]
            if set_by:
                found.append((condition, set_by[0]))
            continue
        # An engine setting sits in the scenario's `engine:` block.
        holder = data if level == "scenario" else data.get("engine") or {}
        value = holder.get(condition.key, condition.plain)
        if value is not None and value != condition.plain:
            found.append((condition, value))
    return found


def described(tier: Tier, data: Mapping[str, Any]) -> list[str]:
    """The words for every condition the scenario sets."""
    return [condition.words(value) for condition, value in values(tier, data)]


def unplayed(tier: Tier, data: Mapping[str, Any], played: frozenset[str]) -> list[str]:
    """Condition keys the scenario sets that a probe playing only `played` would ignore."""
    return [c.key for c, _ in values(tier, data) if c.key not in played]


def refuse_unplayed(tier: Tier, data: Mapping[str, Any], played: frozenset[str]) -> None:
    """Raise where the scenario sets a condition the probe does not play: the run then reads
    "could not measure" on every branch instead of a pass that never met the condition."""
    missing = unplayed(tier, data, played)
    if missing:
        raise ValueError(
            f"the {tier} probe does not play the condition(s) {', '.join(missing)} "
            "(probe.conditions lists them for this tier): play them in the probe, or drop them "
            "from the scenario"
        )
