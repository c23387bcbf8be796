"""Which lines and arcs of vLLM's stats path a probe executed (coverage.py, inside the probe).

The host names the files in the job (`"trace": {"site": ..., "paths": [...]}`: the folder that
holds coverage.py for this base's Python, and `vllm/...` paths, a folder ending in `/`). The
tracer starts here, before the tier's session imports vLLM, restricted to those files (no cost
elsewhere), keeps its data in memory only (no file a branch could rewrite), and reports once, in
the `coverage` record that precedes the trailer: the lines and arcs executed per file, exactly as
coverage.py recorded them. The host parses the files itself (`run.coverage`) and never trusts
the probe for what a file contains.

A branch runs in this very process, so it can stop or replace the tracer (`sys.settrace`,
`threading.settrace`, coverage's own API). That is checked at the end: the tracer that runs then
must be the one started here, never stopped, in the thread that played the runs. Otherwise the
record says `unknown`, with the reason, and the host reads "coverage unknown", never "reached".

A warm probe (`serve_stream`) traces from its first job on and reports after each job what the
process executed that no earlier record of it reported (`record(again=True)`): the host sums the
records, so the sum is what every job executed and a record that is not empty says the job ran
something new. (Erasing coverage.py's data between jobs would give each job's own lines, but costs
~40 ms a job in a process that imported vLLM: more than a scheduler example takes.) One
disturbance makes every later record of the process `unknown` too: a branch that once stopped the
tracer cannot be trusted to have left it alone since.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any


class Tracing:
    """One probe's tracer: started by `start`, read once by `record`."""

    def __init__(self, problem: str = "") -> None:
        self.problem = problem
        self._coverage: Any = None
        self._tracer: Any = None
        self._root = ""
        #: Which of coverage.py's tracers runs (its C tracer is many times faster than its Python
        #: one, which it falls back to where the C extension does not load).
        self.core = ""
        #: What earlier records of this process reported, per file (`record(again=True)`).
        self._reported: dict[str, tuple[set[int], set[tuple[int, int]]]] = {}

    @classmethod
    def start(cls, spec: dict[str, Any] | None) -> Tracing | None:
        """Start tracing the job's files; None when the job asks for no tracing."""
        if not spec:
            return None
        tracing = cls()
        try:
            tracing._begin(spec)
        except Exception as exc:  # noqa: BLE001 - the runs go on untraced; the record says why
            tracing.problem = f"the tracer could not start ({type(exc).__name__}: {exc})"
        return tracing

    def _begin(self, spec: dict[str, Any]) -> None:
        site, paths = str(spec["site"]), [str(p) for p in spec["paths"]]
        if not os.path.isdir(site):
            self.problem = f"the tracer's packages are not on this machine ({site})"
            return
        found = importlib.util.find_spec("vllm")  # finds the package without importing it
        if found is None or not found.submodule_search_locations:
            self.problem = "vLLM is not importable here"
            return
        self._root = os.path.realpath(os.path.dirname(list(found.submodule_search_locations)[0]))
        # The shared third-party libraries first, untraced, as the fork server imports them for
        # its children: a tracer set during their import (three quarters of a fresh probe's)
        # cost seconds per probe for files it never records. Not where vLLM must set up before
        # torch is imported (the fork server refuses to share then too).
        from .shared import import_shared, must_import_vllm_first

        if not must_import_vllm_first():
            import_shared()
        sys.path.append(site)  # after the environment's own packages: they keep precedence
        import coverage

        include = [
            os.path.join(self._root, p) + ("*" if p.endswith("/") else "")
            for p in paths
            if p.startswith("vllm/")
        ]
        self._coverage = coverage.Coverage(
            data_file=None, branch=True, include=include, config_file=False
        )
        # A probe whose runs never reached a traced file is not a problem to print in its log.
        self._coverage.set_option("run:disable_warnings", ["no-data-collected"])
        # The C tracer, whose identity `_disturbed` checks (coverage.py picks `sys.monitoring`
        # by itself on newer Pythons, where `sys.gettrace()` shows nothing).
        self._coverage.set_option("run:core", "ctrace")
        self._coverage.start()
        self._tracer = sys.gettrace()
        self.core = str(self._coverage._collector.tracer_name())  # CTracer, PyTracer, ...

    def record(self, again: bool = False) -> dict[str, Any]:
        """The `coverage` record's body: `status` "ok" with `files` ({path: {"lines", "arcs"}},
        paths relative to the site folder, `vllm/...`), or "unknown" with `why`. With `again`
        (a warm probe, between jobs), only what no earlier record reported, and the tracer started
        again for the next job."""
        if self.problem:
            return {"status": "unknown", "why": self.problem, "files": {}}
        disturbed = self._disturbed()
        try:
            self._coverage.stop()
            if disturbed:
                self.problem = disturbed
                return {"status": "unknown", "why": disturbed, "files": {}}
            data = self._coverage.get_data()
            files = {}
            for measured in sorted(data.measured_files()):
                relative = os.path.relpath(os.path.realpath(measured), self._root)
                if relative.startswith(".."):
                    continue
                lines = set(data.lines(measured) or [])
                arcs = set(data.arcs(measured) or [])
                if again:
                    lines, arcs = self._new(relative, lines, arcs)
                    if not lines and not arcs:
                        continue
                files[relative] = {
                    "lines": sorted(lines),
                    "arcs": sorted([a, b] for a, b in arcs),
                }
            if again:
                self._coverage.start()
                self._tracer = sys.gettrace()
        except Exception as exc:  # noqa: BLE001 - a tracer the branch broke: unknown, not a crash
            self.problem = f"the tracer's data cannot be read ({type(exc).__name__}: {exc})"
            return {"status": "unknown", "why": self.problem, "files": {}}
        return {"status": "ok", "why": "", "files": files, "core": self.core}

    def _new(
        self, path: str, lines: set[int], arcs: set[tuple[int, int]]
    ) -> tuple[set[int], set[tuple[int, int]]]:
        """What of `path`'s lines and arcs no earlier record reported; remembered as reported."""
        seen_lines, seen_arcs = self._reported.setdefault(path, (set(), set()))
        new_lines, new_arcs = lines - seen_lines, arcs - seen_arcs
        seen_lines |= new_lines
        seen_arcs |= new_arcs
        return new_lines, new_arcs

    def _disturbed(self) -> str:
        """Why the tracer that runs now is not the one started ("" when it is)."""
        now = sys.gettrace()
        if now is None:
            return "the tracer was stopped while the probe ran (sys.settrace(None) or its API)"
        if now is not self._tracer:
            return "the tracer was replaced while the probe ran (sys.settrace)"
        return ""
