"""`difftest merge EVIDENCE... --out DIR`: the shards of `run --shard I/N` joined into one comparison.

Checks that the files are the shards of one comparison (`core.shards`),
copies each shard's probe files under `DIR/probe/shard-I/` (checked against
the hashes their evidence holds, as `show` checks them), and writes the reports
and the evidence a single run writes.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from difftest.cli.base import Command, Log, add_config, recorded_scenarios, stdout_console
from difftest.core.config import Config
from difftest.core.errors import DifftestError
from difftest.core.evidence import Evidence, ProbeFiles, read_evidence
from difftest.core.records import ProbeRun
from difftest.core.shards import check_shards, merge_shards
from difftest.core.verdicts import exit_code
from difftest.reports import locked_out, prepare_out, write_reports
from difftest.reports.terminal import render_terminal
from difftest.reports.trace import traces_for
from difftest.run.recorded import recorded_runs


class MergeCommand(Command):
    name = "merge"
    help = "join the evidence of every `run --shard I/N` into the reports and evidence of one run"

    def setup_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_config(parser)
        parser.add_argument("evidence", nargs="+", help="each shard's evidence.json (its probe/ folder beside it)")
        parser.add_argument("--out", default="out", help="folder for the merged reports and evidence (default: out)")

    def run(self, config: Config | None, args: argparse.Namespace, log: Log) -> int:
        assert config is not None
        out = Path(args.out)
        paths = [Path(p) for p in args.evidence]
        if any(p.resolve().parent == out.resolve() for p in paths):
            raise DifftestError(f"--out {args.out!r} holds a shard being merged", "pass --out another folder")
        with locked_out(out):  # the whole command: nobody else writes into `out` meanwhile (`locked_out`)
            parts = [(str(p), read_evidence(p)) for p in paths]
            check_shards(parts)
            folders = {e.shard.index: p.parent for p, (_n, e) in zip(paths, parts) if e.shard}
            # Every shard's step records, checked against its own evidence before anything is written.
            recorded = {
                (b, run.scenario, run.label): run
                for (_n, e), p in zip(parts, paths)
                for b, t in {(f.branch, f.tier) for f in e.probes}
                for run in recorded_runs(e, p.parent, b, t)
            }
            prepare_out(out)

            def moved(index: int, files: ProbeFiles) -> ProbeFiles:
                target = out / "probe" / f"shard-{index}"
                target.mkdir(parents=True, exist_ok=True)
                renamed = {}
                for key in ("job", "records"):
                    source = folders[index] / getattr(files, key)
                    shutil.copyfile(source, target / source.name)
                    renamed[key] = (target / source.name).relative_to(out).as_posix()
                return files.model_copy(update=renamed)

            merged = merge_shards(parts, moved).model_copy(update={"command": sys.argv[:]})
            write_merged(config, merged, out, recorded)
            render_terminal(merged, stdout_console())
            log(f"merged {len(parts)} shard(s) into {out}")
            return exit_code(merged.results)


def write_merged(config: Config, merged: Evidence, out: Path, recorded: dict[tuple[str, str, str], ProbeRun]) -> None:
    scenarios = recorded_scenarios(config, merged, [n for n, s in merged.scenarios.items() if not s.skipped])
    failing = [r for r in merged.results if r.verdict != "pass"]
    write_reports(merged, out, traces_for(failing, recorded, scenarios, merged.reading))
