"""The serving-conditions kit: per condition, a regression that changes the stats only there, and a
behaviour-preserving refactor of the same code.

Each `Condition` names the shipped scheduler scenario that reaches it and two
edits of vLLM 0.32.0's sources (the fixture repository's `v0.32.0`):
- `mutant`: a plausible one-line regression whose effect on the stats exists
  only under the condition (everywhere else the branch counts as main does);
- `refactor`: the same code rewritten without changing what it does.
`tests/conditions/test_conditions.py` holds the contract: `gate` (exit 1) and
`fuzz --against main` (within 300 examples) flag every mutant; neither flags a
refactor. A condition the scheduler tier cannot reach would show here as a
mutant nobody flags.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.patching import make_patch

SCHEDULER = "vllm/v1/core/sched/scheduler.py"

#: The statistics call of `update_from_output` (the first lines every stats mutant touches).
_STATS_CALL = """\
                spec_decoding_stats = self.make_spec_decoding_stats(
                    spec_decoding_stats,
                    num_draft_tokens=num_draft_tokens,
                    num_accepted_tokens=num_accepted,
                    num_invalid_spec_tokens=scheduler_output.num_invalid_spec_tokens,
                    request_id=req_id,
                )
"""
#: The guard of that call.
_STATS_GUARD = """\
            if scheduled_spec_token_ids and (
                generated_token_ids or self.num_sampled_tokens_per_step == 0
            ):
"""
#: Where `update_draft_token_ids` drops the drafts of a request that is still prefilling.
_PREFILL_CHUNK_DRAFTS = """\
            if request.is_prefill_chunk:
                # Ignore draft tokens for prefill chunks.
                if request.spec_token_ids:
                    request.spec_token_ids = []
                continue

"""
#: Where `update_from_output` skips a request that is gone or finished.
_GONE = """\
            if request is None or request.is_finished():
                # The request is already finished. This can happen if the
"""
_GONE_REST = "                # The request is already finished. This can happen if the\n"


@dataclass(frozen=True)
class Edit:
    """Replace `old` (which must occur exactly once) with `new` in `path`."""

    path: str
    old: str
    new: str

    def patch(self, dest: Path, repo: object, tag: str = "v0.32.0") -> Path:
        from difftest.build.refs import read_blob

        source = read_blob(repo, tag, self.path).decode()
        assert source.count(self.old) == 1, f"{self.path}: the edited text must occur once"
        return make_patch(dest, self.path, source, source.replace(self.old, self.new))


@dataclass(frozen=True)
class Condition:
    name: str
    #: The shipped scheduler scenario that reaches the condition.
    scenario: str
    #: What the regression does, in a sentence.
    does: str
    mutant: Edit
    refactor: Edit
    #: Whether a scenario mapping (a fuzz finding, shrunk) still has the condition.
    present: Callable[[dict[str, Any]], bool]

    @property
    def slug(self) -> str:
        return self.name.replace(" ", "-").replace("/", "")


def _counting_gone(which: str) -> str:
    """The skip of a gone request, counting the scheduled drafts of those `which` selects as a draft
    round with nothing accepted."""
    return (
        _GONE.replace(_GONE_REST, "") + f"                if {which} and (\n"
        "                    scheduler_output.scheduled_spec_decode_tokens.get(req_id)\n"
        "                ):\n"
        "                    spec_decoding_stats = self.make_spec_decoding_stats(\n"
        "                        spec_decoding_stats,\n"
        "                        num_draft_tokens=len(\n"
        "                            scheduler_output.scheduled_spec_decode_tokens[req_id]\n"
        "                        ),\n"
        "                        num_accepted_tokens=0,\n"
        "                        num_invalid_spec_tokens=None,\n"
        "                        request_id=req_id,\n"
        "                    )\n" + _GONE_REST
    )


def _stats_call_if(condition: str) -> str:
    """The statistics call made only where `condition` holds (the step's accumulator kept as it is
    elsewhere): nothing but the stats changes, the rollback above it is untouched."""
    call = "".join("    " + line if line else line for line in _STATS_CALL.splitlines(True)[1:])
    return (
        "                spec_decoding_stats = (\n"
        "                    self.make_spec_decoding_stats(\n"
        + call
        + f"                    if {condition}\n"
        "                    else spec_decoding_stats\n"
        "                )\n"
    )


def _stats_call_with(extra: str) -> str:
    return _STATS_CALL.replace(
        "num_accepted_tokens=num_accepted,", f"num_accepted_tokens=num_accepted{extra},"
    )


METRICS = "vllm/v1/spec_decode/metrics.py"
#: Where `SpecDecodingLogging.reset` clears the per-position lists of the interval just logged.
_RESET_PER_POS = """\
        self.accepted_tokens_per_pos_lists: list[list[int]] = []
        self.last_log_time = time.monotonic()
"""

CONDITIONS: tuple[Condition, ...] = (
    Condition(
        "prefix caching",
        "prefix-cache-hit",
        "counts the sampled token of a prefix-cache hit's first (padded) step as an accepted draft",
        Edit(
            SCHEDULER,
            _STATS_CALL,
            _stats_call_with(
                " + int(bool(request.prefill_stats"
                " and request.prefill_stats.num_local_cached_tokens))"
            ),
        ),
        Edit(
            SCHEDULER,
            _STATS_CALL,
            "                spec_decoding_stats = self.make_spec_decoding_stats(\n"
            "                    spec_decoding_stats,\n"
            "                    num_draft_tokens,\n"
            "                    num_accepted,\n"
            "                    scheduler_output.num_invalid_spec_tokens,\n"
            "                    req_id,\n"
            "                )\n",
        ),
        present=lambda raw: bool(raw.get("prefix_caching")),
    ),
    Condition(
        "P/D decode node",
        "pd-decode-node",
        "counts the sampled token of a KV-loaded request's first (padded) step as accepted",
        Edit(
            SCHEDULER,
            _STATS_CALL,
            _stats_call_with(
                " + int(bool(request.prefill_stats"
                " and request.prefill_stats.num_external_cached_tokens))"
            ),
        ),
        Edit(
            SCHEDULER,
            _STATS_CALL,
            "                spec_decoding_stats = self.make_spec_decoding_stats(\n"
            "                    spec_decoding_stats,\n"
            "                    request_id=req_id,\n"
            "                    num_invalid_spec_tokens="
            "scheduler_output.num_invalid_spec_tokens,\n"
            "                    num_accepted_tokens=num_accepted,\n"
            "                    num_draft_tokens=num_draft_tokens,\n"
            "                )\n",
        ),
        present=lambda raw: raw.get("kv_connector") == "decode-node",
    ),
    Condition(
        "1-token prompts",
        "one-token-prompt",
        "drops every draft round of a request whose prompt is one token",
        Edit(SCHEDULER, _STATS_CALL, _stats_call_if("request.num_prompt_tokens > 1")),
        Edit(
            SCHEDULER,
            _STATS_CALL,
            "                invalid = scheduler_output.num_invalid_spec_tokens\n"
            + _STATS_CALL.replace(
                "num_invalid_spec_tokens=scheduler_output.num_invalid_spec_tokens,",
                "num_invalid_spec_tokens=invalid,",
            ),
        ),
        present=lambda raw: any(len(r["prompt"]) == 1 for r in raw["requests"]),
    ),
    Condition(
        "aborts",
        "abort-in-flight",
        "counts the in-flight drafts of a request aborted between schedule and update",
        Edit(
            SCHEDULER,
            _GONE,
            _counting_gone("req_id in self.finished_req_ids"),
        ),
        Edit(
            SCHEDULER,
            _GONE,
            "            if request is None or RequestStatus.is_finished(request.status):\n"
            + _GONE_REST,
        ),
        present=lambda raw: any(r.get("abort") is not None for r in raw["requests"]),
    ),
    Condition(
        "two steps in flight",
        "two-steps-in-flight",
        "counts the in-flight step of a request that stopped while it was scheduled",
        Edit(
            SCHEDULER,
            _GONE,
            _counting_gone("request is None and req_id not in self.finished_req_ids"),
        ),
        Edit(
            SCHEDULER,
            _GONE,
            "            if request is None or request.status > RequestStatus.PREEMPTED:\n"
            + _GONE_REST,
        ),
        present=lambda raw: raw.get("in_flight") == 2,
    ),
    Condition(
        "preemption",
        "preemption-sync",
        "drops every draft round of a request once it has been preempted",
        Edit(SCHEDULER, _STATS_CALL, _stats_call_if("not request.num_preemptions")),
        Edit(SCHEDULER, _STATS_CALL, _stats_call_if("request is not None")),
        present=lambda raw: raw.get("kv_blocks") is not None,
    ),
    Condition(
        "chunked prefill",
        "chunked-prefill",
        "keeps the drafts the runner hands over for a request still prefilling",
        Edit(SCHEDULER, _PREFILL_CHUNK_DRAFTS, ""),
        Edit(
            SCHEDULER,
            _PREFILL_CHUNK_DRAFTS,
            "            if request.is_prefill_chunk:\n"
            "                # Ignore draft tokens for prefill chunks.\n"
            "                request.spec_token_ids = []\n"
            "                continue\n\n",
        ),
        present=lambda raw: raw.get("max_num_batched_tokens") is not None,
    ),
    Condition(
        "token budget",
        "token-budget-cut",
        "lists a decode's whole draft block when the token budget scheduled only part of it",
        Edit(
            SCHEDULER,
            "                    if len(spec_token_ids) > num_scheduled_spec_tokens:\n"
            "                        spec_token_ids = spec_token_ids[:num_scheduled_spec_tokens]\n",
            "",
        ),
        Edit(
            SCHEDULER,
            "                    spec_token_ids = request.spec_token_ids\n"
            "                    if len(spec_token_ids) > num_scheduled_spec_tokens:\n"
            "                        spec_token_ids = spec_token_ids[:num_scheduled_spec_tokens]\n",
            "                    spec_token_ids = "
            "request.spec_token_ids[:num_scheduled_spec_tokens]\n",
        ),
        # A short context cuts a draft block too (#49): what the mutant mishandles either way.
        present=lambda raw: (
            raw.get("max_num_batched_tokens") is not None or raw.get("max_model_len") is not None
        ),
    ),
    Condition(
        "spec decoding off",
        "spec-decoding-off",
        "reports an empty stats object every step when speculative decoding is off (undoes #16023)",
        Edit(
            SCHEDULER,
            "        spec_stats = spec_decoding_stats\n",
            "        spec_stats = spec_decoding_stats\n"
            "        if spec_stats is None and self.vllm_config.speculative_config is None:\n"
            "            spec_stats = SpecDecodingStats.new(self.num_spec_tokens)\n",
        ),
        Edit(
            SCHEDULER,
            "        spec_stats = spec_decoding_stats\n",
            "        spec_stats: SpecDecodingStats | None = spec_decoding_stats\n",
        ),
        present=lambda raw: raw.get("spec_decoding") is False,
    ),
    Condition(
        "logging intervals",
        "log-intervals",
        "keeps each position's accepted counts across logging intervals (the logger's reset no "
        "longer clears them): a run's first line is right, every later one wrong",
        Edit(
            METRICS,
            _RESET_PER_POS,
            _RESET_PER_POS.replace(
                "        self.accepted_tokens_per_pos_lists",
                '        if not hasattr(self, "accepted_tokens_per_pos_lists"):\n'
                "            self.accepted_tokens_per_pos_lists",
            ),
        ),
        Edit(
            METRICS,
            _RESET_PER_POS,
            _RESET_PER_POS.replace("= []", "= list()"),
        ),
        present=lambda raw: raw.get("log_every") is not None,
    ),
)


def condition(slug: str) -> Condition:
    return next(c for c in CONDITIONS if c.slug == slug)
