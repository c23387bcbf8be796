"""Environment for the git commands whose output must be the same on every machine, and the git the
host runs.

A commit's SHA covers its author, committer, dates, message encoding and (if
signed) signature, so anything taken from the user's git config or the clock
would give two machines different SHAs for the same inputs. Every commit
difftest writes goes through `fixed_commit_env`.

Every git command runs the system's git with the user's config ignored and the settings that run
programs pinned (`core.host_tools`, issue #47): `host_git` sets that up on a `git.Git` (`open_repo`
calls it on every repository difftest opens), and the pinned config below carries the same
settings for the commands that set `GIT_CONFIG_COUNT` themselves.
"""

from __future__ import annotations

import git
from git.exc import GitCommandError

from difftest.core.host_tools import git_env, git_safe_config, system_git

IDENTITY_NAME = "difftest"
IDENTITY_EMAIL = "difftest@localhost"
#: 2000-01-01T00:00:00Z: fixed, so the SHA depends only on content.
FIXED_DATE = "946684800 +0000"

#: Config pinned per command (git >= 2.31): settings that would change a commit's bytes.
_PINNED_CONFIG = {
    "commit.gpgSign": "false",
    "i18n.commitEncoding": "UTF-8",
    "core.autocrlf": "false",
    "core.safecrlf": "false",
}


def use_system_git() -> str:
    """Make GitPython run the system's git from now on (it runs `git` by name through PATH, whose
    folders a branch can write); its path. A ConfigError when the system has none."""
    path = system_git()
    if git.Git.GIT_PYTHON_GIT_EXECUTABLE != path:
        git.refresh(path=path)
    return path


def host_git(g: git.Git) -> git.Git:
    """`g` set to run every command (GitPython's persistent cat-file included) the host's way: the
    system's git, no system or user config, git's own subprocesses from the system's folders, and
    `git_safe_config` on the command line, where it wins over the repository's `.git/config`."""
    use_system_git()
    g.update_environment(**git_env())
    g.set_persistent_git_options(c=[f"{key}={value}" for key, value in git_safe_config().items()])
    return g


def fixed_commit_env(**extra: str) -> dict[str, str]:
    """Author/committer/dates fixed and commit-shaping config pinned; `extra` added on top."""
    env = {
        "GIT_AUTHOR_NAME": IDENTITY_NAME,
        "GIT_AUTHOR_EMAIL": IDENTITY_EMAIL,
        "GIT_AUTHOR_DATE": FIXED_DATE,
        "GIT_COMMITTER_NAME": IDENTITY_NAME,
        "GIT_COMMITTER_EMAIL": IDENTITY_EMAIL,
        "GIT_COMMITTER_DATE": FIXED_DATE,
    }
    # The host's safe settings too: a command given this environment may run on a `git.Git` that
    # `host_git` did not set up (the fixture's).
    pinned = {**_PINNED_CONFIG, **git_safe_config()}
    env["GIT_CONFIG_COUNT"] = str(len(pinned))
    for i, (key, value) in enumerate(pinned.items()):
        env[f"GIT_CONFIG_KEY_{i}"] = key
        env[f"GIT_CONFIG_VALUE_{i}"] = value
    env.update(extra)
    return env


def isolated_env(git_dir: str, **extra: str) -> dict[str, str]:
    """`fixed_commit_env` that also ignores the user's and the system's git config.

    Only for repositories difftest owns (the fixture): there nothing from the
    user's config is wanted, and `GIT_DIR` is set so a stray `GIT_DIR` in the
    caller's environment cannot redirect the build. The host's git environment (`git_env`) is part
    of it, for a `git.Git` that `host_git` did not set up; and GitPython is pointed at the system's
    git here, so such a `git.Git` runs it even in a caller that did not start from the CLI.
    """
    use_system_git()
    return fixed_commit_env(
        **git_env(),
        GIT_DIR=git_dir,
        GIT_DEFAULT_HASH="sha1",
        **extra,
    )


def git_message(exc: GitCommandError) -> str:
    """git's own stderr, without GitPython's framing, for an error message."""
    text = exc.stderr if isinstance(exc.stderr, str) else str(exc.stderr or "")
    text = text.strip()
    if text.startswith("stderr:"):
        text = text.removeprefix("stderr:").strip()
    text = text.strip("'").strip()
    return text or f"git exited with status {exc.status}"
