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

A warm probe (`serve_stream`) traces from its first job on and reports after each job what that
job executed (`record(again=True)`), taken out of coverage.py's collector while it keeps running:
the arcs recorded since the last record are copied and removed from the collector's live sets, so
every thread's tracer stays in place (a pool thread started in one job and reused in a later one
is still traced) and what another thread records meanwhile stays for the next job. (coverage.py's
public way, stopping, erasing its data and starting again, costs ~40 ms a job in a process that
imported vLLM and leaves threads that already exist untraced; it is the fallback where the
collector is not as this reads it.) One disturbance makes every later record of the process
`unknown` too: a branch that once stopped the tracer cannot be trusted to have left it alone since.
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

    @classmethod
    def start(cls, spec: dict[str, Any] | None, preload: bool = True) -> Tracing | None:
        """Start tracing the job's files; None when the job asks for no tracing. `preload`
        imports the shared third-party libraries first, untraced (a probe, which imports them
        anyway); a tests-tier worker does not, so that its tests see the modules they import
        exactly as an untraced session does."""
        if not spec:
            return None
        tracing = cls()
        try:
            tracing._begin(spec, preload)
        except Exception as exc:  # noqa: BLE001 - the runs go on untraced; the record says why
            tracing.problem = f"the tracer could not start ({type(exc).__name__}: {exc})"
        return tracing

    def _begin(self, spec: dict[str, Any], preload: bool) -> None:
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

        if preload and not must_import_vllm_first():
            import_shared()
        sys.path.append(site)  # after the environment's own packages: they keep precedence
        import coverage

        wanted = spec.get("version")
        if wanted and coverage.__version__ != wanted:
            # Another coverage.py came first on the path (a test-only requirement, say): what it
            # records is not what the host's parser reads.
            imported = f"coverage.py {coverage.__version__} was imported from {coverage.__file__}"
            self.problem = f"{imported}, not the tracer's {wanted}"
            return

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
        (a warm probe, between jobs), what ran since the last record, the tracer left running."""
        if self.problem:
            return {"status": "unknown", "why": self.problem, "files": {}}
        disturbed = self._disturbed()
        try:
            if disturbed:
                self._coverage.stop()
                self.problem = disturbed
                return {"status": "unknown", "why": disturbed, "files": {}}
            job = _take_since_last(self._coverage) if again else None
            if job is None:
                job = self._read_all(again)
            files = {}
            for name, (lines, arcs) in sorted(job.items()):
                relative = os.path.relpath(os.path.realpath(name), self._root)
                if relative.startswith("..") or not (lines or arcs):
                    continue
                files[relative] = {
                    "lines": sorted(lines),
                    "arcs": sorted([a, b] for a, b in arcs),
                }
        except Exception as exc:  # noqa: BLE001 - a tracer the branch broke: unknown, not a crash
            self.problem = f"the tracer's data cannot be read ({type(exc).__name__}: {exc})"
            return {"status": "unknown", "why": self.problem, "files": {}}
        return {"status": "ok", "why": "", "files": files, "core": self.core}

    def _read_all(self, again: bool) -> dict[str, tuple[set[int], set[tuple[int, int]]]]:
        """Everything recorded, through coverage.py's public API (the tracer stopped); with
        `again`, its data erased and the tracer started afresh for the next job."""
        self._coverage.stop()
        data = self._coverage.get_data()
        found = {
            name: (set(data.lines(name) or []), set(data.arcs(name) or []))
            for name in data.measured_files()
        }
        if again:
            self._coverage.erase()
            self._coverage.start()
            self._tracer = sys.gettrace()
        return found

    def _disturbed(self) -> str:
        """Why the tracer that runs now is not the one started ("" when it is)."""
        now = sys.gettrace()
        if now is None:
            return "the tracer was stopped while the probe ran (sys.settrace(None) or its API)"
        if now is not self._tracer:
            return "the tracer was replaced while the probe ran (sys.settrace)"
        return ""


#: How coverage.py's C tracer packs an arc into one int (its `tracer.c`, `CTracer_record_pair`):
#: 28 bits per line number, and a sign bit for each.
_LINE_BITS = 28
_LINE_MASK = (1 << _LINE_BITS) - 1
_NEGATIVE_FROM, _NEGATIVE_TO = 1 << 56, 1 << 57


def _take_since_last(coverage: Any) -> dict[str, tuple[set[int], set[tuple[int, int]]]] | None:
    """Each traced file's lines and arcs recorded since the last call, taken out of the running
    collector's sets (each copied, then exactly the copy removed: what a thread adds meanwhile
    stays). None where the collector is not the one this reads (other packing, other fields): the
    caller then falls back to coverage.py's public API."""
    collector = getattr(coverage, "_collector", None)
    raw = getattr(collector, "data", None)
    if (
        not isinstance(raw, dict)
        or getattr(getattr(collector, "core", None), "packed_arcs", None) is not True
    ):
        return None
    taken: dict[str, set[int]] = {}
    for name, live in list(raw.items()):
        if not isinstance(name, str) or not isinstance(live, set):
            return None
        taken[name] = live.copy()  # atomic under the GIL, as coverage.py's own flush relies on
    found: dict[str, tuple[set[int], set[tuple[int, int]]]] = {}
    for name, packed in taken.items():
        arcs: set[tuple[int, int]] = set()
        for value in packed:
            if not isinstance(value, int):
                return None
            start, end = value & _LINE_MASK, (value >> _LINE_BITS) & _LINE_MASK
            arcs.add(
                (-start if value & _NEGATIVE_FROM else start, -end if value & _NEGATIVE_TO else end)
            )
        # As coverage.py derives lines from arcs: every positive line number an arc touches.
        found[name] = ({n for arc in arcs for n in arc if n > 0}, arcs)
    for name, packed in taken.items():
        raw[name].difference_update(packed)
    return found
