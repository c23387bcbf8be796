"""Probe processes: starting a tier's probe in every branch environment and reading what it wrote.

`runner` runs them in parallel (fresh interpreters, or children of the tier's
warm fork server, `forking`); `read_records` checks their RUNS.jsonl into one
`ProbeRun` per planned run; `files`, `environ` and `descendants` keep a
branch's code from blocking the host, seeing more of the caller's environment
than it should, or outliving its probe; `capacity` says how many run at once.
"""
