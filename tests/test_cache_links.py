"""The user cache writes inside itself only, and removes its own entries only.

A cache a CI job restored from an archive, or one in a shared home, is data: tar keeps
symbolic and hard links, so what optrace finds in the cache's place may lead elsewhere.
Its kind folders, entries and the repository index's store (with SQLite's journals) are
used only when they are files and folders of the cache's own; the size bound removes
files named as entries, in folders named as kinds — the cache's root may be a link to a
folder that holds other files — and the temporary files a killed run left.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.engine import index_cache
from optrace.runtime import usercache

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
runner = CliRunner()


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(usercache, "limit", lambda kind: 1 << 30)
    index_cache.set_enabled(True)
    root = tmp_path / "xdg" / "optrace"
    root.mkdir(parents=True)
    return root


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_the_bound_removes_entries_only_not_other_files_where_the_root_leads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The cache's root a link to a build's output folder: its JSON files are no entries.
    build = tmp_path / "repo" / "build_out"
    for rel in ("kernel_meta/op_a.json", "kernel_meta/op_b.json", "plan/notes.json",
                "plan/" + "ab" * 8 + "x.json.z", "check-list.json"):
        (build / rel).parent.mkdir(parents=True, exist_ok=True)
        (build / rel).write_bytes(b"{}" + b" " * 4000)
        os.utime(build / rel, (1, 1))  # older than any entry: the first a bound would take
    (tmp_path / "xdg").mkdir()
    (tmp_path / "xdg" / "optrace").symlink_to(build)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(usercache, "limit", lambda kind: 1 << 30)
    others = _tree(build)
    names = [f"{i:032x}" for i in range(4)]
    for name in names:
        assert usercache.write_entry("plan", name, {"pad": "x" * 1000})
    usercache.prune(1)  # room for nothing: every entry goes, and nothing else
    assert not any(usercache.entry_path("plan", n).exists() for n in names)
    assert {k: v for k, v in _tree(build).items() if k in others} == others


def test_a_killed_runs_temporary_file_is_removed_once_stale(cache: Path) -> None:
    assert usercache.write_entry("check", "cd" * 16, {"a": 1})
    stale = cache / "check" / ".tmp-abcd1234.json.z"
    fresh = cache / "check" / ".tmp-efgh5678.json.z"
    mine = cache / "check" / ".tmp-notours.txt"
    for path in (stale, fresh, mine):
        path.write_bytes(b"x")
    old = time.time() - 2 * 3600
    os.utime(stale, (old, old))
    os.utime(mine, (old, old))
    usercache.prune(1 << 30)
    assert not stale.exists() and fresh.exists() and mine.exists()


def test_a_kind_folder_that_is_a_link_is_neither_written_nor_read(cache: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "repo" / "examples"
    elsewhere.mkdir(parents=True)
    (cache / "plan").symlink_to(elsewhere)
    name = "ef" * 16
    assert not usercache.write_entry("plan", name, {"plan": 1})
    assert list(elsewhere.iterdir()) == []
    # An entry placed there (by the archive) is not one: not read, its time not touched.
    (cache / "plan").unlink()
    (cache / "plan").mkdir()
    assert usercache.write_entry("plan", name, {"plan": 1})
    shutil.move(str(cache / "plan" / f"{name}.json.z"), str(elsewhere))
    (cache / "plan").rmdir()
    (cache / "plan").symlink_to(elsewhere)
    os.utime(elsewhere / f"{name}.json.z", (1, 1))
    assert usercache.read_entry("plan", name) is None
    assert (elsewhere / f"{name}.json.z").stat().st_mtime == 1


@pytest.mark.parametrize("how", ["symbolic", "hard"])
def test_an_entry_that_is_a_link_is_not_read(cache: Path, tmp_path: Path, how: str) -> None:
    name = "12" * 16
    assert usercache.write_entry("check", name, {"report": 1})
    entry = usercache.entry_path("check", name)
    target = tmp_path / "elsewhere.json.z"
    shutil.move(str(entry), str(target))
    os.utime(target, (1, 1))
    if how == "symbolic":
        entry.symlink_to(target)
    else:
        os.link(target, entry)
    assert usercache.read_entry("check", name) is None
    assert target.stat().st_mtime == 1


def _database(path: Path) -> None:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (x)")
    con.execute("INSERT INTO t VALUES (1)")
    con.commit()
    con.close()


@pytest.mark.parametrize("planted", ["index.sqlite", "index.sqlite-wal", "index.sqlite-journal", "hard link"])
def test_the_index_store_in_a_link_is_not_used_and_plan_still_answers(
        cache: Path, tmp_path: Path, planted: str) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURES / "umdk_style", repo, symlinks=True)
    op = repo / "src" / "cam" / "comm_operator" / "ascend_kernels" / "moe_fused_gmm"
    expected = runner.invoke(app, ["plan", str(op), "--no-cache"])
    assert expected.exit_code == 0, expected.output
    theirs = repo / "app.db"
    _database(theirs)
    if planted == "hard link":
        os.link(theirs, cache / "index.sqlite")
    else:
        (cache / planted).symlink_to(theirs)
    before = _tree(repo)
    for _ in range(2):  # a first run and one that would read what the first kept
        result = runner.invoke(app, ["plan", str(op)])
        assert result.exit_code == 0 and result.output == expected.output, result.output
        assert runner.invoke(app, ["check", str(op)]).exit_code in (0, 1)
    assert _tree(repo) == before  # the database and every file of the repository as they were
    con = sqlite3.connect(theirs)
    assert [r[0] for r in con.execute("SELECT name FROM sqlite_master")] == ["t"]
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    con.close()
