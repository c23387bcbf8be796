"""`difftest merge EVIDENCE... --out DIR`: the shards of `run --shard I/N` joined into one
comparison.

Checks that the files are the shards of one comparison this difftest wrote
(`core.shards`), judges every shard again from its probe files (`run.rejudge`:
the records and jobs checked against the hashes their evidence holds, the
scenarios against the config's files; the shards' own verdicts are never
read), copies each shard's probe files under `DIR/probe/shard-I/`, and writes
the reports and the evidence a single run writes. Nothing is written into
`DIR` until every shard has been checked and judged.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from difftest.build.envs.fingerprint import sha256_file
from difftest.cli.base import Command, Log, add_config
from difftest.core.config import Config
from difftest.core.errors import DifftestError
from difftest.core.evidence import ProbeFiles, read_evidence, written_version
from difftest.core.shards import Shard, check_shards, merge_shards
from difftest.core.verdicts import exit_code
from difftest.reports import locked_out, prepare_out, registry, write_report
from difftest.reports.sources import RunReport
from difftest.run.rejudge import Rejudged, rejudge


class MergeCommand(Command):
    name = "merge"
    help = "join the evidence of every `run --shard I/N` into the reports and evidence of one run"

    def setup_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_config(parser)
        parser.add_argument(
            "evidence", nargs="+", help="each shard's evidence.json (its probe/ folder beside it)"
        )
        parser.add_argument(
            "--out", default="out", help="folder for the merged reports and evidence (default: out)"
        )

    def run(self, config: Config | None, args: argparse.Namespace, log: Log) -> int:
        assert config is not None
        out = Path(args.out)
        paths = [Path(p) for p in args.evidence]
        if any(p.resolve().parent == out.resolve() for p in paths):
            raise DifftestError(
                f"--out {args.out!r} holds a shard being merged", "pass --out another folder"
            )
        with locked_out(
            out
        ):  # the whole command: nobody else writes into `out` meanwhile (`locked_out`)
            shards = [Shard(str(p), read_evidence(p), written_version(p)) for p in paths]
            check_shards(shards)
            folders = {
                s.evidence.shard.index: p.parent
                for p, s in zip(paths, shards, strict=True)
                if s.evidence.shard
            }
            # Every shard judged again from its own files, before anything is written.
            judged: dict[int, Rejudged] = {}
            for shard in shards:
                assert shard.evidence.shard is not None
                index = shard.evidence.shard.index
                judged[index] = rejudge(
                    config, shard.evidence, folders[index], shard.name, shard.evidence.shard.order
                )
            prepare_out(out, log)

            def moved(index: int, files: ProbeFiles) -> ProbeFiles:
                target = out / "probe" / f"shard-{index}"
                target.mkdir(parents=True, exist_ok=True)
                renamed = {}
                for key in ("job", "records"):
                    source = folders[index] / getattr(files, key)
                    shutil.copyfile(source, target / source.name)
                    if sha256_file(target / source.name) != getattr(files, f"{key}_sha256"):
                        # It changed after it was judged: the merge would cite other bytes.
                        raise DifftestError(
                            f"{source} changed while it was being merged",
                            "merge again once nothing writes the shards",
                        )
                    renamed[key] = (target / source.name).relative_to(out).as_posix()
                return files.model_copy(update=renamed)

            merged = merge_shards(
                shards,
                moved,
                {i: j.results for i, j in judged.items()},
                {i: j.runs for i, j in judged.items()},
            ).model_copy(update={"command": sys.argv[:]})
            scenarios = {name: s for j in judged.values() for name, s in j.scenarios.items()}
            recorded = {key: run for j in judged.values() for key, run in j.recorded.items()}
            report = RunReport.of(merged, scenarios, recorded, exit_code=exit_code(merged.results))
            write_report(report, out)
            registry.show_output("terminal", report)
            log(
                f"merged {len(shards)} shard(s) into {out}, every verdict judged again from their "
                "runs"
            )
            return report.exit_code
