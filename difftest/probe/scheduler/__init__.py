"""The scheduler tier's probe: a scripted model driving the branch's real Scheduler.

Kept import-free: the host imports `script` (pure standard library) for the oracle.
"""
