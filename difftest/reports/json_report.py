"""`--format json`: the results for scripts, on stdout, instead of the text a person reads.

One JSON object: the schema version and oracle reading of the evidence, the
command's exit code, every result exactly as the evidence records it, and
what the command adds (the gate's findings, verify's differences).
"""

from __future__ import annotations

import json
from typing import Any

from difftest.core.evidence import Evidence


def render_json(evidence: Evidence, exit_code: int, **extra: Any) -> str:
    document = {
        "schema_version": evidence.schema_version,
        "reading": evidence.reading,
        "probes_confined": evidence.protection.confined if evidence.protection else None,
        "home_unconfined_since": (
            evidence.protection.home_unconfined_since if evidence.protection else ""
        ),
        "exit_code": exit_code,
        "results": [r.model_dump(mode="json") for r in evidence.results],
        **extra,
    }
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False)


def render_skipped_json(reason: str, exit_code: int) -> str:
    """What `gate --format json` prints when it skips (the head touches no stats-path file)."""
    return json.dumps(
        {"skipped": True, "reason": reason, "exit_code": exit_code, "results": []},
        indent=2,
        sort_keys=True,
    )
