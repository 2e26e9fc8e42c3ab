from __future__ import annotations

from tests.helpers.providers import provider_env

__all__ = ["provider_env"]
