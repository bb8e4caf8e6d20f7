"""Tables derived from a whole repository and kept in the user cache: the quoted include
names of every C / C++ source (engine/sharing.py's `_naming`, under the index's state) and
the searchable files by word (`RepoIndex.mentioning`, under those files' paths and
signatures). A later plan of the unchanged repository (a process an operator) looks up
what it asks instead of asking the store about each file. A change to a file the table
rests on, a damaged table, or a run with nothing kept derives it again, and a plan
answered from the tables is the plan one without any cache gives."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.engine import discovery, index_cache, sharing
from optrace.engine.discovery import forget_repo_indexes, repo_index
from optrace.engine.index_cache import ContentStore, reading_only

runner = CliRunner()

ENTRY = ('extern "C" __global__ __aicore__ void {op}(GM_ADDR x, GM_ADDR y, GM_ADDR workspace, '
         'GM_ADDR tiling)\n{{\n    {cls} op;\n    op.Init(x, y);\n    op.Process();\n}}\n')


def kernel(name: str) -> str:
    steps = "".join(f"    __aicore__ inline void Stage{i}(int g)\n    {{\n" + "        acc_ += g * 3;\n" * 6
                    + "    }\n" for i in range(2))
    return ("#pragma once\n#include \"kernel_operator.h\"\n"
            f"class {name} {{\npublic:\n    __aicore__ inline void Init(GM_ADDR x, GM_ADDR y) {{}}\n"
            "    __aicore__ inline void Process()\n    {\n"
            "        for (int tileIdx = 0; tileIdx < tiles_; ++tileIdx) {\n"
            "            Stage0(tileIdx);\n            Stage1(tileIdx);\n        }\n    }\n"
            f"{steps}    int acc_ = 0;\n    int tiles_ = 8;\n}};\n")


# Two operators whose class headers other operators compile through the flattened build
# tree's `../<op>/` path, and one that includes nothing of theirs (yet).
FILES = {
    "ops/scale/op_kernel/scale.cpp":
        '#include "scale_kernel.h"\n' + ENTRY.format(op="scale", cls="ScaleKernel"),
    "ops/scale/op_kernel/scale_kernel.h": kernel("ScaleKernel"),
    "ops/scale_v2/op_kernel/scale_v2.cpp":
        '#include "../scale/scale_kernel.h"\n#include "shift_kernel.h"\n'
        + ENTRY.format(op="scale_v2", cls="ShiftKernel"),
    "ops/scale_v2/op_kernel/shift_kernel.h": kernel("ShiftKernel"),
    "ops/scale_v3/op_kernel/scale_v3.cpp":
        '#include "../scale_v2/shift_kernel.h"\n' + ENTRY.format(op="scale_v3", cls="ShiftKernel"),
    "ops/clip/op_kernel/clip.cpp": '#include "kernel_operator.h"\n' + ENTRY.format(op="clip", cls="int"),
    # searchable files: host code and Python, which the word table indexes
    "ops/scale/op_host/scale_def.cpp": 'namespace ops {\nOP_ADD(Scale);\n}  // namespace ops\n',
    "ops/clip/op_host/clip_def.cpp": 'namespace ops {\nOP_ADD(Clip);\n}  // namespace ops\n',
    "tests/test_scale.py": "import torch\n\ny = torch.ops.npu.scale(x)\n",
}


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    index_cache.set_enabled(True)
    root = tmp_path / "repo"
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / ".git").mkdir()
    _aged()
    forget_repo_indexes()
    yield root
    forget_repo_indexes()
    index_cache.reset_enabled()


def _aged() -> None:
    """Past the tick in which a source just written is racy (no state is kept for it):
    the whole-second one, in case the filesystem keeps whole seconds."""
    time.sleep(index_cache.RACY_WHOLE_SECONDS_NS / 1e9 + 0.05)


def asked_for(monkeypatch: pytest.MonkeyPatch, wanted: str) -> list[str]:
    """The files the store is asked for their value of kind `wanted`, by name, from now on."""
    seen: list[str] = []
    derived = ContentStore.derived

    def spy(self: ContentStore, path: Path, kind: str, *args: object, **kwargs: object) -> str:
        if kind == wanted:
            seen.append(Path(path).name)
        return derived(self, path, kind, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ContentStore, "derived", spy)
    return seen


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The sources the store is asked for their include names."""
    return asked_for(monkeypatch, sharing.INCLUDES_KIND)


def includers(root: Path, name: str) -> list[str]:
    """`_naming` in a phase of its own, after the index's state (as a plan takes it), as
    a run of its own: the index and its store made again."""
    forget_repo_indexes()
    with reading_only():
        index = repo_index(root)
        index.state()
        return [p.relative_to(root).as_posix() for p in sharing._naming(index, {name})]


def tables(root: Path) -> list[tuple[str, str]]:
    db = sqlite3.connect(root.parent / "cache/optrace/index.sqlite")
    try:
        return [(kind, key) for kind, key in db.execute("SELECT kind, key FROM tables WHERE kind = ?",
                                                          (sharing.NAMES_TABLE_KIND,))]
    finally:
        db.close()


def test_the_names_are_gathered_once_then_looked_up_in_the_kept_table(repo: Path, asked: list[str]) -> None:
    assert includers(repo, "scale_kernel.h") == ["ops/scale/op_kernel/scale.cpp",
                                                 "ops/scale_v2/op_kernel/scale_v2.cpp"]
    assert sorted(asked) == ["clip.cpp", "clip_def.cpp", "scale.cpp", "scale_def.cpp", "scale_kernel.h",
                             "scale_v2.cpp", "scale_v3.cpp", "shift_kernel.h"]  # every C / C++ file
    [(kind, key)] = tables(repo)
    assert kind == sharing.NAMES_TABLE_KIND
    asked.clear()
    # A later phase (another run of the unchanged repository): no source is asked.
    assert includers(repo, "scale_kernel.h") == ["ops/scale/op_kernel/scale.cpp",
                                                 "ops/scale_v2/op_kernel/scale_v2.cpp"]
    assert includers(repo, "shift_kernel.h") == ["ops/scale_v2/op_kernel/scale_v2.cpp",
                                                 "ops/scale_v3/op_kernel/scale_v3.cpp"]
    assert includers(repo, "nothing_includes_this.h") == []
    assert asked == []
    assert tables(repo) == [(kind, key)]


def test_a_source_that_starts_including_the_header_is_found_and_the_table_replaced(
        repo: Path, asked: list[str]) -> None:
    assert includers(repo, "scale_kernel.h") == ["ops/scale/op_kernel/scale.cpp",
                                                 "ops/scale_v2/op_kernel/scale_v2.cpp"]
    [before] = tables(repo)
    clip = repo / "ops/clip/op_kernel/clip.cpp"
    clip.write_text('#include "../scale/scale_kernel.h"\n' + clip.read_text())
    asked.clear()
    # Found at once, the write still within its tick (that state is kept nowhere; on a
    # busy machine the tick may be over by the time the state is taken, and it is kept).
    assert "ops/clip/op_kernel/clip.cpp" in includers(repo, "scale_kernel.h")
    _aged()
    assert includers(repo, "scale_kernel.h") == [
        "ops/clip/op_kernel/clip.cpp", "ops/scale/op_kernel/scale.cpp", "ops/scale_v2/op_kernel/scale_v2.cpp"]
    assert asked  # gathered again: the state is another
    [after] = tables(repo)
    assert after[1] != before[1]
    asked.clear()
    assert includers(repo, "scale_kernel.h")[0] == "ops/clip/op_kernel/clip.cpp"
    assert asked == []


def test_a_damaged_or_foreign_table_is_not_read(repo: Path, asked: list[str]) -> None:
    includers(repo, "scale_kernel.h")
    db = sqlite3.connect(repo.parent / "cache/optrace/index.sqlite")
    try:  # the clip operator written into the table, its checksum left as it was
        (value,) = db.execute("SELECT value FROM tables").fetchone()
        db.execute("UPDATE tables SET value = ?", (value + "scale_kernel.h\t0\n",))
        db.commit()
    finally:
        db.close()
    asked.clear()
    assert includers(repo, "scale_kernel.h") == ["ops/scale/op_kernel/scale.cpp",
                                                 "ops/scale_v2/op_kernel/scale_v2.cpp"]
    assert asked  # gathered from the sources again


def test_no_table_is_kept_with_the_cache_off(repo: Path, asked: list[str]) -> None:
    index_cache.set_enabled(False)
    assert includers(repo, "shift_kernel.h") == ["ops/scale_v2/op_kernel/scale_v2.cpp",
                                                 "ops/scale_v3/op_kernel/scale_v3.cpp"]
    assert not (repo.parent / "cache/optrace/index.sqlite").exists()


def cached_equals_bare(op_dir: Path, asked: list[str]) -> dict[str, Any]:
    """The operator's JSON plan with the tables kept (nothing in `asked` from now on) and
    without any cache (asked again): the same; the plan's operator."""
    asked.clear()
    cached = runner.invoke(app, ["plan", str(op_dir), "--format", "json"])
    assert cached.exit_code == 0, cached.output
    assert asked == []
    forget_repo_indexes()
    bare = runner.invoke(app, ["plan", str(op_dir), "--format", "json", "--no-cache"])
    assert bare.exit_code == 0, bare.output
    assert asked  # no table without the cache
    assert json.loads(cached.stdout) == json.loads(bare.stdout)
    op: dict[str, Any] = json.loads(cached.stdout)["operators"][0]
    return op


def test_a_plan_answered_from_the_table_is_the_plan_without_a_cache(repo: Path, asked: list[str]) -> None:
    # scale's plan keeps the table; scale_v2's (its own header included by scale_v3) reads it.
    assert runner.invoke(app, ["plan", str(repo / "ops/scale")]).exit_code == 0
    op = cached_equals_bare(repo / "ops/scale_v2", asked)
    assert [(o["file"], o["included_by"]) for o in op["outside"]] == [
        ("ops/scale/op_kernel/scale_kernel.h", ["ops/scale"])]
    # scale_v3 compiles scale_v2's class header: its steps are measured at the call site,
    # no point goes into the header (the header's tile loop would be a phase otherwise).
    def files(region: dict[str, object]) -> set[object]:
        return {region["file"]}.union(*(files(c) for c in region["children"]))  # type: ignore[attr-defined]

    assert files(op["tree"]) == {"ops/scale_v2/op_kernel/scale_v2.cpp"}


# --- the searchable files by word ------------------------------------------------------


@pytest.fixture
def words_read(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The files whose word lists are asked of the store."""
    return asked_for(monkeypatch, discovery.WORDS_KIND)


def twice(root: Path, *words: str) -> list[str]:
    """`mentioning` in two runs: the first over the files as they are keeps their key
    alone, the second the table."""
    first = mentioning(root, *words)
    assert mentioning(root, *words) == first
    return first


def mentioning(root: Path, *words: str) -> list[str]:
    """`RepoIndex.mentioning` in a run of its own, after the index's state."""
    forget_repo_indexes()
    with reading_only():
        index = repo_index(root)
        index.state()
        return [p.relative_to(root).as_posix() for p in index.mentioning(*(w.encode() for w in words))]


def tables_of(root: Path, kind: str) -> list[tuple[str]]:
    db = sqlite3.connect(root.parent / "cache/optrace/index.sqlite")
    try:
        return list(db.execute("SELECT key FROM tables WHERE kind = ?", (kind,)))
    finally:
        db.close()


def word_tables(root: Path) -> list[str]:
    """The word table's value kept ("": its key alone)."""
    db = sqlite3.connect(root.parent / "cache/optrace/index.sqlite")
    try:
        return [v for (v,) in db.execute("SELECT value FROM tables WHERE kind = ?",
                                         (discovery.WORDS_TABLE_KIND,))]
    finally:
        db.close()


HOST = ["ops/scale/op_host/scale_def.cpp", "tests/test_scale.py"]


def test_the_words_are_looked_up_in_the_kept_table_until_a_searchable_file_changes(
        repo: Path, words_read: list[str]) -> None:
    assert mentioning(repo, "scale") == HOST
    assert sorted(set(words_read)) == ["clip_def.cpp", "scale_def.cpp", "test_scale.py"]
    assert word_tables(repo) == [""]  # the first run keeps the files' key alone
    [key] = [k for k, in tables_of(repo, discovery.WORDS_TABLE_KIND)]
    words_read.clear()
    assert mentioning(repo, "scale") == HOST
    assert sorted(set(words_read)) == ["clip_def.cpp", "scale_def.cpp", "test_scale.py"]  # the second indexes
    assert word_tables(repo) != [""]
    assert [k for k, in tables_of(repo, discovery.WORDS_TABLE_KIND)] == [key]
    words_read.clear()
    assert mentioning(repo, "Scale", "clip") == ["ops/clip/op_host/clip_def.cpp", *HOST]
    assert mentioning(repo, "test_scale") == ["tests/test_scale.py"]  # by its name
    assert mentioning(repo, "op_add") == ["ops/clip/op_host/clip_def.cpp", "ops/scale/op_host/scale_def.cpp"]
    assert mentioning(repo, "nowhere") == []
    assert words_read == []
    # A kernel source is no searchable file: the table stands after it changes.
    clip = repo / "ops/clip/op_kernel/clip.cpp"
    clip.write_text(clip.read_text() + "// scale later\n")
    _aged()
    assert mentioning(repo, "scale") == HOST
    assert words_read == [] and [k for k, in tables_of(repo, discovery.WORDS_TABLE_KIND)] == [key]
    # A searchable file that starts naming the word is found, and the table replaced.
    clip_def = repo / "ops/clip/op_host/clip_def.cpp"
    clip_def.write_text(clip_def.read_text() + "// calls scale\n")
    assert mentioning(repo, "scale") == ["ops/clip/op_host/clip_def.cpp", *HOST]  # in its tick: none kept
    _aged()
    words_read.clear()
    assert twice(repo, "scale") == ["ops/clip/op_host/clip_def.cpp", *HOST]
    assert words_read and [k for k, in tables_of(repo, discovery.WORDS_TABLE_KIND)] != [key]
    words_read.clear()
    assert mentioning(repo, "calls") == ["ops/clip/op_host/clip_def.cpp"]
    assert words_read == []


def test_a_damaged_word_table_is_not_read(repo: Path, words_read: list[str]) -> None:
    twice(repo, "scale")
    assert word_tables(repo) != [""]
    db = sqlite3.connect(repo.parent / "cache/optrace/index.sqlite")
    try:  # clip_def.cpp (the first file) said to name `scale`, the checksum left as it was
        db.execute("UPDATE tables SET value = value || ? WHERE kind = ?",
                   ("scale\t0\n", discovery.WORDS_TABLE_KIND))
        db.commit()
    finally:
        db.close()
    words_read.clear()
    assert mentioning(repo, "scale") == HOST
    assert words_read


def test_no_word_table_outside_a_phase_or_with_the_cache_off(repo: Path, words_read: list[str]) -> None:
    forget_repo_indexes()
    index = repo_index(repo)
    index.state()
    assert [p.name for p in index.mentioning(b"scale")] == ["scale_def.cpp", "test_scale.py"]
    assert word_tables(repo) == []
    index_cache.set_enabled(False)
    assert twice(repo, "scale") == HOST
    assert not (repo.parent / "cache/optrace/index.sqlite").exists() or word_tables(repo) == []


# --- the build scripts and what each build script gives --------------------------------

SCRIPTS = {
    "build.sh": "#!/bin/bash\ncp -r ops/scale/op_kernel build/op_kernel\ncmake --build build\n",
    "cmake/kernels.cmake": "add_ascendc_kernels(scale_kernels ops/scale/op_kernel)\n",
    "scripts/ci/lint.sh": "#!/bin/bash\nruff check .\n",  # builds nothing
}


@pytest.fixture
def scripts_repo(repo: Path) -> Path:
    for rel, text in SCRIPTS.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    _aged()
    return repo


@pytest.fixture
def scripts_asked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The scripts asked of the store, for their kind or their words."""
    seen: list[str] = []
    derived = ContentStore.derived

    def spy(self: ContentStore, path: Path, kind: str, *args: object, **kwargs: object) -> str:
        if kind in (discovery.BUILDS_KIND, discovery.SCRIPT_WORDS_KIND):
            seen.append(f"{kind}:{Path(path).name}")
        return derived(self, path, kind, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ContentStore, "derived", spy)
    return seen


def build_scripts(root: Path) -> tuple[list[str], list[str], bool]:
    """A run of its own, after the index's state: the build scripts, each one's words,
    and whether the index opened its store."""
    forget_repo_indexes()
    with reading_only():
        index = repo_index(root)
        index.state()
        names = [p.relative_to(root).as_posix() for p in index.build_scripts()]
        words = index.script_values(discovery.SCRIPT_WORDS_KIND, discovery._script_words)
        return names, words, index.store is not None


BUILDING = ["build.sh", "cmake/kernels.cmake"]


def test_the_build_scripts_and_their_words_are_kept_until_a_script_changes(
        scripts_repo: Path, scripts_asked: list[str]) -> None:
    names, words, _ = build_scripts(scripts_repo)
    assert names == BUILDING
    assert "cp" in words[0].split("\n") and "add_ascendc_kernels" in words[1].split("\n")
    assert sorted(scripts_asked) == ["builds1:build.sh", "builds1:kernels.cmake", "builds1:lint.sh",
                                     "script-words1:build.sh", "script-words1:kernels.cmake"]
    scripts_asked.clear()
    # A later run of the unchanged repository: no script asked, no store opened.
    assert build_scripts(scripts_repo) == (names, words, False)
    assert scripts_asked == []
    # A kernel source edited leaves them (the state is taken from the hashes again).
    clip = scripts_repo / "ops/clip/op_kernel/clip.cpp"
    clip.write_text(clip.read_text() + "// edited\n")
    _aged()
    assert build_scripts(scripts_repo)[:2] == (names, words)
    assert scripts_asked == []
    # A script that starts building the kernels is found, its words derived, the tables
    # replaced; the next run reads them.
    lint = scripts_repo / "scripts/ci/lint.sh"
    lint.write_text(lint.read_text() + "cmake -S ops/clip/op_kernel -B build\n")
    _aged()
    names, words, _ = build_scripts(scripts_repo)
    assert names == [*BUILDING, "scripts/ci/lint.sh"] and "ruff" in words[2].split("\n")
    assert "builds1:lint.sh" in scripts_asked
    scripts_asked.clear()
    assert build_scripts(scripts_repo) == (names, words, False)
    assert scripts_asked == []


def test_a_damaged_scripts_table_is_not_read(scripts_repo: Path, scripts_asked: list[str]) -> None:
    expected = build_scripts(scripts_repo)
    db = sqlite3.connect(scripts_repo.parent / "cache/optrace/index.sqlite")
    try:  # the script that builds nothing said to build, the checksum left as it was
        db.execute("UPDATE tables SET value = ? WHERE kind = ?",
                   ("0 1 2", discovery.BUILD_SCRIPTS_TABLE_KIND + discovery.BUILDS_KIND))
        db.execute("UPDATE tables SET value = '[]' WHERE kind LIKE ?",
                   (discovery.SCRIPT_VALUES_TABLE_KIND + "%",))
        db.commit()
    finally:
        db.close()
    scripts_asked.clear()
    names, words, _ = build_scripts(scripts_repo)
    assert (names, words) == expected[:2]
    assert "builds1:lint.sh" in scripts_asked and "script-words1:build.sh" in scripts_asked


def test_outside_a_phase_each_question_asks_the_store(scripts_repo: Path, scripts_asked: list[str]) -> None:
    """apply edits scripts between its questions: outside a `reading_only` phase a
    script's words are asked of the store each time (a `stat` each), never a table."""
    build_scripts(scripts_repo)
    build_scripts(scripts_repo)  # the tables kept
    forget_repo_indexes()
    index = repo_index(scripts_repo)
    index.state()
    scripts_asked.clear()
    first = index.script_values(discovery.SCRIPT_WORDS_KIND, discovery._script_words)
    build = scripts_repo / "build.sh"
    build.write_text(build.read_text() + "echo optrace_hook\n")
    again = index.script_values(discovery.SCRIPT_WORDS_KIND, discovery._script_words)
    assert "optrace_hook" not in first[0].split("\n") and "optrace_hook" in again[0].split("\n")
    assert scripts_asked.count("script-words1:build.sh") == 2


def test_a_plan_with_build_scripts_from_the_tables_is_the_plan_without_a_cache(
        scripts_repo: Path, scripts_asked: list[str]) -> None:
    for _ in range(2):  # the second run finds the tables kept by the first
        forget_repo_indexes()
        assert runner.invoke(app, ["plan", str(scripts_repo / "ops/clip")]).exit_code == 0
    forget_repo_indexes()
    op = cached_equals_bare(scripts_repo / "ops/scale", scripts_asked)
    assert op["layers"]["build_script"][0]["file"] == "build.sh"


def test_postings_answer_the_same_from_the_text_its_bytes_and_the_dict() -> None:
    table = {"scale": [0, 2], "größe": [1], "op_add": [0, 1, 2]}
    text = discovery.Postings(table).text()
    assert text is not None
    forms = [discovery.Postings(table), discovery.Postings(text), discovery.Postings(text.encode())]
    for key in ("scale", "größe", "op_add", "missing", "sca", "a\tb", ""):
        assert len({tuple(p.get(key)) for p in forms}) == 1, key
    assert forms[2].text() == text
