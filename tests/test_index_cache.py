"""The repository index's user cache (engine/index_cache.py): a second run reads it and
no file; a changed, new or deleted file updates its rows only; a corrupt row or
database is rebuilt; and what discovery finds is the same with it, without it and with
`--no-cache`."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sqlite3
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.engine import discovery, index_cache
from optrace.engine.discovery import RepoIndex, read_bounded
from optrace.engine.index_cache import ContentStore

runner = CliRunner()


@pytest.fixture
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    index_cache.set_enabled(True)
    return tmp_path / "cache" / "optrace" / "index.sqlite"


def _older_than_racy(written: Path | None = None) -> None:
    """Let the files just written age past the window in which the store does not trust a
    file's signature (index_cache.RACY_NS; the longer one where `written`'s filesystem
    keeps whole seconds): a test that counts what a second run reads."""
    whole = written is not None and written.stat().st_mtime_ns % 1_000_000_000 == 0
    time.sleep((index_cache.RACY_WHOLE_SECONDS_NS if whole else 3 * index_cache.RACY_NS) / 1e9)


def _repo(root: Path) -> Path:
    files = {
        "ops/foo_op/op_kernel/foo_op.cpp": "extern \"C\" __global__ __aicore__ void foo_op(GM_ADDR x) {}\n",
        "ops/foo_op/op_host/foo_op_def.cpp": "OP_ADD(FooOp);\n",
        "torch/adapter.cpp": "at::Tensor foo_op(x) { EXEC_NPU_CMD(aclnnFooOp, x); }\n",
        "torch/other.cpp": "// bar_op only\n",
        "tests/test_foo.py": "torch.ops.lib.foo_op(x)\n",
        "build.sh": "cmake op_kernel\n",
        "tools/run.sh": "echo hi\n",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def _answers(root: Path) -> tuple[list[Path], ...]:
    index = RepoIndex.build(root)
    return (index.mentioning(b"foo_op"), index.mentioning(b"FooOp", b"aclnnFooOp"),
            index.mentioning(b"bar_op"), index.mentioning(b"foo-op"), index.build_scripts())


def _store_of(root: Path) -> ContentStore:
    index = RepoIndex.build(root)
    index.mentioning(b"foo_op")
    index.build_scripts()
    assert index.store is not None
    return index.store


def test_second_run_reads_the_cache_and_no_file(cache_home: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    root = _repo(tmp_path / "repo")
    _older_than_racy(root / "build.sh")
    first = _store_of(root)
    assert first.misses > 0 and cache_home.is_file()
    read: list[Path] = []

    def counting(path: Path) -> bytes | None:
        read.append(path)
        return read_bounded(path)

    monkeypatch.setattr("optrace.engine.discovery.read_bounded", counting)
    second = _store_of(root)
    assert second.misses == 0 and second.hits == first.misses
    assert read == []  # nothing read: every signature matched


def _reads_counted(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The files the index reads from now on, in order."""
    read: list[Path] = []

    def counting(path: Path) -> bytes | None:
        read.append(path)
        return read_bounded(path)

    monkeypatch.setattr("optrace.engine.discovery.read_bounded", counting)
    return read


def test_a_first_run_that_takes_the_state_reads_each_file_once(cache_home: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A cold lookup hashes every file (the state) and the search after its miss derives
    every file's words: from the bytes the state read, not a second read and hash. A
    later run over a copy finds the first folder's words by their hashes."""
    index_cache.set_enabled(False)
    expected = _answers(_repo(tmp_path / "elsewhere"))
    index_cache.set_enabled(True)
    root = _repo(tmp_path / "repo")
    read = _reads_counted(monkeypatch)
    index = RepoIndex.build(root)
    index.state()
    # (plain words: a search for `foo-op` reads each file as a scan does)
    answers = (index.mentioning(b"foo_op"), index.mentioning(b"FooOp", b"aclnnFooOp"),
               index.mentioning(b"bar_op"), index.build_scripts())
    assert [[p.relative_to(root) for p in a] for a in answers] == [
        [p.relative_to(tmp_path / "elsewhere") for p in a] for k, a in enumerate(expected) if k != 3]
    index.build_script_words()
    assert sorted(read) == sorted({*read}), " ".join(p.name for p in read)
    assert len(read) == len(index.files) + len(index.scripts)
    copy = _repo(tmp_path / "repo-copy")
    again = RepoIndex.build(copy)
    again.state()
    again.mentioning(b"foo_op")
    assert again.store is not None and again.store.misses == 0


def test_a_copys_first_run_finds_a_kind_its_state_does_not_derive(cache_home: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A kind other than the words (a layer's own, as the build hook's facts of a script)
    asked of a copy's file after the state hashed it: the value another folder derived of
    the same bytes, not a second read."""
    first = _repo(tmp_path / "repo")
    index = RepoIndex.build(first)
    index.state()
    store = index.content()
    assert store.derived(first / "build.sh", "other-kind1", lambda data: str(len(data or b""))) == "16"
    store.flush()
    copy = _repo(tmp_path / "repo-copy")
    read = _reads_counted(monkeypatch)
    again = RepoIndex.build(copy)
    again.state()
    hashed = len(read)
    copied = again.content()
    assert copied.derived(copy / "build.sh", "other-kind1", lambda data: "derived again") == "16"
    assert read[hashed:] == [] and copied.misses == 0


def test_a_run_loads_its_own_folder_and_a_copy_derives_nothing_again(cache_home: Path,
                                                                     tmp_path: Path) -> None:
    # Two clones of one repository (a corpus run's scratch copies, a user's worktrees):
    # each run loads only the rows under the folder it indexes, and the copy's files,
    # read and hashed once, find the values the first clone derived.
    first = _repo(tmp_path / "repo")
    derived = _store_of(first).misses
    copy = _repo(tmp_path / "repo-copy")
    store = _store_of(copy)
    assert derived > 0 and store.misses == 0 and store.hits == derived
    again = _store_of(copy)
    assert again.misses == 0
    assert again._paths and all(p.startswith(f"{copy}/") for p in again._paths)
    # A folder whose name extends the other's ("repo" / "repo-copy") is not under it.
    assert all(p.startswith(f"{first}/") for p in _store_of(first)._paths)


def test_changed_new_and_deleted_files_update(cache_home: Path, tmp_path: Path) -> None:
    root = _repo(tmp_path / "repo")
    _store_of(root)
    (root / "torch/other.cpp").write_text("// now foo_op too\n")
    (root / "torch/new.cpp").write_text("void f() { foo_op(); }\n")
    (root / "tests/test_foo.py").unlink()
    store = _store_of(root)
    assert store.misses == 2  # the changed file and the new one, nothing else
    names = {p.name for p in RepoIndex.build(root).mentioning(b"foo_op")}
    assert names == {"adapter.cpp", "other.cpp", "new.cpp"}
    con = sqlite3.connect(cache_home)
    paths = {row[0] for row in con.execute("SELECT path FROM paths")}
    con.close()
    assert str(root / "tests/test_foo.py") not in paths and str(root / "torch/new.cpp") in paths


def test_same_answers_with_and_without_cache(cache_home: Path, tmp_path: Path) -> None:
    root = _repo(tmp_path / "repo")
    cold = _answers(root)
    warm = _answers(root)
    index_cache.set_enabled(False)
    try:
        uncached = _answers(root)
    finally:
        index_cache.set_enabled(True)
    assert cold == warm == uncached
    assert [p.name for p in cold[0]] == ["test_foo.py", "adapter.cpp"]
    assert [p.name for p in cold[1]] == ["foo_op_def.cpp", "adapter.cpp"]
    assert [p.name for p in cold[2]] == ["other.cpp"]
    assert cold[3] == []
    assert [p.name for p in cold[4]] == ["build.sh"]


def _scan(index: RepoIndex, *words: bytes) -> list[Path]:
    # The search as a whole-word scan of every file's lowered bytes (the index's meaning).
    key = sorted({w.lower() for w in words})
    whole = re.compile(rb"(?<![a-z0-9_])(?:" + b"|".join(map(re.escape, key)) + rb")(?![a-z0-9_])")
    return [p for p in index.files if os.fsencode(p.stem.lower()) in key
            or whole.search((read_bounded(p) or b"").lower())]


WORDS = st.text(alphabet="abcFO_9-", min_size=1, max_size=6)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(st.text(alphabet="abcFO_9-. \n()", max_size=40), min_size=1, max_size=5),
       words=st.lists(WORDS, min_size=1, max_size=3), named=st.booleans(), indexed=st.booleans())
def test_words_answer_as_a_whole_word_scan(cache_home: Path, tmp_path_factory: pytest.TempPathFactory,
                                           texts: list[str], words: list[str], named: bool,
                                           indexed: bool) -> None:
    """The same answer from the files' words scanned and, once a run has asked enough
    (`indexed`), from the words indexed; a file named by a word (`named`) is found by name."""
    root = tmp_path_factory.mktemp("r")
    for i, text in enumerate(texts):
        (root / f"f{i}.cpp").write_text(text)
    if named:
        (root / f"{words[0]}.h").write_text("int x;\n")
    index = RepoIndex.build(root)
    if indexed:
        index._scans = discovery._SCANS_BEFORE_INDEX  # as after that many scans
    encoded = [w.encode() for w in words]
    assert index.mentioning(*encoded) == _scan(index, *encoded)
    assert (index._word_files is not None) is (indexed and all(re.fullmatch(rb"[a-z0-9_]+", w.lower())
                                                                for w in encoded))


def test_a_corrupt_row_is_derived_again(cache_home: Path, tmp_path: Path) -> None:
    root = _repo(tmp_path / "repo")
    expected = _answers(root)
    con = sqlite3.connect(cache_home)
    con.execute("UPDATE vals SET value = ?", ("\nfoo_op\n",))  # every file 'names' foo_op, unchecked
    con.commit()
    con.close()
    assert _answers(root) == expected
    assert _store_of(root).misses == 0  # rebuilt and written back by the run before


def test_a_corrupt_database_is_rebuilt(cache_home: Path, tmp_path: Path) -> None:
    root = _repo(tmp_path / "repo")
    expected = _answers(root)
    cache_home.write_bytes(b"not a database" * 100)
    for suffix in ("-wal", "-shm"):
        Path(f"{cache_home}{suffix}").unlink(missing_ok=True)
    assert _answers(root) == expected
    assert _store_of(root).misses == 0


def test_the_state_loads_no_value_and_the_first_search_loads_them(cache_home: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A lookup the user cache answers asks only for the index's state (content hashes):
    it reads no value row (on a large repository, every file's words); the first search
    then finds them all, deriving nothing."""
    root = _repo(tmp_path / "repo")
    _older_than_racy(root / "build.sh")
    expected = _answers(root)
    state = RepoIndex.build(root).state()
    checked: list[str] = []
    real = index_cache._check

    def counted(kind: str, sha: str, value: str) -> str:
        checked.append(kind)
        return real(kind, sha, value)

    monkeypatch.setattr(index_cache, "_check", counted)
    index = RepoIndex.build(root)
    # no value row read (each is checked): the listing and the state kept with the last state
    assert index.state() == state and checked == ["listing", "state"]
    assert index.store is None  # not a row of the store loaded
    answers = (index.mentioning(b"foo_op"), index.mentioning(b"FooOp", b"aclnnFooOp"),
               index.mentioning(b"bar_op"), index.mentioning(b"foo-op"), index.build_scripts())
    assert answers == expected and checked and index.store.misses == 0


def test_an_unchanged_folder_has_the_state_kept_under_its_signatures(cache_home: Path, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A state taken from the content hashes is kept under the digest of the walk's paths
    and their stat signatures: a later index whose files all have them takes it back
    without loading the store or reading a file; a file touched (same bytes) takes the
    state from the hashes again (the same state), a file edited or added gives another."""
    root = _repo(tmp_path / "repo")
    _older_than_racy(root / "build.sh")
    state = RepoIndex.build(root).state()
    read = _reads_counted(monkeypatch)
    again = RepoIndex.build(root)
    assert again.state() == state and again.store is None and read == []
    assert again.state_holds(state)
    os.utime(root / "tests/test_foo.py")  # the same bytes, another signature
    touched = RepoIndex.build(root)
    assert touched.state() == state and touched.store is not None  # from the hashes
    assert read == [root / "tests/test_foo.py"]
    _older_than_racy(root / "tests/test_foo.py")
    assert RepoIndex.build(root).state() == state  # kept again under the new signatures
    (root / "ops/foo_op/op_kernel/foo_op.cpp").write_text("// a kernel edited: a source's signature\n")
    edited = RepoIndex.build(root).state()
    assert edited != state
    (root / "torch/new.cpp").write_text("// a file added\n")
    assert RepoIndex.build(root).state() not in (state, edited)


def test_a_state_taken_from_signatures_holds_while_they_do(cache_home: Path, tmp_path: Path) -> None:
    """An entry is kept under a state taken from the signatures only while every file has
    them still: a file edited between the state and the search (which read its new bytes)
    breaks it, as it does a state taken from the hashes."""
    root = _repo(tmp_path / "repo")
    _older_than_racy(root / "build.sh")
    state = RepoIndex.build(root).state()
    index = RepoIndex.build(root)
    assert index.state() == state and index.store is None
    (root / "torch/other.cpp").write_text("// baz_op now\n")
    assert index.mentioning(b"baz_op") == [root / "torch/other.cpp"]
    assert not index.state_holds(state)


def _change(root: Path, change: str) -> None:
    """A C / C++ source or a build script given another signature, a searchable file gone."""
    if change == "source touched":
        os.utime(root / "ops/foo_op/op_kernel/foo_op.cpp", ns=(1, 1))
    elif change == "file removed":
        (root / "tests/test_foo.py").unlink()
    elif change == "script touched":
        os.utime(root / "build.sh", ns=(1, 1))


@pytest.mark.parametrize("change", ["none", "source touched", "file removed", "script touched"])
def test_a_signed_state_holds_while_what_was_asked_since_has_its_signatures(cache_home: Path,
                                                                           tmp_path: Path,
                                                                           change: str) -> None:
    """The check before an entry is kept compares the signature the state took of each
    path the store stat-ed or read since with the path's now: a C / C++ source the state
    holds by its signature only, a searchable file gone, a build script, each asked by a
    search after the change, breaks it; nothing changed, it holds."""
    root = _repo(tmp_path / "repo")
    _older_than_racy(root / "build.sh")
    state = RepoIndex.build(root).state()
    index = RepoIndex.build(root)
    assert index.state() == state and index.store is None  # taken from the signatures
    _change(root, change)
    index.includers()  # every source's include names
    index.mentioning(b"foo_op")  # every searchable file's words
    index.build_scripts()  # every script's kind
    assert index.state_holds(state) is (change == "none")


@pytest.mark.parametrize("change", ["source touched", "file removed", "script touched"])
def test_a_signed_state_holds_when_nothing_asked_since_changed(cache_home: Path, tmp_path: Path,
                                                               change: str) -> None:
    """A path changed after the state that nothing asked of since does not break it: every
    answer was the state's, so an entry kept under it is right for any later run that
    takes that state again (a file touched with its bytes kept, an edit undone); it is
    not stat-ed again (every path of ops-nn was: ~0.2 s a plan). A search that then asks
    of the changed path does break it."""
    root = _repo(tmp_path / "repo")
    _older_than_racy(root / "build.sh")
    state = RepoIndex.build(root).state()
    index = RepoIndex.build(root)
    assert index.state() == state and index.store is None
    _change(root, change)
    assert index.state_holds(state)
    if change == "source touched":
        index.includers()
    elif change == "file removed":
        index.mentioning(b"foo_op")
    else:
        index.build_scripts()
    assert not index.state_holds(state)


@pytest.mark.parametrize("kept", ["signed", "hashed"])
def test_a_folder_moved_out_behind_a_link_changes_the_state(cache_home: Path, tmp_path: Path,
                                                           kept: str) -> None:
    """Moving a folder keeps every file's size, times and inode, and the walk and `stat`
    follow a link put in its place: the same paths, the same signatures, the same hashes.
    What the files are part of changed (an include that leads out of the repository is
    not read), so the state does too, whether taken back from the signatures or hashed;
    and back in place, it is the first state again."""
    root = _repo(tmp_path / "repo")
    _older_than_racy(root / "build.sh")
    state = RepoIndex.build(root).state()
    assert RepoIndex.build(root).state() == state  # kept under the signatures
    outside = tmp_path / "elsewhere" / "torch"
    outside.parent.mkdir()
    (root / "torch").rename(outside)
    (root / "torch").symlink_to(outside, target_is_directory=True)
    moved = RepoIndex.build(root)
    # signed: as a lookup takes it; hashed: from the content hashes, signatures aside
    assert (moved.state() if kept == "signed" else moved._hashed_state()) != state
    (root / "torch").unlink()
    outside.rename(root / "torch")
    assert RepoIndex.build(root).state() == state


def test_a_state_from_the_store_marks_its_folder_used_without_waiting(cache_home: Path,
                                                                      tmp_path: Path) -> None:
    """A state taken back from the store marks its folder used (the size bound removes
    the folders used least recently first), unless another run holds the store's write
    lock: then it does not wait for it."""
    root = _repo(tmp_path / "repo")
    _older_than_racy(root / "build.sh")
    state = RepoIndex.build(root).state()
    with sqlite3.connect(cache_home) as con:
        con.execute("UPDATE roots SET used = 1")
    assert RepoIndex.build(root).state() == state
    with sqlite3.connect(cache_home) as con:
        assert con.execute("SELECT used FROM roots").fetchone()[0] > 1
        con.execute("UPDATE roots SET used = 1")
    holder = sqlite3.connect(cache_home, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")  # another run writing
        started = time.monotonic()
        assert RepoIndex.build(root).state() == state
        assert time.monotonic() - started < 5
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_a_racy_file_keeps_no_state_and_a_bad_row_is_ignored(cache_home: Path, tmp_path: Path) -> None:
    """A file hashed within its timestamp's tick may change without its signature
    changing: no state is kept under signatures then. A kept row that fails its
    checksum, or names another state, is not taken."""
    root = _repo(tmp_path / "repo")
    RepoIndex.build(root).state()  # every file just written: racy (that state is its run's alone)
    with sqlite3.connect(cache_home) as con:
        assert con.execute("SELECT COUNT(*) FROM states").fetchone() == (0,)
    _older_than_racy(root / "build.sh")
    state = RepoIndex.build(root).state()
    with sqlite3.connect(cache_home) as con:
        assert con.execute("SELECT COUNT(*) FROM states").fetchone() == (1,)
        con.execute("UPDATE states SET state = 'forged'")
    forged = RepoIndex.build(root)
    assert forged.state() == state and forged.store is not None  # checksum failed: the hashes
    with sqlite3.connect(cache_home) as con:
        con.execute("DROP TABLE states")  # a store of an earlier optrace
    older = RepoIndex.build(root)
    assert older.state() == state and older.store is not None


def test_a_state_taken_within_a_sources_tick_is_that_runs_alone(cache_home: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A C / C++ source is in the state by its signature: one changed within its change
    time's tick of the state may change again, same size, with the same signature. Such a
    state is never taken again, nor kept under the signatures, and no entry is kept under
    it. A modification time ahead of the clock (an archive made where the clock runs
    ahead) is no such change: any write sets the change time to now, so that file keeps
    the cache working once its change time is past the tick."""
    root = _repo(tmp_path / "repo")
    _older_than_racy(root / "build.sh")
    settled = RepoIndex.build(root).state()
    source = root / "ops/foo_op/op_kernel/foo_op.cpp"
    source.write_text(source.read_text().replace("x)", "y)"))  # the same size
    ahead = time.time_ns() + 3600 * 1_000_000_000
    os.utime(source, ns=(ahead, ahead))
    changed = source.stat().st_ctime_ns
    clock = iter(range(changed + 1_000_000, changed + 2_000_000))  # each state 1 ms after the change
    with monkeypatch.context() as m:
        m.setattr(time, "time_ns", lambda: next(clock))
        index = RepoIndex.build(root)
        racy = index.state()
        assert not index.state_holds(racy)  # no entry kept under it
        assert RepoIndex.build(root).state() not in (racy, settled)  # nothing changed: still its own
    _older_than_racy(source)
    later = RepoIndex.build(root).state()
    assert later not in (racy, settled)
    index = RepoIndex.build(root)
    assert index.state() == later and index.store is None  # kept, taken back from the signatures
    assert index.state_holds(later)


def _groups_of(index: RepoIndex) -> tuple[object, ...]:
    return index.file_paths, index.script_paths, index.source_paths


def _listed_index(root: Path) -> RepoIndex:
    """An index of `root` after a state was kept with its walk's listing."""
    _older_than_racy(root / "build.sh")
    RepoIndex.build(root).state()
    return RepoIndex.build(root)


def test_an_unchanged_folder_is_listed_from_the_store_as_a_walk_finds_it(cache_home: Path,
                                                                          tmp_path: Path) -> None:
    """The walk's listing is kept with the state: a later index of a folder none of whose
    directories changed takes it (a `stat` a directory, no listing) and has what a walk
    finds, in the same order; a file added or a directory removed makes it walk again."""
    root = _repo(tmp_path / "repo")
    listed = _listed_index(root)
    assert listed._from_listing and _groups_of(listed) == _groups_of(RepoIndex.walk(root))
    assert listed.state() == RepoIndex.walk(root).state()
    (root / "torch/added.py").write_text("foo_op()\n")
    walked = RepoIndex.build(root)
    assert not walked._from_listing and str(root / "torch/added.py") in walked.file_paths
    listed = _listed_index(root)
    assert listed._from_listing and str(root / "torch/added.py") in listed.file_paths
    shutil.rmtree(root / "tools")
    assert not RepoIndex.build(root)._from_listing


@pytest.mark.parametrize("link", ["dangling_dir", "dangling_file", "file_then_gone", "file_then_dir"])
def test_a_walk_that_meets_a_link_keeps_no_listing(cache_home: Path, tmp_path: Path, link: str) -> None:
    """What a symbolic link leads to changes with no directory of the walk changing: a
    link to a folder not made yet (a build output), to a file that goes or becomes a
    folder. A walk that met one keeps no listing, so each index walks and finds what the
    link leads to now (a second review found each of these listed stale)."""
    root = _repo(tmp_path / "repo")
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / ("built" if link == "dangling_dir" else "target.h")
    if link.startswith("file_then"):
        target.write_text("// a header\n")
    (root / "torch" / ("vendor" if link == "dangling_dir" else "linked.h")).symlink_to(target)
    _older_than_racy(root / "build.sh")
    RepoIndex.build(root).state()
    if link == "dangling_dir":
        target.mkdir()
        (target / "sample.py").write_text("foo_op()\n")
    elif link == "file_then_gone":
        target.unlink()
    elif link == "file_then_dir":
        target.unlink()
        target.mkdir()
        (target / "inner.py").write_text("foo_op()\n")
    index = RepoIndex.build(root)
    assert not index._from_listing
    assert _groups_of(index) == _groups_of(RepoIndex.walk(root))


def test_a_name_with_a_line_break_keeps_no_listing(cache_home: Path, tmp_path: Path) -> None:
    """The listing is a path a line: a name holding a line break keeps none."""
    root = _repo(tmp_path / "repo")
    (root / "torch/a\nb.py").write_text("foo_op()\n")
    index = _listed_index(root)
    assert not index._from_listing and str(root / "torch/a\nb.py") in index.file_paths


def test_a_listing_of_other_walk_rules_is_not_taken(cache_home: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A listing kept by a walk of other rules (another optrace: other folders skipped,
    other suffixes kept) is not taken."""
    root = _repo(tmp_path / "repo")
    assert _listed_index(root)._from_listing
    monkeypatch.setattr(discovery, "_WALK_RULES", "another optrace's")
    assert not RepoIndex.build(root)._from_listing


def test_a_listed_script_past_the_bound_is_not_searched(cache_home: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A script that grew past the search's size bound in place (its directory unchanged)
    leaves the scripts, as a walk would leave it out."""
    root = _repo(tmp_path / "repo")
    listed = _listed_index(root)
    assert str(root / "build.sh") in listed.script_paths
    monkeypatch.setattr(discovery, "SEARCH_LIMIT_BYTES", 8)
    again = RepoIndex.build(root)
    assert again._from_listing and str(root / "build.sh") not in again.script_paths
    assert _groups_of(again) == _groups_of(RepoIndex.walk(root))


def test_a_racy_folder_keeps_no_listing_and_a_bad_one_is_ignored(cache_home: Path, tmp_path: Path) -> None:
    """A directory changed within its timestamp's tick of the walk may take an entry
    without its signature changing: no listing is kept then. A kept listing that fails
    its checksum is not taken."""
    root = _repo(tmp_path / "repo")
    RepoIndex.build(root).state()  # every directory just written
    with sqlite3.connect(cache_home) as con:
        assert con.execute("SELECT COUNT(*) FROM walks").fetchone() == (0,)
    assert _listed_index(root)._from_listing
    with sqlite3.connect(cache_home) as con:
        con.execute("UPDATE walks SET paths = paths || '\n' || ?", (str(root / "forged.py"),))
    forged = RepoIndex.build(root)
    assert not forged._from_listing and _groups_of(forged) == _groups_of(RepoIndex.walk(root))


def test_a_database_damaged_after_the_paths_were_loaded_costs_a_derivation(cache_home: Path,
                                                                            tmp_path: Path) -> None:
    root = _repo(tmp_path / "repo")
    expected = _answers(root)
    index = RepoIndex.build(root)
    index.state()  # the paths loaded, the values not yet
    cache_home.write_bytes(b"not a database" * 100)
    for suffix in ("-wal", "-shm"):
        Path(f"{cache_home}{suffix}").unlink(missing_ok=True)
    answers = (index.mentioning(b"foo_op"), index.mentioning(b"FooOp", b"aclnnFooOp"),
               index.mentioning(b"bar_op"), index.mentioning(b"foo-op"), index.build_scripts())
    assert answers == expected
    assert index.store is not None and index.store.misses > 0  # derived again, no error


def test_the_state_holds_until_a_file_of_it_is_hashed_anew(cache_home: Path, tmp_path: Path) -> None:
    """What an entry is kept under (the state) must be what the index answered from: a
    file edited after the state was taken and read by a search since (its words derived
    from the new bytes) breaks it; a process that took no state takes it to compare."""
    root = _repo(tmp_path / "repo")
    _answers(root)  # the store knows every file
    _older_than_racy(root / "build.sh")
    index = RepoIndex.build(root)
    state = index.state()
    assert index.state_holds(state) and not index.state_holds("another state")
    assert index.mentioning(b"bar_op") == [root / "torch/other.cpp"]
    assert index.state_holds(state)  # searched, nothing changed
    edited = RepoIndex.build(root)
    assert edited.state() == state
    (root / "torch/other.cpp").write_text("// baz_op now\n")
    assert edited.mentioning(b"bar_op") == []  # the new bytes' words
    assert not edited.state_holds(state)
    assert not RepoIndex.build(root).state_holds(state)  # no state taken yet: taken now, another
    # a file gone after the state, found gone by a search (outside a reading-only phase)
    (root / "torch/other.cpp").write_text("// bar_op only\n")
    _older_than_racy(root / "torch/other.cpp")
    gone = RepoIndex.build(root)
    state = gone.state()
    (root / "torch/other.cpp").unlink()
    assert gone.mentioning(b"bar_op") == []
    assert not gone.state_holds(state)


def test_no_cache_writes_nothing(cache_home: Path, tmp_path: Path) -> None:
    root = _repo(tmp_path / "repo")
    (root / ".git").mkdir()
    res = runner.invoke(app, ["plan", "--no-cache", str(root / "ops/foo_op")])
    index_cache.set_enabled(True)
    assert res.exit_code in (0, 1, 2), res.stderr
    assert not cache_home.exists()
    os.environ.pop("OPTRACE_NO_CACHE", None)


def test_a_folder_named_in_bytes_that_are_not_utf8_is_indexed_again_each_run(
        cache_home: Path, tmp_path: Path) -> None:
    # SQLite's text is UTF-8: rows of such a folder are never stored, and the load that
    # selects a folder's rows by name must not try to encode it (CI: OT999 on check/strip
    # of an operator under `repo-<GBK bytes>`).
    _store_of(_repo(tmp_path / "plain"))  # the store exists with rows of another folder
    odd = _repo(Path(os.fsdecode(os.fsencode(str(tmp_path)) + b"/repo-\xb7\xd6\xd7\xe9")))
    for _ in range(2):
        store = _store_of(odd)  # its files' contents were seen: found by hash, not derived
        assert store.misses == 0 and store.hits > 0
    assert _answers(odd) == _answers(odd)
    con = sqlite3.connect(cache_home)
    assert all(row[0].startswith(str(tmp_path / "plain")) for row in con.execute("SELECT path FROM paths"))
    con.close()


def _sized_repo(root: Path, tag: str, files: int = 60) -> Path:
    # Each repository's files hold their own words: its values are its own rows.
    for i in range(files):
        path = root / "torch" / f"adapter{i}.cpp"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"void {tag}_kernel_{i}() {{ {tag}_call_{i}(); }} // {tag * 40}\n")
    return root


def _rows(db: Path) -> set[str]:
    con = sqlite3.connect(db)
    try:
        return {row[0] for row in con.execute("SELECT path FROM paths")}
    finally:
        con.close()


def test_the_store_keeps_under_its_share_of_the_bound_dropping_gone_then_old_folders(
        cache_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Folders of rows well past the tables' own pages: the bound below is in folders.
    repos = {tag: _sized_repo(tmp_path / tag, tag, files=200) for tag in ("aaa", "bbb", "ccc", "ddd")}
    cache_home.parent.mkdir(parents=True)
    ContentStore(cache_home, read_bounded)._connect(cache_home).close()
    con = sqlite3.connect(cache_home)
    empty = index_cache._used_bytes(con)  # the tables' own pages
    con.close()
    for tag in ("bbb", "ccc", "aaa"):  # aaa, indexed last, is gone before the older bbb
        _store_of(repos[tag])
    con = sqlite3.connect(cache_home)
    one = (index_cache._used_bytes(con) - empty) / 3  # the pages one folder's rows take
    # A row a store of an earlier version wrote, under no recorded folder.
    con.execute("INSERT INTO paths VALUES (?, 1, 1, 1, 1, ?)", (str(tmp_path / "old/x.cpp"), "-"))
    con.close()
    shutil.rmtree(repos["aaa"])  # a scratch copy removed: its rows go first
    bound = empty + int(one * 3.5)  # the next run goes past it; under 3/4 of it two folders fit
    monkeypatch.setattr(index_cache, "store_bound", lambda: bound)
    assert _store_of(repos["ddd"]).misses > 0
    left = {Path(p).relative_to(tmp_path).parts[0] for p in _rows(cache_home)}
    assert left == {"ccc", "ddd"}  # gone, stray, then least recently indexed (bbb)
    assert cache_home.stat().st_size <= bound  # compacted: the file, not only its pages
    assert _store_of(repos["ccc"]).misses == 0  # what is left still answers


def test_the_folder_a_run_indexed_is_kept_even_past_the_bound(
        cache_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _store_of(_sized_repo(tmp_path / "other", "fff"))
    monkeypatch.setattr(index_cache, "store_bound", lambda: 1)
    root = _sized_repo(tmp_path / "repo", "eee")
    _store_of(root)
    assert _rows(cache_home) and all(p.startswith(f"{root}/") for p in _rows(cache_home))
    assert _store_of(root).misses == 0  # a second run derives nothing again
    assert _answers(root) == _answers(root)


def test_a_flush_of_values_alone_keeps_its_folder_past_the_bound(
        cache_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A flush with no walk behind it (the include names `operators_including` derives
    for a plan) past the bound keeps the store's own folder, as the walk's flush does: it
    had deleted the folder being searched, so every run over ops-nn began cold."""
    other = _sized_repo(tmp_path / "other", "fff")
    _store_of(other)
    root = _sized_repo(tmp_path / "repo", "eee")
    store = _store_of(root)
    monkeypatch.setattr(index_cache, "store_bound", lambda: 1)
    for path in sorted((root / "torch").iterdir()):
        store.derived(path, "sizes-test", lambda data: str(len(data or b"")))
    store.flush()
    left = _rows(cache_home)
    assert left and all(p.startswith(f"{root}/") for p in left)  # the other folder went
    again = _store_of(root)
    assert again.misses == 0
    assert again.derived(root / "torch" / "adapter0.cpp", "sizes-test", lambda data: "x") != "x"


def test_folders_around_or_inside_the_indexed_one_are_its_rows(
        cache_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A repository and a folder inside it both indexed whole (a sub-project searched as
    # its own root): shrinking for one does not delete the other's range, which holds it.
    _store_of(_sized_repo(tmp_path / "x", "xxx"))
    outer = _sized_repo(tmp_path / "r", "rrr")
    inner = _sized_repo(outer / "sub", "sss")
    _store_of(outer)
    monkeypatch.setattr(index_cache, "store_bound", lambda: 1)
    store = _store_of(inner)
    left = _rows(cache_home)
    assert left and all(p.startswith(f"{outer}/") for p in left)
    assert any(p.startswith(f"{inner}/") for p in left)
    assert store.misses == 0 and _store_of(inner).misses == 0


def test_a_folder_named_in_bytes_that_are_not_utf8_survives_a_shrink(
        cache_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _store_of(_sized_repo(tmp_path / "plain", "ggg"))
    monkeypatch.setattr(index_cache, "store_bound", lambda: 1)
    odd = _sized_repo(Path(os.fsdecode(os.fsencode(str(tmp_path)) + b"/repo-\xb7\xd6")), "hhh")
    assert _store_of(odd).misses > 0  # no error: its name is never bound into a query
    assert _rows(cache_home) == set()  # the other folder went; this one is never stored


def test_check_entries_get_what_the_index_leaves_and_at_least_half(
        cache_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from optrace.runtime import usercache

    monkeypatch.setattr(usercache, "limit", lambda kind: 1 << 30)
    names = [f"{i:032x}" for i in range(10)]
    for name in names:
        assert usercache.write_entry("check", name, {"pad": "x" * 1000})
    size = usercache.entry_path("check", names[0]).stat().st_size
    index = cache_home  # the store's file, beside check/
    index.write_bytes(b"\0" * (3 * size))

    def kept() -> int:
        return sum(usercache.entry_path("check", n).exists() for n in names)

    usercache.prune(8 * size)  # the index takes 3 entries' room of 8: 5 entries stay
    assert kept() == 5
    index.write_bytes(b"\0" * (100 * size))
    usercache.prune(4 * size)  # an index past its half leaves the entries their half: 2
    assert kept() == 2


def test_an_entry_is_compressed_json_and_what_would_expand_too_far_is_none(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Entries are zlib-compressed JSON (a plan's shrinks 5-8x: all of a repository's fit
    the bound); what is not zlib, expands past EXPANDED times the bound, is cut short or
    has bytes after its stream is no entry; a document past that is not written."""
    import zlib

    from optrace.runtime import usercache

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(usercache, "limit", lambda kind: 8192)
    name = "ab" * 16
    document = {"files": [[f"/repo/src/file_{i}.h", "0" * 32] for i in range(200)]}
    assert usercache.write_entry("plan", name, document)
    path = usercache.entry_path("plan", name)
    data = path.read_bytes()
    assert path.name.endswith(".json.z") and len(data) <= 8192 < len(json.dumps(document))
    assert usercache.read_entry("plan", name) == document
    bomb = zlib.compress(b"[" + b"0," * (8192 * usercache.EXPANDED) + b"0]")
    for stored in (bomb, data[:-8], data + b"x", json.dumps(document).encode(), b"\x78\x01junk"):
        path.write_bytes(stored)
        assert usercache.read_entry("plan", name) is None
    assert not usercache.write_entry("plan", name, {"pad": "x" * (8192 * usercache.EXPANDED)})


def test_an_earlier_versions_plain_entries_are_pruned_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from optrace.runtime import usercache

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(usercache, "limit", lambda kind: 1 << 30)
    legacy = tmp_path / "optrace" / "check" / ("cd" * 16 + ".json")
    legacy.parent.mkdir(parents=True)
    legacy.write_bytes(b"{}" + b" " * 5000)
    os.utime(legacy, (1, 1))  # used long ago
    names = [f"{i:032x}" for i in range(3)]
    for name in names:
        assert usercache.write_entry("check", name, {"pad": "x" * 1000})
    usercache.prune(5000)
    assert not legacy.exists() and all(usercache.entry_path("check", n).exists() for n in names)


@pytest.mark.parametrize("times", ["whole seconds", "just now", "in the future", "a minute ago"])
def test_a_file_hashed_within_its_timestamps_tick_is_read_again(
    cache_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, times: str
) -> None:
    """git's "racily clean" files: a file rewritten, same size, within the tick of the
    time the store hashed it keeps its stat signature on a filesystem whose times are
    coarse. Its row is not trusted by the next run, which reads and hashes it again; a
    file older than the tick is not read again."""
    now = time.time_ns()
    fixed = {
        "whole seconds": now // 1_000_000_000 * 1_000_000_000,  # a filesystem of whole seconds
        "just now": now,  # nanoseconds, written as the run hashed it (see `first_stat`)
        "in the future": now + 60_000_000_123,  # another machine's clock
        "a minute ago": now - 60_000_000_123,
    }[times]
    real = index_cache.signature
    # "just now": the moment of the first stat, not of the test's start (on a loaded
    # machine the setup alone took longer than the 10 ms tick, and the file looked old).
    first_stat: list[int] = []

    def coarse(st: os.stat_result) -> index_cache.Signature:
        size, _, _, ino = real(st)
        if times == "just now":
            if not first_stat:
                first_stat.append(time.time_ns())
            return (size, first_stat[0], first_stat[0], ino)
        return (size, fixed, fixed, ino)  # every write within the one tick: the same times

    monkeypatch.setattr(index_cache, "signature", coarse)
    root = _repo(tmp_path / "repo")
    target = root / "torch/other.cpp"
    assert [p.name for p in RepoIndex.build(root).mentioning(b"bar_op")] == ["other.cpp"]
    target.write_text(target.read_text().replace("bar_op", "baz_op"))  # same size, same inode
    read: list[Path] = []

    def counting(path: Path) -> bytes | None:
        read.append(path)
        return read_bounded(path)

    monkeypatch.setattr("optrace.engine.discovery.read_bounded", counting)
    index = RepoIndex.build(root)
    found = [p.name for p in index.mentioning(b"baz_op")]
    if times == "a minute ago":
        # Trusted: on a real filesystem a file rewritten since has a new mtime, which is
        # the change the store sees (here the signature was held still: nothing is read).
        assert read == []
    else:
        assert found == ["other.cpp"] and target in read


def test_the_tick_counts_from_before_the_read_not_after_the_hash(
    cache_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file rewritten (same size, same coarse time) just after the store read it, the
    store then slow to hash it (a large file, a busy machine): the window counts from the
    stat, so the row is still not trusted and the next run reads the new bytes."""
    # The store's clock, ours: a real one lets a busy machine (a collection of the
    # garbage, another process) put more than the 5 ms below between the write and the
    # store's `stat`, and the file is then rightly trusted.
    clock = [time.time_ns()]
    monkeypatch.setattr(index_cache.time, "time_ns", lambda: clock[0])
    tick = clock[0] - 5_000_000  # written 5 ms before the run, within its tick
    real = index_cache.signature
    monkeypatch.setattr(index_cache, "signature", lambda st: (real(st)[0], tick, tick, real(st)[3]))
    target = tmp_path / "repo" / "a.cpp"
    target.parent.mkdir()
    target.write_bytes(b"foo_op();\n")

    def read_then_rewritten(path: Path) -> bytes | None:
        data = read_bounded(path)
        path.write_bytes(b"bar_op();\n")  # same size, same tick: the same signature
        clock[0] += 3 * index_cache.RACY_NS  # the hash takes its time
        return data

    first = ContentStore(cache_home, read_then_rewritten, under=target.parent)
    assert first.derived(target, "text", lambda data: (data or b"").decode()) == "foo_op();\n"
    first.flush()
    again = ContentStore(cache_home, read_bounded, under=target.parent)
    assert again.derived(target, "text", lambda data: (data or b"").decode()) == "bar_op();\n"


def test_what_is_derived_is_kept_under_the_hash_of_the_bytes_it_came_from(
    cache_home: Path, tmp_path: Path
) -> None:
    """In a reading-only phase a file's signature is taken once; a file another process
    edits during it is read for a kind not derived yet: that value is of the new bytes and
    is kept under their hash, never the old one (a later file holding the old bytes got
    the new bytes' words), and the row is read again by the next run."""
    root = tmp_path / "repo"
    root.mkdir()
    script = root / "build.sh"
    before, after = b"add_kernel foo_op\n", b"add_kernel some_other_op\n"
    script.write_bytes(before)
    past = time.time_ns() - 3600 * 1_000_000_000
    os.utime(script, ns=(past, past))
    _older_than_racy()

    def second_word(data: bytes | None) -> str:
        return (data or b"").split()[1].decode()

    with index_cache.reading_only():
        store = ContentStore(cache_home, read_bounded, under=root)
        assert store.derived(script, "builds", lambda data: "1") == "1"
        script.write_bytes(after)  # edited while the phase runs
        assert store.derived(script, "word", second_word) == "some_other_op"
        store.flush()
    script.write_bytes(before)  # and back, as a checkout would
    os.utime(script, ns=(past, past))
    _older_than_racy()
    later = ContentStore(cache_home, read_bounded, under=root)
    assert later.derived(script, "word", second_word) == "foo_op"


def _packs(cache_home: Path) -> dict[str, str]:
    con = sqlite3.connect(cache_home)
    try:
        return {kind: value for kind, value in con.execute("SELECT kind, value FROM packs")}
    finally:
        con.close()


def test_a_kinds_values_are_read_from_its_pack(cache_home: Path, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The folder's values of a kind are kept as one row (a pack) by the run that loaded
    them a row a file; the next run reads the pack (the rows are not looked up), a value
    derived since rewrites it, and a damaged pack is read as none. Every file's words are
    never packed (the index's word table answers for them)."""
    root = _repo(tmp_path / "repo")
    _older_than_racy(root / "build.sh")
    _store_of(root)  # derives the words and the build scripts' kind
    _store_of(root)  # loads them a row a file: packs the build scripts' kind
    packs = _packs(cache_home)
    assert set(packs) == {discovery.BUILDS_KIND}
    builds = json.loads(packs[discovery.BUILDS_KIND])
    assert sorted(builds.values()) == ["0", "1"]  # build.sh builds, tools/run.sh does not
    # The kind's rows gone, the pack answers: nothing read, nothing derived.
    con = sqlite3.connect(cache_home)
    con.execute("DELETE FROM vals WHERE kind = ?", (discovery.BUILDS_KIND,))
    con.commit()
    con.close()
    read = _reads_counted(monkeypatch)
    third = _store_of(root)
    assert third.misses == 0 and read == []
    assert [p.name for p in RepoIndex.build(root).build_scripts()] == ["build.sh"]
    # A script changed: its value derived, the pack written again with it.
    (root / "tools/run.sh").write_text("# tools\ncmake op_kernel\n")
    _older_than_racy(root / "tools/run.sh")
    index = RepoIndex.build(root)
    assert sorted(p.name for p in index.build_scripts()) == ["build.sh", "run.sh"]
    assert index.store is not None and index.store.misses == 1
    now = json.loads(_packs(cache_home)[discovery.BUILDS_KIND])
    assert now[hashlib.sha256(b"# tools\ncmake op_kernel\n").hexdigest()] == "1"
    # A pack that fails its checksum is not read: the rows are (a pack saying no script
    # builds, its checksum left as it was, changes no answer).
    con = sqlite3.connect(cache_home)
    con.execute("UPDATE packs SET value = ? WHERE kind = ?",
                (json.dumps(dict.fromkeys(now, "0")), discovery.BUILDS_KIND))
    con.commit()
    con.close()
    assert sorted(p.name for p in RepoIndex.build(root).build_scripts()) == ["build.sh", "run.sh"]


def test_a_file_changed_between_its_signature_and_its_read_is_not_trusted(cache_home: Path,
                                                                          tmp_path: Path) -> None:
    """A row keeps a file's hash under the signature taken before the read (in a phase,
    the state's, taken earlier): a file written in between gave the new bytes to the old
    signature, which a later run (or a state taken from it) would trust. A `stat` after the
    read tells: the row is not trusted, and a state taken from the hashes is not kept."""
    root = _repo(tmp_path / "repo")
    _older_than_racy(root / "build.sh")
    path = root / "tests/test_foo.py"
    taken = time.time_ns()  # the signature's time: past the file's tick
    before = os.stat(path)
    path.write_text("# foo_op, written after the signature was taken\n")
    _older_than_racy(path)
    store = ContentStore(None, read_bounded)
    with index_cache.reading_only():
        sha = store.current_sha(path, before, taken_ns=taken)
        assert sha == hashlib.sha256(path.read_bytes()).hexdigest()
        assert store.racy(path)
        unchanged = root / "build.sh"
        taken = time.time_ns()
        store.current_sha(unchanged, os.stat(unchanged), taken_ns=taken)
        assert not store.racy(unchanged)


def test_a_time_past_64_bits_of_nanoseconds_is_a_signature_like_any(cache_home: Path, tmp_path: Path) -> None:
    """A filesystem keeps modification times past 2262 (or before 1677): the state's
    packed signatures take them (modulo 2**64), a plan does not fail, and a change of such
    a file is a new state."""
    root = _repo(tmp_path / "repo")
    source = root / "ops/foo_op/op_kernel/foo_op.cpp"
    far = 11_000_000_000 * 10**9  # the year 2318
    try:
        os.utime(source, ns=(far, far))
    except (OSError, OverflowError):
        pytest.skip("this filesystem keeps no such time")
    if os.stat(source).st_mtime_ns != far:
        pytest.skip("this filesystem keeps no such time")
    _older_than_racy(root / "build.sh")
    state = RepoIndex.build(root).state()
    assert RepoIndex.build(root).state() == state
    os.utime(source, ns=(far + 1, far + 1))
    assert RepoIndex.build(root).state() != state
    res = runner.invoke(app, ["plan", str(root / "ops/foo_op")])
    assert res.exit_code == 0, res.output
