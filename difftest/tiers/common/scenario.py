"""What every scenario has, whatever its tier: identity, batch orders, planned runs, file reading.

The scheduler tier (scripted model) and the engine tier (real model) describe
requests differently, but both are run in the same batch orders plus each
request alone, are keyed by name in the evidence, and are read from YAML files
with the same error messages. That shared part lives here, once.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import yaml
from pydantic import ConfigDict, Field, ValidationError, field_validator

from difftest.core.errors import ConfigError
from difftest.core.schema import StrictModel
from difftest.core.text import clean
from difftest.core.validation import describe
from difftest.core.values import quote
from difftest.core.yamlfile import read_yaml
from difftest.probe.protocol import JobScenario, PlannedRun

#: A tier's own scenario class, kept by `load_folder` for its callers.
ScenarioT = TypeVar("ScenarioT", bound="ScenarioBase")

_REQUEST_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
_SCENARIO_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
MAX_SCENARIO_NAME = 100


class ScenarioIdentity(StrictModel):
    """What the pipeline, the evidence and the reports need of any tier's scenario: a name, a
    one-line statement, and where it was read from (file and hash), for `verify`."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    name: str
    statement: str = Field(min_length=1)
    seed: int = 0
    #: Set by the loader, not written in the file.
    file: str = ""
    sha256: str = ""

    @field_validator("name")
    @classmethod
    def _safe_name(cls, value: str) -> str:
        # A scenario's name goes into commands printed for a person to paste, file names and
        # terminal lines: the same characters as a branch's name.
        if not _SCENARIO_NAME.match(value) or len(value) > MAX_SCENARIO_NAME:
            raise ValueError(
                f"use at most {MAX_SCENARIO_NAME} letters, digits, '.', '_' or '-', starting with "
                f"a letter or digit (got {value[:60]!r})"
            )
        return value

    @field_validator("statement")
    @classmethod
    def _one_line(cls, value: str) -> str:
        if "\n" in value.strip():
            raise ValueError("must be one line")
        # Terminal escape sequences (a screen clear, an OSC 8 link) never reach a terminal.
        return clean(value.strip())

    def runs(self) -> list[PlannedRun]:
        """The planned runs a probe plays (none for tiers that are not measured by probes)."""
        return []

    @property
    def conditions(self) -> list[str]:
        """The serving conditions the scenario runs under, in words (none: the plain case, and
        every tier without serving conditions, such as the tests tier)."""
        return []


class ScenarioBase(ScenarioIdentity):
    """A batch of requests played in several orders. Subclasses add `tier` and `requests`
    (each request has an `id`)."""

    k: int = Field(ge=1, le=8)
    #: YAML key `orders`: `listed`, `all` (every permutation) or explicit id lists.
    batch_orders: Literal["listed", "all"] | list[list[str]] = Field("listed", alias="orders")
    #: Run each request alone too (needed by the additivity invariant); default: when there are
    #: several.
    alone: bool | None = None
    if TYPE_CHECKING:
        # Declared for the type checker only: each subclass's own `requests` field is the one
        # pydantic validates.
        requests: Sequence[Any]

    @property
    def request_ids(self) -> list[str]:
        return [r.id for r in self.requests]

    def request(self, rid: str) -> Any:
        return next(r for r in self.requests if r.id == rid)

    def check_request_ids(self) -> None:
        """Unique ids, and explicit orders that are permutations of them (ValueError otherwise)."""
        ids = self.request_ids
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"requests: duplicate id(s) {dupes}")
        if isinstance(self.batch_orders, list):
            if not self.batch_orders:
                raise ValueError(
                    "orders: an empty list runs nothing; "
                    "write `listed`, `all` or at least one order"
                )
            seen: list[list[str]] = []
            for order in self.batch_orders:
                if sorted(order) != sorted(ids):
                    raise ValueError(
                        f"orders: {quote(order)} is not a permutation "
                        f"of the request ids {quote(ids)}"
                    )
                if order in seen:
                    raise ValueError(
                        f"orders: {quote(order)} is listed twice; each order runs once"
                    )
                seen.append(order)

    def orders(self) -> list[list[str]]:
        """The batch orders to run: the listed order, every permutation, or the explicit list."""
        ids = self.request_ids
        if self.batch_orders == "all":
            return [list(p) for p in itertools.permutations(ids)]
        if self.batch_orders == "listed":
            return [ids]
        return [list(o) for o in self.batch_orders]

    def batch_and_alone_runs(self) -> list[PlannedRun]:
        """Each batch order, then (with several requests, unless `alone: false`) each request
        alone."""
        runs: list[PlannedRun] = [
            {"label": order_label(o), "order": o, "role": "batch"} for o in self.orders()
        ]
        alone = self.alone if self.alone is not None else len(self.request_ids) > 1
        if alone:
            runs += [
                {"label": f"alone:{rid}", "order": [rid], "role": "alone"}
                for rid in self.request_ids
            ]
        return runs

    def runs(self) -> list[PlannedRun]:
        """Every planned run, in the order the probe plays them (tiers may add reference runs)."""
        return self.batch_and_alone_runs()

    def probe_data(self) -> dict[str, Any]:
        """The plain data the tier's probe plays."""
        raise NotImplementedError

    def job_scenario(self) -> JobScenario:
        """This scenario as the probe's job lists it."""
        return {
            "name": self.name,
            "file": self.file,
            "data": self.probe_data(),
            "runs": self.runs(),
        }


def order_label(order: list[str]) -> str:
    return "order:" + ",".join(order)


def read_scenario_file(path: Path, guide: str) -> dict[str, Any]:
    """The file's mapping plus what the loader sets: `name` (default: the file's stem), `file`,
    `sha256`."""
    raw_bytes = path.read_bytes()
    raw = read_yaml(path, raw_bytes)
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping", f"see {guide} for the format")
    raw.setdefault("name", path.stem)
    return {**raw, "file": path.name, "sha256": hashlib.sha256(raw_bytes).hexdigest()}


def scenario_file_text(raw: dict[str, Any], comments: Sequence[str] = ()) -> str:
    """A scenario file for `raw`: `# ` comment lines, then the mapping as YAML (`read_scenario_file`
    reads it back)."""
    head = "".join(
        f"# {line}\n" if line else "#\n"
        for comment in comments
        for line in comment.splitlines() or [""]
    )
    return head + yaml.safe_dump(
        raw, sort_keys=False, default_flow_style=None, allow_unicode=True, width=120
    )


def scenario_error(
    exc: ValidationError, path: Path | str, hints: dict[str, str], guide: str
) -> ConfigError:
    """One line per problem (key, message, bad value) and the fixes that apply."""

    def hint_for(key: str) -> str | None:
        part = next((p for p in reversed(key.split(".")) if p in hints), None)
        return f"{part}: {hints[part]}" if part else None

    lines, fixes = describe(exc, hint_for)
    return ConfigError(
        f"{path}: invalid scenario\n" + "\n".join(lines),
        "; ".join(fixes) or f"compare with {guide}",
    )


def request_id(value: str) -> str:
    """A request id appears in run labels (`order:a,b`, `alone:a`): keep it plain."""
    if not _REQUEST_ID.match(value):
        raise ValueError("use letters, digits, '_' or '-' (it appears in run labels)")
    return value


def check_unique_names(scenarios: Sequence[ScenarioBase]) -> None:
    seen: dict[str, str] = {}
    for s in scenarios:
        if s.name in seen:
            raise ConfigError(
                f"{s.file}: name {s.name!r} already used by {seen[s.name]}",
                "give every scenario its own name",
            )
        seen[s.name] = s.file


def scenario_files(folder: Path) -> list[Path]:
    files = sorted(Path(folder).glob("*.yaml"))
    if not files:
        raise ConfigError(
            f"{folder}: no *.yaml scenario files", "add a scenario (see scenarios/README.md)"
        )
    return files


def load_folder(folder: Path, load_file: Callable[[Path], ScenarioT]) -> list[ScenarioT]:
    """Every `*.yaml` in `folder`, sorted by file name, with unique scenario names."""
    scenarios = [load_file(f) for f in scenario_files(folder)]
    check_unique_names(scenarios)
    return scenarios
