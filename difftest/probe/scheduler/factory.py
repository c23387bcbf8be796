"""Builds the REAL vLLM scheduler for a scenario, as vLLM's own CPU tests do.

One `VllmConfig` + `StructuredOutputManager` per `Shape` (k, draft path and the
serving conditions that live in the config) is cached: they hold the tokenizer
and xgrammar's compiler, the expensive part. Each run gets a fresh `Scheduler`
(sync path) or `AsyncScheduler` (async path), so no state leaks between runs.
Its KV block pool is the scenario's `kv_blocks` (preemption) or sized to the run
(`blocks_for`): vLLM builds one Python object per block, so a fixed pool of
thousands of blocks cost ~25 ms per run, 40 times the scripted run itself.
"""

from __future__ import annotations

import time
from concurrent.futures import Future
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from vllm.config import (
    CacheConfig,
    KVTransferConfig,
    ModelConfig,
    SchedulerConfig,
    SpeculativeConfig,
    VllmConfig,
)
from vllm.sampling_params import SamplingParams, StructuredOutputsParams
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager
from vllm.v1.structured_output.utils import choice_as_grammar

from . import script
from .model_dir import MAX_MODEL_LEN

BLOCK_SIZE = script.BLOCK_SIZE
#: What the configs declare (vLLM asserts a positive count); each run's pool is `blocks_for(...)`.
NUM_BLOCKS = 4096
#: The smallest pool a run gets; a run never needs more than `blocks_for` gives, so nothing is
#: preempted.
MIN_BLOCKS = 64
GRAMMAR_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Shape:
    """What of a scenario lives in the scheduler's config (one config per shape)."""

    k: int
    path: str = "sync"
    spec_decoding: bool = True
    prefix_caching: bool = False
    kv_connector: str = "none"
    #: The token budget of one step; None: the context length (nothing chunked or cut).
    budget: int | None = None
    #: `ObservabilityConfig.per_request_spec_decode_metrics`.
    request_metrics: str = "none"
    #: The context length; None: the model folder's.
    max_model_len: int | None = None

    @classmethod
    def of(cls, scenario: dict[str, Any]) -> Shape:
        return cls(
            k=int(scenario["k"]),
            path=scenario.get("draft_path", "sync"),
            spec_decoding=bool(scenario.get("spec_decoding", True)),
            prefix_caching=bool(scenario.get("prefix_caching", False)),
            kv_connector=scenario.get("kv_connector") or "none",
            budget=scenario.get("max_num_batched_tokens"),
            request_metrics=scenario.get("per_request_metrics") or "none",
            max_model_len=scenario.get("max_model_len"),
        )


def observability(request_metrics: str) -> dict[str, Any]:
    """The `VllmConfig` keyword for per-request metrics; none for the default, so a branch whose
    config lacks the knob still runs every scenario that does not ask for it."""
    if request_metrics == "none":
        return {}
    from vllm.config import ObservabilityConfig

    return {
        "observability_config": ObservabilityConfig(per_request_spec_decode_metrics=request_metrics)
    }


class SchedulerFactory:
    """Configs are built once per shape; schedulers once per run."""

    def __init__(self, model_dir: Path) -> None:
        self.model_dir = model_dir
        self._model_configs: dict[int, ModelConfig] = {}
        self._cache: dict[Shape, tuple[VllmConfig, StructuredOutputManager]] = {}
        self._hasher: Any = None

    def model_config(self, max_model_len: int = MAX_MODEL_LEN) -> ModelConfig:
        if max_model_len not in self._model_configs:
            self._model_configs[max_model_len] = ModelConfig(
                model=str(self.model_dir),
                tokenizer=str(self.model_dir),
                dtype="float32",
                seed=0,
                max_model_len=max_model_len,
            )
        return self._model_configs[max_model_len]

    def _configs(self, shape: Shape) -> tuple[VllmConfig, StructuredOutputManager]:
        if shape not in self._cache:
            context = shape.max_model_len or MAX_MODEL_LEN
            # The budget is the scenario's, never the context: a cut the scenario did not ask for
            # would be one the oracle does not know of.
            budget = shape.budget or MAX_MODEL_LEN
            transfer = None
            if shape.kv_connector in ("decode-node", "decode-node-async"):
                # Imported here: vLLM's KV-transfer modules load only for a scenario that uses one.
                from . import connector

                transfer = KVTransferConfig(
                    kv_connector=connector.register(shape.kv_connector == "decode-node-async"),
                    kv_role="kv_consumer",
                )
            vllm_config = VllmConfig(
                model_config=self.model_config(context),
                scheduler_config=SchedulerConfig(
                    max_num_seqs=min(64, budget),
                    max_num_batched_tokens=budget,
                    max_model_len=context,
                    enable_chunked_prefill=True,
                    is_encoder_decoder=False,
                ),
                cache_config=CacheConfig(
                    block_size=BLOCK_SIZE, enable_prefix_caching=shape.prefix_caching
                ),
                speculative_config=(
                    SpeculativeConfig(method="ngram", num_speculative_tokens=shape.k)
                    if shape.spec_decoding
                    else None
                ),
                kv_transfer_config=transfer,
                **observability(shape.request_metrics),
            )
            vllm_config.cache_config.num_gpu_blocks = NUM_BLOCKS
            self._cache[shape] = (vllm_config, StructuredOutputManager(vllm_config))
        return self._cache[shape]

    def scheduler(self, shape: Shape, num_blocks: int = NUM_BLOCKS) -> Scheduler:
        vllm_config, manager = self._configs(shape)
        kv_cache_config = KVCacheConfig(
            num_blocks=num_blocks,
            kv_cache_tensors=[],
            kv_cache_groups=[
                KVCacheGroupSpec(
                    ["layer"],
                    FullAttentionSpec(
                        block_size=BLOCK_SIZE, num_kv_heads=1, head_size=1, dtype=torch.float32
                    ),
                )
            ],
        )
        cls = AsyncScheduler if shape.path == "async" else Scheduler
        return cls(
            vllm_config=vllm_config,
            kv_cache_config=kv_cache_config,
            structured_output_manager=manager,
            block_size=BLOCK_SIZE,
            log_stats=True,
        )

    def _block_hasher(self) -> Any:
        """vLLM's request block hasher over sha256, its none-hash set once per process."""
        if self._hasher is None:
            from vllm.utils.hashing import sha256
            from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash

            init_none_hash(sha256)
            self._hasher = get_request_block_hasher(BLOCK_SIZE, sha256)
        return self._hasher

    @staticmethod
    def blocks_for(requests: list[dict[str, Any]], k: int) -> int:
        """Twice the blocks every request holds at its longest (prompt + max_tokens + k
        lookahead)."""
        need = sum(
            -(-(len(script.tokens(r["prompt"])) + int(r["max_tokens"]) + k + 1) // BLOCK_SIZE)
            for r in requests
        )
        return max(MIN_BLOCKS, 2 * need)

    def request(self, scheduler: Scheduler, req: dict[str, Any], prefix_caching: bool) -> Request:
        """A vLLM Request with EOS, stop tokens, (optionally) a compiled xgrammar grammar, and the
        block hashes prefix caching looks requests up by (without them nothing ever hits)."""
        eos_id = script.token(req.get("eos") or "<eos>")
        stop_ids = [script.token(s) for s in req.get("stop") or []]
        structured = None
        if req.get("grammar"):
            # The frontend turns `choice` into an EBNF grammar before the engine sees it; do the
            # same.
            structured = StructuredOutputsParams(
                grammar=choice_as_grammar(list(req["grammar"]["choice"]))
            )
            structured._backend = "xgrammar"
        params = SamplingParams(
            max_tokens=req["max_tokens"],
            temperature=0.0,
            stop_token_ids=stop_ids,
            structured_outputs=structured,
        )
        params.update_from_generation_config({}, eos_id)
        request = Request(
            request_id=req["id"],
            prompt_token_ids=script.tokens(req["prompt"]),
            sampling_params=params,
            pooling_params=None,
            block_hasher=self._block_hasher() if prefix_caching else None,
        )
        if structured is not None:
            scheduler.structured_output_manager.grammar_init(request)
            deadline = time.monotonic() + GRAMMAR_TIMEOUT_S
            so_req = request.structured_output_request
            assert so_req is not None
            pending = getattr(so_req, "_grammar", None)
            if isinstance(
                pending, Future
            ):  # wait on the compilation itself instead of polling for it
                futures_wait([pending], timeout=GRAMMAR_TIMEOUT_S)
            while not so_req.is_grammar_ready:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"grammar for {req['id']} not compiled after {GRAMMAR_TIMEOUT_S}s"
                    )
                time.sleep(0.001)
            if isinstance(so_req.grammar, Exception):
                raise RuntimeError(f"grammar for {req['id']} failed to compile") from so_req.grammar
        return request
