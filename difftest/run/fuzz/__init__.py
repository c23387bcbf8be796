"""`difftest fuzz`: `campaign` generates scenarios with `search` (Hypothesis as a search engine)
and plays each on a warm probe per branch (`warm_probe`), judged through the same door as `run`.
"""
