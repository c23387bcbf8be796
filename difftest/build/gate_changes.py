"""Whether `difftest gate` has anything to measure: the head's changes on the stats path.

The base and the head are resolved as every command resolves a branch (the
configured source repository, fetched first when asked), then diffed by git
(`refs.diff.stats_path_changes`).
"""

from __future__ import annotations

from difftest.build.envs.base import Log
from difftest.build.refs.diff import stats_path_changes
from difftest.build.workspace import branch_spec, open_source_repo, refs_to_fetch, resolve_spec
from difftest.core.config import Config


def head_stats_path_changes(
    config: Config, base_name: str, head_name: str, do_fetch: bool, log: Log
) -> list[str]:
    """The head's changed files (relative to the base) that lie on the stats path."""
    specs = [branch_spec(config, base_name), branch_spec(config, head_name)]
    repo = open_source_repo(config, None, do_fetch, log, refs_to_fetch(config, specs))
    base, head = (resolve_spec(config, repo, spec) for spec in specs)
    return stats_path_changes(repo, base.sha, head.sha, config.stats_paths)
