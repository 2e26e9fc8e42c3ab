"""Agents act inside a sandbox: oracle, nop, the LLM terminal agent, installed CLIs."""
