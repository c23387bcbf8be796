"""Where difftest keeps what it builds: one cache folder, overridable.

`DIFFTEST_HOME` wins; otherwise `$XDG_CACHE_HOME/difftest` (default
`~/.cache/difftest`). Everything expensive (base environments, branch
environments, fixture repositories, the tiny model) lives below it, so deleting
that folder is always a safe reset.
"""

from __future__ import annotations

import os
from pathlib import Path

from difftest.core.errors import ConfigError


def difftest_home() -> Path:
    """The cache root, created on first use."""
    explicit = os.environ.get("DIFFTEST_HOME")
    if explicit:
        root = Path(explicit).expanduser()
    else:
        xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        root = Path(xdg) / "difftest"
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _unusable(root, exc.strerror or str(exc)) from None
    if not os.access(root, os.W_OK | os.X_OK):
        raise _unusable(root, "not writable")
    return root.resolve()


def _unusable(root: Path, why: str) -> ConfigError:
    variable = "DIFFTEST_HOME" if os.environ.get("DIFFTEST_HOME") else "the cache folder"
    return ConfigError(
        f"{variable} {str(root)!r} cannot be used: {why}",
        "point DIFFTEST_HOME at a folder you can write to (it is created if missing)",
    )


def envs_dir() -> Path:
    return _sub("envs")


def repos_dir() -> Path:
    return _sub("repos")


def locks_dir() -> Path:
    return _sub("locks")


def vllm_cache_dir() -> Path:
    """`VLLM_CACHE_ROOT` and `HF_HOME` of every probe: shared across branches on purpose
    (vLLM keys its model-inspection cache by the model file's hash)."""
    return _sub("vllm-cache")


def models_dir() -> Path:
    return _sub("models")


def sources_dir() -> Path:
    """Downloaded source distributions (pinned by hash) and what was taken from them."""
    return _sub("sdists")


def test_roots_dir() -> Path:
    """The tests tier's test trees, one folder per git tree (and grafted PR tests)."""
    return _sub("test-roots")


def test_deps_dir() -> Path:
    """Test-only packages, one folder per base, put on PYTHONPATH (never into an environment)."""
    return _sub("test-deps")


def results_dir() -> Path:
    """The result cache: probe outputs by the sha256 of what they depend on
    (`run.cache.results`)."""
    return _sub("results")


def hf_standins_dir() -> Path:
    """Offline Hugging Face caches holding locally written stand-in configs."""
    return _sub("hf-standins")


def _sub(name: str) -> Path:
    path = difftest_home() / name
    path.mkdir(parents=True, exist_ok=True)
    return path
