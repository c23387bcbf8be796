"""The architecture, checked from the source (AST): what may import what, and where tiers are named.

- The probe package runs inside branch environments, which hold only it and the
  base's packages: it imports the standard library, vLLM and the base's own
  libraries, and nothing of difftest's host layers.
- Host layers import one way (`ALLOWED`), and no module imports itself back
  through others (no cycles; imports under `if TYPE_CHECKING:` do not run).
- No code outside the tier registry compares a value with a tier's name.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from difftest import tiers
from difftest.tiers.probe_tier import ProbeTier
from difftest.tiers.suite_tier import SuiteTier
from tests.factories import ROOT

PACKAGE = ROOT / "difftest"
SOURCES = sorted(PACKAGE.rglob("*.py"))
#: What the base environment provides besides the standard library and vLLM.
BASE_PACKAGES = {"vllm", "torch", "tokenizers", "transformers", "safetensors", "xgrammar", "numpy"}
#: The tests tier's pytest plugin also has the test-only folder on its path (pytest and friends).
SUITE_PLUGIN_PACKAGES = {"pytest"}
#: The probe's tracer imports coverage.py from the folder the job names (`probe.tracing`).
TRACER_PACKAGES = {"coverage"}
#: Layer -> the difftest layers it may import (itself included). cli sits on top and may import all.
#: `probe.protocol`, `probe.conditions` and `probe.tests.contract` are the contracts between the
#: host and what runs inside branch environments (the probe; the tests tier's pytest plugin),
#: shared by both sides;
#: `probe.confine` is the wrapper the host starts every confined process through (its exit code and
#: message prefix are the contract).
ALLOWED = {
    "probe": {"probe"},
    "core": {"core", "probe.protocol"},
    "tiers": {
        "tiers",
        "core",
        "probe.protocol",
        "probe.conditions",
        "probe.scheduler.script",
        "probe.tests.contract",
    },
    "build": {"build", "core"},
    "run": {
        "run",
        "build",
        "tiers",
        "core",
        "probe.protocol",
        "probe.tests.contract",
        "probe.confine",
    },
    "reports": {"reports", "tiers", "core"},
    "cli": {"cli", "run", "build", "reports", "tiers", "core", "probe.protocol"},
}


#: Inside `run`: each part -> the other parts it may import. Processes are the bottom (probes),
#: the cluster runs them on other machines, the cache stores what they deliver, the context and
#: the suites build on those, the pipeline on all of them; fuzz, rejudge and blame are on top, and
#: reread (what show and merge read again) reads only probes.
RUN_PARTS = {
    "probes": set(),
    "cache": {"probes"},
    "reread": {"probes"},
    # The Ray executor runs probes elsewhere and reads them back as `probes` reads local ones.
    "cluster": {"probes"},
    # What the probes trace, and which changed lines they executed.
    "coverage": {"probes"},
    "context": {"probes", "cache", "cluster", "coverage"},
    "suites": {"probes", "cache", "context"},
    "pipeline": {"probes", "cache", "context", "suites", "cluster", "coverage"},
    "fuzz": {"probes", "cache", "context", "pipeline", "cluster", "coverage"},
    "rejudge": {"probes", "reread", "pipeline"},
    "blame": {"probes", "cache", "context", "pipeline"},
    # One branch run traced over all of vLLM (`difftest coverage`, the gate's skip rule).
    "traced": {"probes", "context", "coverage", "pipeline"},
}
#: Inside `tiers`: the shared parts, and the tiers that build on them. A tier's folder imports the
#: shared parts only: no tier depends on another, so adding or removing one touches nothing else.
TIER_SHARED = {"common", "base", "door", "probe_tier", "suite_tier"}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p) for p in SOURCES}


def _type_checking_block(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imports_of(path: Path) -> set[str]:
    """Absolute names of every module `path` imports at run time (relative imports resolved)."""
    tree = ast.parse(path.read_text())
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if _type_checking_block(node):
            skipped |= {id(n) for n in ast.walk(node)}
    package = (
        module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    )
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            # `from a.b import c` imports the module a.b.c when there is one, else names of a.b.
            submodules = {f"{prefix}.{alias.name}" for alias in node.names} & MODULES
            found |= submodules or {prefix}
    return found


def difftest_imports(path: Path) -> set[str]:
    return {name for name in imports_of(path) if name in MODULES and name != "difftest"}


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


@pytest.mark.parametrize(
    "path", [p for p in SOURCES if layer_of(module_name(p)) == "probe"], ids=lambda p: p.name
)
def test_the_probe_imports_only_the_standard_library_vllm_and_the_base(path: Path) -> None:
    for name in imports_of(path):
        top = name.split(".")[0]
        if top == "difftest":
            assert name.startswith("difftest.probe") or name == "difftest", (
                f"{path}: imports host code {name}"
            )
        else:
            extra = SUITE_PLUGIN_PACKAGES if path.parent.name == "tests" else set()
            extra |= TRACER_PACKAGES if path.name == "tracing.py" else set()
            assert (
                top in sys.stdlib_module_names
                or top in BASE_PACKAGES | extra
                or top == "__future__"
            ), f"{path}: {name}"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: module_name(p))
def test_host_layers_import_one_way(path: Path) -> None:
    layer = layer_of(module_name(path))
    if layer is None:
        return  # difftest/__init__.py imports nothing
    allowed = ALLOWED[layer]
    for name in difftest_imports(path):
        target = name.removeprefix("difftest.")
        assert any(target == a or target.startswith(a + ".") for a in allowed), (
            f"{module_name(path)} ({layer}) imports {name}; {layer} may import {sorted(allowed)}"
        )


def _part(module: str, layer: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == layer else None


@pytest.mark.parametrize(
    "path", [p for p in SOURCES if _part(module_name(p), "run")], ids=lambda p: module_name(p)
)
def test_the_parts_of_run_import_downward(path: Path) -> None:
    mine = _part(module_name(path), "run")
    assert mine in RUN_PARTS, f"{module_name(path)}: a new part of run/ must be placed in RUN_PARTS"
    for name in difftest_imports(path):
        other = _part(name, "run")
        if other is not None and other != mine:
            assert other in RUN_PARTS[mine], (
                f"{module_name(path)} imports {name}; run.{mine} may import "
                f"{sorted(RUN_PARTS[mine]) or 'no other part of run'}"
            )


@pytest.mark.parametrize(
    "path",
    [p for p in SOURCES if _part(module_name(p), "tiers") not in (None, *TIER_SHARED)],
    ids=lambda p: module_name(p),
)
def test_a_tier_imports_only_the_shared_parts_of_tiers(path: Path) -> None:
    mine = _part(module_name(path), "tiers")
    for name in difftest_imports(path):
        other = _part(name, "tiers")
        assert other in (None, mine, *TIER_SHARED), (
            f"{module_name(path)} (the {mine} tier) imports {name}: tiers share only "
            f"{sorted(TIER_SHARED)}"
        )


def test_the_shared_parts_of_tiers_import_no_tier() -> None:
    for path in SOURCES:
        mine = _part(module_name(path), "tiers")
        if mine not in TIER_SHARED:
            continue
        for name in difftest_imports(path):
            assert _part(name, "tiers") in (None, *TIER_SHARED), (
                f"{module_name(path)} imports {name}"
            )


def test_no_import_cycles() -> None:
    graph = {module_name(p): difftest_imports(p) for p in SOURCES}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt) :] + [nxt]
                # A package's __init__ importing its own submodules is not a cycle between modules.
                if not all(n == cycle[0] or n.startswith(cycle[0] + ".") for n in cycle):
                    raise AssertionError("import cycle: " + " -> ".join(cycle))
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)


def test_no_tier_name_is_compared_outside_the_registry() -> None:
    names = set(tiers.REGISTRY)
    offenders = []
    for path in SOURCES:
        if path == PACKAGE / "tiers" / "__init__.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                constants = [
                    n for n in [node.left, *node.comparators] if isinstance(n, ast.Constant)
                ]
                if any(c.value in names for c in constants):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert not offenders, "tier names compared outside the registry:\n" + "\n".join(offenders)


def test_every_registered_tier_is_wired_to_what_runs_inside_the_branches() -> None:
    """A probe-measured tier names a probe entry; a suite-measured tier names its pytest plugin."""
    from difftest.probe.__main__ import ENTRIES

    for name, tier in tiers.REGISTRY.items():
        assert tier.name == name
        assert (PACKAGE / "tiers" / name / "tier.py").is_file()
        if isinstance(tier, ProbeTier):
            assert tier.probe_entry in ENTRIES, f"tier {name}: no probe entry {tier.probe_entry!r}"
        else:
            assert isinstance(tier, SuiteTier) and tier.plugin.startswith("difftest.probe."), (
                tier.plugin
            )
            assert (ROOT / (tier.plugin.replace(".", "/") + ".py")).is_file(), (
                f"tier {name}: no plugin {tier.plugin}"
            )
