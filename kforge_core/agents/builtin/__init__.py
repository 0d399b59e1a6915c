"""Built-in, rule-based agents (no LLM)."""
