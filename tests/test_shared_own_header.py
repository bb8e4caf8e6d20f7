"""An operator's own kernel header that another operator compiles (fixtures/shared_norm:
`rms_norm_v2` includes `../rms_norm/rms_norm_kernel.h`; ops-nn's `gemma_rms_norm` includes
`../rms_norm/rms_norm_split_d.h`). Instrumenting the owner must not change the other
operator's kernel: no points and no runtime include in that header — its code is traced
at its call sites in the owner's other files, as a header outside the directory is, and
the plan says which operator shares it. Once nobody else includes it, it is the owner's
again (and the user cache does not keep the old answer)."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from test_host_layers import cli, snapshot

from optrace.engine import sharing
from optrace.engine.index_cache import RACY_NS
from optrace.engine.source import overlaid

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
SHARED = "norm/rms_norm/op_kernel/rms_norm_kernel.h"


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # plan's cache: our own
    root = tmp_path / "shared_norm"
    shutil.copytree(FIXTURES / "shared_norm", root)
    return root


def regions(op: Path) -> list[dict[str, object]]:
    code, out, err = cli("plan", str(op), "--format", "json")
    assert code == 0, out + err
    found: list[dict[str, object]] = []

    def walk(region: dict[str, object]) -> None:
        found.append(region)
        for child in region.get("children", []):  # type: ignore[union-attr]
            walk(child)  # type: ignore[arg-type]

    walk(json.loads(out)["operators"][0]["tree"])
    return found


def files_of(found: list[dict[str, object]]) -> set[str]:
    return {os.path.basename(str(r["file"])) for r in found if r.get("file")}


def test_the_owner_traces_a_shared_header_at_its_call_sites(repo: Path) -> None:
    found = regions(repo / "norm/rms_norm")
    assert files_of(found) == {"rms_norm.cpp"}, found
    assert [r["label"] for r in found] == ["processing", "init", "norm"]
    notes = [n for r in found for n in r.get("notes", [])]  # type: ignore[attr-defined]
    assert ("RmsNormKernel::Process is defined in rms_norm_kernel.h, which another operator compiles too "
            "(norm/rms_norm_v2): traced at the call site") in notes, notes


def test_apply_leaves_the_shared_header_and_the_other_operator_alone(repo: Path) -> None:
    before = snapshot(repo)
    assert cli("apply", str(repo / "norm/rms_norm"), "--write")[0] == 0
    after = snapshot(repo)
    assert after[SHARED] == before[SHARED]
    assert {k for k in after if k.startswith("norm/rms_norm_v2/")} == {
        k for k in before if k.startswith("norm/rms_norm_v2/")}
    assert all(after[k] == v for k, v in before.items() if k.startswith("norm/rms_norm_v2/"))
    entry = after["norm/rms_norm/op_kernel/rms_norm.cpp"].decode()
    assert '#include "optrace_runtime.h"' in entry and 'TRACE_POINT("norm", "B")' in entry
    assert cli("strip", str(repo / "norm/rms_norm"), "--write")[0] == 0
    assert snapshot(repo) == before


def test_a_header_nobody_else_includes_is_the_owners(repo: Path) -> None:
    """Planned once with the user cache, then the other operator removed: the next plan
    is not the cached one, and the header's own steps get points."""
    assert files_of(regions(repo / "norm/rms_norm")) == {"rms_norm.cpp"}
    shutil.rmtree(repo / "norm/rms_norm_v2")
    found = regions(repo / "norm/rms_norm")
    assert "rms_norm_kernel.h" in files_of(found), found
    assert {"group sum-squares", "group scale"} <= {str(r["label"]) for r in found}


def test_a_shared_base_header_does_not_take_the_runtime_include(repo: Path) -> None:
    """The owner's `<op>_base.h` would carry the runtime's include for its files with
    points; when another operator includes it too, each file with points includes the
    runtime itself."""
    kernel = repo / "norm/rms_norm/op_kernel"
    (kernel / "rms_norm_base.h").write_text(
        "#ifndef RMS_NORM_BASE_H\n#define RMS_NORM_BASE_H\n#include \"kernel_operator.h\"\n\n"
        "constexpr int32_t RMS_NORM_GROUPS = 4;\n#endif  // RMS_NORM_BASE_H\n")
    entry = kernel / "rms_norm.cpp"
    entry.write_text(entry.read_text().replace('#include "rms_norm_kernel.h"\n',
                                               '#include "rms_norm_kernel.h"\n#include "rms_norm_base.h"\n'))
    other = repo / "norm/rms_norm_v2/op_kernel/rms_norm_v2.cpp"
    original = other.read_text()
    shared_include = '#include "kernel_operator.h"\n#include "../rms_norm/rms_norm_base.h"\n'
    other.write_text(original.replace('#include "kernel_operator.h"\n', shared_include, 1))
    base_before = (kernel / "rms_norm_base.h").read_bytes()
    assert cli("apply", str(repo / "norm/rms_norm"), "--write")[0] == 0
    assert (kernel / "rms_norm_base.h").read_bytes() == base_before
    assert '#include "optrace_runtime.h"' in entry.read_text()
    assert cli("strip", str(repo / "norm/rms_norm"), "--write")[0] == 0
    other.write_text(original)  # only the owner includes it now: it takes the include
    assert cli("apply", str(repo / "norm/rms_norm"), "--write")[0] == 0
    assert '#include "optrace_runtime.h"' in (kernel / "rms_norm_base.h").read_text()


def _notes_by_operator(out: str) -> dict[str, list[str]]:
    """Each planned operator's notes (every region's), by the operator's folder name."""
    notes: dict[str, list[str]] = {}
    for op in json.loads(out)["operators"]:
        found: list[str] = []

        def walk(region: dict[str, object], found: list[str] = found) -> None:
            found.extend(region.get("notes", []))  # type: ignore[arg-type]
            for child in region.get("children", []):  # type: ignore[union-attr]
                walk(child)  # type: ignore[arg-type]

        walk(op["tree"])
        notes[Path(op["op_dir"]).name] = found
    return notes


def test_one_run_reads_each_other_source_once_for_every_operator(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Operators laid out alike name their own headers alike (`finalize.h` in two
    operators here, `block/part_3.h` in each of a generated forest's): each operator of a
    run asks who else includes its headers, of every source naming one of their file
    names. One run reads such a source once, not once per operator asking, and each
    operator still gets its own answer; the next run reads again and sees an edit."""
    v2 = repo / "norm/rms_norm_v2"
    v3 = repo / "norm/rms_norm_v3"
    shutil.copytree(v2, v3)
    (v3 / "op_kernel/rms_norm_v2.cpp").rename(v3 / "op_kernel/rms_norm_v3.cpp")
    entry3 = v3 / "op_kernel/rms_norm_v3.cpp"
    entry3.write_text(entry3.read_text().replace("void rms_norm_v2(", "void rms_norm_v3("))
    reads: list[str] = []
    real = sharing.read_bounded

    def counted(path: Path, *args: object) -> bytes | None:
        reads.append(path.relative_to(repo).as_posix())
        return real(path, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(sharing, "read_bounded", counted)
    ops = [str(repo / "norm" / name) for name in ("rms_norm", "rms_norm_v2", "rms_norm_v3")]
    code, out, err = cli("plan", *ops, "--format", "json", "--jobs", "1", "--no-cache")
    assert code == 0, out + err
    # rms_norm asks of both other entries (they name rms_norm_kernel.h), v2 of v3's and
    # v3 of v2's (each names a finalize.h): each entry asked of twice, read once.
    entries = ["norm/rms_norm_v2/op_kernel/rms_norm_v2.cpp", "norm/rms_norm_v3/op_kernel/rms_norm_v3.cpp"]
    assert set(entries) <= set(reads) and len(reads) == len(set(reads)), reads
    shared = "which another operator compiles too"
    notes = _notes_by_operator(out)
    process = "RmsNormKernel::Process is defined in rms_norm_kernel.h, " + shared
    assert f"{process} (norm/rms_norm_v2 and 1 more): traced at the call site" in notes["rms_norm"], notes
    assert not [n for n in notes["rms_norm_v2"] + notes["rms_norm_v3"] if shared in n], notes
    # v3 stops including the owner's header: the next run sees it.
    for path in (entry3, v3 / "op_kernel/finalize.h"):
        path.write_text(path.read_text().replace('#include "../rms_norm/rms_norm_kernel.h"\n', ""))
    reads.clear()
    code, out, err = cli("plan", ops[0], "--format", "json", "--jobs", "1", "--no-cache")
    assert code == 0, out + err
    assert reads and not [r for r in reads if r.startswith("norm/rms_norm_v3/")], reads  # named no more
    assert f"{process} (norm/rms_norm_v2): traced at the call site" in _notes_by_operator(out)["rms_norm"]


def _settled(*paths: Path) -> None:
    """Past their clock's tick (`RACY_NS`): a later write gives each another signature."""
    assert all(p.stat().st_mtime_ns % 1_000_000_000 for p in paths)  # a clock with fractions
    time.sleep(3 * RACY_NS / 1e9)


def test_outside_a_run_of_plans_a_source_is_read_again_only_when_it_changed(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """apply asks who includes each operator's headers twice an operator (its plan and
    its proof), and writes between operators: a source is read again only when its
    signature changed, and never answered from memory while the proof reads other bytes
    in its place."""
    owner = repo / "norm/rms_norm"
    header = owner / "op_kernel/rms_norm_kernel.h"
    other = repo / "norm/rms_norm_v2/op_kernel/rms_norm_v2.cpp"
    finalize = other.parent / "finalize.h"
    _settled(other, finalize)
    reads: list[str] = []
    real = sharing.read_bounded

    def counted(path: Path, *args: object) -> bytes | None:
        reads.append(path.name)
        return real(path, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(sharing, "read_bounded", counted)
    monkeypatch.setattr(sharing, "_SCANNED", {})
    v2 = (repo / "norm/rms_norm_v2").resolve()
    ask = lambda: sharing.operators_including(repo, [header], owner)  # noqa: E731
    assert ask() == {header: (v2,)}
    assert sorted(reads) == ["finalize.h", "rms_norm_v2.cpp"]
    reads.clear()
    assert ask() == {header: (v2,)} and reads == []
    # Apply's proof reads other bytes in the entry's place: read, and not kept.
    without = other.read_bytes().replace(b'#include "../rms_norm/rms_norm_kernel.h"', b"")
    st = other.stat()
    with overlaid({(st.st_dev, st.st_ino): without}):
        assert ask() == {header: (v2,)}  # finalize.h still includes it
        assert reads == ["rms_norm_v2.cpp"]
    reads.clear()
    assert ask() == {header: (v2,)} and reads == []
    # Both written since, the include commented out (still named, so still asked): read
    # again, and the answer follows.
    for path in (other, finalize):
        path.write_bytes(path.read_bytes().replace(b'#include "../rms_norm/rms_norm_kernel.h"',
                                                   b'// #include "../rms_norm/rms_norm_kernel.h"'))
    _settled(other, finalize)
    assert ask() == {header: ()}
    assert sorted(reads) == ["finalize.h", "rms_norm_v2.cpp"]
