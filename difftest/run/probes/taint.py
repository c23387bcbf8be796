"""A `DIFFTEST_HOME` where probes ran unconfined is marked, and later confined runs there say so.

Confined, a branch's code can write only its scratch folder; unconfined (`DIFFTEST_SANDBOX=off`,
or no user namespaces), it can write whatever difftest can, and difftest checks by content only
what every probe reads (the base's `vllm/`, the model folders, vLLM's inspection cache). What an
unconfined branch left elsewhere in the home (another package of the base, a branch environment)
would be read by a later confined run unnoticed. So the first unconfined probe of a process marks
the home, and a confined run in a marked home says in its evidence and every report that it
should start from a fresh home to be trusted. (A branch written to defeat this can remove the
mark while it runs unconfined: the mark catches a person's `DIFFTEST_SANDBOX=off` left on, not an
attack.)
"""

from __future__ import annotations

import json
import os
import threading
from datetime import UTC, datetime
from pathlib import Path

from difftest.core import paths

#: The mark, in `DIFFTEST_HOME`.
MARK_NAME = "unconfined-probes.json"

_MARKED: set[str] = set()
_LOCK = threading.Lock()


def mark_path(home: Path | None = None) -> Path:
    return (home or paths.difftest_home()) / MARK_NAME


def mark_unconfined(why: str, home: Path | None = None) -> None:
    """Mark the home: probes ran unconfined in it (once a process and home; the first kept)."""
    mark = mark_path(home)
    with _LOCK:
        if str(mark) in _MARKED:
            return
        _MARKED.add(str(mark))
    if unconfined_since(home):
        return
    mark.parent.mkdir(parents=True, exist_ok=True)
    tmp = mark.with_name(f".{mark.name}.{os.getpid()}.tmp")
    tmp.write_text(
        json.dumps({"since": datetime.now(UTC).isoformat(timespec="seconds"), "why": why})
    )
    tmp.replace(mark)


def unconfined_since(home: Path | None = None) -> str:
    """When probes first ran unconfined in the home ("" when never, as far as the mark says)."""
    try:
        return str(json.loads(mark_path(home).read_text()).get("since", "")) or "an earlier run"
    except FileNotFoundError:
        return ""
    except (OSError, ValueError, AttributeError):
        return "an earlier run (its mark is unreadable)"
