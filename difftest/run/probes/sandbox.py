"""Probes see the whole machine read-only but their own scratch folder (`probe.confine`).

A branch's probe runs the branch's own code with the caller's rights, and a CI job runs pull
requests nobody has read. An allowlist of protected folders always forgot one (the home, the
configured vLLM clone, the config and its patches, the models, a result cache kept elsewhere, the
lock files, `--out`), so the sandbox is inverted: every process difftest starts for a branch
(fresh probe, fork server and each of its children, fuzz's warm probes, test sessions, a cluster
node's probes) sees every mount read-only, submounts included and checked one by one, except its
own scratch folder (its `HOME` and `TMPDIR`, `run.probes.scratch`), a private `/dev/shm`, and
what the host names for that process alone (a test session's report folder). Its records go to
a descriptor the host opened. It runs as an unprivileged uid in a nested user namespace, where the
kernel locks those mounts (no remount, no unmount, as root too), and it is non-dumpable (no
ptrace of another probe or of the fork server).

The wrapper is `probe/confine.py` run by difftest's own interpreter with `-I -S`: no program or
module is looked up through a place a probe could write.

It needs Linux user namespaces and `mount_setattr` (Linux 5.12+). Where they are missing or
forbidden (Docker's default seccomp profile, Ubuntu 24.04's AppArmor restriction), or with
`DIFFTEST_SANDBOX=off`, probes run unconfined: `protection()` says so, the evidence and every
report say so, and the result cache keeps those runs apart.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from difftest.core.evidence import ProtectionEvidence
from difftest.probe import confine
from difftest.run.probes import taint

SANDBOX_ENV = "DIFFTEST_SANDBOX"
#: The exit code of the wrapper itself when it could not confine (never the probe's).
MOUNT_FAILED = confine.CONFINE_FAILED
#: The package difftest runs from.
PACKAGE_ROOT = Path(__file__).resolve().parents[2]
#: The wrapper every confined process starts through.
CONFINE_SCRIPT = PACKAGE_ROOT / "probe" / "confine.py"


@dataclass(frozen=True)
class Protection:
    """Whether probes run confined, or why not."""

    active: bool
    why_not: str = ""

    def describe(self) -> str:
        if self.active:
            return "probes confined: everything read-only but their own scratch folder"
        return f"probes NOT confined (they can write what you can): {self.why_not}"

    @property
    def label(self) -> str:
        """One word for the evidence, the reports and the result cache's key."""
        return "confined" if self.active else "unconfined"


_CHECKED: dict[str, Protection] = {}
_LOCK = threading.Lock()


def protection() -> Protection:
    """What `wrap` will do: tried once per setting of `DIFFTEST_SANDBOX` in this process."""
    setting = os.environ.get(SANDBOX_ENV, "").lower()
    with _LOCK:
        if setting not in _CHECKED:
            _CHECKED[setting] = _try(setting)
        return _CHECKED[setting]


def protection_evidence() -> ProtectionEvidence:
    """What the evidence records of this process's probes' confinement."""
    guard = protection()
    return ProtectionEvidence(
        confined=guard.active,
        why_not=guard.why_not,
        home_unconfined_since=taint.unconfined_since() if guard.active else "",
    )


def _try(setting: str) -> Protection:
    if setting == "off":
        return Protection(False, f"{SANDBOX_ENV}=off")
    if not sys.platform.startswith("linux"):
        return Protection(False, f"Linux namespaces are not available on {sys.platform}")
    # The real question: can a confined process write outside its scratch folder, and inside?
    with tempfile.TemporaryDirectory(prefix="difftest-sandbox-check-") as folder:
        scratch = Path(folder) / "scratch"
        scratch.mkdir()
        outside = Path(folder) / "outside"
        script = (
            "import sys\n"
            "open(sys.argv[1] + '/inside', 'w').close()\n"
            "try:\n"
            "    open(sys.argv[2], 'w').close()\n"
            "except OSError:\n"
            "    pass\n"
        )
        argv = [sys.executable, "-I", "-S", "-c", script, str(scratch), str(outside)]
        try:
            done = subprocess.run(
                _wrapped(argv, [scratch]), capture_output=True, text=True, timeout=30
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            return Protection(False, f"the confinement did not start ({error})")
        if outside.exists():
            return Protection(False, "a confined process could still write outside its folder")
        if done.returncode != 0 or not (scratch / "inside").exists():
            said = (done.stderr.strip().splitlines() or ["no message"])[-1]
            said = said.removeprefix(confine.FAILED_PREFIX)
            return Protection(False, f"user namespaces are not available here ({said})")
    return Protection(True)


def _wrapped(argv: Sequence[str], writable: Sequence[Path], own_pids: bool = True) -> list[str]:
    spec = json.dumps(
        {"writable": [str(Path(folder).resolve()) for folder in writable], "own_pids": own_pids}
    )
    return [sys.executable, "-I", "-S", str(CONFINE_SCRIPT), spec, "--", *argv]


def wrap(argv: Sequence[str], writable: Sequence[Path], own_pids: bool = True) -> list[str]:
    """`argv` as it runs confined, only `writable` writable to it, or unchanged where
    `protection()` is not active. With `own_pids` it runs in a pid namespace of its own, below
    the wrapper, which passes the host's signals on and ends as it ends; without (a fork server,
    whose children the host finds by pid), the wrapper `exec`s it: the same process id."""
    guard = protection()
    if not guard.active:
        taint.mark_unconfined(guard.why_not)
        return list(argv)
    return _wrapped(argv, writable, own_pids)
