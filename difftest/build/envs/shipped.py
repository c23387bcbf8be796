"""A branch environment on a cluster node: built there by the same code as `prepare`, from what the
host ships, and refused when it would not be the host's environment.

The host ships what its environment was built from (`ship`): the base's requirement and lock, the
base's identity (wheel hash, lock hash, Python, platform), the branch environment's fingerprint with
its manifest, and the content of every file the branch changes. The node (`ensure_shipped`):

1. builds or reuses its base for the same requirement (`base.ensure_base`, installing exactly the
   host's lock when it has to build), and refuses to go on when its base is not the host's (another
   wheel, another lock, Python or platform): results of two bases are never mixed in one comparison;
2. checks every shipped file against the sha256 the host's manifest holds for it;
3. reuses its environment of the same key (`branch.branch_key`: base, commit, probe digest) when
   its manifest still holds (`branch.reusable`), or builds it with the same code
   (`branch.build_overlay`), and checks that what it holds is what the host's holds (every source
   file by hash, the same files removed). Bytecode and the `.pth` are left out of that comparison:
   they are made from those files on the node (timestamps, the node's own base path).
"""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass
from typing import Any

from difftest.build.envs.base import BaseEnv, Log, ensure_base
from difftest.build.envs.branch import (
    BASE_KEYS,
    BranchEnv,
    OverlayChange,
    branch_key,
    build_overlay,
    env_folder,
    reusable,
)
from difftest.build.envs.integrity import OVERLAY, PROBE
from difftest.build.envs.locks import env_lock
from difftest.core.config import BaseSpec
from difftest.core.errors import EnvironmentBuildError

#: What the host's fingerprint says of a branch that the node writes into its own.
_DESCRIBED = ("kind", "key", "name", "ref", "ref_sha", "sha", "patches", "base_ref", "base_ref_sha")


class BaseMismatch(EnvironmentBuildError):
    """This node's base is not the host's: the node is refused for this comparison."""


@dataclass(frozen=True)
class ShippedEnv:
    """Everything a node needs to build one branch environment exactly as the host's."""

    #: `BaseSpec` as JSON (requirement, Python, exclusions, torch source).
    base_spec: dict[str, Any]
    #: The host base's identity (`branch.BASE_KEYS`: key, wheel hash, lock hash, ...).
    base: dict[str, Any]
    #: The host base's lock (`uv pip freeze`): what a node that builds its base installs.
    lock: str
    #: The host branch environment's fingerprint, manifest included.
    fingerprint: dict[str, Any]
    #: Repository path -> content of each file the branch adds or modifies.
    files: dict[str, bytes]

    @property
    def name(self) -> str:
        return str(self.fingerprint.get("name", "?"))


def ship(spec: BaseSpec, base: BaseEnv, env: BranchEnv) -> ShippedEnv:
    """What a node needs to build `env` (on `base`): read from the host's own environment, whose
    manifest `prepare` has just checked."""
    files = {}
    for line in env.fingerprint.get("changed_files", []):
        status, path = line.split(" ", 1)
        if status != "D":
            files[path] = (env.path / OVERLAY / path).read_bytes()
    return ShippedEnv(
        base_spec=spec.model_dump(mode="json"),
        base={k: base.fingerprint.get(k) for k in BASE_KEYS},
        lock=(base.path / "lock.txt").read_text(),
        fingerprint=dict(env.fingerprint),
        files=files,
    )


def ensure_shipped(shipped: ShippedEnv, log: Log = lambda _m: None) -> BranchEnv:
    """This node's environment for `shipped`, reused or built; raises `BaseMismatch` when the
    node's base is not the host's, EnvironmentBuildError when what it would hold is not the
    host's."""
    spec = BaseSpec.model_validate(shipped.base_spec)
    base = ensure_base(spec, log, constraints=shipped.lock)
    differs = [
        f"{k} {base.fingerprint.get(k)!r} (the host's: {shipped.base.get(k)!r})"
        for k in BASE_KEYS
        if base.fingerprint.get(k) != shipped.base.get(k)
    ]
    if differs:
        raise BaseMismatch(
            f"this node's base is not the host's: {'; '.join(differs)}",
            "give every node the same base (the same wheel and lock: remove the node's "
            "`DIFFTEST_HOME/envs/base-*` to have it rebuilt from the host's lock), or leave the "
            "node out of the cluster",
        )
    host = shipped.fingerprint
    key = branch_key(base, str(host["sha"]))
    if key != host.get("key"):
        raise EnvironmentBuildError(
            f"this node's difftest probe differs from the host's (environment key {key}, the "
            f"host's {host.get('key')})",
            "install the same difftest on every node as on the host",
        )
    changes = _changes(shipped)
    final = env_folder(str(host["sha"]), key)
    with env_lock(final.name):
        found = reusable(final, key, base, shipped.name, log)
        if found is not None and not _content_differs(found, host):
            return BranchEnv(shipped.name, final, final / "bin" / "python", found)
        if found is not None:
            log(f"{shipped.name}: environment {final.name} differs from the host's: rebuilding it")
            shutil.rmtree(final, ignore_errors=True)
        described = {k: host.get(k) for k in _DESCRIBED}
        built = build_overlay(base, described, changes, final, log)
        problem = _content_differs(built.fingerprint, host)
        if problem:
            shutil.rmtree(final, ignore_errors=True)
            raise EnvironmentBuildError(
                f"the environment this node built is not the host's: {problem}",
                "install the same difftest on every node as on the host",
            )
        return built


def _changes(shipped: ShippedEnv) -> list[OverlayChange]:
    """The branch's changes, each shipped file checked against the host's manifest."""
    own = shipped.fingerprint.get("manifest", {}).get("own", {})
    changes = []
    for line in shipped.fingerprint.get("changed_files", []):
        status, path = line.split(" ", 1)
        if status == "D":
            changes.append(OverlayChange(status, path, None))
            continue
        content = shipped.files.get(path)
        expected = own.get(f"{OVERLAY}/{path}")
        if content is None or hashlib.sha256(content).hexdigest() != expected:
            raise EnvironmentBuildError(
                f"the shipped file {path} does not match the host's manifest",
                "run difftest again (the host's environment changed while it was shipped)",
            )
        changes.append(OverlayChange(status, path, content))
    return changes


def _content_differs(node: dict[str, Any], host: dict[str, Any]) -> str | None:
    """How the node's environment differs from the host's in what it runs (None: it does not)."""
    for key in ("sha", "probe_digest", "changed_files", "base"):
        if node.get(key) != host.get(key):
            return f"its {key} is {node.get(key)!r}, the host's {host.get(key)!r}"
    mine, theirs = _sources(node), _sources(host)
    if mine != theirs:
        changed = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
        return f"{len(changed)} file(s) differ, first {changed[0]}"
    if node.get("manifest", {}).get("removed") != host.get("manifest", {}).get("removed"):
        return "it removes other files of the base's vLLM"
    return None


def _sources(fingerprint: dict[str, Any]) -> dict[str, str]:
    """The manifest's own source files by hash (no bytecode, no `.pth`)."""
    own: dict[str, str] = fingerprint.get("manifest", {}).get("own", {})
    return {
        path: digest
        for path, digest in own.items()
        if path.startswith((f"{OVERLAY}/", f"{PROBE}/")) and not path.endswith(".pyc")
    }
