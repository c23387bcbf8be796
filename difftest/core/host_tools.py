"""The programs difftest's own process runs, and the settings it runs git with (issue #47).

A branch's code runs inside its probe as the caller's own user, so it can write what the sandbox
leaves writable: the caller's home (`~/.local/bin`, which is on PATH before `/usr/bin` on Ubuntu
and on GitHub's runners; `~/.gitconfig`; `~/.ssh/config`; uv's config) and a user's clone's
`.git/config`. The host (difftest's own process) therefore never runs a program found through a
writable place and never lets such a file make git run one: git comes from `SYSTEM_PATH`, with the
system's and the user's git config ignored, and the settings that run programs pinned on git's
command line, where they win over every config file (the repository's own included).
"""

from __future__ import annotations

import os
import shutil

from difftest.core.errors import ConfigError

#: Where the host looks up the programs it runs (root's folders, which probes cannot write): never
#: the caller's PATH. Any other part of the host that runs a program should take it from here.
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
#: The variable GitPython reads, when it is imported, for the git it runs.
GITPYTHON_EXECUTABLE_ENV = "GIT_PYTHON_GIT_EXECUTABLE"
#: What GitPython is pointed at when the system has no git: a path, never a name PATH resolves.
_MISSING_GIT = "/usr/bin/git"


def system_program(name: str) -> str | None:
    """The absolute path of `name` on `SYSTEM_PATH`, or None: a program found through PATH could be
    one a branch planted in `~/.local/bin`."""
    return shutil.which(name, path=SYSTEM_PATH)


def system_git() -> str:
    """The system's git; a ConfigError naming the fix when there is none."""
    found = system_program("git")
    if found is None:
        raise ConfigError(
            f"git is not installed in the system's folders ({SYSTEM_PATH})",
            "install git with the system's package manager (e.g. `apt-get install git`): difftest "
            "never runs a git found through PATH, whose folders the branches it runs can write",
        )
    return found


def pin_gitpython_executable() -> None:
    """Point GitPython at the system's git before it is first imported.

    `import git` runs `git version` at once, by name through PATH unless the variable names a
    program. Without a system git the import is kept quiet (a missing path, never a name): the
    first git command then raises `system_git`'s error instead of an ImportError.
    """
    found = system_program("git")
    os.environ[GITPYTHON_EXECUTABLE_ENV] = found or _MISSING_GIT
    if found is None:
        os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")


def git_env() -> dict[str, str]:
    """The environment every git command of the host runs with (on top of the caller's).

    No config file but the repository's own is read (the system's and the user's, `~/.gitconfig`
    and `~/.config/git/config`, are ignored), and git's own subprocesses (remote helpers,
    `ssh`) are looked up on `SYSTEM_PATH` only. `GIT_PROXY_COMMAND`, when the caller sets none,
    is set empty, which keeps git from reading `core.gitProxy` (a program) from any config.
    """
    env = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "PATH": SYSTEM_PATH}
    if "GIT_PROXY_COMMAND" not in os.environ:
        env["GIT_PROXY_COMMAND"] = ""
    return env


def git_safe_config() -> dict[str, str]:
    """Settings given on git's command line (`-c`), which win over every config file: the
    repository's `.git/config` too, which a branch can write in a user's clone.

    Each one keeps a config file from making git run a program during the commands difftest uses
    (rev-parse, update-ref, read-tree, apply, commit-tree, diff-tree, log, archive, fetch, ...).
    `safe.directory` is left alone on purpose: git's ownership check stays on, so a repository
    owned by another user is refused; with the user's config ignored a `safe.directory` written
    there no longer widens it (a branch could write one), and difftest's own repositories (the
    fixture, the mirrors) and a user's clone are the caller's own. `uploadpack.packObjectsHook` is
    honoured from protected config only (system, global, command line), all of which are fixed.
    """
    ssh = system_program("ssh") or "/usr/bin/ssh"
    return {
        # No hook runs: `reference-transaction` on every update-ref and fetch, `post-checkout`, ...
        "core.hooksPath": os.devnull,
        # No fsmonitor program or hook when a command reads the index.
        "core.fsmonitor": "false",
        # No program listing an alternate object store's refs (a fetch into a repository with
        # alternates runs it).
        "core.alternateRefsCommand": "true",
        # fetch over ssh: the system's ssh, reading no `~/.ssh/config` (its ProxyCommand and
        # LocalCommand run programs). `GIT_SSH_COMMAND` in the caller's environment still wins.
        "core.sshCommand": f"{ssh} -F {os.devnull}",
        # No askpass program and no credential helper: an empty `credential.helper` clears the list
        # every config file gave. A fetch that needs credentials fails (GIT_TERMINAL_PROMPT=0).
        "core.askPass": "",
        "credential.helper": "",
        # `ext::` URLs run a command (git's default already; a config file could allow them).
        "protocol.ext.allow": "never",
        # `git log` would run `gpg.program` to check signatures.
        "log.showSignature": "false",
        # No `gc --auto` or maintenance after a fetch (a detached process, `pre-auto-gc` hook).
        "gc.auto": "0",
        "maintenance.auto": "false",
        # No fetch inside submodules, whose own config files these settings do not reach.
        "fetch.recurseSubmodules": "false",
    }
