"""A P/D decode node's KV connector (scheduler side): every prompt but its last token is loaded.

On a disaggregated decode node the prefill ran elsewhere; the connector tells
the scheduler how many prompt tokens it can load, and vLLM schedules the rest.
Loading all but the last token leaves exactly one new token: the new request is
scheduled as a decode and padded with `[-1] * k` placeholder drafts (#45237),
the case #50518 is about. Nothing is transferred (the probe has no workers), and
every load succeeds, so the scheduler sees what a working connector gives it:
- `decode-node`: the load is synchronous;
- `decode-node-async`: the load is asynchronous (#49): the scheduler parks the
  request in `WAITING_FOR_REMOTE_KVS`, and the probe's runner reports it in
  `KVConnectorOutput.finished_recving` with the output of the step it started
  in (with two steps in flight, while the next one is already scheduled); the
  scheduler then admits it again.
"""

from __future__ import annotations

from typing import Any

from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
)

NAME = "DifftestDecodeNode"
ASYNC_NAME = "DifftestDecodeNodeAsync"


class DecodeNodeConnector(KVConnectorBase_V1):
    """Loads every prompt token but the last, synchronously; no worker side."""

    @property
    def requires_kv_delivery(self) -> bool:
        # A decode node hands nothing off: a preempted request's in-flight output is delivered.
        return False

    def get_num_new_matched_tokens(
        self, request: Any, num_computed_tokens: int
    ) -> tuple[int | None, bool]:
        if request.num_output_tokens:  # a resumed request recomputes what it lost
            return 0, False
        return max(0, request.num_prompt_tokens - 1 - num_computed_tokens), False

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        return None

    def build_connector_meta(self, scheduler_output: Any) -> KVConnectorMetadata:
        return KVConnectorMetadata()

    # Worker side: never called (the probe runs no model), present because the base declares it.
    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        return None

    def wait_for_layer_load(self, layer_name: str) -> None:
        return None

    def save_kv_layer(
        self, layer_name: str, kv_layer: Any, attn_metadata: Any, **kwargs: Any
    ) -> None:
        return None

    def wait_for_save(self) -> None:
        return None


class AsyncDecodeNodeConnector(DecodeNodeConnector):
    """The same loads, asynchronously: the request waits for its KVs, then is admitted again."""

    def get_num_new_matched_tokens(
        self, request: Any, num_computed_tokens: int
    ) -> tuple[int | None, bool]:
        tokens, _ = super().get_num_new_matched_tokens(request, num_computed_tokens)
        return tokens, bool(tokens)


def register(asynchronous: bool = False) -> str:
    """Make the connector known to vLLM's factory (once per process); its name for the config."""
    name, cls = (
        (ASYNC_NAME, AsyncDecodeNodeConnector) if asynchronous else (NAME, DecodeNodeConnector)
    )
    try:
        KVConnectorFactory.register_connector(name, __name__, cls.__name__)
    except ValueError:  # already registered by an earlier scenario of this probe
        pass
    return name
