"""The stats path: the vLLM code that decides what `SpecDecodingStats` counts or what a request
gets.

One table, read wherever difftest must know whether a change can move a counter or a response:
the gate's skip rule (`config.stats_paths` defaults to it). (Probes trace the files the compared
branches change, not this whole table: `run.coverage.tracing_job` says why.) A change outside it
cannot alter what the shipped scenarios measure through the code they run... as far as this table
knows: the gate names what it checked, and `stats_paths` in the config overrides it.

The issue that widened it (#48): a head that only stopped the output processor from trimming the
tokens after a matched stop string was skipped ("changes none of the stats-path files"), because
the table listed the scheduler, `spec_decode/metrics.py`, `metrics/`, `engine/core.py` and
`structured_output/` only.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StatsPathPart:
    """A file, or a folder (ending in `/`), of vLLM's stats path, and what it decides there."""

    path: str
    decides: str


STATS_PATH: tuple[StatsPathPart, ...] = (
    StatsPathPart(
        "vllm/v1/core/",
        "the scheduler and async scheduler (drafts scheduled, accepted, trimmed by grammar or "
        "stop, `SpecDecodingStats` built), and the KV-cache and prefix-cache managers that decide "
        "padding, preemption and what a step can hold",
    ),
    StatsPathPart(
        "vllm/v1/spec_decode/",
        "the counters themselves (`metrics.py`) and the drafters that propose what is counted",
    ),
    StatsPathPart(
        "vllm/v1/metrics/",
        "what is logged and exported (`loggers.py`, `stats.py`, the Prometheus counters)",
    ),
    StatsPathPart(
        "vllm/v1/engine/",
        "the engine core's step, and the output processor and detokenizer, which decide what a "
        "request returns (stop strings, `max_tokens`, finish reason, usage)",
    ),
    StatsPathPart("vllm/v1/structured_output/", "which drafts a grammar allows"),
    StatsPathPart("vllm/v1/sample/", "the rejection sampler: which drafts are accepted"),
    StatsPathPart(
        "vllm/v1/worker/",
        "the model runners: tokens sampled and verified per step, padding of draft blocks",
    ),
    StatsPathPart("vllm/v1/outputs.py", "the model runner's output the scheduler counts from"),
    StatsPathPart("vllm/v1/request.py", "a request's state: its output tokens, stop and status"),
    StatsPathPart(
        "vllm/distributed/kv_transfer/",
        "KV connectors: a request waiting for remote KVs, loads delivered while a step runs",
    ),
)

#: The table's paths, for `config.stats_paths`' default.
STATS_PATHS: tuple[str, ...] = tuple(part.path for part in STATS_PATH)


GPU = "GPU-only"
CONDITION = "condition not modelled"
DEAD = "dead code"


@dataclass(frozen=True)
class Unreached:
    """Why the shipped scenarios cannot reach a stats-path file or folder (ending in `/`) here."""

    path: str
    #: GPU, CONDITION or DEAD.
    kind: str
    why: str

    @property
    def reason(self) -> str:
        return f"{self.kind}: {self.why}"


#: What no scenario reaches, and why; a file it does not name reads "no scenario reaches it".
#: The most specific entry wins (a file before its folder).
UNREACHED: tuple[Unreached, ...] = (
    Unreached(
        "vllm/distributed/kv_transfer/kv_connector/v1/",
        CONDITION,
        "vLLM's own KV connectors (P/D, offloading, LMCache, NIXL, Mooncake): the scheduler "
        "tier's decode node (`kv_connector`) is difftest's own connector on their base class",
    ),
    Unreached("vllm/v1/worker/gpu/model_states/", GPU, "the GPU model runner's model states"),
    Unreached("vllm/v1/worker/gpu/spec_decode/", GPU, "the GPU model runner's speculators"),
    Unreached("vllm/v1/worker/gpu/mm/", GPU, "the GPU model runner's multimodal rotary kernels"),
    Unreached("vllm/v1/worker/xpu_model_runner.py", GPU, "Intel XPU only"),
    Unreached("vllm/v1/worker/xpu_worker.py", GPU, "Intel XPU only"),
    Unreached("vllm/v1/sample/ops/topk_topp_triton.py", GPU, "Triton kernels"),
    Unreached(
        "vllm/v1/worker/cpu/model_runner.py",
        CONDITION,
        "the new (v2) model runner on CPU: this release's CPU worker runs the v1 runner",
    ),
    Unreached(
        "vllm/v1/worker/mm_encoder_model_runner.py",
        CONDITION,
        "a multimodal encoder's runner: the tiny model is text only",
    ),
    Unreached(
        "vllm/v1/engine/async_llm.py",
        CONDITION,
        "the asynchronous engine client (the OpenAI server's): the engine tier drives LLMEngine",
    ),
    Unreached(
        "vllm/v1/engine/admission_control.py", CONDITION, "no scenario sets admission control"
    ),
    Unreached("vllm/v1/metrics/ray_wrappers.py", CONDITION, "no scenario exports metrics via Ray"),
    Unreached("vllm/v1/core/sched/diffusion_scheduler.py", CONDITION, "diffusion models"),
)


def unreached_reason(path: str) -> str:
    """The reason `UNREACHED` gives for `path` ("" when it names none)."""
    matching = [
        u for u in UNREACHED if path == u.path or (u.path.endswith("/") and path.startswith(u.path))
    ]
    return max(matching, key=lambda u: len(u.path)).reason if matching else ""
