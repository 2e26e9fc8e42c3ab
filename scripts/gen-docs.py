"""Writes the generated reference pages of the docs site (docs/reference/*.md).

    python scripts/gen-docs.py            # (re)write them
    python scripts/gen-docs.py --check    # exit 1 if a committed page differs

Every page is read from the code, so it cannot drift from it:
- cli.md: the typer app (crucible/cli/main.py), after the same polish `--help` gets;
- config.md: the keys of a `--config` file (engine/request.py's RunRequest and the option
  lists beside it, each with the help of its `crucible run` option), the terminal agent's
  options (agents/terminal/config.py) and the price table (llm/pricing.py);
- env-params.md: each provider's `--env-param` keys (their constructors' keywords; modal's
  ModalParams), with the descriptions in docsgen/providers.py, which must name exactly those
  keys;
- result-schema.md: the pydantic records of a job folder (records/trial.py, records/job.py),
  each field's type, default and description (its `Field(description=)`, else its comment);
- python-api.md: the signatures and docstrings of the entry points docsgen/records.py lists.
The pages are made by scripts/docsgen/. tests/docsite/test_docs_site.py asserts the committed
pages equal what this writes now.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "scripts"))
OUT = ROOT / "docs" / "reference"

from docsgen.cli_pages import cli_page, config_page  # noqa: E402
from docsgen.providers import ENV_PARAM_HELP, env_params_page, provider_params  # noqa: E402
from docsgen.records import python_api_page, schema_page  # noqa: E402

__all__ = ["ENV_PARAM_HELP", "provider_params"]

PAGES = {
    "cli.md": cli_page,
    "config.md": config_page,
    "env-params.md": env_params_page,
    "result-schema.md": schema_page,
    "python-api.md": python_api_page,
}


def generate() -> dict[str, str]:
    return {name: make() for name, make in PAGES.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail if a committed page differs")
    args = ap.parse_args()
    stale = []
    for name, text in generate().items():
        path = OUT / name
        if args.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(str(path.relative_to(ROOT)))
        else:
            OUT.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if stale:
        print("stale generated pages (run python scripts/gen-docs.py):", *stale, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
