"""Measuring branches: `pipeline.compare` runs one comparison end to end with a
`context.RunContext`; `probes`, `suites`, `cache` and `fuzz` are how runs are obtained; `rejudge`
and `reread` read a finished comparison's files again (`merge`, `show`).
"""
