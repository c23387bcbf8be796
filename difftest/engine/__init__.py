"""The engine tier: scenarios, oracle and invariants for runs of the REAL vLLM engine on a tiny model.

Pure Python (no vLLM): the probe side lives in `difftest/probe/engine_*.py`.
"""
