"""What the gate's head changes relative to its base: every changed file, and those on the stats
path.

The base and the head are resolved as every command resolves a branch (the
configured source repository, fetched first when asked), then diffed by git
(`refs.diff`).
"""

from __future__ import annotations

from dataclasses import dataclass

import git

from difftest.build.envs.base import Log
from difftest.build.refs.diff import Change, changed_files, touches
from difftest.build.workspace import branch_spec, open_source_repo, refs_to_fetch, resolve_spec
from difftest.core.config import Config


@dataclass(frozen=True)
class HeadChanges:
    """The head's changes, with the repository and the two commits they were read from."""

    repo: git.Repo
    base_sha: str
    head_sha: str
    changes: list[Change]
    #: The changed files on the configured stats path (`config.stats_paths`).
    on_stats_path: list[str]


def head_changes(
    config: Config, base_name: str, head_name: str, do_fetch: bool, log: Log
) -> HeadChanges:
    """The head's changed files (relative to the base), and those on the stats path."""
    specs = [branch_spec(config, base_name), branch_spec(config, head_name)]
    repo = open_source_repo(config, None, do_fetch, log, refs_to_fetch(config, specs))
    base, head = (resolve_spec(config, repo, spec) for spec in specs)
    changes = changed_files(repo, base.sha, head.sha)
    return HeadChanges(repo, base.sha, head.sha, changes, touches(changes, config.stats_paths))
