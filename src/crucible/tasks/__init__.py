"""Tasks in the Harbor format: models, loader, validation, datasets."""
