"""Fixtures for agent tests: the scripted chat-completions server; a provider by name
(local, and docker where an engine answers) for submission trials."""

from tests.helpers.fake_openai import fake_openai
from tests.helpers.providers import provider_env

__all__ = ["fake_openai", "provider_env"]
