"""difftest: differential tests of vLLM's speculative-decoding statistics.

Kept free of imports on purpose: the probe subpackage is copied into branch
environments, where only the standard library and vLLM may be imported.
"""

__version__ = "0.2.0"
