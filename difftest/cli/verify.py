"""`difftest verify evidence.json`: re-run what an evidence file records and compare.

Refuses (exit 2, naming the mismatch) when the same environment cannot be
rebuilt: a different base wheel or lock, another Python or platform, a branch
that now resolves to another commit, a scenario file whose bytes changed.
Otherwise re-runs exactly the recorded branches and scenarios and exits 0 when
every result is identical, 1 when any differs (each difference is printed).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from difftest.build.envs.base import ensure_base
from difftest.build.envs.branch import probe_digest
from difftest.build.workspace import branch_spec, open_source_repo, resolve_spec
from difftest.cli.base import Command, Log, add_format, recorded_scenarios
from difftest.cli.progress import probe_progress
from difftest.core.config import Config
from difftest.core.errors import EXIT_FAILED, EXIT_OK, ConfigError
from difftest.core.evidence import Evidence, read_evidence
from difftest.core.records import Result
from difftest.reports.json_report import render_json
from difftest.run.pipeline import CompareRequest, compare

_BASE_KEYS = ("requirement", "python", "platform", "wheel_hash", "lock_hash", "torch")


def check_reproducible(config: Config, recorded: Evidence, log: Log) -> None:
    """Raise ConfigError naming the first thing that makes an identical re-run impossible."""
    base = ensure_base(config.base, log)
    for key in _BASE_KEYS:
        then, now = recorded.base.fingerprint.get(key), base.fingerprint.get(key)
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
        now = resolve_spec(config, repo, branch_spec(config, name) if config.branch(name) else branch_spec(config, then.ref))
        if now.sha != then.sha:
            raise ConfigError(
                f"branch {name!r} now resolves to {now.sha[:12]}, the evidence recorded {str(then.sha)[:12]}",
                "check out the commit/patches the evidence names (see its `branches` section), or fetch them",
            )


def result_key(result: Result) -> tuple[str, str, str]:
    return (result.branch, result.scenario, result.label)


def differences(recorded: list[Result], rerun: list[Result]) -> list[str]:
    """Every (branch, scenario, run) whose verdict or measured totals changed."""
    before = {result_key(r): r for r in recorded}
    after = {result_key(r): r for r in rerun}
    found = []
    for key in sorted(set(before) | set(after)):
        old, new = before.get(key), after.get(key)
        where = "/".join(key)
        if old is None or new is None:
            found.append(f"{where}: {'not in the evidence' if old is None else 'not re-run'}")
        elif old.verdict != new.verdict:
            found.append(f"{where}: verdict {old.verdict} -> {new.verdict}")
        elif old.measured != new.measured:
            found.append(f"{where}: measured totals differ: {old.measured} -> {new.measured}")
    return found


class VerifyCommand(Command):
    name = "verify"
    help = "re-run the branches and scenarios an evidence file records and compare the results"

    def setup_arguments(self, parser: argparse.ArgumentParser) -> None:
        super().setup_arguments(parser)
        parser.add_argument("evidence", help="an evidence.json written by `difftest run` or `gate`")
        parser.add_argument("--out", default="out-verify", help="folder for the re-run's probe records (default: out-verify)")
        add_format(parser, ("text", "json"), "text", "text: one line per differing result")

    def run(self, config: Config | None, args: argparse.Namespace, log: Log) -> int:
        assert config is not None
        recorded = read_evidence(args.evidence)
        check_reproducible(config, recorded, log)
        names = [name if config.branch(name) else then.ref for name, then in recorded.branches.items()]
        recorded_tiers = list(dict.fromkeys(s.tier for s in recorded.scenarios.values()))
        request = CompareRequest(branches=names, tiers=recorded_tiers, reading=recorded.reading, out=Path(args.out))
        evidence = compare(config, request, log, probe_progress).evidence
        rerun = [r for r in evidence.results if r.scenario in recorded.scenarios]
        found = differences(recorded.results, rerun)
        code = EXIT_FAILED if found else EXIT_OK
        if args.format == "json":
            print(render_json(evidence, code, identical=not found, differences=found, evidence_file=str(args.evidence)))
            return code
        if found:
            print(f"difftest verify: {len(found)} result(s) differ from {args.evidence}:")
            for line in found:
                print(f"  {line}")
            return EXIT_FAILED
        print(f"difftest verify: all {len(rerun)} results identical to {args.evidence}")
        return EXIT_OK
