"""Fixtures for agent tests: the scripted chat-completions server."""

from tests.helpers.fake_openai import fake_openai

__all__ = ["fake_openai"]
