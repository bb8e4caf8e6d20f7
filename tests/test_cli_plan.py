"""`optrace plan` as a user runs it: exit codes, messages, several operators, outputs."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from optrace.cli.app import app

runner = CliRunner()

KERNEL = """
class DemoKernel {
public:
    __aicore__ inline void Process() {
        for (uint32_t groupIdx = 0; groupIdx < groupNum_; ++groupIdx) {
            SendTokens(groupIdx);
            SyncAll();
        }
    }
    __aicore__ inline void SendTokens(uint32_t g) {
        for (uint32_t tokenIdx = 0; tokenIdx < n_; ++tokenIdx) { DataCopy(dst, src, len); }
        SyncAll();
    }
};
extern "C" __global__ __aicore__ void {name}(GM_ADDR x, GM_ADDR y, GM_ADDR workspace, GM_ADDR tiling) {
    DemoKernel op;
    op.Process();
}
"""


def make_op(repo: Path, name: str, body: str | None = None) -> Path:
    op = repo / name
    (op / "op_kernel").mkdir(parents=True)
    text = (body if body is not None else KERNEL).replace("{name}", name)
    (op / "op_kernel" / f"{name}.cpp").write_text(text)
    (repo / "optrace.toml").touch()
    return op


def run(*args: str) -> tuple[int, str, str]:
    res = runner.invoke(app, list(args))
    return res.exit_code, res.stdout, res.stderr


def test_plan_text(tmp_path: Path) -> None:
    op = make_op(tmp_path, "demo_op")
    code, out, err = run("plan", str(op))
    assert code == 0, err
    # The file is named once, in the tree's legend; the tree's lines say `[n]:line`.
    assert "files: [1] demo_op/op_kernel/demo_op.cpp\ntrace tree:  (" in out
    # Each region: its class and why, in a few words (the full reason is in JSON).
    assert "  group [AIV] phase: loop over `groupIdx`  @ [1]:5" in out and "hot=" not in out
    assert "group send-tokens" in out
    tree = out.split("trace tree")[1].split("labels per core type")[0].splitlines()[1:]
    assert tree and not any("demo_op.cpp" in line for line in tree)
    assert "op_host OpDef: MISSING" in out


def test_missing_directory_is_usage_error(tmp_path: Path) -> None:
    code, out, err = run("plan", str(tmp_path / "nope"))
    assert code == 2
    assert "OT001" in err and "Traceback" not in err + out


def test_no_entry_is_exit_2_with_location(tmp_path: Path) -> None:
    op = make_op(tmp_path, "empty_op", body="int helper() { return 1; }\n")
    code, _, err = run("plan", str(op))
    assert code == 2
    assert f"{op}: OT010" in err


def test_one_broken_operator_does_not_stop_the_others(tmp_path: Path) -> None:
    good = make_op(tmp_path, "good_op")
    bad = make_op(tmp_path, "bad_op", body="// nothing here\n")
    code, out, err = run("plan", str(bad), str(good), "--format", "json")
    assert code == 2
    doc = json.loads(out)
    assert doc["version"] == 1
    assert [o["name"] for o in doc["operators"]] == ["good_op"]
    assert "bad_op" in err


def test_json_schema_fields(tmp_path: Path) -> None:
    op = make_op(tmp_path, "demo_op")
    code, out, _ = run("plan", str(op), "--format", "json")
    assert code == 0
    o = json.loads(out)["operators"][0]
    for key in ("layers", "missing_layers", "includes", "tree", "labels_per_core", "capacity",
                "loops", "diagnostics"):
        assert key in o
    tree = o["tree"]
    assert tree["label"] == "processing" and tree["depth"] == 1
    loop = tree["children"][0]
    assert loop["kind"] == "loop" and loop["index"] == "groupIdx" and loop["placement"] == "inside"


def test_output_file_and_graphs_per_operator(tmp_path: Path) -> None:
    a = make_op(tmp_path, "op_a")
    b = make_op(tmp_path, "op_b")
    out_file = tmp_path / "plan.json"
    code, out, _ = run("plan", str(a), str(b), "--format", "json", "-o", str(out_file),
                       "--graph", str(tmp_path / "g.html"))
    assert code == 0 and out == ""
    assert len(json.loads(out_file.read_text())["operators"]) == 2
    html_a = (tmp_path / "g.op_a.html").read_text()
    assert "<html>" in html_a and '<g class="node traced' in html_a and "<svg" in html_a
    assert (tmp_path / "g.op_b.html").exists()
    code, _, _ = run("plan", str(a), "--graph", str(tmp_path / "g.dot"))
    dot = (tmp_path / "g.dot").read_text()
    assert dot.startswith('digraph "op_a"') and "fillcolor" in dot


def test_invalid_config_is_located(tmp_path: Path) -> None:
    op = make_op(tmp_path, "demo_op")
    (tmp_path / "optrace.toml").write_text("[rules]\ndisable = 3\n")
    code, _, err = run("plan", str(op))
    assert code == 2 and "OT003" in err and "optrace.toml:2" in err
    (tmp_path / "optrace.toml").write_text("this is = = not toml\n")
    code, _, err = run("plan", str(op))
    assert code == 2 and "OT002" in err and "optrace.toml:1" in err


def test_unparseable_header_is_a_warning_and_plan_continues(tmp_path: Path) -> None:
    op = make_op(tmp_path, "demo_op")
    entry = op / "op_kernel" / "demo_op.cpp"
    entry.write_text('#include "broken.h"\n' + entry.read_text())
    (op / "op_kernel" / "broken.h").write_text("class { ( ( ( ;;; }}} template <<\n")
    code, out, err = run("plan", str(op))
    assert code == 0
    assert "broken.h:1: OT020" in err
    assert "group send-tokens" in out


def test_non_utf8_crlf_input_is_normal(tmp_path: Path) -> None:
    op = make_op(tmp_path, "demo_op")
    entry = op / "op_kernel" / "demo_op.cpp"
    raw = ("// 注释\n" + entry.read_text()).replace("\n", "\r\n").encode("gbk")
    entry.write_bytes(b"\xef\xbb\xbf" + raw)
    code, out, err = run("plan", str(op))
    assert code == 0, err
    assert "  group [AIV] phase: loop over `groupIdx`  @ [1]:6" in out
    assert entry.read_bytes() == b"\xef\xbb\xbf" + raw  # plan never writes


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symlinks")
def test_symlink_loop_in_operator_tree(tmp_path: Path) -> None:
    op = make_op(tmp_path, "demo_op")
    os.symlink(op / "op_kernel", op / "op_kernel" / "self_loop")
    code, out, err = run("plan", str(op))
    assert code == 0, err
    assert "group send-tokens" in out


def test_help_lists_the_commands_that_exist() -> None:
    code, out, _ = run("--help")
    assert code == 0
    names = {c.name or (c.callback.__name__ if c.callback else "") for c in app.registered_commands}
    for name in ("plan", "apply", "strip", "preprocess"):
        assert name in names and name in out


def test_text_plan_reads_at_120_columns_and_says_ot020_once(tmp_path: Path) -> None:
    op = make_op(tmp_path, "demo_op")
    entry = op / "op_kernel" / "demo_op.cpp"
    entry.write_text('#include "broken_a.h"\n#include "broken_b.h"\n' + entry.read_text())
    for name in ("broken_a.h", "broken_b.h"):
        (op / "op_kernel" / name).write_text("class { ( ( ( ;;; }}} template <<\n")
    code, out, _ = run("plan", str(op))
    assert code == 0
    findings = out.split("findings:")[1].splitlines()
    ot020 = [line for line in findings if "OT020" in line]
    # One warning naming both files, by the legend's numbers.
    legend = dict(re.findall(r"^  \[(\d+)\] (\S+)$", out, re.M))
    named = re.findall(r"\[(\d+)\]:1", ot020[0]) if len(ot020) == 1 else []
    assert sorted(legend[n].rsplit("/", 1)[-1] for n in named) == ["broken_a.h", "broken_b.h"], out
    # the kernel offers fewer than 10 candidate regions: no "below 10" warning
    assert "OT106" not in out
    assert all(len(line) <= 120 for line in out.splitlines())


def test_a_qualifier_that_is_not_an_identifier_is_refused_where_it_is_written(tmp_path: Path) -> None:
    """Qualifiers are words the parse blanks: one that is not a C++ identifier would blank
    text that is no name (a `#`, a newline), so the config is refused, located."""
    op = make_op(tmp_path, "demo_op")
    (tmp_path / "optrace.toml").write_text('# team config\nqualifiers = ["MY_DEVICE", "\\t#"]\n')
    code, _, err = run("plan", str(op))
    assert code == 2 and "OT003" in err and "optrace.toml:2" in err and "not a C++ identifier" in err
    (tmp_path / "optrace.toml").write_text('qualifiers = ["MY_DEVICE"]\n')
    assert run("plan", str(op))[0] == 0


def test_a_layer_file_the_config_names_that_is_not_there_is_refused_where_it_is_written(
        tmp_path: Path) -> None:
    """`[layers]` naming a file that does not exist (a typo, a moved file) is the config's
    mistake, said at its line (plan and apply refuse, exit 2; check reports it) — it was
    an internal error (exit 3) where the torch adapter's layer read it."""
    op = make_op(tmp_path, "demo_op")
    (tmp_path / "optrace.toml").write_text('[layers]\n# ours\ntorch_adapter = ["pybind/nope.cpp"]\n')
    for command, exit_code in (("plan", 2), ("apply", 2), ("check", 1)):  # check: a finding
        code, _, err = run(command, str(op))
        assert code == exit_code and "OT003" in err and "is not a file" in err, err
        assert "optrace.toml:3" in err, err
    (tmp_path / "pybind").mkdir()
    (tmp_path / "pybind" / "nope.cpp").write_text("// the adapter\n")
    assert run("plan", str(op))[0] == 0


def test_a_deep_operators_layers_read_at_120_columns(tmp_path: Path) -> None:
    """An operator four folders down with long file names (ops-nn's op_host/op_tiling/...
    paths from the root run past 120 columns on their own): the layers list names its
    files relative to the operator, as the file legend does."""
    msopgen = Path(__file__).resolve().parent.parent / "fixtures" / "msopgen_style"
    deep = tmp_path / "repo" / "experimental" / "a_category_with_a_long_name" / "moe_token_permute"
    shutil.copytree(msopgen / "moe_token_permute", deep)
    long_name = "moe_token_permute_definition_of_every_output_shape_and_dtype_def.cpp"
    opdef = deep / "op_host" / "moe_token_permute_def.cpp"
    opdef.rename(opdef.with_name(long_name))
    (tmp_path / "repo" / "optrace.toml").write_text("")
    code, out, _ = run("plan", str(deep))
    assert code == 0, out
    assert f"  + infer shape: op_host/{long_name}:" in out, out  # the OpDef's file registers it
    assert [line for line in out.splitlines() if len(line) > 120] == []
