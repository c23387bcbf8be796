"""The config `difftest blame` writes beside its reports: the base, the branch and every set of
hunks it reports, each set pinned as a patch series on the base's commit, so that `difftest run -c
blame.yaml -k SCENARIO` measures them again (and `difftest verify` re-runs the evidence)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from difftest.build.refs import ResolvedBranch
from difftest.build.workspace import PreparedBranch
from difftest.core.blame import BlameFinding
from difftest.core.config import Config
from difftest.run.blame.subsets import PATCH_PREFIX, Measured


def patch_names(measured: Measured, steps: list[int]) -> list[str]:
    """The file names of a set's patch series (one per step it touches, `steps` 0-based)."""
    return [f"{PATCH_PREFIX}{measured.digest[:12]}-{index + 1}.patch" for index in steps]


def reproduce_config(
    config: Config,
    base: PreparedBranch,
    head: PreparedBranch,
    reported: list[tuple[Measured, list[int]]],
    scenarios_dir: Path,
    findings: list[BlameFinding],
) -> str:
    """The config's text: `config` with its branches replaced by the base and the branch (each at
    the commit measured) and each reported set (with the steps it touches), `scenarios_dir` the
    folder the findings' scenarios were read from."""
    raw = json.loads(config.model_dump_json(exclude={"root"}))
    raw["branches"] = [_pinned(base.resolved), _pinned(head.resolved)]
    lines = []
    for measured, steps in reported:
        assert measured.branch is not None
        raw["branches"].append(
            {
                "name": measured.branch.name,
                "ref": base.resolved.sha,
                "patches": patch_names(measured, steps),
            }
        )
        lines.append(f"{measured.branch.name}: {_role(measured.number, findings)}")
    raw["baseline"] = base.name
    raw["scenarios_dir"] = str(scenarios_dir)
    raw["tests"] = None
    head_text = (
        f"# Written by difftest blame: {head.name} and its base {base.name}, each at the commit "
        "measured, and every set of\n"
        f"# hunks it reported, pinned as a patch series on {base.name}'s commit "
        "(the patch files beside this one).\n"
        "# `difftest run -c THIS_FILE --tier TIER -k SCENARIO` measures them again.\n"
        + "".join(f"#   {line}\n" for line in lines)
    )
    return head_text + yaml.safe_dump(raw, sort_keys=False)


def _pinned(resolved: ResolvedBranch) -> dict[str, Any]:
    """A branch at the commit measured: its start and patch series as configured, or its tip (a
    transplanted branch or a stack, whose replay the config cannot name otherwise)."""
    if resolved.transplants or resolved.stack:
        return {"name": resolved.name, "ref": resolved.sha}
    return {
        "name": resolved.name,
        "ref": resolved.ref_sha,
        "patches": [str(p.path) for p in resolved.patches],
    }


def _role(number: int, findings: list[BlameFinding]) -> str:
    roles = [f"the hunks making {f.scenario}'s finding" for f in findings if f.culprit == number]
    roles += [
        f"the rest of the change without the hunks making {f.scenario}'s finding"
        for f in findings
        if f.rest == number
    ]
    return "; ".join(roles)
