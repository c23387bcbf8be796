"""Runs inside a branch environment: the standard library and the base's packages only.

`protocol` is the wire format shared with the host; `scheduler/` and `engine/`
are the two tiers' probes. Nothing here imports difftest's host layers
(tests/test_layering.py enforces it), because a branch environment holds only
this package.
"""
