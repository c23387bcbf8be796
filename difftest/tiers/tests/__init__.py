"""The tests tier: the repository's own tests, and each branch's new tests, on every branch's
code."""
