"""Engine scenario files (`scenarios/engine/*.yaml`): schema, run plan, probe data.

Unlike scheduler scenarios, nothing here scripts the model: the engine runs a
real tiny Llama greedily, so a scenario says which prompts to send, how each
request may be cut (EOS / stop token / max_tokens inside accepted drafts, the
cut chosen by the probe from a reference run), and which structured output it
must follow. Every engine scenario of one job runs on ONE engine (one per
process on CPU), so the engine settings must agree across the folder; the
loader checks that before anything is run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from difftest.core.errors import ConfigError
from difftest.core.schema import StrictModel
from difftest.probe import conditions
from difftest.probe.protocol import PlannedRun
from difftest.tiers.common.scenario import (
    ScenarioBase,
    load_folder,
    read_scenario_file,
    request_id,
    scenario_error,
)

GUIDE = "scenarios/README.md (Engine scenarios)"

#: The serving conditions' keys, explained in loader errors (`probe.conditions`).
_HINTS = {c.key: c.hint for c in conditions.of_tier("engine")}

Truncate = Literal["none", "eos", "stop", "max_tokens", "boundary", "stop_string"]


class _Strict(StrictModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EngineSettings(_Strict):
    """The one engine of a probe process; identical across the scenarios of a job."""

    prompt_lookup_min: int = Field(default=1, ge=1, le=8)
    prompt_lookup_max: int = Field(default=3, ge=1, le=8)
    max_model_len: int = Field(default=1024, ge=64, le=2048)
    max_num_seqs: int = Field(default=8, ge=1, le=64)
    #: `ngram` on CPU; `ngram_gpu` / `draft_model` (the tiny model drafting for itself) need CUDA.
    method: Literal["ngram", "ngram_gpu", "draft_model"] = "ngram"
    async_scheduling: bool = False
    #: A local model folder (config.json, tokenizer, weights) to use instead of the tiny model.
    model: str | None = None
    #: Serving conditions (README "Engine scenarios"); unset: the platform's plain case.
    #: Automatic prefix caching; the probe resets the cache before every batch.
    prefix_caching: bool = False
    #: KV block size in tokens (the CPU attention backend takes multiples of 32; its default: 128).
    block_size: int | None = Field(default=None, ge=16, le=256, multiple_of=16)
    #: KV blocks in the pool (`num_gpu_blocks_override`): small enough and requests are preempted.
    kv_blocks: int | None = Field(default=None, ge=2, le=100_000)
    #: The token budget of a step (`max_num_batched_tokens`): a longer prompt is chunked.
    max_num_batched_tokens: int | None = Field(default=None, ge=16, le=65_536)

    @model_validator(mode="after")
    def _pool_holds_a_request(self) -> EngineSettings:
        if self.kv_blocks is not None:
            if self.block_size is None:
                raise ValueError(
                    "engine.kv_blocks needs engine.block_size (the default block size differs by "
                    "platform)"
                )
            if self.kv_blocks * self.block_size < self.max_model_len:
                raise ValueError(
                    f"engine.kv_blocks {self.kv_blocks} x block_size {self.block_size} tokens "
                    f"cannot hold one request of max_model_len {self.max_model_len}: vLLM refuses "
                    "to start"
                )
        if self.max_num_batched_tokens is not None and self.max_num_batched_tokens < (
            self.max_num_seqs
        ):
            raise ValueError(
                f"engine.max_num_batched_tokens {self.max_num_batched_tokens} is below "
                f"engine.max_num_seqs {self.max_num_seqs}"
            )
        return self

    @field_validator("model")
    @classmethod
    def _local_model(cls, value: str | None) -> str | None:
        if value is not None and not (Path(value).expanduser() / "config.json").is_file():
            raise ValueError(
                f"{value!r} is not a local model folder (no config.json); nothing is downloaded"
            )
        return str(Path(value).expanduser().resolve()) if value else None


class StructuredSpec(_Strict):
    """Exactly one of a regex, a JSON schema or a list of choices (vLLM's
    StructuredOutputsParams)."""

    regex: str | None = None
    json_schema: dict[str, Any] | None = Field(None, alias="json")
    choice: list[str] | None = Field(None, min_length=1)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _one(self) -> StructuredSpec:
        given = [k for k in ("regex", "json_schema", "choice") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of regex, json, choice (got {given or 'none'})")
        return self

    def params(self) -> dict[str, Any]:
        """Keyword arguments for vLLM's StructuredOutputsParams."""
        if self.regex is not None:
            return {"regex": self.regex}
        if self.json_schema is not None:
            return {"json": self.json_schema}
        return {"choice": list(self.choice or [])}


class EngineRequest(_Strict):
    id: str
    #: Text; the engine tokenizes it with the tiny model's tokenizer (must give >= 2 tokens).
    prompt: str = Field(min_length=2)
    max_tokens: int = Field(gt=0, le=512)
    #: How the probe cuts this request inside accepted drafts, chosen from a reference run.
    truncate: Truncate = "none"
    #: With `truncate: stop_string`: how many output tokens the stop string spans (2 and more can
    #: span two steps), and whether the response keeps it (`include_stop_str_in_output`).
    stop_string_tokens: int | None = Field(None, ge=1, le=4)
    include_stop_str_in_output: bool | None = None
    #: With `truncate: eos`: the request ignores its EOS (`SamplingParams.ignore_eos`), so the
    #: chosen EOS inside accepted drafts must end nothing: the request runs on to `max_tokens`.
    ignore_eos: bool | None = None
    #: Where the cut goes: on an accepted draft that is not its block's last (default), or on the
    #: bonus token of a step that accepted drafts (`bonus`: nothing accepted is trimmed, a control).
    place: Literal["accepted", "bonus"] = "accepted"
    #: `SamplingParams.min_tokens`: EOS and stop token ids are held back until the request has
    #: this many output tokens. With `truncate: eos` / `stop` it must lie past the cut, which the
    #: request then does not end on (the probe checks it once the cut is chosen).
    min_tokens: int | None = Field(None, ge=1, le=512)
    #: Append the model's own first N greedy tokens to the prompt (puts its loop where ngram can
    #: draft from it).
    prime: int = Field(0, ge=0, le=64)
    structured: StructuredSpec | None = None
    #: The request is meant to run into engine.max_model_len (finish `length`): the context check,
    #: which otherwise refuses a request vLLM would cap, does not apply to it.
    until_max_model_len: bool = False
    #: Abort the request (`LLMEngine.abort_request`) right after its N-th sampling step (the
    #: prefill's is the 1st), between two engine steps, as a client that disconnects: it has
    #: received the tokens of N steps, as a scheduler scenario's `abort: N` (one key, both tiers).
    abort: int | None = Field(None, ge=1, le=511)

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, raw: Any) -> Any:
        if isinstance(raw, dict) and "abort_after_steps" in raw:
            raise ValueError(
                "abort_after_steps is now `abort` (the same N: the request is aborted right "
                "after its N-th sampling step), the key a scheduler scenario uses: rename it"
            )
        return raw

    @model_validator(mode="after")
    def _stop_string_options(self) -> EngineRequest:
        if self.truncate != "stop_string" and (
            self.stop_string_tokens is not None or self.include_stop_str_in_output is not None
        ):
            raise ValueError(
                "stop_string_tokens and include_stop_str_in_output apply to `truncate: "
                f"stop_string` only (this request has truncate {self.truncate!r}): set it, or "
                "remove them"
            )
        if self.ignore_eos is not None and self.truncate != "eos":
            raise ValueError(
                f"ignore_eos applies to `truncate: eos` only (this request has truncate "
                f"{self.truncate!r}): an ignored EOS needs an EOS placed inside accepted drafts"
            )
        if self.truncate == "stop_string" and (self.stop_string_tokens or 1) >= self.max_tokens:
            raise ValueError(
                f"stop_string_tokens {self.stop_string_tokens or 1} needs max_tokens above it (it "
                f"is {self.max_tokens}): the string must complete on an accepted draft after them"
            )
        return self

    @model_validator(mode="after")
    def _placed_by_a_stop(self) -> EngineRequest:
        if self.place == "bonus" and self.truncate not in ("eos", "stop", "stop_string"):
            raise ValueError(
                f"place: bonus puts an EOS, stop token or stop string on a bonus token: it needs "
                f"`truncate: eos`, `stop` or `stop_string` (this request has truncate "
                f"{self.truncate!r}; for max_tokens on a step boundary use `truncate: boundary`)"
            )
        return self

    @model_validator(mode="after")
    def _min_tokens_reachable(self) -> EngineRequest:
        if self.min_tokens is None:
            return self
        if self.min_tokens > self.max_tokens:
            raise ValueError(
                f"min_tokens {self.min_tokens} is above max_tokens {self.max_tokens}: vLLM "
                "refuses the request; lower min_tokens or raise max_tokens"
            )
        if self.truncate not in ("eos", "stop") or self.ignore_eos:
            raise ValueError(
                f"min_tokens holds back EOS and stop token ids: it applies with `truncate: eos` "
                f"or `stop`, which place one inside accepted drafts for it to hold back (this "
                f"request has truncate {self.truncate!r}"
                f"{' and ignore_eos' if self.ignore_eos else ''}); remove min_tokens or change "
                "the cut"
            )
        return self

    @model_validator(mode="after")
    def _abort_before_the_end(self) -> EngineRequest:
        if self.abort is None:
            return self
        if self.abort >= self.max_tokens:
            # Every sampling step emits at least one token: the request would end first.
            raise ValueError(
                f"abort {self.abort} must be below max_tokens {self.max_tokens}, or the request "
                "ends before the abort"
            )
        if self.truncate != "none" or self.until_max_model_len:
            raise ValueError(
                "abort cannot be combined with truncate or until_max_model_len: the "
                "request must end by the abort"
            )
        return self

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        return request_id(value)


class EngineScenario(ScenarioBase):
    tier: Literal["engine"] = "engine"
    engine: EngineSettings = Field(default_factory=EngineSettings)
    #: `cuda`: needs a CUDA base (async scheduling, ngram_gpu/draft_model); not run on a CPU base,
    #: and the evidence says so.
    requires: Literal["cpu", "cuda"] = "cpu"
    requests: list[EngineRequest] = Field(min_length=1)
    #: Check each finished request's own spec-decode metrics against the oracle's. The engine
    #: probe always runs with `per_request_spec_decode_metrics: detailed` (one engine serves every
    #: scenario of a job), so this says what is checked: `summary` leaves out the per-step lists.
    per_request_metrics: Literal["none", "summary", "detailed"] = "none"

    @model_validator(mode="after")
    def _consistent(self) -> EngineScenario:
        self.check_request_ids()
        if self.engine.prompt_lookup_min > self.engine.prompt_lookup_max:
            raise ValueError("engine.prompt_lookup_min must be <= engine.prompt_lookup_max")
        if self.engine.method != "ngram" and self.requires != "cuda":
            raise ValueError(
                f"engine.method {self.engine.method!r} runs only on CUDA: set `requires: cuda`"
            )
        for r in self.requests:
            # Byte-level BPE: a prompt has at most one token per byte, plus a BOS token.
            needed = len(r.prompt.encode()) + 1 + r.prime + r.max_tokens + self.k + 1
            if needed > self.engine.max_model_len and not r.until_max_model_len:
                raise ValueError(
                    f"requests.{r.id}: may need {needed} tokens of context "
                    "(prompt bytes + BOS + prime + max_tokens + k drafts + 1), "
                    f"more than engine.max_model_len {self.engine.max_model_len}: "
                    "vLLM would cap it (a false diverge); shorten the prompt or max_tokens, "
                    "raise engine.max_model_len, or, if the request is meant to end there, "
                    "write `until_max_model_len: true`"
                )
        return self

    @property
    def conditions(self) -> list[str]:
        """The serving conditions this scenario runs under, in words (`probe.conditions`)."""
        return conditions.described("engine", self.model_dump(mode="json", by_alias=True))

    def engine_key(self) -> dict[str, Any]:
        """What must be equal across a job's scenarios (the probe's ENGINE_KEYS, plus
        method/async)."""
        return {"k": self.k, "seed": self.seed, **self.engine.model_dump()}

    def runs(self) -> list[PlannedRun]:
        """Reference runs (uncut, for every truncating request) first, then batch orders, then
        alone."""
        references: list[PlannedRun] = [
            {"label": f"reference:{r.id}", "order": [r.id], "role": "reference"}
            for r in self.requests
            if r.truncate != "none"
        ]
        return references + self.batch_and_alone_runs()

    def probe_data(self) -> dict[str, Any]:
        """The plain dict the engine probe plays."""
        return {
            "name": self.name,
            "tier": "engine",
            "seed": self.seed,
            "k": self.k,
            "engine": self.engine_key(),
            "requests": [
                {
                    "id": r.id,
                    "prompt": r.prompt,
                    "max_tokens": r.max_tokens,
                    "truncate": r.truncate,
                    "stop_string_tokens": r.stop_string_tokens,
                    "include_stop_str_in_output": r.include_stop_str_in_output,
                    "ignore_eos": r.ignore_eos,
                    "min_tokens": r.min_tokens,
                    "place": r.place,
                    "prime": r.prime,
                    "structured": r.structured.params() if r.structured else None,
                    "abort": r.abort,
                }
                for r in self.requests
            ],
        }


def load_engine_scenario(path: Path) -> EngineScenario:
    return parse_engine_scenario(read_scenario_file(path, GUIDE), path)


def parse_engine_scenario(raw: dict[str, Any], source: Path | str) -> EngineScenario:
    """One scenario mapping, validated as a file is (`source` names it in errors)."""
    try:
        return EngineScenario.model_validate(raw)
    except ValidationError as exc:
        raise scenario_error(exc, source, _HINTS, GUIDE) from None


def load_engine_scenarios(folder: Path) -> list[EngineScenario]:
    """Every `*.yaml` in `folder`, sorted; one engine config for all, unique names."""
    scenarios = load_folder(folder, load_engine_scenario)
    check_shared_engine(scenarios)
    return scenarios


def check_shared_engine(scenarios: list[EngineScenario]) -> None:
    """One engine per probe process: every scenario must ask for the same engine."""
    if not scenarios:
        return
    first = scenarios[0]
    for s in scenarios[1:]:
        if s.engine_key() != first.engine_key():
            diff = {
                k: (first.engine_key()[k], v)
                for k, v in s.engine_key().items()
                if first.engine_key()[k] != v
            }
            raise ConfigError(
                f"{s.file}: engine settings differ from {first.file}: {diff}",
                "all engine scenarios of a folder share one engine (one per process on CPU): "
                "use the same k, seed and `engine:`",
            )
