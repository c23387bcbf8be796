"""How a probe process ended: the second half of what every verdict is judged from.

A probe's records say what each run measured; they cannot say what the
process did after its last record (hang on a non-daemon thread, exit non-zero,
get killed) or why records are missing. `ProcessOutcome` says that, and it
travels with the runs everywhere they go — the result cache stores it, the
evidence records it, `merge` reads it back — so that the one judging door
(`tiers.door`) sees the same facts whichever path the runs took.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ProcessOutcome(BaseModel):
    """What the host saw of one probe process, from start to end."""

    model_config = ConfigDict(extra="forbid")

    #: The process's exit status (negative: killed by that signal); None when it never started.
    exit_code: int | None = None
    #: Killed at `timeouts.probe_s` while it was still reporting runs.
    timed_out: bool = False
    #: Its records end with a trailer the host accepted.
    trailer: bool = False
    #: It wrote its trailer but did not exit within `timeouts.exit_s`: killed (`stuck` says why).
    exit_overdue: bool = False
    #: What kept it from finishing, as it said before it was killed (threads still running, their
    #: stacks).
    stuck: str = ""
    #: The last line it printed, when it exited non-zero on its own (a crash's exception, say).
    last_line: str = ""
    #: Why difftest could not read what this probe wrote (its own failure, never the branch's
    #: verdict).
    host_error: str | None = None
    #: The probe's session started (vLLM imported, header written): runs it did not report were cut
    #: by it.
    started: bool = False
    #: Planned runs ("scenario / label") the process never reported: cut short by its end.
    unreported: list[list[str]] = Field(default_factory=list)
    #: Seconds from start to exit (or kill).
    duration_s: float = 0.0

    @property
    def clean(self) -> bool:
        """Exited 0 on its own, after a trailer, and difftest read everything it wrote."""
        return (
            self.exit_code == 0
            and self.trailer
            and not self.timed_out
            and not self.exit_overdue
            and self.host_error is None
        )

    def fault(self) -> str:
        """The process's own fault in one line ("" when it ended cleanly)."""
        if self.host_error is not None:
            return f"difftest could not read its output: {self.host_error}"
        stuck = f" ({self.stuck})" if self.stuck else ""
        if self.exit_overdue:
            return f"did not exit after its last run{stuck}"
        if self.timed_out:
            return f"was killed at the probe time limit{stuck}"
        if self.exit_code is None:
            return "never started"
        said = f" ({self.last_line})" if self.last_line else ""
        if self.exit_code < 0:
            return f"was killed by signal {-self.exit_code}{said}"
        if self.exit_code != 0:
            return f"exited with code {self.exit_code}{said}"
        if not self.trailer:
            return "exited without its trailer"
        return ""


def clean_outcome(duration_s: float = 0.0) -> ProcessOutcome:
    """The outcome of a probe that did everything right (what records without an outcome imply)."""
    return ProcessOutcome(exit_code=0, trailer=True, started=True, duration_s=duration_s)
