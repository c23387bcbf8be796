"""What every probe of a job reads and none may write, built before any probe runs.

Probes once built the model folders they need and filled vLLM's model-inspection cache
themselves, in folders every branch's probe shared: a hostile branch could rewrite the tokenizer
or the cached model information that main's next probe read. Now the host runs this module in the
BASE's interpreter (never a branch's: no branch code runs here), before the job's probes start:

    python -I -c "...; from difftest.probe.prebuild import main" --job JOB.json --vllm-cache DIR

It builds the job's model folder in the job's `work_dir` (the scheduler tier's tokenizer-only
model, or the engine tier's tiny Llama unless the scenarios name a model of their own) and fills
`DIR/modelinfos` by constructing vLLM's `ModelConfig` on it, as every probe would. Probes then see
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="prebuild.py")
    parser.add_argument("--job", type=Path, required=True)
    parser.add_argument("--vllm-cache", type=Path, required=True)
    parser.add_argument("--fresh", action="store_true", help="remove a model folder already there")
    args = parser.parse_args(argv)
    job = json.loads(args.job.read_text(encoding="utf-8"))
    os.environ["VLLM_CACHE_ROOT"] = str(args.vllm_cache)
    model = model_folder(job, args.fresh)
    if model is not None:
        inspect_model(model)
    print(json.dumps({"model": str(model) if model else None}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
