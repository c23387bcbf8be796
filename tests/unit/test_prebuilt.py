"""What every probe reads is built before they run and checked by content before each use
(`run.probes.prebuilt`, #47 case 4).

The build itself (`build_in_base`: the base's interpreter, vLLM's model inspection, ~20 s) runs in
every real run of the suite; here it is replaced by a stand-in that writes a model folder as the
real one does, so that what is tested is the record, the check and the rebuild. That the real
build replaces a folder it did not build is tests/tiers/test_prebuild.py's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from difftest.run.probes import prebuilt
from difftest.run.probes.prebuilt import BaseInterpreter, base_interpreter, ensure_prebuilt


@pytest.fixture
def branch_env(tmp_path, monkeypatch) -> Path:
    """A branch environment's layout as difftest builds it: its fingerprint names its base."""
    monkeypatch.setenv("DIFFTEST_HOME", str(tmp_path / "home"))
    base = tmp_path / "home" / "envs" / "base-abc"
    (base / "bin").mkdir(parents=True)
    (base / "bin" / "python").write_text("")
    env = tmp_path / "home" / "envs" / "branch-x"
    (env / "bin").mkdir(parents=True)
    (env / "probe" / "difftest").mkdir(parents=True)
    fingerprint = {"kind": "branch", "base_path": str(base), "base": {"key": "abc"}}
    (env / "fingerprint.json").write_text(json.dumps(fingerprint))
    return env


@pytest.fixture
def builds(monkeypatch) -> list[Path]:
    """Every model-folder build (each writing `model-x/tokenizer.json`); the inspection writes one
    inspection-cache file."""
    done: list[Path] = []

    def build(job: dict, base: BaseInterpreter) -> Path:
        model = Path(job["work_dir"]) / "model-x"
        model.mkdir(parents=True, exist_ok=True)
        (model / "tokenizer.json").write_text('{"vocab": "as built"}')
        done.append(model)
        return model

    def inspect(base: BaseInterpreter, args: list[str]) -> dict:
        cache = Path(args[args.index("--vllm-cache") + 1])
        (cache / "modelinfos").mkdir(parents=True, exist_ok=True)
        (cache / "modelinfos" / "llama.json").write_text("{}")
        return {"inspected": str(cache)}

    monkeypatch.setattr(prebuilt, "build_in_base", build)
    monkeypatch.setattr(prebuilt, "_run_in_base", inspect)
    return done


def _job(work_dir: Path) -> dict:
    return {"entry": "scheduler", "work_dir": str(work_dir), "scenarios": []}


def test_the_base_behind_a_branch_environment_is_read_from_its_fingerprint(branch_env):
    found = base_interpreter(branch_env / "bin" / "python")
    assert found is not None and found.key == "abc"
    assert found.python == branch_env.parent / "base-abc" / "bin" / "python"
    assert found.probe_path == branch_env / "probe"
    (branch_env / "fingerprint.json").write_text("{}")
    assert base_interpreter(branch_env / "bin" / "python") is None


def test_a_folder_built_once_is_reused_while_it_is_as_built(branch_env, builds, tmp_path):
    job = _job(tmp_path / "models")
    first = ensure_prebuilt(job, branch_env / "bin" / "python")
    again = ensure_prebuilt(job, branch_env / "bin" / "python")
    assert len(builds) == 1 and first == again
    assert first.vllm_cache is not None and (first.vllm_cache / "modelinfos").is_dir()


@pytest.mark.parametrize("change", ["rewritten", "added", "removed"])
def test_a_changed_model_folder_is_named_removed_and_built_again(
    branch_env, builds, tmp_path, change
):
    """A tokenizer rewritten while probes could still write it (an older difftest, or the sandbox
    off) once poisoned every later run of main: now it is seen by content, said, and rebuilt."""
    job = _job(tmp_path / "models")
    python = branch_env / "bin" / "python"
    ensure_prebuilt(job, python)
    tokenizer = builds[0] / "tokenizer.json"
    if change == "rewritten":
        tokenizer.write_text('{"vocab": "poisoned"}')
    elif change == "added":
        (builds[0] / "added_tokens.json").write_text("{}")
    else:
        tokenizer.unlink()
    said: list[str] = []
    ensure_prebuilt(job, python, said.append)
    assert len(builds) == 2
    assert tokenizer.read_text() == '{"vocab": "as built"}'
    assert not (builds[0] / "added_tokens.json").exists()
    assert len(said) == 1 and "building it again" in said[0], said
    assert str(builds[0]) in said[0], said


def test_the_inspection_is_made_once_per_base_and_checked_too(branch_env, builds, tmp_path):
    """Two model folders (two commands' work folders) share the base's inspection cache; a cache
    file changed is named and the inspection made again."""
    python = branch_env / "bin" / "python"
    first = ensure_prebuilt(_job(tmp_path / "a"), python).vllm_cache
    second = ensure_prebuilt(_job(tmp_path / "b"), python).vllm_cache
    assert first == second and first is not None and len(builds) == 2
    (first / "modelinfos" / "llama.json").write_text('{"poisoned": true}')
    said: list[str] = []
    ensure_prebuilt(_job(tmp_path / "a"), python, said.append)
    assert (first / "modelinfos" / "llama.json").read_text() == "{}"
    assert len(said) == 1 and "llama.json" in said[0] and len(builds) == 2, said


def test_a_named_model_builds_no_work_folder(branch_env, tmp_path, monkeypatch, builds):
    monkeypatch.setattr(prebuilt, "build_in_base", lambda job, base: Path("/elsewhere/model"))
    ensure_prebuilt(_job(tmp_path / "unused"), branch_env / "bin" / "python")
    assert not (tmp_path / "unused").exists()


def test_an_interpreter_difftest_did_not_build_gets_nothing_prebuilt(tmp_path, builds):
    assert ensure_prebuilt(_job(tmp_path), tmp_path / "python").vllm_cache is None
    assert builds == []
