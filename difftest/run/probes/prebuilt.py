"""The model folder and vLLM's model-inspection cache a job's probes read, built by the host first.

Probes may write nothing but their scratch folders (`sandbox`), so what they all read is built
before any of them runs, in the BASE's interpreter (no branch's code: `probe.prebuild`), and
checked by content before every later use: a record of the sha256 of every file built is kept in
difftest's vLLM cache folder, and a folder that no longer matches it (changed while probes could
still write it, by an older difftest or with the sandbox off) is named in the log, removed and
built again. vLLM's inspection is made once per base (a vLLM import, seconds); a job's model
folder is built without importing vLLM.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from difftest.build.envs.contents import file_digest
from difftest.build.envs.fingerprint import canonical_hash
from difftest.core import paths
from difftest.core.locks import own_lock
from difftest.probe.protocol import Job
from difftest.run.probes.environ import probe_environ

Log = Callable[[str], None]
#: How long building a model folder and inspecting it may take.
PREBUILD_S = 900.0
_LAUNCH = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); "
    "from difftest.probe.prebuild import main; sys.exit(main(sys.argv[1:]))"
)


@dataclass(frozen=True)
class Prebuilt:
    """What the job's probes read: `vllm_cache` seeds each probe's private cache root."""

    vllm_cache: Path | None


@dataclass(frozen=True)
class BaseInterpreter:
    """The base's interpreter behind a branch environment, and the probe package it runs."""

    python: Path
    probe_path: Path
    key: str


def base_interpreter(python: Path) -> BaseInterpreter | None:
    """The base behind `python`'s branch environment (from its fingerprint, which only the host
    writes); None for an interpreter difftest did not build."""
    env = python.parent.parent
    try:
        fingerprint = json.loads((env / "fingerprint.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if fingerprint.get("kind") != "branch" or not (env / "probe" / "difftest").is_dir():
        return None
    base_path = Path(str(fingerprint.get("base_path", "")))
    base_python = base_path / "bin" / "python"
    if not base_python.exists():
        return None
    key = str(fingerprint.get("base", {}).get("key", base_path.name))
    return BaseInterpreter(base_python, env / "probe", key)


def ensure_prebuilt(job: Job, python: Path, log: Log | None = None) -> Prebuilt:
    """Build (or check and reuse) what the job's probes read: vLLM's inspection cache, once per
    base, and the job's model folder; where `python` is not a branch environment difftest built,
    nothing is built (its probe builds its model folder itself, in a folder the caller makes
    writable to it)."""
    base = base_interpreter(python)
    if base is None:
        return Prebuilt(None)
    say = log or _stderr
    cache = paths.vllm_cache_dir() / f"base-{base.key}"

    def inspect() -> list[Path]:
        shutil.rmtree(cache, ignore_errors=True)
        cache.mkdir(parents=True)
        _run_in_base(base, ["--inspect", "--vllm-cache", str(cache)])
        return [cache]

    _ensure(f"inspected-{base.key}", [paths.vllm_cache_dir()], inspect, say)
    work_dir = Path(job["work_dir"])
    needs = {
        "entry": job["entry"],
        "base": base.key,
        "models": _named_models(job),
        "work_dir": str(work_dir.resolve()),
    }

    def build() -> list[Path]:
        model = build_in_base(job, base)
        inside = model is not None and model.resolve().parent == work_dir.resolve()
        return [model] if inside and model is not None else []

    _ensure(f"models-{canonical_hash(needs)[:16]}", [work_dir], build, say)
    return Prebuilt(cache)


def _ensure(name: str, within: list[Path], build: Callable[[], list[Path]], log: Log) -> None:
    """Reuse what the record `name` lists while every file is as built; otherwise say what
    changed, remove it (only below `within`) and build it again, the record written last."""
    record = paths.vllm_cache_dir() / "records" / f"{name}.json"
    with own_lock(paths.locks_dir() / f"prebuilt-{name}.lock"):
        problem = _changed(record)
        if problem is None:
            return
        if record.exists():
            log(f"difftest: {problem}: building it again")
        _remove_recorded(record, within)
        folders = build()
        files = {str(path): file_digest(str(path)) for f in folders for path in _files(f)}
        record.parent.mkdir(parents=True, exist_ok=True)
        tmp = record.with_suffix(".tmp")
        tmp.write_text(json.dumps({"folders": [str(f) for f in folders], "files": files}))
        tmp.replace(record)


def _named_models(job: Job) -> list[str]:
    names = {str(s.get("data", {}).get("engine", {}).get("model") or "") for s in job["scenarios"]}
    return sorted(name for name in names if name)


def build_in_base(job: Job, base: BaseInterpreter) -> Path | None:
    """The job's model folder, built by `probe.prebuild` in the base's interpreter (None: the job
    needs none in its work folder)."""
    with tempfile.TemporaryDirectory(prefix="difftest-prebuild-") as folder:
        job_file = Path(folder) / "job.json"
        job_file.write_text(json.dumps(job))
        answer = _run_in_base(base, ["--job", str(job_file), "--fresh"])
    model = answer.get("model")
    return Path(model) if model else None


def _run_in_base(base: BaseInterpreter, args: list[str]) -> dict[str, str | None]:
    """`probe.prebuild ARGS` in the base's interpreter: its answer; OSError with its last words
    when it fails."""
    with tempfile.TemporaryDirectory(prefix="difftest-prebuild-") as folder:
        env = {k: v for k, v in probe_environ().items() if k != "VLLM_CACHE_ROOT"}
        env.update(HOME=folder, TMPDIR=folder)
        argv = [str(base.python), "-I", "-c", _LAUNCH, str(base.probe_path), *args]
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=PREBUILD_S, env=env, cwd=folder
        )
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-8:])
        raise OSError(f"building what the probes read failed:\n{tail}")
    answer: dict[str, str | None] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


def _files(folder: Path) -> list[Path]:
    return sorted(path for path in folder.rglob("*") if path.is_file() or path.is_symlink())


def _changed(record: Path) -> str | None:
    """None when every file the record lists (and no other) is as built; else what changed."""
    try:
        recorded = json.loads(record.read_text(encoding="utf-8"))
        folders = [Path(f) for f in recorded["folders"]]
        files: dict[str, str] = recorded["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return "what the probes read was never built here"
    found = {str(path) for folder in folders for path in _files(folder)}
    for extra in sorted(found - set(files)):
        return f"{extra} appeared after it was built"
    for name, digest in sorted(files.items()):
        try:
            if file_digest(name) != digest:
                return f"{name} was changed after it was built (its content differs)"
        except OSError:
            return f"{name} is missing or no longer a regular file"
    return None


def _remove_recorded(record: Path, within: list[Path]) -> None:
    """Remove what the record lists, and the record: only folders directly below one of `within`
    (a record is a file; one written when probes could still write it may name any folder)."""
    try:
        folders = json.loads(record.read_text(encoding="utf-8")).get("folders", [])
    except (OSError, ValueError, AttributeError):
        folders = []
    parents = {folder.resolve() for folder in within}
    for name in folders:
        folder = Path(str(name))
        if not folder.is_symlink() and folder.parent.resolve() in parents:
            shutil.rmtree(folder, ignore_errors=True)
    record.unlink(missing_ok=True)


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)
