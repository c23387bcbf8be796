"""Scheduler scenario files (`scenarios/scheduler/*.yaml`): schema, loading, probe data.

A scenario is data, readable in review: k, the draft path, the requests with
their scripted target stream and drafter, the batch orders, and a one-line
statement of what it probes. Loading validates the schema with pydantic and
then plays the script once (the oracle's simulation), so a target stream that
runs out or breaks its own grammar is a ConfigError naming the file, the key
and the fix before any branch is probed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from difftest.core.errors import ConfigError
from difftest.probe.scheduler import script
from difftest.tiers.common.scenario import (
    ScenarioBase,
    load_folder,
    read_scenario_file,
    request_id,
    scenario_error,
)
from difftest.tiers.scheduler.play import ScriptViolation, play_request

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
}


class _Strict(BaseModel):
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
        ids = _tokens(value)
        if len(ids) < 2:
            # A 1-token prompt meets the scheduler's -1 padding of new decodes (#50518): not this
            # tier's subject.
            raise ValueError(
                "needs at least 2 tokens (a 1-token prompt gets scheduler -1 padding, #50518)"
            )
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

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        self.check_request_ids()
        if self.draft_path == "async":
            skipping = [r.id for r in self.requests if r.drafter.skipped]
            if skipping:
                raise ValueError(
                    f"requests {skipping}: `drafter.skipped` is played on the sync path only "
                    "(the path of the CPU engine); on the async path the skip flag would arrive "
                    "after the placeholders were scheduled"
                )
            for r in self.requests:
                if isinstance(r.drafter, ScriptedDrafter):
                    short = [s for s in r.drafter.steps if len(_tokens(s or "")) != self.k]
                    if short:
                        raise ValueError(
                            f"requests.{r.id}.drafter.steps: on the async path "
                            f"a drafter proposes exactly k={self.k} tokens per step "
                            f"(fewer become -1 placeholders, #44056); got {short}"
                        )
                    if r.drafter.then == "none":
                        raise ValueError(
                            f"requests.{r.id}.drafter.then: `none` is not possible "
                            "on the async path (k placeholders are always scheduled); "
                            "use `perfect`"
                        )
        return self

    def probe_data(self) -> dict[str, Any]:
        """The plain dict the probe plays (`data` in the job)."""
        return self.model_dump(mode="json", by_alias=True, exclude={"file", "sha256"})


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
    data = scenario.probe_data()
    for req in scenario.requests:
        try:
            played = play_request(data, req.id)
        except (script.ScriptError, ScriptViolation) as exc:
            raise ConfigError(
                f"{path}: requests.{req.id}: {exc}",
                "make the target stream long enough to reach a stop (or max_tokens) "
                "and keep it inside its grammar",
            ) from None
        _check_fits(scenario, req, len(played.output), path)


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
