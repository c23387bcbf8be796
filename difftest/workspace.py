"""From a validated config to one ready interpreter per branch.

Order matters for the user: everything that can be wrong in the config (an
unknown ref, a patch that does not apply, a path that is not a repository) is
found before any environment is built, and raises (exit 2). A branch whose
environment then fails to build is kept as a could-not-measure branch, so the
other branches' results survive.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
import git

from difftest.config import BranchSpec, Config
from difftest.envs.base import BaseEnv, ensure_base
from difftest.envs.branch import BranchEnv, ensure_branch_env
from difftest.envs.base import Log
from difftest.errors import EnvironmentBuildError, RefError
from difftest.refs import (
    ResolvedBranch,
    ensure_fixture_repo,
    fetch,
    open_repo,
    resolve_branch,
    resolve_ref,
)


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
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", name_or_ref).strip("-.") or "ref"
    return BranchSpec(name=slug, ref=name_or_ref)


def open_source_repo(
    config: Config,
    base: BaseEnv,
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
            fetch(repo, refs=refs or [b.ref for b in config.branches])
        return repo
    if do_fetch:
        log("--fetch ignored: the fixture repo has no remote")
    return open_repo(ensure_fixture_repo(base.vllm_dir, config.base.package, config.base.version))


def prepare(
    config: Config,
    names: list[str] | None = None,
    do_fetch: bool = False,
    log: Log = lambda _m: None,
) -> Workspace:
    """Build or reuse the base and the selected branches' environments."""
    specs = [branch_spec(config, n) for n in names] if names else list(config.branches)
    base = ensure_base(config.base, log)
    repo = open_source_repo(config, base, do_fetch, log, [spec.ref for spec in specs])
    try:
        resolve_ref(repo, config.base_ref)
    except RefError as exc:
        raise RefError(
            f"the base release's commit {config.base_ref!r} is not in {repo.working_dir}: {exc.problem}",
            "set `repo.base_ref` to the commit whose Python matches the base wheel (e.g. tag v0.32.0), "
            "or fetch tags (`--fetch`)",
        ) from None
    resolved = [resolve_branch(repo, spec) for spec in specs]
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
