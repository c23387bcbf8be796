"""Suite tiers' sessions: `measure` runs the repository's own tests in every branch environment in
pytest-xdist sessions; `results` reads each session's JUnit XML and the plugin's worker records.
"""
