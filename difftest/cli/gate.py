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

from difftest.build.refs import changed_files, touches
from difftest.build.workspace import branch_spec, open_source_repo, refs_to_fetch, resolve_spec
from difftest.cli.base import (
    Command,
    Log,
    add_cache_option,
    add_compare_options,
    add_format,
    compare_request,
    stdout_console,
    write_comparison_reports,
)
from difftest.cli.progress import probe_progress
from difftest.core.config import Config
from difftest.core.errors import EXIT_OK
from difftest.core.gate import compare_for_gate, gate_exit_code
from difftest.reports import locked_out, prepare_out
from difftest.reports.gate_markdown import render_gate_markdown
from difftest.reports.gate_terminal import render_gate_terminal
from difftest.reports.json_report import render_json, render_skipped_json
from difftest.run.pipeline import compare

FORMATS = ("auto", "text", "md", "json")


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
        add_compare_options(parser)
        add_cache_option(parser)
        add_format(
            parser,
            FORMATS,
            "auto",
            "text: for a person; md: Markdown; auto: text on a terminal, md when piped",
        )

    def run(self, config: Config | None, args: argparse.Namespace, log: Log) -> int:
        assert config is not None
        with locked_out(args.out):  # before prepare_out clears what another command may be writing
            prepare_out(args.out)
            base_name = branch_spec(config, args.base).name
            head_name = branch_spec(config, args.head).name
            hits = stats_path_changes(config, args.base, args.head, args.fetch, log)
            if not hits and not args.always:
                message = (
                    f"difftest gate: skipped: {head_name} changes none of the stats-path files relative to {base_name} "
                    f"({', '.join(config.stats_paths)}); pass --always to run anyway"
                )
                print(message if args.format != "json" else render_skipped_json(message, EXIT_OK))
                _step_summary(message + "\n")
                return EXIT_OK
            if hits:
                log(f"{head_name} changes {len(hits)} stats-path file(s): {', '.join(hits[:6])}")
            request = compare_request(args, [args.base, args.head], baseline=base_name)
            comparison = compare(config, request, log, probe_progress)
            evidence = comparison.evidence
            base_results = [r for r in evidence.results if r.branch == base_name]
            head_results = [r for r in evidence.results if r.branch == head_name]
            outcome = compare_for_gate(base_results, head_results)
            code = gate_exit_code(outcome, head_results)
            summary = render_gate_markdown(outcome, base_name, head_name)
            write_comparison_reports(comparison, request.out, {"gate.md": summary})
            chosen = (
                args.format if args.format != "auto" else ("text" if sys.stdout.isatty() else "md")
            )
            if chosen == "json":
                gate = {
                    "worse": outcome.worse,
                    "findings": [dataclasses.asdict(f) for f in outcome.findings],
                }
                print(render_json(evidence, code, base=base_name, head=head_name, gate=gate))
            elif chosen == "text":
                render_gate_terminal(outcome, base_name, head_name, stdout_console())
            else:
                print(summary)
            _step_summary(summary)
            return code


def stats_path_changes(
    config: Config, base_name: str, head_name: str, do_fetch: bool, log: Log
) -> list[str]:
    """The head's changed files (relative to the base) that lie on the stats path."""
    specs = [branch_spec(config, base_name), branch_spec(config, head_name)]
    repo = open_source_repo(config, None, do_fetch, log, refs_to_fetch(config, specs))
    base, head = (resolve_spec(config, repo, spec) for spec in specs)
    return touches(changed_files(repo, base.sha, head.sha), config.stats_paths)


def _step_summary(markdown: str) -> None:
    """Append to the CI job summary when running under GitHub Actions."""
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if target:
        with open(target, "a", encoding="utf-8") as handle:
            handle.write(markdown + "\n")
