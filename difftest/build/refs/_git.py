"""Environment for the git commands whose output must be the same on every machine.

A commit's SHA covers its author, committer, dates, message encoding and (if
signed) signature, so anything taken from the user's git config or the clock
would give two machines different SHAs for the same inputs. Every commit
difftest writes goes through `fixed_commit_env`.
"""

from __future__ import annotations

import os

from git.exc import GitCommandError

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


def fixed_commit_env(**extra: str) -> dict[str, str]:
    """Author/committer/dates fixed and commit-shaping config pinned; `extra` added on top."""
    env = {
        "GIT_AUTHOR_NAME": IDENTITY_NAME,
        "GIT_AUTHOR_EMAIL": IDENTITY_EMAIL,
        "GIT_AUTHOR_DATE": FIXED_DATE,
        "GIT_COMMITTER_NAME": IDENTITY_NAME,
        "GIT_COMMITTER_EMAIL": IDENTITY_EMAIL,
        "GIT_COMMITTER_DATE": FIXED_DATE,
        "GIT_CONFIG_COUNT": str(len(_PINNED_CONFIG)),
    }
    for i, (key, value) in enumerate(_PINNED_CONFIG.items()):
        env[f"GIT_CONFIG_KEY_{i}"] = key
        env[f"GIT_CONFIG_VALUE_{i}"] = value
    env.update(extra)
    return env


def isolated_env(git_dir: str, **extra: str) -> dict[str, str]:
    """`fixed_commit_env` that also ignores the user's and the system's git config.

    Only for repositories difftest owns (the fixture): there nothing from the
    user's config is wanted, and `GIT_DIR` is set so a stray `GIT_DIR` in the
    caller's environment cannot redirect the build.
    """
    return fixed_commit_env(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
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
