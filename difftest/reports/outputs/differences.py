"""What `verify --format text` prints: each difference of the re-run from the evidence, or that
there is none."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from difftest.reports.sources import VerifyReport


def show(report: VerifyReport) -> None:
    found, verified = report.differences, report.evidence_file
    if found:
        print(f"difftest verify: {len(found)} difference(s) from {verified}:")
        for line in found:
            print(f"  {line}")
        return
    print(
        f"difftest verify: all {len(report.evidence.results)} results and their runs identical to "
        f"{verified}"
    )
