"""How a probe on a Ray cluster is tried again, and what a worker's death is called (#29, case 4).

The sequences are the executor's own (`_retry`); the messages follow Ray 2.60's own texts (the
actors' as they came on the loopback cluster of `tests/cluster/`, the memory monitor's from the
raylet's format string: a memory monitor kill cannot be caused on demand here).
"""

from __future__ import annotations

from difftest.run.cluster.connect import NodeInfo
from difftest.run.cluster.executor import Tried, _retry, out_of_memory, worker_death

A = NodeInfo("a" * 56, "127.0.0.1")
B = NodeInfo("b" * 56, "127.0.0.2")


def test_a_worker_death_is_tried_again_there_once_and_a_lost_node_elsewhere_once() -> None:
    died = Tried(A, "its Ray worker died", worker_died=True)
    lost = Tried(A, "lost mid-probe")
    assert _retry([died]) == " there"
    assert _retry([died, Tried(A, "again", worker_died=True)]) is None
    assert _retry([lost]) == " on another node"
    assert _retry([lost, Tried(B, "lost mid-probe")]) is None
    # Each kind has its own retry: a worker death after a lost node, and the other way round.
    assert _retry([lost, Tried(B, "died", worker_died=True)]) == " there"
    assert _retry([died, Tried(A, "lost mid-probe")]) == " on another node"
    assert _retry([died, Tried(A, "lost"), Tried(B, "died", worker_died=True)]) is None
    # A worker that died before it said where it ran is tried again on any node.
    assert _retry([Tried(None, "its Ray worker died", worker_died=True)]) == ""


#: Built from the raylet's format ("Memory on the node (IP: %s, ID: %s) was %sGB used / %sGB limit
#: (%f)", then the kill reason and the killing policy's lines).
RAY_OOM = (
    "Task was killed due to the node running low on memory.\n"
    "Memory on the node (IP: 127.0.0.1, ID: 2d87d7b0) was 7.50GB used / 7.80GB limit (0.961538)\n"
    "OOM kill reason: memory usage above the threshold of 0.95\n"
    "Ray killed 1 worker(s) based on the killing policy\n"
)

ACTOR_WORKER_KILLED = (
    "The actor died unexpectedly before finishing this task.\n\tclass_name: WarmActor\n"
    "\tactor_id: a84aaa5303ad29bc65e116d601000000\n\tpid: 13761\n\tip: 127.0.0.1\n"
    "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker "
    "exit detail: Worker unexpectedly exits with a connection error code 2. End of file. Some "
    "common causes include: (1) the process was killed by the OOM killer due to high memory usage"
)

ACTOR_NODE_GONE = (
    "The actor c3e2871135bb5e59969e5b7c01000000 is unavailable: The actor is temporarily "
    "unavailable: RpcError: RPC error: Socket closed rpc_code: 14. The task may or may not have "
    "been executed on the actor."
)


def test_what_ended_a_worker_is_named_from_rays_own_words() -> None:
    assert out_of_memory(RAY_OOM) == (
        "the node ran low on memory: Ray's memory monitor killed its worker (Memory on the node "
        "(IP: 127.0.0.1, ID: 2d87d7b0) was 7.50GB used / 7.80GB limit (0.961538))"
    )
    assert out_of_memory("") == "the node ran low on memory: Ray's memory monitor killed its worker"
    assert worker_death(ACTOR_WORKER_KILLED) == (
        "its Ray worker died while the node stayed up (Worker exit type: SYSTEM_ERROR Worker exit "
        "detail: Worker unexpectedly exits with a connection error code 2. End of file.)"
    )
    assert worker_death(ACTOR_NODE_GONE) is None
