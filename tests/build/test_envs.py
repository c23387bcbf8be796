"""Branch environments over the real compiled base: overlay, isolation, cache, refusal.

These use the real vLLM base (built once per machine, reused from difftest's
cache) and the real fixture repository; each test builds its branch
environments in its own DIFFTEST_HOME so that cache behaviour is observable.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from difftest.build.envs import branch as branch_module
from difftest.build.envs.base import ensure_base
from difftest.build.envs.branch import ensure_branch_env
from difftest.build.envs.cache import list_envs, prune
from difftest.build.envs.fingerprint import read_fingerprint
from difftest.build.refs import read_blob, resolve_branch
from difftest.core import paths
from difftest.core.config import BaseSpec, BranchSpec
from difftest.core.errors import NativeCodeChanged
from tests.patching import make_patch

pytestmark = pytest.mark.slow

VERSION_FILE = "vllm/_version.py"


def version_patch(tmp_path: Path, repo, marker: str) -> Path:
    """A patch that changes a value visible after `import vllm`: its version string."""
    old = read_blob(repo, "v0.32.0", VERSION_FILE).decode()
    new = old.replace(
        "__version__ = version = '0.32.0'", f"__version__ = version = '0.32.0+{marker}'"
    )
    assert new != old
    return make_patch(tmp_path / f"{marker}.patch", VERSION_FILE, old, new)


def run_python(python: Path, code: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A private cache for branch environments (the base stays the shared one)."""
    monkeypatch.setenv("DIFFTEST_HOME", str(tmp_path / "home"))
    return paths.difftest_home()


def test_each_branch_env_imports_its_own_code_and_leaves_the_base_alone(
    base_env, fixture_repo, home, tmp_path
):
    base_version_file = base_env.vllm_dir / "_version.py"
    before = (base_version_file.read_bytes(), base_version_file.stat().st_ino)
    branches = {
        "plain": BranchSpec(name="plain", ref="main"),
        "marked": BranchSpec(
            name="marked", ref="main", patches=[version_patch(tmp_path, fixture_repo, "alpha")]
        ),
    }
    envs = {
        name: ensure_branch_env(
            base_env, fixture_repo, resolve_branch(fixture_repo, spec), "v0.32.0"
        )
        for name, spec in branches.items()
    }
    code = "import vllm, difftest.probe; print(vllm.__version__); print(vllm.__file__)"
    plain_version, plain_file = run_python(envs["plain"].python, code).splitlines()
    marked_version, marked_file = run_python(envs["marked"].python, code).splitlines()
    assert plain_version == "0.32.0"
    assert marked_version == "0.32.0+alpha"
    assert plain_file.startswith(str(envs["plain"].path)) and marked_file.startswith(
        str(envs["marked"].path)
    )
    # The base's file is neither edited nor replaced.
    assert (base_version_file.read_bytes(), base_version_file.stat().st_ino) == before
    assert run_python(base_env.python, "import vllm; print(vllm.__version__)") == "0.32.0"
    fp = envs["marked"].fingerprint
    assert fp["changed_files"] == [f"M {VERSION_FILE}"]
    assert fp["patches"] == {
        "alpha.patch": resolve_branch(fixture_repo, branches["marked"]).patches[0].sha256
    }
    assert fp["base"]["wheel_hash"] == base_env.fingerprint["wheel_hash"]


def test_compiled_artifacts_are_hard_links_of_the_base(base_env, fixture_repo, home):
    env = ensure_branch_env(
        base_env,
        fixture_repo,
        resolve_branch(fixture_repo, BranchSpec(name="m", ref="main")),
        "v0.32.0",
    )
    so_files = sorted(base_env.vllm_dir.glob("*.so"))
    assert so_files, "the base wheel ships compiled extensions"
    for so in so_files:
        assert (env.path / "overlay" / "vllm" / so.name).stat().st_ino == so.stat().st_ino


def test_cache_reuse_and_invalidation(base_env, fixture_repo, home, tmp_path, monkeypatch):
    main = resolve_branch(fixture_repo, BranchSpec(name="main", ref="main"))
    first = ensure_branch_env(base_env, fixture_repo, main, "v0.32.0")
    again = ensure_branch_env(base_env, fixture_repo, main, "v0.32.0")
    assert again.path == first.path
    assert again.fingerprint["created_at"] == first.fingerprint["created_at"]  # reused, not rebuilt

    other = resolve_branch(
        fixture_repo,
        BranchSpec(name="b", ref="main", patches=[version_patch(tmp_path, fixture_repo, "beta")]),
    )
    assert ensure_branch_env(base_env, fixture_repo, other, "v0.32.0").path != first.path

    # A new probe invalidates every branch environment; prune then removes the old ones.
    monkeypatch.setattr(branch_module, "probe_digest", lambda: "0" * 64)
    import difftest.build.envs.cache as cache_module

    monkeypatch.setattr(cache_module, "probe_digest", lambda: "0" * 64)
    rebuilt = ensure_branch_env(base_env, fixture_repo, main, "v0.32.0")
    assert rebuilt.path != first.path
    stale = {e.path for e in list_envs() if e.stale_reason}
    assert first.path in stale and rebuilt.path not in stale
    removed = {e.path for e in prune()[0]}
    assert first.path in removed and not first.path.exists() and rebuilt.path.exists()


def test_interrupted_build_is_never_trusted(base_env, fixture_repo, home):
    main = resolve_branch(fixture_repo, BranchSpec(name="main", ref="main"))
    env = ensure_branch_env(base_env, fixture_repo, main, "v0.32.0")
    # Simulate a build killed after the folder was in place but before its fingerprint.
    (env.path / "fingerprint.json").unlink()
    leftover = env.path.parent / f".{env.path.name}.killed"
    leftover.mkdir()
    assert any(e.kind == "unfinished" for e in list_envs())
    rebuilt = ensure_branch_env(base_env, fixture_repo, main, "v0.32.0")
    assert read_fingerprint(rebuilt.path) is not None
    assert run_python(rebuilt.python, "import difftest.probe, vllm.version; print('ok')") == "ok"


def test_native_code_change_is_refused(base_env, fixture_repo, home, tmp_path):
    patch = make_patch(tmp_path / "native.patch", "csrc/attention.cpp", "", "// a kernel change\n")
    branch = resolve_branch(fixture_repo, BranchSpec(name="native", ref="main", patches=[patch]))
    with pytest.raises(NativeCodeChanged) as info:
        ensure_branch_env(base_env, fixture_repo, branch, "v0.32.0")
    message = str(info.value)
    assert "csrc/attention.cpp" in message and "native" in message and "fix:" in message
    assert not any(e.kind == "branch" for e in list_envs(with_sizes=False))


def test_base_build_is_atomic_and_excludes_packages(home):
    """A tiny requirement stands in for vLLM here: the mechanics are the same, the cost is not."""
    spec = BaseSpec(requirement="six==1.16.0", exclude=[])
    built = ensure_base(spec)
    assert built.fingerprint["vllm_version"] == "1.16.0" and built.fingerprint["lock_hash"]
    assert (built.path / "lock.txt").read_text().strip() == "six==1.16.0"
    # A base folder without its fingerprint (killed mid-install) is removed and rebuilt.
    (built.path / "fingerprint.json").unlink()
    (built.path / "half-written").write_text("")
    rebuilt = ensure_base(spec)
    assert rebuilt.path == built.path and not (rebuilt.path / "half-written").exists()
    assert ensure_base(spec).fingerprint["created_at"] == rebuilt.fingerprint["created_at"]


def test_prune_during_a_build_leaves_the_build_alone(base_env, fixture_repo, home, monkeypatch):
    """`envs --prune` run while an environment is half built (here: from inside the build, between
    linking the base and copying the probe) skips it; the build finishes and is trusted."""
    from difftest.cli import main

    pruned: list[int] = []
    copy_probe = branch_module._copy_probe

    def prune_then_copy(dest: Path) -> None:
        assert any(
            p.name.startswith(".branch-") for p in paths.envs_dir().iterdir()
        )  # the half-built folder
        pruned.append(main(["envs", "--prune"]))
        copy_probe(dest)

    monkeypatch.setattr(branch_module, "_copy_probe", prune_then_copy)
    env = ensure_branch_env(
        base_env,
        fixture_repo,
        resolve_branch(fixture_repo, BranchSpec(name="m", ref="main")),
        "v0.32.0",
    )
    assert pruned == [0]
    assert read_fingerprint(env.path) is not None
    assert run_python(env.python, "import difftest.probe, vllm.version; print('ok')") == "ok"
