"""Errors that end a command with a clear message and a fixed exit code.

Every error names the problem and the fix, so that the CLI can print it as is
instead of a traceback. Exit codes follow the README: 2 for usage and
configuration errors (nothing was run), 3 when something could not be measured,
130 when interrupted.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNMEASURED = 3
#: Interrupted by Ctrl-C or SIGTERM (128 + SIGINT, as shells report it).
EXIT_INTERRUPTED = 130


class DifftestError(Exception):
    """A problem the user can fix; `hint` says how."""

    exit_code = EXIT_USAGE

    def __init__(self, problem: str, hint: str = "") -> None:
        super().__init__(problem)
        self.problem = problem
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.problem}\n  fix: {self.hint}" if self.hint else self.problem


class ConfigError(DifftestError):
    """branches.yaml (or a path it names) is invalid; nothing has been built."""


class RefError(DifftestError):
    """A git ref, repository or patch series cannot be turned into a commit."""


class EnvironmentBuildError(DifftestError):
    """A base or branch environment cannot be built."""


class NativeCodeChanged(EnvironmentBuildError):
    """The branch changes compiled code, so the base's binaries would not match it."""


class NotMeasured(DifftestError):
    """What a command needs measured could not be (a branch without an environment, runs that
    errored): exit 3, as for a result that could not be measured."""

    exit_code = EXIT_UNMEASURED
