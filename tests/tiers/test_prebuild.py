"""The real prebuild step, in the real base's interpreter: a model folder it did not build (one a
probe built when probes could still write there, with a rewritten tokenizer) is replaced, never
reused on its marker file (#47 case 4)."""

from __future__ import annotations

import json
import subprocess

from difftest.probe.scheduler.model_dir import recipe_key
from difftest.run.probes.sandbox import PACKAGE_ROOT


def test_a_model_folder_the_prebuild_did_not_build_is_replaced(base_env, tmp_path):
    stale = tmp_path / f"model-{recipe_key()}"
    stale.mkdir()
    (stale / "config.json").write_text("{}")  # the marker a probe's build wrote last
    (stale / "tokenizer.json").write_text('{"poisoned": true}')
    code = (
        "import sys, json; sys.path.insert(0, sys.argv[1]); "
        "from difftest.probe.prebuild import model_folder; "
        "print(model_folder(json.loads(sys.argv[2]), True))"
    )
    job = {"entry": "scheduler", "work_dir": str(tmp_path), "scenarios": []}
    done = subprocess.run(
        [
            str(base_env.path / "bin" / "python"),
            "-I",
            "-c",
            code,
            str(PACKAGE_ROOT.parent),
            json.dumps(job),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(stale)
    assert "poisoned" not in (stale / "tokenizer.json").read_text()
    assert json.loads((stale / "config.json").read_text())["model_type"] == "llama"
