"""`difftest coverage [BRANCH]`: which stats-path lines and arcs the scenarios reach, per file and
function, on one branch (default: the config's baseline).

The branch's probes run every selected scenario traced over all of `vllm/` (its results come from
and go to the result cache like `run`'s); the stats path's files are then read from the branch's
environment, parsed here and marked. Exits 0, or 3 where the coverage is unknown or partial (a
probe failed, a file could not be read or parsed). Writes `coverage.json` (with the map of every
executed `vllm/` line: what the gate's skip rule computes the same way for its base) and
`coverage/` (HTML pages) into --out.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from difftest.cli.base import (
    Command,
    Log,
    add_cache_option,
    add_compare_options,
    compare_request,
)
from difftest.cli.progress import probe_progress
from difftest.core.config import Config
from difftest.core.errors import EXIT_OK, EXIT_UNMEASURED
from difftest.core.stats_path import STATS_PATH
from difftest.reports import locked_out, prepare_out, write_report_set
from difftest.reports.coverage_view import (
    CoverageReport,
    render_json,
    render_pages,
    render_terminal,
)
from difftest.run.coverage.reach import reach_of, stats_path_files
from difftest.run.pipeline import check_request
from difftest.run.traced import TRACED, TracedRun, run_traced

#: What each built-in stats-path part decides (a part the config adds has no words).
DECIDES = {part.path: part.decides for part in STATS_PATH}


class CoverageCommand(Command):
    name = "coverage"
    help = "which stats-path lines and arcs the scenarios reach, per file and function"

    def setup_arguments(self, parser: argparse.ArgumentParser) -> None:
        super().setup_arguments(parser)
        add_compare_options(parser, out="out-coverage", holds="coverage.json and coverage/")
        add_cache_option(parser)
        parser.add_argument(
            "branch", nargs="?", default=None, help="branch name or git ref (default: baseline)"
        )

    def run(self, config: Config | None, args: argparse.Namespace, log: Log) -> int:
        assert config is not None
        branch = args.branch or config.baseline
        request = compare_request(args, [branch], baseline=branch)
        check_request(config, request)
        with locked_out(request.out):
            prepare_out(request.out, log)
            traced = run_traced(config, request, branch, log, probe_progress)
            report, sources = coverage_report(traced, config.stats_paths)
            files = {"coverage.json": render_json(report)}
            files.update(render_pages(report, sources))
            write_report_set(request.out, files)
            render_terminal(report, Console(width=80, highlight=False))
            log(
                f"wrote {Path(request.out) / 'coverage.json'} and {Path(request.out) / 'coverage'}/"
            )
            # A figure that could not be had, or only in part, is never read as one.
            complete = not report.failures and not any(f.problem for f in report.files)
            return EXIT_OK if report.status == "ok" and complete else EXIT_UNMEASURED


def coverage_report(
    traced: TracedRun, stats_paths: list[str]
) -> tuple[CoverageReport, dict[str, str]]:
    """The traced branch's reach over the stats path (`stats_paths`, the config's), and the
    sources of the files it ran."""
    executed, workspace = traced.executed, traced.comparison.workspace
    status, why = "ok", ""
    if executed.unknown:
        status, why = "unknown", executed.unknown[0]
    elif not executed.traced_probes:
        coverage = traced.comparison.evidence.coverage
        status = "unknown"
        why = (coverage.why_not if coverage else "") or ("no probe or test session was traced")
    root = traced.root
    files = reach_of(root, executed, stats_path_files(root, stats_paths), stats_paths)
    sources = {
        f.file: (root.parent / f.file).read_text(encoding="utf-8", errors="replace")
        for f in files
        if f.imported
    }
    branch = next(b for b in workspace.branches if b.name == traced.branch)
    report = CoverageReport(
        branch=traced.branch,
        sha=branch.resolved.sha,
        base=workspace.base.fingerprint,
        tiers=traced.tiers,
        scenarios=traced.scenarios,
        traced=list(TRACED),
        status=status,
        why=why,
        files=files,
        parts=[(path, DECIDES.get(path, "")) for path in stats_paths],
        executed={path: sorted(lines) for path, lines in sorted(executed.lines.items())},
        failures=traced.failures,
    )
    return report, sources
