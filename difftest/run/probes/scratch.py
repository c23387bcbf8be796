"""Each probe's own writable folder: its home, its temporary folder and its caches.

A confined probe (`sandbox`) may write nothing else, so everything a library writes as a matter of
course goes here: `HOME` (torch's and triton's caches, a stray `~/.config`), `TMPDIR`, the XDG
folders, and vLLM's cache root, seeded with a copy (bytes, never links: a hard link would reach
the shared file through this writable folder) of the model-inspection cache the host built before
any probe ran (`prebuilt`). Nothing here is read back by the host, and it is removed when the
probe ends: what one probe leaves there never reaches another.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

#: The folders of a scratch, by the variable that points at each.
_FOLDERS = {
    "HOME": "home",
    "TMPDIR": "tmp",
    "XDG_CACHE_HOME": "home/.cache",
    "XDG_CONFIG_HOME": "home/.config",
    "XDG_DATA_HOME": "home/.local/share",
    "VLLM_CACHE_ROOT": "vllm-cache",
    "HF_HOME": "hf",
}


@dataclass(frozen=True)
class Scratch:
    """One probe's folder (`root`), below the host's temporary folder, which probes cannot
    write."""

    root: Path

    @classmethod
    def create(cls, seed: Path | None = None, parent: Path | None = None) -> Scratch:
        """A new, empty scratch folder; vLLM's cache root starts as a copy of `seed`."""
        root = Path(tempfile.mkdtemp(prefix="difftest-probe-", dir=parent)).resolve()
        for name, folder in _FOLDERS.items():
            if name != "VLLM_CACHE_ROOT" or seed is None or not seed.is_dir():
                (root / folder).mkdir(parents=True, exist_ok=True)
        if seed is not None and seed.is_dir():
            shutil.copytree(seed, root / _FOLDERS["VLLM_CACHE_ROOT"], symlinks=False)
        return cls(root)

    def environ(self) -> dict[str, str]:
        """The variables that point a probe's writes here (`TEMP` and `TMP` too: some libraries
        read those)."""
        env = {name: str(self.root / folder) for name, folder in _FOLDERS.items()}
        env["TEMP"] = env["TMP"] = env["TMPDIR"]
        return env

    def remove(self) -> None:
        """Gone, whatever modes the probe left on its folders."""
        shutil.rmtree(self.root, onerror=_writable_again)


def _writable_again(_function: object, path: str, _error: object) -> None:
    """`rmtree`'s second try at what a probe made unwritable (a folder it chmod'ed to 0500)."""
    try:
        os.chmod(os.path.dirname(path), 0o700)
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, 0o700)
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except OSError:
        pass
