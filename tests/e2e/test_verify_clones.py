"""Evidence written in one clone and cache verifies in another clone with another DIFFTEST_HOME.

The first run is this checkout with the shared cache. The reviewer's side is a
`git clone` of this checkout (with the working tree's uncommitted changes copied
over, so it runs the code under test) in a tmp folder, run as a separate
process from that clone's own sources, with a DIFFTEST_HOME of its own. That
home holds a hard-linked copy of the base (`link_base_into`) instead of a
fresh build: another cache path for the same wheel, which is what the base's
identity must not depend on; its fixture repository and branch environments
are built afresh there.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import git
import pytest

from tests.e2e.cli_helpers import CONTROL, run_cli
from tests.factories import ROOT, link_base_into

pytestmark = pytest.mark.slow

#: Runs the clone's own difftest: with `-c`, the working directory (the clone) comes first on
#: sys.path.
FROM_CWD = (
    "import sys, difftest.cli; print('difftest from', difftest.cli.__file__, file=sys.stderr); "
    "sys.exit(difftest.cli.main(sys.argv[1:]))"
)


def clone_of_this_checkout(dest: Path) -> Path:
    """`git clone` of ROOT, plus its uncommitted and untracked files (the code under test)."""
    git.Repo.clone_from(str(ROOT), dest)
    repo = git.Repo(ROOT)
    for path in repo.git.ls_files("--modified", "--others", "--exclude-standard").splitlines():
        source, target = ROOT / path, dest / path
        if source.is_file() or source.is_symlink():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.unlink(missing_ok=True)
            shutil.copy2(source, target, follow_symlinks=False)
        else:
            target.unlink(missing_ok=True)
    return dest


def test_evidence_from_one_clone_verifies_in_another_clone_and_cache(tmp_path, base_env):
    first = tmp_path / "first"
    assert (
        run_cli(
            "run",
            "-c",
            ROOT / "branches.yaml",
            "--tier",
            "scheduler",
            "-k",
            CONTROL,
            "--out",
            first,
            "main",
            "pr-56137-style",
        )
        == 0
    )
    evidence = json.loads((first / "evidence.json").read_text())

    clone = clone_of_this_checkout(tmp_path / "reviewer" / "difftest")
    home = link_base_into(tmp_path / "reviewer-home", base_env.path)
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "DIFFTEST_HOME": str(home)}
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            FROM_CWD,
            "verify",
            str(first / "evidence.json"),
            "--out",
            str(tmp_path / "rerun"),
        ],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert f"difftest from {clone}" in done.stderr
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"all {len(evidence['results'])} results and their runs identical" in done.stdout
    rerun = json.loads((tmp_path / "rerun" / "evidence.json").read_text())
    # Another cache: other paths, same identity.
    assert rerun["base"]["fingerprint"]["site_packages"].startswith(str(home))
    assert (
        rerun["base"]["fingerprint"]["wheel_hash"] == evidence["base"]["fingerprint"]["wheel_hash"]
    )
    assert {b["sha"] for b in rerun["branches"].values()} == {
        b["sha"] for b in evidence["branches"].values()
    }
