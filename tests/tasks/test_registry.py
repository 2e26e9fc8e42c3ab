"""Harbor's dataset registry: reading it (local and over HTTP), finding a dataset, pulling its
tasks from a real git repository into the datasets folder once per repository and commit."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.helpers.git_registry import commit_all, dataset, entry, task_repo, write_registry

from crucible.errors import ExitCode
from crucible.tasks.dataset import discover_tasks
from crucible.tasks.registry.errors import DatasetError
from crucible.tasks.registry.pull import pull_dataset
from crucible.tasks.registry.source import load_registry, parse_registry

SHA = "a" * 40


def _one(task: dict[str, object]) -> bytes:
    return json.dumps([dataset("demo", "1.0", [task])]).encode()


def test_harbor_format_reads_with_its_field_names() -> None:
    raw = [
        {
            "name": "terminal-bench",
            "version": "2.0",
            "description": "Terminal tasks",
            "tasks": [
                {"name": "hello", "git_url": "https://github.com/org/repo.git",
                 "git_commit_id": SHA.upper(), "path": "tasks/hello"},
                {"name": "head", "git_url": "git@github.com:org/repo.git",
                 "git_commit_id": "head", "path": "./tasks/head/", "future_field": 1},
                {"name": "nocommit", "git_url": "ssh://git@host/r", "git_commit_id": None, "path": "t"},
            ],
            "metrics": [{"type": "mean", "kwargs": {}}],
        }
    ]  # fmt: skip
    [spec] = parse_registry(json.dumps(raw).encode(), "reg.json")
    assert spec.ref == "terminal-bench@2.0" and spec.description == "Terminal tasks"
    hello, head, nocommit = spec.tasks
    assert (hello.git_commit_id, hello.path, hello.kind) == (SHA, "tasks/hello", "https")
    assert (head.git_commit_id, head.path, head.kind) == (None, "tasks/head", "ssh")
    assert nocommit.git_commit_id is None and nocommit.kind == "ssh"
    # {"datasets": [...]} and a file of one dataset read too
    assert parse_registry(json.dumps({"datasets": raw}).encode(), "r")[0].ref == spec.ref
    assert parse_registry(json.dumps(raw[0]).encode(), "r")[0].ref == spec.ref


@pytest.mark.parametrize(
    ("task", "field", "says"),
    [
        (entry("t", "https://h/r", SHA, "/etc"), "tasks[0].path", "absolute"),
        (entry("t", "https://h/r", SHA, "a/../../b"), "tasks[0].path", "climbs"),
        (entry("t", "https://h/r", SHA, ".git/hooks"), "tasks[0].path", ".git"),
        (entry("t", "https://h/r", SHA, "."), "tasks[0].path", "repository itself"),
        (entry("t", "https://h/r", "abc123", "t"), "tasks[0].git_commit_id", "full commit id"),
        (entry("t", "https://h/r", "main", "t"), "tasks[0].git_commit_id", "full commit id"),
        (entry("t", "http://h/r", SHA, "t"), "tasks[0].git_url", "scheme 'http'"),
        (entry("t", "git://h/r", SHA, "t"), "tasks[0].git_url", "scheme 'git'"),
        (entry("t", "ext::sh -c touch% /tmp/x", SHA, "t"), "tasks[0].git_url", "spaces"),
        (entry("t", "ext::sh", SHA, "t"), "tasks[0].git_url", "transport::address"),
        (entry("t", "-uhttps://h/r", SHA, "t"), "tasks[0].git_url", "option"),
        (entry("t", "ssh://-oProxyCommand=x/r", SHA, "t"), "tasks[0].git_url", "'-'"),
        (entry("t", "git@-oProxyCommand=x:r", SHA, "t"), "tasks[0].git_url", "'-'"),
        ({"name": "t", "git_url": "https://h/r"}, "tasks[0].path", "Field required"),
    ],
)
def test_a_bad_entry_is_refused_with_its_field_named(
    task: dict[str, object], field: str, says: str
) -> None:
    with pytest.raises(DatasetError) as err:
        parse_registry(_one(task), "reg.json")
    assert f"datasets[0] (demo@1.0).{field}" in err.value.message, err.value.message
    assert says in err.value.message and "reg.json" in err.value.message


def test_not_json_and_a_missing_version_name_the_problem() -> None:
    with pytest.raises(DatasetError, match="not JSON"):
        parse_registry(b"[{", "r.json")
    with pytest.raises(DatasetError, match=r"datasets\[0\] \(x\)\.version: Field required"):
        parse_registry(b'[{"name": "x", "tasks": []}]', "r.json")


def test_find_by_name_and_version(tmp_path: Path) -> None:
    reg_file = write_registry(tmp_path / "r.json", [
        dataset("a", "1.0", []), dataset("a", "2.0", []), dataset("b", "1", [])])  # fmt: skip
    reg = load_registry(reg_file, tmp_path / "cache")
    assert reg.find("a@2.0").version == "2.0" and reg.find("b").ref == "b@1"
    for ref, code, says in [("a", ExitCode.USAGE, "versions 1.0, 2.0"),
                            ("a@3", ExitCode.NOT_FOUND, "no version '3'"),
                            ("zzz@1", ExitCode.NOT_FOUND, "not in the registry"),
                            ("a@", ExitCode.USAGE, "NAME@VERSION")]:  # fmt: skip
        with pytest.raises(DatasetError, match=says) as err:
            reg.find(ref)
        assert err.value.code == code
    with pytest.raises(DatasetError) as missing:
        load_registry(tmp_path / "nope.json", tmp_path / "cache")
    assert missing.value.code == ExitCode.NOT_FOUND


def test_pull_fetches_once_per_commit_sparse_and_the_loader_reads_the_tasks(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    first = task_repo(repo, ["alpha", "beta"])
    (repo / "big").mkdir()
    (repo / "big" / "blob.bin").write_bytes(b"x" * 1000)
    second = commit_all(repo, "more")
    reg_file = write_registry(tmp_path / "registry" / "registry.json", [
        dataset("one", "1.0", [entry("alpha", "../repo", first, "tasks/alpha")]),
        dataset("two", "1.0", [entry("alpha", "../repo", first, "tasks/alpha"),
                               entry("beta", "../repo", first, "tasks/beta")]),
        dataset("head", "1.0", [entry("alpha", str(repo), "HEAD", "tasks/alpha")]),
    ])  # fmt: skip
    cache = tmp_path / "cache"
    reg = load_registry(reg_file, cache)
    fetched: list[tuple[str, str]] = []

    def pull(ref: str) -> list[Path]:
        return [
            t.path
            for t in pull_dataset(
                reg, reg.find(ref), cache, on_fetch=lambda u, c: fetched.append((u, c))
            )
        ]

    [alpha] = pull("one@1.0")
    assert fetched == [(str(repo.resolve()), first)]
    checkout = alpha.parents[1]
    assert not (checkout / "big").exists(), "sparse: only the task folders asked for"
    assert pull("one@1.0") == [alpha] and len(fetched) == 1, "a pulled commit is not fetched again"
    both = pull("two@1.0")
    assert (
        both == [alpha, checkout / "tasks" / "beta"] and len(fetched) == 2
    )  # widened, same checkout
    [at_head] = pull("head@1.0")
    assert fetched[-1][1] == second and at_head != alpha, "HEAD is resolved to the commit it is now"
    tasks, invalid = discover_tasks(both)
    assert [t.name for t in tasks] == ["alpha", "beta"] and invalid == []


def test_a_task_without_git_url_is_a_folder_beside_a_local_registry(tmp_path: Path) -> None:
    task_repo(tmp_path / "reg", ["local-one"], under="tasks")
    same = entry("x", None, None, "tasks/local-one")
    write_registry(tmp_path / "reg" / "a.json", [dataset("loc", "1", [same, same])])
    reg = load_registry(tmp_path / "reg", tmp_path / "cache")  # a folder of .json files
    [task] = pull_dataset(reg, reg.find("loc@1"), tmp_path / "cache")  # listed twice: one task
    assert task.path == (tmp_path / "reg" / "tasks" / "local-one").resolve()


class _Serve(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def served() -> Iterator[tuple[str, type[_Serve], http.server.ThreadingHTTPServer]]:
    handler = type("Handler", (_Serve,), {})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/registry.json", handler, server
    server.shutdown()
    server.server_close()
    thread.join()


def test_a_remote_registry_is_kept_for_offline_use_and_cannot_name_host_files(
    tmp_path: Path, served: tuple[str, type[_Serve], http.server.ThreadingHTTPServer]
) -> None:
    url, handler, server = served
    repo = tmp_path / "repo"
    sha = task_repo(repo, ["alpha"])
    handler.body = json.dumps([
        dataset("local-repo", "1", [entry("alpha", str(repo), sha, "tasks/alpha")]),
        dataset("file-url", "1", [entry("alpha", f"file://{repo}", sha, "tasks/alpha")]),
        dataset("no-url", "1", [entry("alpha", None, None, "tasks/alpha")]),
    ]).encode()  # fmt: skip
    cache = tmp_path / "cache"
    reg = load_registry(url, cache)
    assert reg.local_root is None and [d.name for d in reg.datasets] == [
        "local-repo",
        "file-url",
        "no-url",
    ]
    for name, says in [("local-repo", "local repository"), ("file-url", "local repository"),
                       ("no-url", "cannot name local folders")]:  # fmt: skip
        with pytest.raises(DatasetError, match=says):
            pull_dataset(reg, reg.find(name), cache)
    assert not (cache / "git").exists(), "nothing was fetched"

    server.shutdown()
    server.server_close()
    offline = load_registry(url, cache)
    assert [d.name for d in offline.datasets] == [d.name for d in reg.datasets]
    assert "using the copy" in offline.warnings[0]
    with pytest.raises(DatasetError) as err:
        load_registry(url, tmp_path / "empty-cache")
    assert err.value.code == ExitCode.BACKEND and err.value.hint and "--registry" in err.value.hint
    with pytest.raises(DatasetError, match="only https"):
        load_registry("http://example.com/registry.json", cache)
