"""Model access for LLM agents: the OpenAI-compatible client, token usage and prices."""
