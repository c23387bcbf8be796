"""`difftest blame BRANCH`: which hunks of a branch's change make each of its findings."""

from __future__ import annotations

import argparse
from pathlib import Path

from difftest.cli.base import (
    Command,
    Log,
    add_cache_option,
    add_compare_options,
    add_format,
    tier_names,
)
from difftest.core.config import Config
from difftest.core.errors import EXIT_OK, EXIT_UNMEASURED, ConfigError
from difftest.reports import locked_out, prepare_out, registry, write_report
from difftest.reports.sources import BlameReport


class BlameCommand(Command):
    name = "blame"
    help = "find the smallest set of a branch's hunks that makes each of its findings"

    def setup_arguments(self, parser: argparse.ArgumentParser) -> None:
        super().setup_arguments(parser)
        parser.add_argument("branch", help="branch name or git ref whose change is blamed")
        parser.add_argument(
            "--against",
            default=None,
            metavar="BASE",
            help="the base the branch's hunks are applied on (default: the config's baseline)",
        )
        parser.add_argument(
            "--finding",
            type=Path,
            default=None,
            metavar="FILE",
            help="a scenario file `difftest fuzz` wrote (OUT/found/scheduler/...yaml) to blame, "
            "instead of -k",
        )
        add_compare_options(
            parser,
            out="out-blame",
            holds="blame.md, evidence.json, blame.yaml and the patches it names, the reports of "
            "the sets it reports",
        )
        add_cache_option(parser)
        parser.add_argument(
            "--jobs",
            type=int,
            default=None,
            help="sets of hunks measured at once (default: one per core, as memory allows)",
        )
        add_format(
            parser,
            self.name,
            "text",
            "text: the hunks of each finding for a person; md: Markdown for a PR comment",
        )

    def run(self, config: Config | None, args: argparse.Namespace, log: Log) -> int:
        assert config is not None
        # Imported here: only blame needs the search.
        from difftest.run.blame.search import BlameRequest, blame

        if args.finding is not None and args.select is not None:
            raise ConfigError(
                "-k and --finding both choose what to blame",
                "give one: -k SCENARIO for a configured scenario, --finding FILE for a fuzz "
                "finding",
            )
        if args.jobs is not None and args.jobs < 1:
            raise ConfigError(f"--jobs {args.jobs}: give at least 1", "e.g. --jobs 2")
        request = BlameRequest(
            branch=args.branch,
            against=args.against,
            select=args.select,
            finding=args.finding,
            tiers=tier_names(args.tier),
            reading=args.reading,
            out=Path(args.out),
            fetch=args.fetch,
            fork=not args.no_fork,
            jobs=args.jobs,
            reuse_cached=not args.no_cache,
        )
        with locked_out(request.out):  # before prepare_out clears what another command may write
            # An earlier blame's config and patches go with its reports: write_report recorded them
            # in the manifest. A blame.yaml of a person's own there is kept.
            prepare_out(request.out, log)
            outcome = blame(config, request, log)
            blamed = outcome.evidence.blame
            assert blamed is not None
            # 0: every finding blamed on a set of hunks; 3: a finding the search could not blame.
            code = EXIT_OK if all(f.minimal for f in blamed.findings) else EXIT_UNMEASURED
            report = BlameReport.of(
                outcome.evidence, outcome.scenarios, outcome.recorded, exit_code=code, out=args.out
            )
            written = write_report(report, request.out, outcome.files)
            registry.show(report, self.name, args.format)
            log("wrote " + ", ".join(str(p) for p in written.values()))
            return report.exit_code
