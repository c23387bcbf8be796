"""What every probe of a job reads and none may write, built before any probe runs.

Probes once built the model folders they need and filled vLLM's model-inspection cache
themselves, in folders every branch's probe shared: a hostile branch could rewrite the tokenizer
or the cached model information that main's next probe read. Now the host runs this module in the
BASE's interpreter (never a branch's: no branch code runs here), before the job's probes start:

    python -I -c "...; from difftest.probe.prebuild import main" --job JOB.json --fresh
    python -I -c "...; from difftest.probe.prebuild import main" --inspect --vllm-cache DIR

It builds the job's model folder in the job's `work_dir` (the scheduler tier's tokenizer-only
model, or the engine tier's tiny Llama unless the scenarios name a model of their own; without
importing vLLM), and, once per base, fills `DIR/modelinfos` by constructing vLLM's `ModelConfig`
on a Llama model folder, as every probe would. Probes then see
both read-only (`confine`), each with a private copy of the inspection cache.

Standard library, the base's own packages and difftest's probe package only.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from pathlib import Path
from typing import Any


def model_folder(job: dict[str, Any], fresh: bool) -> Path | None:
    """Build the job's model folder if its entry needs one (each entry's `prebuild`); the folder
    vLLM inspects (None: none). `fresh`: a folder already there is removed first (it was not built
    by this step, or no longer matches what was)."""
    from .__main__ import ENTRIES

    entry = importlib.import_module(ENTRIES[job["entry"]])
    build = getattr(entry, "prebuild", None)
    return None if build is None else Path(build(job, fresh))


def inspect_model(model: Path) -> None:
    """vLLM's model-class inspection (a subprocess, seconds) cached under `VLLM_CACHE_ROOT`."""
    from vllm.config import ModelConfig

    ModelConfig(model=str(model), tokenizer=str(model), dtype="float32", seed=0)


def inspect_base(cache: Path) -> None:
    """Fill `cache` (a `VLLM_CACHE_ROOT`) with vLLM's inspection of the Llama class every shipped
    model uses, once per base: on a tokenizer-only model folder built aside for it."""
    import tempfile

    from .scheduler.model_dir import ensure_model_dir

    os.environ["VLLM_CACHE_ROOT"] = str(cache)
    with tempfile.TemporaryDirectory(prefix="difftest-inspect-") as folder:
        inspect_model(ensure_model_dir(Path(folder)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="prebuild.py")
    parser.add_argument("--job", type=Path, help="build this job's model folder")
    parser.add_argument("--fresh", action="store_true", help="remove a model folder already there")
    parser.add_argument("--inspect", action="store_true", help="fill --vllm-cache")
    parser.add_argument("--vllm-cache", type=Path)
    args = parser.parse_args(argv)
    if args.inspect:
        if args.vllm_cache is None:
            parser.error("--inspect needs --vllm-cache")
        inspect_base(args.vllm_cache)
        print(json.dumps({"inspected": str(args.vllm_cache)}))
        return 0
    if args.job is None:
        parser.error("--job or --inspect is required")
    job = json.loads(args.job.read_text(encoding="utf-8"))
    model = model_folder(job, args.fresh)
    print(json.dumps({"model": str(model) if model else None}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
