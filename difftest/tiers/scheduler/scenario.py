"""Scheduler scenario files (`scenarios/scheduler/*.yaml`): schema, loading, probe data.

A scenario is data, readable in review: k, the draft path, the requests with
their scripted target stream and drafter, the batch orders, and a one-line
statement of what it probes. Loading validates the schema with pydantic and
then plays the script once (the oracle's simulation), so a target stream that
runs out or breaks its own grammar is a ConfigError naming the file, the key
and the fix before any branch is probed.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from difftest.core.errors import ConfigError
from difftest.core.schema import StrictModel
from difftest.probe import conditions
from difftest.probe.scheduler import script
from difftest.tiers.common.scenario import (
    ScenarioBase,
    load_folder,
    read_scenario_file,
    request_id,
    scenario_error,
)
from difftest.tiers.scheduler.play import PlayData, ScriptViolation, play_request

GUIDE = "scenarios/README.md"

_HINTS = {
    "k": "an integer from 1 to 8 (num_speculative_tokens)",
    "draft_path": "`sync` (update_draft_token_ids) or "
    "`async` (AsyncScheduler + update_draft_token_ids_in_output)",
    "orders": "`listed`, `all` (every permutation) or a list of id lists",
    "requests": "a list of `{id, prompt, max_tokens, target, drafter}` mappings",
    "drafter": "`{kind: scripted, steps: [TOKENS...], then: none|perfect}` or "
    "`{kind: random, acceptance: 0.0-1.0}`, each with an optional `skipped: [N, ...]` "
    "(verification steps, from 1, whose drafting the runner skipped)",
    "target": "a token string such as `ab<eos>` or `{random: {length: N, alphabet: abc}}`",
    "grammar": "`{choice: [STRING, ...]}`",
    "statement": "one line saying what the scenario probes",
    **{c.key: c.hint for c in conditions.of_tier("scheduler")},
}


class _Strict(StrictModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Drafter(_Strict):
    #: Verification steps (1 = the request's first after prefill) for which the model runner skipped
    #: the drafter and zero-filled the drafts (#34734); the probe delivers k zeros and, where the
    #: branch's `DraftTokenIds` has one, the runner's `drafting_skipped` flag.
    skipped: list[int] = Field(default_factory=list)

    @field_validator("skipped")
    @classmethod
    def _steps(cls, value: list[int]) -> list[int]:
        if any(n < 1 for n in value) or len(set(value)) != len(value):
            raise ValueError("list distinct verification steps, counted from 1")
        return sorted(value)


class ScriptedDrafter(_Drafter):
    kind: Literal["scripted"]
    #: Drafts for the request's 1st, 2nd, ... verification step; empty = no drafts that step.
    steps: list[str | None] = Field(default_factory=list)
    #: After the listed steps: `none` (no drafts) or `perfect` (the next k target tokens).
    then: Literal["none", "perfect"] = "none"


class RandomDrafter(_Drafter):
    kind: Literal["random"]
    #: Probability that each draft token equals the target's (seeded per seed/request/position).
    acceptance: float = Field(ge=0.0, le=1.0)


class RandomTarget(_Strict):
    length: int = Field(gt=0, le=100_000)
    alphabet: str = "abcdefghijklmnopqrstuvwxyz"


class RandomTargetSpec(_Strict):
    random: RandomTarget


class ChoiceGrammarSpec(_Strict):
    choice: list[str] = Field(min_length=1)


class RequestSpec(_Strict):
    id: str
    prompt: str
    max_tokens: int = Field(gt=0)
    #: The engine step (a turn of the engine core's loop, scheduled or not) before which the
    #: request is added (0: before the first).
    arrive: int = Field(0, ge=0, le=1000)
    #: Abort the request while this step of its own is in flight (0: the step sampling its first
    #: token; n: its n-th step after that), between `schedule()` and `update_from_output()`, its
    #: tokens still in the model output. None: never.
    abort: int | None = Field(None, ge=0)
    eos: str = "<eos>"
    stop: list[str] = Field(default_factory=list)
    grammar: ChoiceGrammarSpec | None = None
    target: str | RandomTargetSpec
    drafter: ScriptedDrafter | RandomDrafter = Field(discriminator="kind")

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        return request_id(value)

    @field_validator("prompt")
    @classmethod
    def _prompt(cls, value: str) -> str:
        if not _tokens(value):
            raise ValueError("needs at least 1 token")
        return value

    @field_validator("eos")
    @classmethod
    def _one_token(cls, value: str) -> str:
        _one(value)
        return value

    @field_validator("stop")
    @classmethod
    def _stops(cls, value: list[str]) -> list[str]:
        for v in value:
            _one(v)
        return value

    @field_validator("target")
    @classmethod
    def _target(cls, value: Any) -> Any:
        if isinstance(value, str):
            _tokens(value)
        else:
            _tokens(value.random.alphabet)
        return value

    @field_validator("drafter")
    @classmethod
    def _drafts(cls, value: Any) -> Any:
        if isinstance(value, ScriptedDrafter):
            for s in value.steps:
                _tokens(s or "")
        return value


class Scenario(ScenarioBase):
    tier: Literal["scheduler"] = "scheduler"
    draft_path: Literal["sync", "async"] = "sync"
    requests: list[RequestSpec] = Field(min_length=1)
    # -- serving conditions (defaults: the plain case every other scenario runs in) --
    #: False: no speculative config at all (a control: no step may report spec stats).
    spec_decoding: bool = True
    #: 2: `schedule()` of step N+1 before `update_from_output()` of step N (async path).
    in_flight: Literal[1, 2] = 1
    prefix_caching: bool = False
    #: `decode-node`: every request's KV but its last prompt token comes from a KV connector;
    #: `decode-node-async`: asynchronously (the request waits for its KVs, then is admitted again).
    kv_connector: Literal["none", "decode-node", "decode-node-async"] = "none"
    #: The KV pool in blocks; None: sized so that nothing is ever preempted.
    kv_blocks: int | None = Field(None, ge=1, le=100_000)
    #: The token budget of one step; None: large enough that nothing is chunked or cut.
    max_num_batched_tokens: int | None = Field(None, ge=1, le=script.MAX_MODEL_LEN)
    #: The context length (`max_model_len`); None: the model folder's 8192. A decode's draft block
    #: is cut to the positions that still fit, and a request ends (`length`) when it is full.
    max_model_len: int | None = Field(None, ge=8, le=script.MAX_MODEL_LEN)
    #: Log the branch's spec-decode line every N engine steps (as a server's logger does on its
    #: timer) and check each interval's line against the oracle's rows of those steps.
    log_every: int | None = Field(None, ge=1, le=1000)
    #: Each finished request returns its own spec-decode metrics
    #: (`ObservabilityConfig.per_request_spec_decode_metrics`), checked against the oracle's.
    per_request_metrics: Literal["none", "summary", "detailed"] = "none"
    #: After the output of this step (a `schedule()` call, from 0) the engine core resets the
    #: prefix cache with `reset_running_requests=True`: every running request is preempted, and
    #: with two steps in flight the other step's output for them is dropped. None: never.
    reset_prefix_cache: int | None = Field(None, ge=0, le=10_000)

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        self.check_request_ids()
        self._check_conditions()
        if self.draft_path == "async":
            skipping = [r.id for r in self.requests if r.drafter.skipped]
            if skipping:
                raise ValueError(
                    f"requests {skipping}: `drafter.skipped` is played on the sync path only "
                    "(the path of the CPU engine); on the async path the skip flag would arrive "
                    "after the placeholders were scheduled"
                )
        return self

    def _check_conditions(self) -> None:
        """Serving conditions the probe can play and whose runs always end."""
        if self.in_flight == 2 and self.draft_path != "async":
            raise ValueError(
                "in_flight: two steps in flight need `draft_path: async` (only AsyncScheduler "
                "schedules a step before the previous one's output is known)"
            )
        if self.log_every is not None and not self.spec_decoding:
            raise ValueError(
                "log_every: with spec decoding off no step has spec-decode stats, so no interval "
                "logs a line and nothing would be checked; remove it, or `spec_decoding: false`"
            )
        if self.per_request_metrics != "none" and not self.spec_decoding:
            raise ValueError(
                f"per_request_metrics: {self.per_request_metrics!r} needs spec decoding (vLLM "
                "refuses the knob without a speculative config): set it to `none`, or remove "
                "`spec_decoding: false`"
            )
        if self.reset_prefix_cache is not None and self.kv_connector == "decode-node-async":
            raise ValueError(
                "reset_prefix_cache: vLLM cannot reset the cache while a request waits for its "
                "remote KVs (it raises); use `kv_connector: decode-node` or drop the reset"
            )
        if self.max_model_len is not None:
            long = [r.id for r in self.requests if len(_tokens(r.prompt)) >= self.max_model_len]
            if long:
                raise ValueError(
                    f"max_model_len: {self.max_model_len} does not hold the prompt of request(s) "
                    f"{long} and one output token; vLLM refuses them: raise max_model_len or "
                    "shorten the prompts"
                )
        budget = self.max_num_batched_tokens
        if budget is not None and self.spec_decoding and budget < self.k + 1:
            raise ValueError(
                f"max_num_batched_tokens: {budget} is below 1 + k = {self.k + 1}: a padded new "
                "decode would never be scheduled (vLLM prefers not scheduling to scheduling "
                "it unpadded)"
            )
        if self.kv_blocks is not None:
            for r in self.requests:
                need = blocks_needed(len(_tokens(r.prompt)), r.max_tokens, self.k)
                if need > self.kv_blocks:
                    raise ValueError(
                        f"kv_blocks: a pool of {self.kv_blocks} cannot hold request {r.id} alone "
                        f"(it needs {need} blocks at its longest, the pool's null block "
                        "included); it would never be scheduled"
                    )

    @property
    def conditions(self) -> list[str]:
        """The serving conditions this scenario runs under, in words (`probe.conditions`), and
        the prompts that make one (a 1-token prompt is scheduled as a padded decode)."""
        found = conditions.described("scheduler", self.probe_data())
        if any(len(_tokens(r.prompt)) == 1 for r in self.requests):
            found.append("1-token prompts")
        return found

    def probe_data(self) -> dict[str, Any]:
        """The plain dict the probe plays (`data` in the job)."""
        return self.model_dump(mode="json", by_alias=True, exclude={"file", "sha256"})

    @cached_property
    def play_data(self) -> PlayData:
        """The probe's data once, for the oracle's plays of every run (read, never changed)."""
        return PlayData.of(self.probe_data())


def blocks_needed(prompt: int, max_tokens: int, k: int) -> int:
    """KV blocks one request needs at its longest: prompt, output, a step's drafts and their
    lookahead, plus the pool's null block (vLLM's block pool keeps block 0 for itself)."""
    return -(-(prompt + max_tokens + 2 * k + 2) // script.BLOCK_SIZE) + 1


def _tokens(value: str) -> list[int]:
    try:
        return script.tokens(value)
    except script.ScriptError as exc:
        raise ValueError(str(exc)) from None


def _one(value: str) -> int:
    try:
        return script.token(value)
    except script.ScriptError as exc:
        raise ValueError(str(exc)) from None


def load_scenario(path: Path) -> Scenario:
    """Read and validate one file, or raise ConfigError naming file, key, value and fix."""
    return parse_scenario(read_scenario_file(path, GUIDE), path)


def parse_scenario(raw: dict[str, Any], source: Path | str) -> Scenario:
    """Validate a scenario mapping as the loader does (schema, then playable): a file's, or a
    generated one."""
    try:
        scenario = Scenario.model_validate(raw)
    except ValidationError as exc:
        raise scenario_error(exc, Path(source), _HINTS, GUIDE) from None
    _check_playable(scenario, source)
    return scenario


def load_scenarios(folder: Path) -> list[Scenario]:
    """Every `*.yaml` in `folder`, sorted by file name."""
    return load_folder(folder, load_scenario)


def _check_playable(scenario: Scenario, path: Path | str) -> None:
    """Play every request once; a script that cannot be played is the author's error, not a
    branch's."""
    for req in scenario.requests:
        try:
            played = play_request(scenario.play_data, req.id)
        except (script.ScriptError, ScriptViolation) as exc:
            raise ConfigError(
                f"{path}: requests.{req.id}: {exc}",
                "make the target stream long enough to reach a stop (or max_tokens) "
                "and keep it inside its grammar",
            ) from None
        _check_fits(scenario, req, len(played.output), path)
        if req.abort is not None and req.abort >= len(played.steps):
            # A batch can only add steps to a request (a cut draft block, a recompute), never take
            # one away: an abort that misses it alone misses it everywhere.
            raise ConfigError(
                f"{path}: requests.{req.id}.abort: {req.abort} never lands: the request ends "
                f"after {len(played.steps)} step(s) of its own (0 to {len(played.steps) - 1})",
                f"give `abort` a step from 0 to {len(played.steps) - 1}, or raise `max_tokens`",
            )


def _check_fits(scenario: Scenario, req: RequestSpec, output: int, path: Path | str) -> None:
    """Prompt + output + one step's drafts must stay below the probe model's context length:
    vLLM would cap the request there (finish `length`, fewer drafts), a false `diverge` on every
    branch."""
    prompt = len(_tokens(req.prompt))
    needed = prompt + output + scenario.k + 1
    if needed > script.MAX_MODEL_LEN:
        raise ConfigError(
            f"{path}: requests.{req.id}: needs {needed} tokens of context "
            f"(prompt {prompt} + output {output} + k={scenario.k} drafts + 1), "
            f"more than the probe model's max_model_len {script.MAX_MODEL_LEN}",
            "shorten the prompt, the target stream or `max_tokens`",
        )
