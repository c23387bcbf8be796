"""The result cache: probe output and test sessions kept so that an unchanged re-run need not
import vLLM. Entries hold runs and process outcomes, never verdicts (`tiers.door` judges them
again on every use): `results` for probes, `sessions` for the tests tier's pytest sessions,
`validated_copy` so an intact entry is not re-read line by line, `heap` keeping what it holds
out of the garbage collector's way.
"""
