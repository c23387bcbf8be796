"""`difftest verify evidence.json`: re-run what an evidence file records and compare.

Refuses (exit 2, naming the mismatch) when the same environment cannot be
rebuilt (`build.reproducible`): a different base wheel or lock, another Python
or platform, a branch that now resolves to another commit or applies other
patch files, a scenario file (or the tests tier's selection) whose bytes
changed, an evidence file with no results. Otherwise re-runs exactly the
recorded branches and scenarios, writes the re-run's reports and evidence to
`--out`, and exits 0 when everything a verdict rests on (every test outcome of
the tests tier included) is identical (`core.reproduction`), 1 when anything
differs (each difference is printed).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from difftest.build.reproducible import check_reproducible
from difftest.cli.base import (
    Command,
    Log,
    add_executor_options,
    add_format,
    cluster_request,
    comparison_report,
    recorded_scenarios,
)
from difftest.cli.progress import probe_progress
from difftest.core.config import Config
from difftest.core.errors import EXIT_FAILED, EXIT_OK, ConfigError
from difftest.core.evidence import read_evidence, written_version
from difftest.core.reproduction import evidence_differences
from difftest.reports import locked_out, prepare_out, registry, write_report
from difftest.reports.sources import VerifyReport
from difftest.run.pipeline import CompareRequest, compare


class VerifyCommand(Command):
    name = "verify"
    help = "re-run the branches and scenarios an evidence file records and compare the results"

    def setup_arguments(self, parser: argparse.ArgumentParser) -> None:
        super().setup_arguments(parser)
        parser.add_argument("evidence", help="an evidence.json written by `difftest run` or `gate`")
        parser.add_argument(
            "--out",
            default="out-verify",
            help="folder for the re-run's reports, evidence and probe records (default: "
            "out-verify)",
        )
        add_format(parser, self.name, "text", "text: one line per difference")
        parser.add_argument(
            "--no-fork",
            action="store_true",
            help="start every probe in an interpreter of its own (default: forked from a warm one)",
        )
        add_executor_options(parser)

    def run(self, config: Config | None, args: argparse.Namespace, log: Log) -> int:
        assert config is not None
        recorded = read_evidence(args.evidence)
        if Path(args.evidence).resolve().parent == Path(args.out).resolve():
            raise ConfigError(
                f"--out {args.out!r} is the folder of the evidence being verified: the re-run "
                "would replace it",
                "pass --out another folder (default: out-verify)",
            )
        with locked_out(args.out):  # before prepare_out clears what another command may be writing
            prepare_out(args.out, log)
            check_reproducible(config, recorded, log, recorded_scenarios)
            names = [
                name if config.branch(name) else then.ref
                for name, then in recorded.branches.items()
                if name not in recorded.reference_branches
            ]  # measured again as the re-run's own reference
            recorded_tiers = list(dict.fromkeys(s.tier for s in recorded.scenarios.values()))
            request = CompareRequest(
                branches=names,
                tiers=recorded_tiers,
                reading=recorded.reading,
                out=Path(args.out),
                scenarios=sorted(recorded.scenarios),
                baseline=recorded.baseline,
                reuse_cached=False,
                # A re-run that reads its results from a cache verifies nothing.
                store_results=False,
                fork=not args.no_fork,
                cluster=cluster_request(args),
            )
            comparison = compare(config, request, log, probe_progress)
            found = evidence_differences(
                recorded, comparison.evidence, written_version(args.evidence)
            )
            code = EXIT_FAILED if found else EXIT_OK
            report = comparison_report(
                comparison,
                VerifyReport,
                exit_code=code,
                differences=found,
                evidence_file=str(args.evidence),
            )
            written = write_report(report, request.out)
            log("wrote " + ", ".join(str(p) for p in written.values()))
            registry.show(report, self.name, args.format)
            return code
