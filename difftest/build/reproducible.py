"""Can this machine re-run what an evidence file records, identically? (`verify`, before it runs)

An identical re-run needs the same base (wheel, lock, Python, platform, torch),
the same probe, the same scenario files and the same commits with the same
patch files. The base is identified by its wheel's files, not by where it is
installed, so evidence verifies from another clone, cache (`DIFFTEST_HOME`) or
machine. The scenario files are checked by the caller's `check_scenarios`
(the config's scenarios are chosen above this layer), at the point where the
checks have always made it.
"""

from __future__ import annotations

from collections.abc import Callable

from difftest.build.envs.base import BaseEnv, Log, ensure_base
from difftest.build.envs.branch import probe_digest
from difftest.build.envs.identity import IDENTITY_VERSION, find_record, legacy_record_hash
from difftest.build.workspace import branch_spec, open_source_repo, resolve_spec
from difftest.core.config import Config
from difftest.core.errors import ConfigError
from difftest.core.evidence import Evidence

_BASE_KEYS = ("requirement", "python", "platform", "wheel_hash", "lock_hash", "torch")
#: Raises ConfigError when a scenario file the evidence names is missing or changed.
ScenarioCheck = Callable[[Config, Evidence], object]


def check_reproducible(
    config: Config, recorded: Evidence, log: Log, check_scenarios: ScenarioCheck
) -> None:
    """Raise ConfigError naming the first thing that makes an identical re-run impossible."""
    if not recorded.results:
        raise ConfigError(
            "the evidence file holds no results: there is nothing to verify",
            "pass the evidence.json of a run or gate that measured something",
        )
    base = ensure_base(config.base, log)
    for key in _BASE_KEYS:
        then, now = (
            recorded.base.fingerprint.get(key),
            _base_value(base, recorded, key, config.base.package),
        )
        if then != now:
            raise ConfigError(
                f"base {key} differs: the evidence used {then!r}, this machine has {now!r}",
                "verify with the branches.yaml (base.requirement, Python, torch source) that "
                "produced the evidence",
            )
    check_scenarios(config, recorded)
    current_probe = probe_digest()
    for name, then in recorded.branches.items():
        recorded_probe = then.fingerprint.get("probe_digest")
        if recorded_probe and recorded_probe != current_probe:
            raise ConfigError(
                f"branch {name!r} was measured by another version of difftest's probe (digest "
                f"{recorded_probe[:12]}, this checkout has {current_probe[:12]})",
                "verify with the difftest version that wrote the evidence "
                f"({recorded.difftest_version})",
            )
    repo = open_source_repo(config, base)
    for name, then in recorded.branches.items():
        now = resolve_spec(
            config,
            repo,
            branch_spec(config, name) if config.branch(name) else branch_spec(config, then.ref),
        )
        patches = {p.path.name: p.sha256 for p in now.patches}
        if patches != then.patches:
            raise ConfigError(
                f"branch {name!r} applies other patch files than the evidence records (recorded "
                f"{_hashes(then.patches)}, now {_hashes(patches)})",
                "use the patch files the evidence names (see its `branches` section)",
            )
        if now.sha != then.sha:
            raise ConfigError(
                f"branch {name!r} now resolves to {now.sha[:12]}, the evidence recorded "
                f"{str(then.sha)[:12]}",
                "check out the commit/patches the evidence names (see its `branches` section), or "
                "fetch them",
            )


def _base_value(base: BaseEnv, recorded: Evidence, key: str, package: str) -> object:
    """This machine's value of a base key, in the identity version the evidence was written with."""
    if key == "wheel_hash" and recorded.base.fingerprint.get("identity") != IDENTITY_VERSION:
        # Written before identity version 2: comparable only with the same cache's RECORD file.
        record = find_record(base.site_packages, package)
        return legacy_record_hash(record) if record else None
    return base.fingerprint.get(key)


def _hashes(patches: dict[str, str]) -> str:
    return ", ".join(f"{name} {digest[:12]}" for name, digest in patches.items()) or "none"
