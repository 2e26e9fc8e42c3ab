from tests.helpers.providers import provider_env

__all__ = ["provider_env"]
