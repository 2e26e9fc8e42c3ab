"""The registry's defaults, cheap to import (the CLI's help texts name them)."""

# Harbor's public registry: a JSON list of datasets in the format of models.py.
DEFAULT_REGISTRY_URL = "https://raw.githubusercontent.com/laude-institute/harbor/main/registry.json"
REGISTRY_ENV = "CRUCIBLE_REGISTRY"
DATASETS_DIR_ENV = "CRUCIBLE_DATASETS_DIR"
