"""`difftest gate --base REF --head REF`: the CI gate for changes to the stats path.

Skips (exit 0, saying why) when the head changes no configured stats-path file
relative to the base, unless `--always`; otherwise measures both, and fails when
the head is broken anywhere or worse than the base anywhere. The outcome is
printed for a person on a terminal, as Markdown when piped (or `--format md`),
as JSON with `--format json`; `$GITHUB_STEP_SUMMARY` and `gate.md` always get
the Markdown.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

from difftest.build.gate_changes import HeadChanges, head_changes
from difftest.build.workspace import branch_specs
from difftest.cli.base import (
    Command,
    Log,
    add_cache_option,
    add_compare_options,
    add_executor_options,
    add_format,
    compare_request,
    comparison_report,
)
from difftest.cli.progress import probe_progress
from difftest.core.config import Config
from difftest.core.errors import EXIT_OK
from difftest.core.gate import compare_for_gate, gate_exit_code
from difftest.reports import locked_out, prepare_out, registry, write_report
from difftest.reports.conclusion import changed_coverage
from difftest.reports.json_report import render_skipped_json
from difftest.reports.sources import GateReport
from difftest.run.coverage.skip_rule import BaseTrace, SkipCheck, check_skip
from difftest.run.pipeline import CompareRequest, check_request, compare, select_scenarios
from difftest.run.traced import run_traced
from difftest.tiers.suite_tier import SuiteTier

#: The gate's own `--format` choice, before the registry's: text on a terminal, md when piped.
AUTO = "auto"


class GateCommand(Command):
    name = "gate"
    help = "CI gate: fail when HEAD's stats are worse than BASE's"

    def setup_arguments(self, parser: argparse.ArgumentParser) -> None:
        super().setup_arguments(parser)
        parser.add_argument("--base", required=True, help="branch name or git ref of the base")
        parser.add_argument("--head", required=True, help="branch name or git ref of the change")
        parser.add_argument(
            "--always", action="store_true", help="run even when no stats-path file changed"
        )
        parser.add_argument(
            "--require-coverage",
            action="store_true",
            help="exit 1 when the head changes lines that no scenario executed (default: say "
            "'not verified' and exit 0); implies --always",
        )
        add_compare_options(parser)
        add_executor_options(parser)
        add_cache_option(parser)
        add_format(
            parser,
            self.name,
            AUTO,
            "text: for a person; md: Markdown; auto: text on a terminal, md when piped",
            also=(AUTO,),
        )

    def run(self, config: Config | None, args: argparse.Namespace, log: Log) -> int:
        assert config is not None
        # Named as `compare` names them (two refs whose names collide get distinct ones).
        base_name, head_name = (spec.name for spec in branch_specs(config, [args.base, args.head]))
        request = compare_request(args, [args.base, args.head], baseline=base_name)
        check_request(config, request)  # a usage error touches nothing in --out
        with locked_out(args.out):  # before prepare_out clears what another command may be writing
            prepare_out(args.out, log)
            changes = head_changes(config, args.base, args.head, args.fetch, log)
            hits = changes.on_stats_path
            # --require-coverage measures every head: a skip would say nothing of what ran.
            if not hits and not args.always and not args.require_coverage:
                check = _may_skip(config, request, changes, args.base, base_name, log)
                if check.skip:
                    message = (
                        f"difftest gate: skipped: {head_name} changes none of the stats-path "
                        f"files relative to {base_name} ({', '.join(config.stats_paths)}), and "
                        f"{check.why}; pass --always to run anyway"
                    )
                    print(
                        message if args.format != "json" else render_skipped_json(message, EXIT_OK)
                    )
                    _step_summary(message + "\n", log)
                    return EXIT_OK
                log(f"measuring: {head_name} changes no stats-path file, but {check.why}")
            if hits:
                log(f"{head_name} changes {len(hits)} stats-path file(s): {', '.join(hits[:6])}")
            comparison = compare(config, request, log, probe_progress)
            evidence = comparison.evidence
            base_results = [r for r in evidence.results if r.branch == base_name]
            head_results = [r for r in evidence.results if r.branch == head_name]
            outcome = dataclasses.replace(
                compare_for_gate(base_results, head_results),
                coverage=changed_coverage(evidence, head_name),
            )
            code = gate_exit_code(outcome, head_results, args.require_coverage)
            report = comparison_report(
                comparison,
                GateReport,
                exit_code=code,
                outcome=outcome,
                base=base_name,
                head=head_name,
            )
            write_report(report, request.out)
            chosen = (
                args.format if args.format != AUTO else ("text" if sys.stdout.isatty() else "md")
            )
            registry.show(report, self.name, chosen)
            _step_summary(registry.render("gate", report), log)
            return code


def _may_skip(
    config: Config,
    request: CompareRequest,
    changes: HeadChanges,
    base_ref: str,
    base_name: str,
    log: Log,
) -> SkipCheck:
    """The skip rule outside the stats path (`run.coverage.skip_rule`), the base traced over the
    gate's own tiers and scenarios."""

    def trace_base() -> BaseTrace:
        log(f"checking which code of vllm/ the scenarios run on {base_name} (traced; cached)")
        traced = run_traced(config, request, base_ref, log, probe_progress)
        for tier, failure in traced.failures.items():  # a partial map cannot clear a head
            traced.executed.unknown.append(f"its {tier} tier's probe failed ({failure})")
        return BaseTrace(traced.executed, traced.tiers, traced.scenarios, traced.root, traced.sha)

    selected = select_scenarios(config, request.tiers, request.select, request.scenarios)
    untraced = [s.tier.name for s in selected if isinstance(s.tier, SuiteTier) and s.scenarios]
    return check_skip(changes, base_name, trace_base, untraced)


def _step_summary(markdown: str, log: Log) -> None:
    """Append to the CI job summary when running under GitHub Actions. A summary that cannot be
    written (a missing folder, a directory, a full disk) is warned about: the gate's own verdict,
    already written to `--out`, keeps its exit code."""
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return
    try:
        with open(target, "a", encoding="utf-8") as handle:
            handle.write(markdown + "\n")
    except OSError as exc:
        log(
            f"warning: could not append the job summary to GITHUB_STEP_SUMMARY={target!r} "
            f"({exc.strerror or exc}); the gate's verdict and exit code stand, gate.md holds "
            "the same summary"
        )
