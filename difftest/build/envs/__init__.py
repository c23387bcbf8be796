"""Environments: one compiled vLLM base, and one thin overlay interpreter per branch."""
