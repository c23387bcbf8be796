"""The keeper: ends a Ray worker's probes when Ray kills the worker.

On Ctrl-C the host cancels every task with `ray.cancel(force=True)`, which kills the worker
process outright (no `finally` of difftest's runs there). The probe dies with it
(`protocol.die_with_host`), but a process the branch started and that left the probe's group would
not. So the first probe a worker runs starts this keeper (`node.ensure_keeper`): detached (a
session of its own, and no longer the worker's child: Ray ends a dead worker's children), reading
a pipe whose other end only the worker holds. End of input means the worker is gone (or exiting):
the keeper then ends every process that carries a token of that worker's probes
(`descendants.end_probes_of`), removes the worker's scratch folders (`scratch_dir`) and exits.

    python -m difftest.run.cluster.keeper WORKER_PID     (prints the keeper's pid, then waits)
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from difftest.run.probes.descendants import end_probes_of

#: Where a node's probes keep their job, records and log while they run (removed after each).
SCRATCH = Path(tempfile.gettempdir()) / "difftest-ray"


def scratch_dir(label: str) -> Path:
    """A fresh folder for one probe of this worker: named after the worker's pid, so that its keeper
    removes it even when Ray kills the worker before it could."""
    SCRATCH.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-{label}-", dir=SCRATCH))


def main(argv: list[str]) -> int:
    worker = int(argv[0])
    if os.fork():  # the parent exits at once: the keeper is re-parented away from the worker
        return 0
    sys.stdout.write(f"{os.getpid()}\n")
    sys.stdout.flush()
    sys.stdout.close()  # the worker reads the pid up to here
    while sys.stdin.buffer.read(1 << 16):  # nothing is ever written: only the end counts
        pass
    end_probes_of(worker)
    for folder in SCRATCH.glob(f"{worker}-*"):
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
