"""`optrace preprocess`: stable ids, ignored comments, fingerprint, --modify, bad input."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.engine import preprocess as pp
from optrace.runtime.atomic import OutputError, write_output

runner = CliRunner()

KERNEL = """#include "k_base.h"
// MoeTracing(TRACE_POINT("commented out", "B"));
#if 0
MoeTracing(TRACE_POINT("dead code", "B"));
#endif
__aicore__ inline void Dispatch() {
    MoeTracing(TRACE_POINT("dispatch aiv", "B"));
    for (uint32_t groupIdx = 0; groupIdx < n; ++groupIdx) {
        MoeTracing(TRACE_POINT("dispatch aiv group-loop", "B"), 0, groupIdx);
        if (done) { MoeTracing(TRACE_POINT("dispatch aiv group-loop", "E"), 0, groupIdx); break; }
        MoeTracing(TRACE_POINT("dispatch aiv group-loop", "E"), 0, groupIdx);
    }
    MoeTracing(TRACE_POINT("dispatch aiv", "E"));
}
"""
BASE = "#ifndef OPTRACE_BUILD_FINGERPRINT\n#define OPTRACE_BUILD_FINGERPRINT 0u\n#endif\n"


def make_src(tmp: Path, kernel: str = KERNEL) -> Path:
    src = tmp / "src"
    src.mkdir(parents=True, exist_ok=True)
    (src / "k.cpp").write_text(kernel)
    (src / "k_base.h").write_text(BASE)
    return src


def run(*args: str) -> tuple[int, str, str]:
    res = runner.invoke(app, list(args))
    return res.exit_code, res.stdout, res.stderr


def test_map_ignores_comments_and_dead_code(tmp_path: Path) -> None:
    src = make_src(tmp_path)
    code, out, err = run("preprocess", str(src), "--out", str(tmp_path / "out"))
    assert code == 0, err
    doc = json.loads((tmp_path / "out" / "point_map.json").read_text())
    labels = {(p["label"], p["event_type"]) for p in doc["points"].values()}
    assert labels == {("dispatch aiv", "B"), ("dispatch aiv", "E"),
                      ("dispatch aiv group-loop", "B"), ("dispatch aiv group-loop", "E")}
    e = next(p for p in doc["points"].values() if p["label"] == "dispatch aiv group-loop"
             and p["event_type"] == "E")
    assert e["locations"] == ["k.cpp:10", "k.cpp:11"]  # both exit paths, one id
    b_id = pp.point_hash("dispatch aiv group-loop", "B")
    assert e["event_id"] == b_id and str(b_id) in doc["points"]
    assert doc["format_version"] == 1 and doc["fingerprint"] > 0
    assert out.startswith("5 points, 2 labels, 2 files; fingerprint 0x")
    # The sources were not touched without --modify.
    assert "TRACE_POINT" in (src / "k.cpp").read_text()


def test_ids_are_stable_when_unrelated_points_are_added(tmp_path: Path) -> None:
    a = pp.scan(make_src(tmp_path / "a"))
    more = KERNEL.replace('    MoeTracing(TRACE_POINT("dispatch aiv", "E"));',
                          '    MoeTracing(TRACE_POINT("dispatch aiv tail", "B"));\n'
                          '    MoeTracing(TRACE_POINT("dispatch aiv tail", "E"));\n'
                          '    MoeTracing(TRACE_POINT("dispatch aiv", "E"));')
    b = pp.scan(make_src(tmp_path / "b", more))
    for key, pid in a.ids.items():
        assert b.ids[key] == pid
    assert a.fingerprint != b.fingerprint


def test_collisions_resolve_deterministically(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pp, "point_hash", lambda label, event: 42)
    keys = {("b", "B"), ("a", "B"), ("a", "E")}
    ids, notes = pp.assign_ids(keys)
    assert ids == {("a", "B"): 42, ("a", "E"): 43, ("b", "B"): 44}
    assert len(notes) == 2
    assert pp.assign_ids(set(reversed(sorted(keys))))[0] == ids


def test_modify_rewrites_ids_and_fingerprint_then_refuses_a_second_run(tmp_path: Path) -> None:
    src = make_src(tmp_path)
    code, _, err = run("preprocess", str(src), "--out", str(tmp_path / "out"), "--modify")
    assert code == 0, err
    doc = json.loads((tmp_path / "out" / "point_map.json").read_text())
    text = (src / "k.cpp").read_text()
    assert 'TRACE_POINT("dispatch' not in text.split("#endif", 1)[1]
    assert f"MoeTracing({pp.point_hash('dispatch aiv', 'B')});" in text
    assert f"#define OPTRACE_BUILD_FINGERPRINT {doc['fingerprint']}u" in (src / "k_base.h").read_text()
    before = (tmp_path / "out" / "point_map.json").read_bytes()
    code, _, err = run("preprocess", str(src), "--out", str(tmp_path / "out"), "--modify")
    assert code == 2 and "OT205" in err
    assert (tmp_path / "out" / "point_map.json").read_bytes() == before


@pytest.mark.parametrize(("bad", "code_"), [
    ('MoeTracing(TRACE_POINT("Bad Label", "B"));', "OT202"),
    ('MoeTracing(TRACE_POINT("a b c d e f g", "B"));', "OT202"),
    ('MoeTracing(TRACE_POINT("ok", "X"));', "OT202"),
    ('MoeTracing(TRACE_POINT("only-begin", "B"));', "OT204"),
])
def test_bad_points_write_nothing(tmp_path: Path, bad: str, code_: str) -> None:
    src = make_src(tmp_path, KERNEL.replace("#endif\n", "#endif\n" + bad + "\n", 1))
    code, _, err = run("preprocess", str(src), "--out", str(tmp_path / "out"), "--modify")
    assert code == 2 and code_ in err and "k.cpp:6" in err
    assert not (tmp_path / "out").exists()
    assert "TRACE_POINT" in (src / "k.cpp").read_text().split("#endif", 1)[1]


def test_missing_source_dir(tmp_path: Path) -> None:
    code, _, err = run("preprocess", str(tmp_path / "nope"), "--out", str(tmp_path))
    assert code == 2 and "OT200" in err


# --- the core mix the entry scaffold passes: the buffer's slot layout --------------------------

def _entry(name: str, mix: str) -> str:
    """A kernel entry with the scaffold's guard line, as apply writes it."""
    return (f'extern "C" __global__ __aicore__ void {name}(GM_ADDR x, GM_ADDR profiling_data) {{\n'
            '    MoeTracing(TRACE_POINT("processing", "B"));\n'
            '    OptraceEntryEnd optraceEntryEnd(TRACE_POINT("processing", "E"), profiling_data, '
            f"moeProfPtr, {mix});\n}}\n")


# The runtime block's own uses of the names (its #defines, a default argument, a test)
# are not a kernel's core mix.
BLOCK_USES = ("#define OPTRACE_CORES_AIC_ONLY 2\n"
              "__aicore__ inline void WriteBack(int32_t cores = OPTRACE_CORES_MIXED) {\n"
              "    if (cores == OPTRACE_CORES_AIC_ONLY) { return; }\n}\n")


@pytest.mark.parametrize(("mix", "cores"), [
    ("OPTRACE_CORES_AIV_ONLY", ["AIV"]), ("OPTRACE_CORES_AIC_ONLY", ["AIC"]),
    ("OPTRACE_CORES_MIXED", ["AIC", "AIV"]),
])
def test_map_records_the_scaffolds_core_mix(tmp_path: Path, mix: str, cores: list[str]) -> None:
    src = make_src(tmp_path)
    (src / "entry.cpp").write_text(_entry("k", mix))
    (src / "k_base.h").write_text(BASE + BLOCK_USES)
    code, _, err = run("preprocess", str(src), "--out", str(tmp_path / "out"))
    assert code == 0, err
    doc = json.loads((tmp_path / "out" / "point_map.json").read_text())
    assert doc["cores"] == cores and doc["format_version"] == 1  # an optional key: still v1


def test_map_without_a_scaffold_records_no_core_mix(tmp_path: Path) -> None:
    src = make_src(tmp_path)
    (src / "k_base.h").write_text(BASE + BLOCK_USES)
    assert run("preprocess", str(src), "--out", str(tmp_path / "out"))[0] == 0
    assert "cores" not in json.loads((tmp_path / "out" / "point_map.json").read_text())


def test_entries_with_different_core_mixes_record_none_and_warn(tmp_path: Path) -> None:
    src = make_src(tmp_path)
    (src / "a.cpp").write_text(_entry("a", "OPTRACE_CORES_AIV_ONLY"))
    (src / "b.cpp").write_text(_entry("b", "OPTRACE_CORES_MIXED"))
    code, _, err = run("preprocess", str(src), "--out", str(tmp_path / "out"))
    assert code == 0
    assert "OT207" in err and "a.cpp:3" in err and "b.cpp:3" in err
    assert "cores" not in json.loads((tmp_path / "out" / "point_map.json").read_text())


def snapshot(*roots: Path) -> dict[str, tuple[str, object]]:
    """Every entry under the roots, links as links (never followed), files byte for byte."""
    found: dict[str, tuple[str, object]] = {}
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            for name in dirnames + filenames:
                path = Path(dirpath) / name
                if path.is_symlink():
                    found[str(path)] = ("link", os.readlink(path))
                elif path.is_dir():
                    found[str(path)] = ("dir", path.stat().st_mode)
                else:
                    found[str(path)] = ("file", (path.read_bytes(), path.stat().st_mode))
    return found


@pytest.mark.parametrize("case", ["header-linked-out", "header-linked-in", "directory-linked-out"])
def test_modify_refuses_a_file_that_is_a_symlink_or_outside_the_tree(tmp_path: Path, case: str) -> None:
    """A build tree whose header is a link to the checked-in one (or reaches it through a
    linked directory): --modify would write ids into the checked-in sources. Refused with
    OT208 naming the file, exit 2, and nothing written: not the other sources of the tree,
    not the map."""
    src = make_src(tmp_path / "build")
    checked = tmp_path / "checked"
    checked.mkdir()
    header = 'MoeTracing(TRACE_POINT("shared", "B"));\nMoeTracing(TRACE_POINT("shared", "E"));\n'
    if case == "header-linked-out":
        (checked / "shared.h").write_text(header)
        (src / "shared.h").symlink_to(checked / "shared.h")
        named = "shared.h"
    elif case == "header-linked-in":
        (src / "real").mkdir()
        (src / "real" / "shared.h").write_text(header)
        (src / "shared.h").symlink_to(Path("real") / "shared.h")
        named = "shared.h"
    else:
        (checked / "include").mkdir()
        (checked / "include" / "shared.h").write_text(header)
        (src / "include").symlink_to(checked / "include", target_is_directory=True)
        named = "include/shared.h"
    before = snapshot(tmp_path)
    code, out, err = run("preprocess", str(src), "--out", str(tmp_path / "out"), "--modify")
    assert code == 2, (out, err)
    assert f"{named}: OT208 " in err and "nothing written" in err, err
    assert ("a symlink" if case != "directory-linked-out" else "outside") in err, err
    assert snapshot(tmp_path) == before
    assert not (tmp_path / "out").exists()
    # Without --modify nothing is rewritten: the linked file is read like the others.
    code, _, err = run("preprocess", str(src), "--out", str(tmp_path / "out"))
    assert code == 0, err
    doc = json.loads((tmp_path / "out" / "point_map.json").read_text())
    assert any(p["label"] == "shared" for p in doc["points"].values())


def test_modify_rewrites_a_hard_linked_file_without_touching_the_other_name(tmp_path: Path) -> None:
    """A hard link (a `cp -al` build tree) is a regular file of the tree: rewritten by a
    rename, so the checked-in name keeps its bytes."""
    src = make_src(tmp_path / "build")
    checked = tmp_path / "checked.cpp"
    os.link(src / "k.cpp", checked)
    code, _, err = run("preprocess", str(src), "--out", str(tmp_path / "out"), "--modify")
    assert code == 0, err
    assert checked.read_text() == KERNEL
    assert "TRACE_POINT(\"dispatch aiv\"" not in (src / "k.cpp").read_text()


def test_a_rewrite_in_place_is_never_written_through_a_link(tmp_path: Path) -> None:
    """The write itself refuses a link (made after --modify checked the files)."""
    target = tmp_path / "checked.h"
    target.write_bytes(b"checked in")
    (tmp_path / "link.h").symlink_to(target)
    with pytest.raises(OutputError, match="symbolic link"):
        write_output(tmp_path / "link.h", b"ids", rewrite=True)
    assert target.read_bytes() == b"checked in" and (tmp_path / "link.h").is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checked.h", "link.h"]
