"""Reading a finished comparison's step records again (`difftest show`, `difftest merge`), trusting
them no more than the runner did.

The evidence names each probe's job and records file with their sha256 and
the nonce the probe stamped its records with (`ProbeFiles`). A file whose
bytes changed since (edited, truncated, from another run) is refused, naming
it; an unchanged one is validated record by record by the runner's own reader
(`delivery.read_delivery`), so `show` sees exactly the runs the verdicts were
made from, errors included, and `merge` can judge them again (`run.rejudge`).

With the records comes how the probe process ended (`ProbeFiles.outcome`),
checked against them: an outcome that claims a header, a trailer or runs the
records do not hold is refused. What the runner knew beyond the files is taken
from the outcome: difftest could not read the output (`host_error`: every run
is an error, as the runner made it), or rejected it although it reads well
(its probe's vLLM came from elsewhere: the outcome then says it never started),
and why runs went unreported (the exit the outcome records; the probe's log
tail the runner quoted is not kept). A file written before schema 9 holds no
outcome: see `derived_outcome`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from difftest.build.envs.fingerprint import sha256_file
from difftest.core.errors import DifftestError
from difftest.core.evidence import Evidence, ProbeFiles
from difftest.core.outcome import ProcessOutcome
from difftest.core.records import ProbeRun
from difftest.probe.protocol import Job
from difftest.run.probes.read_records import Delivery, check_lines, read_delivery


@dataclass
class RecordedProbe:
    """One probe read back from its files: what the judging door takes (`door.Measured`), and its
    job."""

    files: ProbeFiles
    job: Job
    runs: list[ProbeRun]
    outcome: ProcessOutcome


def probe_files(evidence: Evidence, branch: str, tier: str) -> ProbeFiles:
    """What the evidence says about one probe's files, or DifftestError saying why there is
    nothing."""
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
    """Every planned run of one branch's probe in one tier, with its steps, checked as the runner
    checked it (merged shards hold one probe per shard for a branch and tier: their runs, one after
    the other)."""
    probe_files(evidence, branch, tier)  # none at all: says why
    found = [p for p in evidence.probes if p.branch == branch and p.tier == tier]
    return [run for files in found for run in recorded_probe(files, folder).runs]


def probe_of(
    evidence: Evidence, folder: Path, branch: str, tier: str, scenario: str
) -> ProbeFiles | None:
    """The probe whose job played `scenario` for `branch` (merged shards: one of several); read
    after `recorded_runs` checked the files' hashes."""
    for files in (p for p in evidence.probes if p.branch == branch and p.tier == tier):
        try:
            job = json.loads(_inside(folder, files.job).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if any(s.get("name") == scenario for s in job.get("scenarios", [])):
            return files
    return None


def recorded_probe(files: ProbeFiles, folder: Path) -> RecordedProbe:
    """One probe's runs (with their steps) and outcome, from files whose sha256 the evidence
    recorded; DifftestError naming the file when one is missing or changed, or when the outcome
    contradicts it."""
    branch, tier = files.branch, files.tier
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
                f"{path} changed after the evidence was written "
                f"(sha256 {now[:12]}, the evidence recorded {recorded[:12]}): "
                "its steps are not the ones the verdicts were made from",
                "use the probe/ folder written together with this evidence.json, "
                "or run `difftest run` again",
            )
    try:
        job = json.loads(job_path.read_text(encoding="utf-8"))
    except ValueError as exc:  # cannot happen for a file whose hash matched one the runner wrote
        raise DifftestError(
            f"{job_path}: not valid JSON ({exc})", "run `difftest run` again"
        ) from None
    delivery = read_delivery(records_path, files.nonce, job, tier, files.exited_cleanly)
    outcome = files.outcome or derived_outcome(files, delivery)
    if (
        outcome.host_error is not None
    ):  # the runner could not read them: every run is an error, as it made them
        reason = f"difftest could not read this probe's output: {outcome.host_error}"
        return RecordedProbe(
            files, job, check_lines([], "", job, tier, exited_cleanly=False).runs(reason), outcome
        )
    _check_outcome(outcome, delivery, records_path)
    if delivery.header is not None and delivery.trusted and not outcome.started:
        delivery.untrusted.append(
            "difftest rejected this probe's output when it ran (its vLLM did not come from "
            "its branch environment): the shard's own report names why"
        )
    return RecordedProbe(files, job, delivery.runs(_process_error(outcome)), outcome)


def derived_outcome(files: ProbeFiles, delivery: Delivery) -> ProcessOutcome:
    """The outcome of a probe recorded before schema 9, from what the file does say:
    `exited_cleanly` (it exited 0, not killed) and the records themselves (header, trailer,
    unreported runs), exactly as the runner derives them. A probe that did not exit cleanly is
    recorded only as that, so it reads as exit code 1, standing for "not 0, how is not known": an
    unclean end is never taken for a clean one."""
    return delivery.outcome(exit_code=0 if files.exited_cleanly else 1)


def _check_outcome(outcome: ProcessOutcome, delivery: Delivery, records_path: Path) -> None:
    """DifftestError when the outcome claims what the records do not show (it was edited, or belongs
    to other records): its header, its trailer, the runs it never reported."""
    claims = {
        "a header": (outcome.started, delivery.header is not None and delivery.trusted),
        "a trailer": (outcome.trailer, delivery.trailer is not None and delivery.trusted),
    }
    wrong = [
        f"{what} the records do not hold"
        for what, (said, held) in claims.items()
        if said and not held
    ]
    if sorted(outcome.unreported) != sorted(delivery.unreported()):
        wrong.append(
            f"unreported runs {outcome.unreported} where the records leave {delivery.unreported()}"
        )
    if wrong:
        raise DifftestError(
            f"the evidence's outcome of {records_path.name} does not match the records: "
            f"it claims {'; '.join(wrong)}",
            "use the evidence.json written together with this probe/ folder, "
            "or run `difftest run` again",
        )


def _process_error(outcome: ProcessOutcome) -> str | None:
    """Why runs went unreported, as the runner puts it down to the process (`runner._read_output`):
    a kill at the time limit or a non-zero exit; None for a probe that was only slow to exit after
    its trailer."""
    if outcome.exit_overdue or not (outcome.timed_out or outcome.exit_code != 0):
        return None
    return f"the probe {outcome.fault()}"


def _inside(folder: Path, relative: str) -> Path:
    """`relative` under `folder`; an evidence file naming a path outside it is refused."""
    path = (folder / relative).resolve()
    if not path.is_relative_to(folder.resolve()):
        raise DifftestError(
            f"the evidence names a probe file outside its folder: {relative!r}",
            "use an evidence.json written by `difftest run`",
        )
    return path
