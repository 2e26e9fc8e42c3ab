"""The generator of the docs site's reference pages (run scripts/gen-docs.py)."""
