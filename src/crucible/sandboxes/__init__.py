"""Sandbox providers: the protocol, the registry and the built-in providers."""
