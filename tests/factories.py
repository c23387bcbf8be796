"""Hand-made data shared by the tests of the pure layers (verdicts, reports, gate).

Those layers take data, not vLLM: oracle totals built by hand are their real input.
"""

from __future__ import annotations

from difftest.core.records import Totals

#: Oracle totals of a 4-row, k=3 step series with one truncated row.
ORACLE = Totals(
    num_drafts=4,
    num_draft_tokens=12,
    num_accepted_tokens=9,
    num_accepted_tokens_per_pos=[4, 3, 2],
    num_draft_tokens_per_pos=[4, 4, 4],
    num_emitted_tokens=11,
)
