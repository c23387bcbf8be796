"""From a validated config to one ready interpreter per branch.

Order matters for the user: everything that can be wrong in the config (an
unknown ref, a patch that does not apply, a path that is not a repository) is
found before any environment is built, and raises (exit 2). A branch whose
environment then fails to build is kept as a could-not-measure branch, so the
other branches' results survive.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import git

from difftest.build.envs.base import BaseEnv, Log, ensure_base
from difftest.build.envs.branch import BranchEnv, ensure_branch_env
from difftest.build.refs import (
    BranchContext,
    ResolvedBranch,
    ensure_fixture_repo,
    fetch,
    open_repo,
    repo_label,
    resolve_branch,
    resolve_ref,
)
from difftest.build.tests.sdist import upstream_tests
from difftest.core.config import (
    MAX_BRANCHES,
    BranchSpec,
    Config,
    branch_name_for,
    distinct_branch_name,
)
from difftest.core.errors import ConfigError, EnvironmentBuildError, RefError


@dataclass
class PreparedBranch:
    resolved: ResolvedBranch
    env: BranchEnv | None = None
    error: str | None = None

    @property
    def name(self) -> str:
        return self.resolved.name


@dataclass
class Workspace:
    config: Config
    base: BaseEnv
    repo: git.Repo
    branches: list[PreparedBranch] = field(default_factory=list)

    def branch(self, name: str) -> PreparedBranch:
        return next(b for b in self.branches if b.name == name)


def branch_spec(config: Config, name_or_ref: str) -> BranchSpec:
    """A branch of the config by name (with its patches), or any git ref as an ad-hoc branch."""
    known = config.branch(name_or_ref)
    if known is not None:
        return known
    return BranchSpec(name=branch_name_for(name_or_ref), ref=name_or_ref)


def open_source_repo(
    config: Config,
    base: BaseEnv | None,
    do_fetch: bool = False,
    log: Log = lambda _m: None,
    refs: list[str] | None = None,
) -> git.Repo:
    """The user's vLLM clone (fetched first with `--fetch`, pull-request heads among `refs`
    included), or the fixture repo built from the base's own sources."""
    if config.repo.path is not None:
        repo = open_repo(config.repo.path)
        if do_fetch:
            log(f"fetching in {config.repo.path}")
            fetch(repo, refs=refs or refs_to_fetch(config, config.branches))
        return repo
    if do_fetch:
        log("--fetch ignored: the fixture repo has no remote")
    if base is None:
        base = ensure_base(config.base, log)
    tests = upstream_tests(config.base.version)
    if tests is None:
        log(
            f"no source distribution is pinned for vLLM {config.base.version}: the fixture repo "
            "has no tests/"
        )
    return open_repo(
        ensure_fixture_repo(
            base.vllm_dir,
            config.base.package,
            config.base.version,
            upstream=tests.folder if tests else None,
            upstream_id=tests.sha256 if tests else "",
        )
    )


def prepare(
    config: Config,
    names: list[str] | None = None,
    do_fetch: bool = False,
    log: Log = lambda _m: None,
    before_build: Callable[[git.Repo, list[ResolvedBranch]], None] | None = None,
) -> Workspace:
    """Build or reuse the base and the selected branches' environments.

    With a real clone (`repo.path`), every ref and patch is resolved before the
    base is built, so a typo costs seconds, not a base build. The fixture
    repository is made from the base's own sources, so there the base comes first.
    `before_build` sees the resolved commits before any branch environment is
    built (and, with a real clone, before the base): what it raises costs no build.
    """
    specs = branch_specs(config, names)
    if config.repo.path is not None:
        repo = open_source_repo(config, None, do_fetch, log, refs_to_fetch(config, specs))
        resolved = _resolve(config, repo, specs)
        if before_build is not None:
            before_build(repo, resolved)
        base = ensure_base(config.base, log)
    else:
        base = ensure_base(config.base, log)
        repo = open_source_repo(config, base, do_fetch, log)
        resolved = _resolve(config, repo, specs)
        if before_build is not None:
            before_build(repo, resolved)
    workspace = Workspace(config=config, base=base, repo=repo)
    for branch in resolved:
        prepared = PreparedBranch(branch)
        try:
            prepared.env = ensure_branch_env(base, repo, branch, config.base_ref, log)
        except EnvironmentBuildError as exc:
            prepared.error = str(exc)
            log(f"{branch.name}: could not build its environment: {exc.problem}")
        workspace.branches.append(prepared)
    return workspace


def branch_specs(config: Config, names: list[str] | None) -> list[BranchSpec]:
    """The branches to compare: configured names or git refs, each once."""
    if not names:
        return list(config.branches)
    if len(names) > MAX_BRANCHES:
        raise ConfigError(
            f"{len(names):,} branches to compare (those named and the baseline): at most "
            f"{MAX_BRANCHES} are compared in one run",
            "compare fewer branches at a time (each is an environment and a probe per tier)",
        )
    specs: list[BranchSpec] = []
    given: dict[str, str] = {}
    configured = {b.name for b in config.branches}
    for name in names:
        spec = branch_spec(config, name)
        if spec.name in given and given[spec.name] == name:
            raise ConfigError(
                f"branch {name!r} is listed twice on the command line", "name each branch once"
            )
        if spec.name in configured and config.branch(name) is None:
            # `main^{}` beside `main`, or `main;`: never measured under a configured branch's name.
            raise ConfigError(
                f"branch {name!r} is listed twice on the command line (as {spec.name!r}, the name "
                "of a configured branch)",
                "name each branch once; a ref of its own needs a name of its own in branches.yaml",
            )
        if spec.name in given:
            # Two refs whose names collide once made branch names (`x;y`, `x&y`): the later one
            # keeps its ref and gets a name of its own.
            spec = spec.model_copy(update={"name": distinct_branch_name(spec.name, name)})
            if spec.name in given:
                raise ConfigError(
                    f"branch {name!r} is listed twice on the command line (as {spec.name!r})",
                    "name each branch once",
                )
        given[spec.name] = name
        specs.append(spec)
    return specs


def refs_to_fetch(config: Config, specs: list[BranchSpec]) -> list[str]:
    """The refs these branches name, stack members' included (pull-request heads are fetched by
    name)."""
    refs: list[str] = []
    for spec in specs:
        members = [config.branch(m) for m in spec.stack] if spec.stack else [spec]
        refs += [m.ref for m in members if m is not None and m.ref is not None]
    return list(dict.fromkeys(refs))


def branch_context(config: Config) -> BranchContext:
    """What resolving a transplanted branch or a stack needs from the config."""
    return BranchContext(
        base_ref=config.base_ref,
        mainline=config.repo.mainline,
        branches={b.name: b for b in config.branches},
    )


def _resolve(config: Config, repo: git.Repo, specs: list[BranchSpec]) -> list[ResolvedBranch]:
    """Every branch as commits (patches applied), after checking the base release's commit
    exists."""
    try:
        resolve_ref(repo, config.base_ref)
    except RefError as exc:
        raise RefError(
            f"the base release's commit {config.base_ref!r} is not in {repo_label(repo)}: "
            f"{exc.problem}",
            "set `repo.base_ref` to the commit whose Python matches the base wheel (e.g. tag "
            "v0.32.0), or fetch tags (`--fetch`)",
        ) from None
    return [resolve_spec(config, repo, spec) for spec in specs]


def resolve_spec(config: Config, repo: git.Repo, spec: BranchSpec) -> ResolvedBranch:
    """One branch of (or ad hoc for) this config as commits (transplants and stacks resolved in the
    config's context); a name that is neither a configured branch nor a ref says which branches
    there are."""
    try:
        return resolve_branch(repo, spec, branch_context(config))
    except RefError as exc:
        if config.branch(spec.name) is not None or spec.patches:
            raise
        known = ", ".join(b.name for b in config.branches)
        raise RefError(
            f"{spec.ref!r} is neither a branch of the config ({known}) nor a git ref: "
            f"{exc.problem}",
            f"name a configured branch ({known}) or a git ref; {exc.hint}"
            if exc.hint
            else f"name one of: {known}",
        ) from None
