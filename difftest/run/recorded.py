"""Reading a finished comparison's step records again (`difftest show`), trusting them no more than the
runner did.

The evidence names each probe's job and records file with their sha256 and
the nonce the probe stamped its records with (`ProbeFiles`). A file whose
bytes changed since (edited, truncated, from another run) is refused, naming
it; an unchanged one is validated record by record by the runner's own reader
(`delivery.read_delivery`), so `show` sees exactly the runs the verdicts were
made from, errors included.
"""

from __future__ import annotations

import json
from pathlib import Path

from difftest.build.envs.fingerprint import sha256_file
from difftest.core.errors import DifftestError
from difftest.core.evidence import Evidence, ProbeFiles
from difftest.core.records import ProbeRun
from difftest.run.delivery import read_delivery


def probe_files(evidence: Evidence, branch: str, tier: str) -> ProbeFiles:
    """What the evidence says about one probe's files, or DifftestError saying why there is nothing."""
    found = next((p for p in evidence.probes if p.branch == branch and p.tier == tier), None)
    if found is None:
        why = (
            "the evidence file predates step records (schema 2 or older)"
            if not evidence.probes
            else f"no {tier} probe ran for {branch} (it could not be measured)"
        )
        raise DifftestError(
            f"no step records for {branch!r} in the {tier} tier: {why}",
            "run `difftest run` again to record them",
        )
    return found


def recorded_runs(evidence: Evidence, folder: Path, branch: str, tier: str) -> list[ProbeRun]:
    """Every planned run of one branch's probe in one tier, with its steps, checked as the runner checked it
    (merged shards hold one probe per shard for a branch and tier: their runs, one after the other)."""
    probe_files(evidence, branch, tier)  # none at all: says why
    found = [p for p in evidence.probes if p.branch == branch and p.tier == tier]
    return [run for files in found for run in _probe_runs(files, folder, branch, tier)]


def probe_of(evidence: Evidence, folder: Path, branch: str, tier: str, scenario: str) -> ProbeFiles | None:
    """The probe whose job played `scenario` for `branch` (merged shards: one of several); read after
    `recorded_runs` checked the files' hashes."""
    for files in (p for p in evidence.probes if p.branch == branch and p.tier == tier):
        try:
            job = json.loads(_inside(folder, files.job).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if any(s.get("name") == scenario for s in job.get("scenarios", [])):
            return files
    return None


def _probe_runs(files: ProbeFiles, folder: Path, branch: str, tier: str) -> list[ProbeRun]:
    job_path = _inside(folder, files.job)
    records_path = _inside(folder, files.records)
    for path, recorded in ((job_path, files.job_sha256), (records_path, files.records_sha256)):
        if not path.is_file():
            raise DifftestError(
                f"{path} is missing (the evidence names it as {branch}'s {tier} probe output)",
                "keep the probe/ folder next to evidence.json, as `difftest run` wrote it",
            )
        now = sha256_file(path)
        if now != recorded:
            raise DifftestError(
                f"{path} changed after the evidence was written (sha256 {now[:12]}, the evidence recorded "
                f"{recorded[:12]}): its steps are not the ones the verdicts were made from",
                "use the probe/ folder written together with this evidence.json, or run `difftest run` again",
            )
    try:
        job = json.loads(job_path.read_text(encoding="utf-8"))
    except ValueError as exc:  # cannot happen for a file whose hash matched one the runner wrote
        raise DifftestError(f"{job_path}: not valid JSON ({exc})", "run `difftest run` again") from None
    return read_delivery(records_path, files.nonce, job, tier, files.exited_cleanly).runs(None)


def _inside(folder: Path, relative: str) -> Path:
    """`relative` under `folder`; an evidence file naming a path outside it is refused."""
    path = (folder / relative).resolve()
    if not path.is_relative_to(folder.resolve()):
        raise DifftestError(
            f"the evidence names a probe file outside its folder: {relative!r}",
            "use an evidence.json written by `difftest run`",
        )
    return path
