"""A small documentation folder (markdown and HTML) for the docs tests."""

from __future__ import annotations

from pathlib import Path

import pytest

PAGES: dict[str, str] = {
    "getting-started/installation.md": """---
title: Installation
---
# Installation

Install the package with pip:

```
pip install quiver
```

Python 3.10 or newer is required. To install the optional GPU extras use `pip install quiver[gpu]`.
Verify the install with `quiver --version`.
""",
    "guide/io.md": """# Reading and writing files

## read_csv

`quiver.read_csv(path, sep=",")` loads a CSV file into a Frame. Pass `dtype=` to fix column types.

## to_parquet

`Frame.to_parquet(path)` writes a Parquet file. Compression defaults to zstd.
""",
    "guide/merging.md": """# Combining frames

## merge

`Frame.merge(other, on="key", how="inner")` joins two frames on a key column, like a SQL join.
Use `how="left"` for a left join.

## concat

`quiver.concat([a, b])` stacks frames vertically.
""",
    "guide/rate-limits.md": """# Rate limits and retries

The client retries requests that fail with HTTP 429 or 5xx, with exponential backoff.
The `Retry-After` header is honoured. Configure `max_retries` on the client.
""",
    "reference/frame.md": """# Frame

A Frame is a table of typed columns.

"""
    + "\n".join(f"- `Frame.method_{i}()`: method number {i} of the Frame API." for i in range(400)),
    "changelog.md": """# Changelog

## 2.0

- `read_csv` gains `dtype=`.
- merge keeps key order.
- new install instructions.
""",
    "api/auth.html": """<html><head><title>Authentication</title><script>var token = "x";</script></head>
<body><nav>Home | Docs</nav>
<h1>Authentication</h1>
<p>Every request needs an API token. Create a token in the dashboard and send it in the
<code>Authorization</code> header as <code>Bearer TOKEN</code>.</p>
<h2>Rotating tokens</h2>
<p>Tokens expire after 90 days; rotate them with <code>quiver auth rotate</code>.</p>
<pre>quiver auth rotate --all
</pre>
</body></html>""",
    "api/plotting.htm": """<html><body><h1>Plotting</h1><p>Draw a histogram with <b>Frame.plot.hist()</b>
and a scatter plot with Frame.plot.scatter(x, y).</p></body></html>""",
}


@pytest.fixture
def docs_dir(tmp_path: Path) -> Path:
    root = tmp_path / "site"
    for rel, body in PAGES.items():
        f = root / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(body)
    (root / ".hidden").mkdir()
    (root / ".hidden" / "secret.md").write_text("# hidden\ninstall")
    (root / "logo.png").write_bytes(b"\x89PNG")
    return root
