"""The two agent roles (generation, performance analysis): LLM-backed and built-in rule-based implementations."""
