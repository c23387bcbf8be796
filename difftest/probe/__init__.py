"""Runs inside a branch environment: stdlib + vLLM only (see __main__)."""
