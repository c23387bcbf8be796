"""A fork server's child may serve a branch only when that branch's import path finds every shared
module in the very file the server imported. A branch decides top-level names (its own
`functorch/` shadows `functorch.compile` too), so each shared module's top-level package counts."""

from __future__ import annotations

import logging.handlers  # noqa: F401  (imported, as a fork server imports its shared modules)
from pathlib import Path

import pytest

from difftest.probe import forkserver


def test_a_dotted_shared_module_is_checked_by_its_top_level_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert forkserver._not_shareable(["logging.handlers"]) is None
    shadow = tmp_path / "logging"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    refusal = forkserver._not_shareable(["logging.handlers"])
    assert refusal is not None and refusal.startswith("logging would come from ")
    assert str(shadow / "__init__.py") in refusal, refusal
