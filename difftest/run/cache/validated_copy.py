"""The validated copy of a result cache entry's records, so that reusing an unchanged entry does not
read its records line by line again.

Reading an entry's records the runner's way (`delivery.check_lines`: JSON per
line, strings cleaned, the nonce, the plan, the trailer, a model per record) is
most of what reusing the entry costs once its probe is not run. Its outcome
depends on nothing but the entry's bytes (they hold the job, the records and
the nonce), so the outcome is kept beside the entry: the probe's header and its
runs as the reader returned them, with the sha256 of the entry's bytes they were
read from and the sha256 of the copy's own body.

A copy stands for those exact bytes and nothing else. The entry's bytes are
hashed on every reuse (its own checks, key, payload hash and job, still run), and
a copy of other bytes (the entry was damaged, forged or stored again since) is
not used: those records are read line by line again, and a bad one is caught as
before. A copy whose own hash or shape is wrong is reported as damaged and not
used. Even an intact copy is still validated against the record models as it is
read (one pydantic call for the whole body, not one per record), so it can never
yield a run the models reject.

A copy is written only when it reads back exactly as the reader returned it
(fields left unset included); a value JSON cannot carry (NaN in a branch's extra
field) makes the entry be read line by line on every reuse instead.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ValidationError

from difftest.build.envs.fingerprint import sha256_bytes
from difftest.core.evidence import atomic_write_text
from difftest.core.records import ProbeCoverage, ProbeHeader, ProbeRun

#: Bump when the copy's shape changes: a copy of another format is read as damaged and replaced.
COPY_FORMAT = 2


class ReadRecords(BaseModel):
    """What the reader made of one probe's records: its header and one run per planned run, in plan
    order."""

    header: ProbeHeader
    runs: list[ProbeRun]
    #: What the probe traced (None: its job asked for no tracing).
    coverage: ProbeCoverage | None = None


class CopyDamaged(Exception):
    """A copy that does not read back as it was written."""


def copy_path(entry: Path) -> Path:
    """Where the copy of `entry` (`<key>.json`) lives: `<key>.runs.json`, beside it."""
    return entry.with_name(f"{entry.stem}.runs.json")


def read_copy(path: Path, entry_sha256: str) -> ReadRecords | None:
    """The copy at `path` if it was made from entry bytes with this sha256; None when there is none
    or it was made from other bytes; CopyDamaged when it does not read back."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CopyDamaged(f"not readable: {exc.strerror or exc}") from None
    first, _, body = raw.partition(b"\n")
    try:
        head = json.loads(first)
        made_from, body_sha256 = str(head["entry_sha256"]), str(head["sha256"])
        fmt = head["format"]
    except (ValueError, TypeError, KeyError) as exc:
        raise CopyDamaged(f"no readable first line: {exc}") from None
    if fmt != COPY_FORMAT:
        raise CopyDamaged(f"format {fmt!r}, not {COPY_FORMAT}")
    if made_from != entry_sha256:
        return None
    if sha256_bytes(body) != body_sha256:
        raise CopyDamaged("its body does not match its sha256")
    try:
        return ReadRecords.model_validate_json(body)
    except ValidationError as exc:
        raise CopyDamaged(f"its body does not validate: {exc.error_count()} error(s)") from None


def write_copy(path: Path, entry_sha256: str, records: ReadRecords) -> bool:
    """Keep `records` (what the reader made of entry bytes with this sha256) at `path`; False when
    they would not read back exactly (then nothing is written) or the copy cannot be written."""
    try:
        body = records.model_dump_json(exclude_unset=True)
        back = ReadRecords.model_validate_json(body)
        encoded = body.encode("utf-8")
    except (
        ValueError
    ):  # not serializable, not valid once serialized, or not UTF-8 (pydantic's errors included)
        return False
    if back != records or back.model_dump_json(exclude_unset=True) != body:
        return False
    head = json.dumps(
        {"format": COPY_FORMAT, "entry_sha256": entry_sha256, "sha256": sha256_bytes(encoded)}
    )
    try:
        atomic_write_text(path, f"{head}\n{body}")
    except OSError:
        return False
    return True
