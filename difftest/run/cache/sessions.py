"""The result cache for the tests tier: one pytest-xdist session's files, reused when nothing it
depends on changed.

The rules are the probe tiers' (`run.cache.results`): the key covers everything
the session's outcomes depend on — the session (test tree commit, grafts,
pytest arguments), every worker's environment by content, the controller's,
the base, the test-only packages, the time limits, difftest's own code and the
variables that reach the session — and only a clean session is stored (pytest
exited 0, 1 or 5 on its own, with its JUnit report and every worker's report).
What is stored is the session's raw files, never a judgement: a reuse writes
them back and they are read (`run.suites.results.read_session`) and judged
(`tiers.tests`) exactly as a fresh session's are.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from difftest import __version__
from difftest.build.envs.fingerprint import canonical_hash, sha256_bytes
from difftest.core.evidence import atomic_write_text
from difftest.core.suites import SuiteSession
from difftest.run.cache.results import ResultCache, code_digest
from difftest.run.probes.environ import passed_environ
from difftest.run.probes.files import read_probe_file
from difftest.run.probes.sandbox import protection

#: Bump when an entry's shape or the key's material changes.
SUITE_CACHE_FORMAT = 2  # 2: what the workers trace is part of the key
#: The session files an entry holds (the plugin's and pytest's reports; the log is not needed to
#: judge).
SESSION_FILES = ("junit.xml", "workers.json", "progress.jsonl")


def session_key(
    session: SuiteSession,
    workers: list[tuple[str, dict[str, Any]]],
    controller: dict[str, Any],
    base: dict[str, Any],
    packages: list[str],
    limits: dict[str, float],
    trace: dict[str, Any] | None = None,
) -> str:
    """sha256 of everything one session's outcomes depend on
    (`workers`: (branch, env fingerprint)), what its workers trace included (a session stored
    untraced has no coverage to give)."""
    material = {
        "format": SUITE_CACHE_FORMAT,
        "difftest": __version__,
        "code": code_digest(),
        "environ": passed_environ(),
        "session": asdict(session),
        "workers": [(name, canonical_hash(_content(fp))) for name, fp in workers],
        "controller": canonical_hash(_content(controller)),
        "base": canonical_hash(base),
        "packages": sorted(packages),
        "limits": dict(sorted(limits.items())),
        "trace": trace,
        # Sessions run unconfined are never reused by a confined run, nor the other way round.
        "confinement": protection().label,
    }
    return sha256_bytes(json.dumps(material, sort_keys=True, default=str).encode())


def _content(fingerprint: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in fingerprint.items() if k not in ("name", "ref", "fingerprint_hash")}


def _path(cache: ResultCache, key: str) -> Path:
    return cache.folder / "suites" / key[:2] / f"{key}.json"


def load_session(cache: ResultCache | None, key: str, out: Path, log: Any) -> dict[str, Any] | None:
    """The stored session for `key`, its files written back into `out`; None when there is none or
    it is damaged (logged, deleted: the session runs again)."""
    if cache is None or not cache.reuse:
        return None
    path = _path(cache, key)
    if not path.is_file():
        return None
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
        payload = entry["payload"]
        if entry.get("format") != SUITE_CACHE_FORMAT or entry.get("key") != key:
            raise ValueError("stored under another key or format")
        if entry.get("payload_sha256") != _hash(payload):
            raise ValueError("its payload does not match its sha256")
        files = {
            name: str(text) for name, text in payload["files"].items() if name in SESSION_FILES
        }
        meta = {
            "returncode": int(payload["returncode"]),
            "duration_s": float(payload["duration_s"]),
            "measured_at": str(payload["measured_at"]),
            "key": key,
        }
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        log(
            f"tests: result cache entry {path} is damaged ({exc}): "
            "deleting it and running the session again"
        )
        path.unlink(missing_ok=True)
        return None
    # A session's folder was writable to its branches' code: start it afresh, follow no link.
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for name, text in files.items():
        (out / name).write_text(text, encoding="utf-8")
    (out / "pytest.log").write_text(
        f"reused from the result cache ({path}); measured {meta['measured_at']}\n"
    )
    return meta


def store_session(
    cache: ResultCache | None,
    key: str,
    out: Path,
    returncode: int | None,
    error: str | None,
    duration_s: float,
    log: Any,
) -> bool:
    """Keep a clean session's files under `key`; True when stored."""
    if cache is None or not cache.keep:
        return False
    if error is not None or returncode not in (0, 1, 5):
        why = error or f"pytest exited with code {returncode}"
        log(f"tests: session not cached ({why}): the next run runs it again")
        return False
    try:
        files = {
            name: read_probe_file(out / name).decode("utf-8")
            for name in SESSION_FILES
            if (out / name).is_file() and not (out / name).is_symlink()
        }
    except (OSError, UnicodeDecodeError) as exc:
        log(f"tests: session not cached: cannot read its files ({exc})")
        return False
    if "junit.xml" not in files or "workers.json" not in files:
        log("tests: session not cached: it left no JUnit report or no workers' report")
        return False
    payload = {
        "files": files,
        "returncode": returncode,
        "duration_s": duration_s,
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    entry = {
        "format": SUITE_CACHE_FORMAT,
        "key": key,
        "payload": payload,
        "payload_sha256": _hash(payload),
    }
    path = _path(cache, key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(entry, sort_keys=True))
    except OSError as exc:
        log(f"tests: session not cached: cannot write {path} ({exc.strerror or exc})")
        return False
    return True


def _hash(payload: dict[str, Any]) -> str:
    return sha256_bytes(json.dumps(payload, sort_keys=True).encode())
