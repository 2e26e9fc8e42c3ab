"""Fixtures for agent tests: the scripted chat-completions server; a provider by name
(local, and docker where an engine answers) for submission trials; the hello-file task and
a local sandbox for it (the terminal agent's tests)."""

from tests.helpers.fake_openai import fake_openai
from tests.helpers.providers import provider_env
from tests.helpers.terminal_agent import hello_task, sandbox

__all__ = ["fake_openai", "hello_task", "provider_env", "sandbox"]
