"""Same seed, same examples, whatever modules the process imported (`search.no_local_constants`).

Hypothesis draws, now and then, constants it collects from the source of every module the process
has imported: the conditions' fuzz test drew other examples in a suite worker that had imported
other test modules, and found nothing. Here a module full of constants is imported between two
searches of the same seed: they must draw the same values."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from hypothesis import strategies as st

from difftest.run.fuzz.search import search


def _drawn(seed: int) -> list[int]:
    seen: list[int] = []

    def examine(value: int) -> dict[str, int]:
        seen.append(value)
        return {}

    search(st.integers(0, 10**12), examine, seed_value=seed, examples=200)
    return seen


def test_the_same_seed_draws_the_same_values_after_other_modules_are_imported(
    tmp_path: Path, monkeypatch
) -> None:
    before = _drawn(0)
    module = tmp_path / "difftest_constants_module.py"
    module.write_text("".join(f"C{n} = {987654321000 + n * 7919}\n" for n in range(400)))
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module(module.stem)
    try:
        assert _drawn(0) == before
    finally:
        sys.modules.pop(module.stem, None)
