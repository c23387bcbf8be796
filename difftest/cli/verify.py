"""`difftest verify evidence.json`: re-run what an evidence file records and compare.

Refuses (exit 2, naming the mismatch) when the same environment cannot be
rebuilt: a different base wheel or lock, another Python or platform, a branch
that now resolves to another commit or applies other patch files, a scenario
file (or the tests tier's selection) whose bytes changed, an evidence file with no results. The base is
identified by its wheel's files, not by where it is installed, so evidence
verifies from another clone, cache (`DIFFTEST_HOME`) or machine. Otherwise
re-runs exactly the recorded branches and scenarios, writes the re-run's
reports and evidence to `--out`, and exits 0 when everything a verdict rests on
(every test outcome of the tests tier included) is identical (`core.reproduction`), 1 when anything differs (each difference is
printed).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from difftest.build.envs.base import BaseEnv, ensure_base
from difftest.build.envs.branch import probe_digest
from difftest.build.envs.identity import IDENTITY_VERSION, find_record, legacy_record_hash
from difftest.build.workspace import branch_spec, open_source_repo, resolve_spec
from difftest.cli.base import Command, Log, add_format, recorded_scenarios, write_comparison_reports
from difftest.cli.progress import probe_progress
from difftest.core.config import Config
from difftest.core.errors import EXIT_FAILED, EXIT_OK, ConfigError
from difftest.core.evidence import Evidence, read_evidence, written_version
from difftest.core.reproduction import evidence_differences
from difftest.reports import locked_out, prepare_out
from difftest.reports.json_report import render_json
from difftest.run.pipeline import CompareRequest, compare

_BASE_KEYS = ("requirement", "python", "platform", "wheel_hash", "lock_hash", "torch")


def check_reproducible(config: Config, recorded: Evidence, log: Log) -> None:
    """Raise ConfigError naming the first thing that makes an identical re-run impossible."""
    if not recorded.results:
        raise ConfigError(
            "the evidence file holds no results: there is nothing to verify",
            "pass the evidence.json of a run or gate that measured something",
        )
    base = ensure_base(config.base, log)
    for key in _BASE_KEYS:
        then, now = (
            recorded.base.fingerprint.get(key),
            _base_value(base, recorded, key, config.base.package),
        )
        if then != now:
            raise ConfigError(
                f"base {key} differs: the evidence used {then!r}, this machine has {now!r}",
                "verify with the branches.yaml (base.requirement, Python, torch source) that produced the evidence",
            )
    recorded_scenarios(config, recorded)
    current_probe = probe_digest()
    for name, then in recorded.branches.items():
        recorded_probe = then.fingerprint.get("probe_digest")
        if recorded_probe and recorded_probe != current_probe:
            raise ConfigError(
                f"branch {name!r} was measured by another version of difftest's probe "
                f"(digest {recorded_probe[:12]}, this checkout has {current_probe[:12]})",
                f"verify with the difftest version that wrote the evidence ({recorded.difftest_version})",
            )
    repo = open_source_repo(config, base)
    for name, then in recorded.branches.items():
        now = resolve_spec(
            config,
            repo,
            branch_spec(config, name) if config.branch(name) else branch_spec(config, then.ref),
        )
        patches = {p.path.name: p.sha256 for p in now.patches}
        if patches != then.patches:
            raise ConfigError(
                f"branch {name!r} applies other patch files than the evidence records "
                f"(recorded {_hashes(then.patches)}, now {_hashes(patches)})",
                "use the patch files the evidence names (see its `branches` section)",
            )
        if now.sha != then.sha:
            raise ConfigError(
                f"branch {name!r} now resolves to {now.sha[:12]}, the evidence recorded {str(then.sha)[:12]}",
                "check out the commit/patches the evidence names (see its `branches` section), or fetch them",
            )


def _base_value(base: BaseEnv, recorded: Evidence, key: str, package: str) -> object:
    """This machine's value of a base key, in the identity version the evidence was written with."""
    if key == "wheel_hash" and recorded.base.fingerprint.get("identity") != IDENTITY_VERSION:
        # Written before identity version 2: comparable only with the same cache's RECORD file.
        record = find_record(base.site_packages, package)
        return legacy_record_hash(record) if record else None
    return base.fingerprint.get(key)


def _hashes(patches: dict[str, str]) -> str:
    return ", ".join(f"{name} {digest[:12]}" for name, digest in patches.items()) or "none"


class VerifyCommand(Command):
    name = "verify"
    help = "re-run the branches and scenarios an evidence file records and compare the results"

    def setup_arguments(self, parser: argparse.ArgumentParser) -> None:
        super().setup_arguments(parser)
        parser.add_argument("evidence", help="an evidence.json written by `difftest run` or `gate`")
        parser.add_argument(
            "--out",
            default="out-verify",
            help="folder for the re-run's reports, evidence and probe records (default: out-verify)",
        )
        add_format(parser, ("text", "json"), "text", "text: one line per difference")
        parser.add_argument(
            "--no-fork",
            action="store_true",
            help="start every probe in an interpreter of its own (default: forked from a warm one)",
        )

    def run(self, config: Config | None, args: argparse.Namespace, log: Log) -> int:
        assert config is not None
        recorded = read_evidence(args.evidence)
        if Path(args.evidence).resolve().parent == Path(args.out).resolve():
            raise ConfigError(
                f"--out {args.out!r} is the folder of the evidence being verified: the re-run would replace it",
                "pass --out another folder (default: out-verify)",
            )
        with locked_out(args.out):  # before prepare_out clears what another command may be writing
            prepare_out(args.out)
            check_reproducible(config, recorded, log)
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
                store_results=False,  # a re-run that reads its results from a cache verifies nothing
                fork=not args.no_fork,
            )
            comparison = compare(config, request, log, probe_progress)
            evidence = comparison.evidence
            written = write_comparison_reports(comparison, request.out)
            log("wrote " + ", ".join(str(p) for p in written.values()))
            found = evidence_differences(recorded, evidence, written_version(args.evidence))
            code = EXIT_FAILED if found else EXIT_OK
            if args.format == "json":
                print(
                    render_json(
                        evidence,
                        code,
                        identical=not found,
                        differences=found,
                        evidence_file=str(args.evidence),
                    )
                )
                return code
            if found:
                print(f"difftest verify: {len(found)} difference(s) from {args.evidence}:")
                for line in found:
                    print(f"  {line}")
                return EXIT_FAILED
            print(
                f"difftest verify: all {len(evidence.results)} results and their runs identical to {args.evidence}"
            )
            return EXIT_OK
