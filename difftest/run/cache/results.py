"""The result cache: a branch's probe output for one job, kept so an unchanged re-run need not
import vLLM.

A probe's runs depend on nothing but what is in its key (`result_key`): the
branch environment's content (its fingerprint: commit, patches, the overlay's
own files by hash, the probe's digest, the base it overlays), the base's
fingerprint, the job (protocol, probe entry, every scenario's planned runs and
content, the run time limit), the scenario files' sha256, the probe time limit,
the tier, this difftest's version and a digest of its own code that reads and
plays runs (`code_digest`: the probe package, the record models and readers),
and every variable of the caller's environment that reaches a probe
(`run.probes.environ.passed_environ`). Verdicts are never cached: the entry holds
the runs and the process outcome, and they are judged again through the one
door (`tiers.door`) on every use, so another `--reading` or baseline needs no
re-run.

An entry holds the probe's own job file and records file byte for byte, with
the nonce the probe stamped them with. Reusing it writes both back where the
runner would have written them and reads them with the runner's own reader
(`delivery.check_lines`): the evidence then names them with their hash and
nonce as for a fresh probe, and says they were reused (`ProbeFiles.reused`),
so `difftest show` reads the same steps and tells where they came from. What
that reader made of an entry's records is kept beside it (`run.cache.validated_copy`), for
those very bytes only: the next reuse hashes the entry and, when the hash is the
one the copy was made from, takes the runs from the copy instead of checking the
records line by line again.

Only a clean measurement is stored: the probe exited 0 on its own, its output
was trusted whole, and every run was measured or was broken by the branch's
own code in a repeatable way (an exception raised in vLLM, a step budget run
out). A run that could not be measured, timed out, or failed in the probe's
own setup is never stored: the next run measures it again.

An entry that does not read back exactly (not JSON, another key, a payload
whose sha256 does not match, a job that is not this job, records the reader
rejects) is named in the log, deleted (its validated copy too) and measured
again; an entry whose bytes changed in any way is read line by line, never from
the copy. The hash guards against damage, not against someone who can write
`DIFFTEST_HOME` (they could edit the environments too); `--no-cache` and
`difftest verify` always measure.

`DIFFTEST_RESULT_CACHE` moves the cache (default `$DIFFTEST_HOME/results`);
`off` turns it off (the test suite does, so that tests measure what they test).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from difftest import __version__
from difftest.build.envs.fingerprint import canonical_hash, sha256_bytes
from difftest.core import paths
from difftest.core.errors import ConfigError
from difftest.core.evidence import ReusedProbe, atomic_write_text
from difftest.core.outcome import ProcessOutcome, clean_outcome
from difftest.core.records import ProbeRun
from difftest.probe.protocol import PROTOCOL_VERSION, Job, without_trace
from difftest.run.cache.heap import long_lived
from difftest.run.cache.validated_copy import (
    CopyDamaged,
    ReadRecords,
    copy_path,
    read_copy,
    write_copy,
)
from difftest.run.probes.environ import passed_environ
from difftest.run.probes.files import read_probe_file
from difftest.run.probes.read_records import check_lines
from difftest.run.probes.runner import BranchRun, probe_file_paths
from difftest.run.probes.sandbox import protection

#: Bump when an entry's shape or the key's material changes: older entries are then never found.
CACHE_FORMAT = 2
CACHE_ENV = "DIFFTEST_RESULT_CACHE"
#: Fingerprint keys that name the environment rather than describe its content.
_NAMING_KEYS = ("name", "ref", "fingerprint_hash")


def cache_dir() -> Path | None:
    """Where entries live, or None when `DIFFTEST_RESULT_CACHE=off`."""
    chosen = os.environ.get(CACHE_ENV, "").strip()
    if chosen.lower() == "off":
        return None
    if not chosen:
        return paths.results_dir()
    folder = Path(chosen).expanduser()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        usable = os.access(folder, os.W_OK | os.X_OK)
    except OSError as exc:
        usable, why = False, exc.strerror or str(exc)
    else:
        why = "not writable"
    if not usable:
        raise ConfigError(
            f"{CACHE_ENV} {chosen!r} cannot be used: {why}",
            f"point {CACHE_ENV} at a folder you can write to, or set it to `off`",
        )
    return folder.resolve()


#: What the runs depend on of difftest's own code: the probe that plays them, the models and readers
#: that check its records (paths relative to the package).
_CODE = (
    "probe",
    "core/records.py",
    "core/outcome.py",
    "run/probes/read_records.py",
    "run/cache/validated_copy.py",
    "run/cache/results.py",
    "run/probes/environ.py",
    "run/probes/files.py",
    "run/probes/runner.py",
    "run/probes/forking.py",
)


def code_digest() -> str:
    """sha256 over difftest's own code that reads and plays runs (`_CODE`), file by file."""
    package = Path(__file__).resolve().parents[2]
    files: list[Path] = []
    for part in _CODE:
        found = package / part
        files += sorted(found.rglob("*.py")) if found.is_dir() else [found]
    # A file named here that is gone raises: a rename must not quietly leave code out of the key.
    digest = {f.relative_to(package).as_posix(): sha256_bytes(f.read_bytes()) for f in files}
    return canonical_hash(digest)


def result_key(
    tier: str,
    job: Job,
    env_fingerprint: dict[str, Any],
    base_fingerprint: dict[str, Any],
    scenario_sha256: dict[str, str],
    probe_timeout_s: float,
    exit_timeout_s: float = 10.0,
) -> str:
    """sha256 of everything one branch's probe output for `job` depends on."""
    material = {
        "format": CACHE_FORMAT,
        "difftest": __version__,
        "protocol": PROTOCOL_VERSION,
        "tier": tier,
        "job": job,
        "environment": canonical_hash(
            {k: v for k, v in env_fingerprint.items() if k not in _NAMING_KEYS}
        ),
        "base": canonical_hash(base_fingerprint),
        "scenarios": dict(sorted(scenario_sha256.items())),
        "probe_timeout_s": probe_timeout_s,
        "exit_timeout_s": exit_timeout_s,
        "code": code_digest(),
        "environ": passed_environ(),
        # Runs measured unconfined (a branch could write anything) are never reused by a confined
        # run, nor the other way round.
        "confinement": protection().label,
    }
    return sha256_bytes(json.dumps(material, sort_keys=True).encode())


def cacheable(run: BranchRun) -> str | None:
    """Why `run` must not be stored, or None if it is a clean, repeatable measurement."""
    if run.outcome is None or not run.outcome.clean:
        return (
            run.error
            or (run.outcome.fault() if run.outcome else "")
            or "the probe did not exit cleanly"
        )
    if not run.exited_cleanly or run.error or run.timed_out:
        return run.error or "the probe did not exit cleanly"
    if run.header is None:
        return "the probe wrote no header"
    for probe_run in run.runs:
        why = _not_repeatable(probe_run)
        if why:
            return f"{probe_run.scenario} [{probe_run.label}]: {why}"
    return None


def _not_repeatable(run: ProbeRun) -> str | None:
    if run.measured:
        return None
    failure = run.failure
    if failure is None:
        return f"not measured ({run.error or 'no record'})"
    if failure.kind == "did-not-finish" or (
        failure.kind == "exception" and failure.origin == "vllm"
    ):
        return None  # the branch's own code, the same on every run
    return f"{failure.kind} in {failure.origin} code (may not repeat)"


@dataclass(frozen=True)
class ResultCache:
    """The entries under `folder`, read and written for one comparison."""

    folder: Path
    #: Reuse stored entries (off for `--no-cache`: measure, then store afresh).
    reuse: bool = True
    #: Store clean measurements.
    keep: bool = True

    def _path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.json"

    def load(
        self, key: str, job: Job, branch: str, tier: str, work_dir: Path, log: Any
    ) -> BranchRun | None:
        """The stored output for `key`, written back into `work_dir` and re-read as the runner reads
        a probe's; None when there is none, or when it is damaged (logged, deleted: measured
        again)."""
        if not self.reuse:
            return None
        path = self._path(key)
        if not path.is_file():
            return None
        try:
            with long_lived():  # the records stay until the command ends (run.cache.heap)
                return self._restore(path, key, job, branch, tier, work_dir, log)
        except _Damaged as exc:
            log(
                f"{branch}: {tier} result cache entry {path} is damaged ({exc}): "
                "deleting it and measuring again"
            )
            for damaged in (path, copy_path(path)):
                try:
                    damaged.unlink(missing_ok=True)
                except OSError:
                    pass  # measured again all the same; storing the new result replaces it
            return None

    def _restore(
        self, path: Path, key: str, job: Job, branch: str, tier: str, work_dir: Path, log: Any
    ) -> BranchRun:
        try:
            raw = path.read_bytes()
            entry = json.loads(raw.decode("utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise _Damaged(f"not readable JSON: {exc}") from None
        if not isinstance(entry, dict) or not isinstance(entry.get("payload"), dict):
            raise _Damaged("not a result cache entry")
        payload = entry["payload"]
        if entry.get("format") != CACHE_FORMAT or entry.get("key") != key:
            raise _Damaged("it was stored under another key or format")
        if entry.get("payload_sha256") != _payload_hash(payload):
            raise _Damaged("its payload does not match its sha256")
        try:
            job_text, records_text = str(payload["job"]), str(payload["records"])
            nonce, measured_at = str(payload["nonce"]), str(payload["measured_at"])
            duration = float(payload["duration_s"])
            stored_job = json.loads(job_text)
            outcome = ProcessOutcome.model_validate(payload["outcome"])
        except (KeyError, TypeError, ValueError) as exc:
            raise _Damaged(f"incomplete payload: {exc}") from None
        # A job measured traced serves an untraced one (the baseline's: `pipeline.measure_tier`);
        # the other way round, the key already differs.
        if without_trace(stored_job) != without_trace(job):
            raise _Damaged("its job is not this job")
        records = self._records(
            path, sha256_bytes(raw), records_text, nonce, job, tier, f"{branch}: {tier}", log
        )
        restored = BranchRun(
            branch=branch,
            tier=tier,
            header=records.header,
            runs=records.runs,
            coverage=records.coverage,
            exited_cleanly=True,
            outcome=outcome,
            launch=None,  # not started by this run
        )
        why = cacheable(restored)
        if why:
            raise _Damaged(f"it holds a run that is never stored: {why}")
        job_path, records_path, log_path = probe_file_paths(work_dir.resolve(), branch, tier)
        job_path.parent.mkdir(parents=True, exist_ok=True)
        job_path.write_text(job_text, encoding="utf-8")
        records_path.write_text(records_text, encoding="utf-8")
        log_path.write_text(
            f"reused from the result cache ({path}); measured {measured_at} in {duration} s\n"
        )
        return replace(
            restored,
            job_path=job_path,
            records_path=records_path,
            log_path=log_path,
            nonce=nonce,
            duration_s=duration,
            reused=ReusedProbe(key=key, measured_at=measured_at, duration_s=duration),
        )

    @staticmethod
    def _records(
        path: Path,
        entry_sha256: str,
        text: str,
        nonce: str,
        job: Job,
        tier: str,
        who: str,
        log: Any,
    ) -> ReadRecords:
        """The entry's records as the runner's reader reads them: from their validated copy when it
        was made from these very entry bytes (`run.cache.validated_copy`), else line by line,
        keeping a copy for the next reuse."""
        copy = copy_path(path)
        try:
            kept = read_copy(copy, entry_sha256)
        except CopyDamaged as exc:
            log(
                f"{who} result cache entry {path}: its validated copy is damaged ({exc}): "
                "reading its records line by line"
            )
            kept = None
        if kept is not None:
            return kept
        records = _read_records(text, nonce, job, tier)
        write_copy(copy, entry_sha256, records)
        return records

    def store(self, key: str, run: BranchRun, log: Any) -> bool:
        """Keep `run` under `key` if it is a clean measurement (`cacheable`); True when stored."""
        if not self.keep:
            return False
        why = cacheable(run)
        if why or run.job_path is None or run.records_path is None:
            log(
                f"{run.branch}: {run.tier} runs not cached ({why or 'no probe files'}): "
                "the next run measures them again"
            )
            return False
        try:
            job_text = read_probe_file(run.job_path).decode("utf-8")
            records_text = read_probe_file(run.records_path).decode("utf-8")
        except (
            OSError,
            UnicodeDecodeError,
        ) as exc:  # the runs were judged; only their reuse is lost
            log(f"{run.branch}: {run.tier} runs not cached: cannot read its probe files ({exc})")
            return False
        payload = {
            "job": job_text,
            "records": records_text,
            "nonce": run.nonce,
            "duration_s": run.duration_s,
            "measured_at": datetime.fromtimestamp(run.ended_at or run.started_at, UTC).isoformat(
                timespec="seconds"
            ),
            "outcome": (run.outcome or clean_outcome(run.duration_s)).model_dump(mode="json"),
        }
        entry = {
            "format": CACHE_FORMAT,
            "key": key,
            "payload": payload,
            "payload_sha256": _payload_hash(payload),
        }
        path = self._path(key)
        text = json.dumps(entry, sort_keys=True)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, text)
        except OSError as exc:  # a full disk costs the reuse, never the measurement
            log(
                f"{run.branch}: {run.tier} runs not cached: "
                f"cannot write {path} ({exc.strerror or exc})"
            )
            return False
        # The validated copy of exactly what was stored, so that the next run need not read it line
        # by line.
        try:
            records = _read_records(records_text, run.nonce, json.loads(job_text), run.tier)
        except (_Damaged, ValueError):
            return True  # the next reuse reads it line by line, and judges it
        write_copy(copy_path(path), sha256_bytes(text.encode("utf-8")), records)
        return True


class _Damaged(Exception):
    """A cache entry that does not read back as it was written."""


def _read_records(text: str, nonce: str, job: Job, tier: str) -> ReadRecords:
    """An entry's records read line by line by the runner's own reader; _Damaged unless every one is
    trusted."""
    delivery = check_lines(text.splitlines(), nonce, job, tier, exited_cleanly=True)
    if delivery.untrusted or delivery.rejected or delivery.incomplete or delivery.header is None:
        why = (
            delivery.untrusted
            + list(delivery.rejected.values())
            + [delivery.incomplete or "no header"]
        )[0]
        raise _Damaged(f"its records do not validate: {why}")
    return ReadRecords(
        header=delivery.header, runs=delivery.runs(None), coverage=delivery.coverage()
    )


def _payload_hash(payload: dict[str, Any]) -> str:
    return sha256_bytes(json.dumps(payload, sort_keys=True).encode())


def open_cache(reuse: bool, keep: bool) -> ResultCache | None:
    """The cache for one comparison, or None when it is neither read nor written (`verify`) or is
    turned off (`DIFFTEST_RESULT_CACHE=off`)."""
    folder = cache_dir() if reuse or keep else None
    return None if folder is None else ResultCache(folder, reuse, keep)
