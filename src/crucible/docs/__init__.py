"""A local documentation index for agents and people: build it, query it, read pages in windows.

`index.build_index(source, out)` turns a folder of markdown/HTML pages or an
llms.txt-style list into an SQLite FTS5 index (BM25 ranking);
`query.search(index, keys)` returns the most relevant pages first;
`show.show_page(index, page, offset, limit)` returns a bounded window of one page.
"""

from __future__ import annotations

import os
from pathlib import Path

DOCS_INDEX_ENV = "CRUCIBLE_DOCS_INDEX"


def default_index_dir() -> Path:
    """$CRUCIBLE_DOCS_INDEX, else ./.crucible/docs."""
    return Path(os.environ.get(DOCS_INDEX_ENV) or ".crucible/docs")
