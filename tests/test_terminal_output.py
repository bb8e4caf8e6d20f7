"""Text from input data reaches a terminal escaped: an ESC sequence in a label or a file
name cannot retitle the window or write the clipboard, a bidi override cannot reorder a
line, and a file name that is not UTF-8 shows its bytes. JSON keeps its own escaping, and
a diff piped into `git apply` keeps the files' own bytes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.runtime.terminal import safe_text

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
OSC52 = "\x1b]52;c;ZXZpbA==\x07"  # writes the clipboard
TITLE = "\x1b]0;pwned\x07"  # retitles the window
RLO = "\u202e"  # right-to-left override
runner = CliRunner()


def test_safe_text_escapes_what_a_terminal_acts_on_and_nothing_else() -> None:
    assert safe_text(f"a{OSC52}b") == "a\\x1b]52;c;ZXZpbA==\\x07b"
    assert safe_text(f"x{RLO}y\u2066z\u200f") == "x\\u202ey\\u2066z\\u200f"
    assert safe_text("c1 \x9b done") == "c1 \\x9b done"
    assert safe_text("name\udcff\udcfe.h") == "name\\xff\\xfe.h"  # os.fsdecode of b"\xff\xfe"
    plain = "processing dispatch aiv ✓ 12 µs\n\tnext line"
    assert safe_text(plain) is plain


def _op(tmp_path: Path, label: str, header: str = "") -> Path:
    repo = tmp_path / "repo"
    kernel = repo / "demo_op" / "op_kernel"
    kernel.mkdir(parents=True)
    include = f'#include "{header}"\n' if header else ""
    (kernel / "demo_op.cpp").write_text(
        f'{include}extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {{\n'
        f'    MoeTracing(TRACE_POINT("{label}", "B"));\n'
        "    DataCopy(x, x, 8);\n"
        f'    MoeTracing(TRACE_POINT("{label}", "E"));\n'
        "}\n", encoding="utf-8")
    (repo / ".git").mkdir()
    return repo / "demo_op"


def _raw_controls(text: str) -> list[str]:
    return [c for c in text if c in "\x1b\x07\x9b" or c == RLO]


def test_check_prints_a_hostile_label_escaped(tmp_path: Path) -> None:
    op = _op(tmp_path, f"phase{TITLE}{RLO}")
    res = runner.invoke(app, ["check", str(op), "--no-compile"])
    out = res.stdout + res.stderr
    assert "phase\\x1b]0;pwned\\x07\\u202e" in out, out
    assert not _raw_controls(out)


def test_plan_prints_a_hostile_file_name_escaped(tmp_path: Path) -> None:
    op = _op(tmp_path, "phase", header=f"evil{OSC52}.h")
    res = runner.invoke(app, ["plan", str(op)])
    out = res.stdout + res.stderr
    assert "evil\\x1b]52;c;ZXZpbA==\\x07.h" in out, out
    assert not _raw_controls(out)


def test_json_keeps_its_own_escaping(tmp_path: Path) -> None:
    op = _op(tmp_path, "phase", header=f"evil{TITLE}.h")
    res = runner.invoke(app, ["plan", str(op), "--format", "json"])
    doc = json.loads(res.stdout)
    missing = doc["operators"][0]["includes"]["missing"]
    assert any(m["header"] == f"evil{TITLE}.h" for m in missing), missing  # the name, exactly


def test_report_and_inspect_print_point_map_labels_escaped(tmp_path: Path) -> None:
    demo = tmp_path / "demo"
    made = runner.invoke(app, ["demo-data", str(demo), "--ranks", "1", "--launches", "2", "--aic", "1"])
    assert made.exit_code == 0, made.stderr
    pmap = demo / "point_map.json"
    doc = json.loads(pmap.read_text(encoding="utf-8"))
    for point in doc["points"].values():
        point["label"] = point["label"].replace("dispatch", f"dispatch{OSC52}")
    pmap.write_text(json.dumps(doc), encoding="utf-8")
    for command in (["report", str(demo)], ["collect", str(demo), "-o", str(tmp_path / "t.json")]):
        res = runner.invoke(app, command)
        out = res.stdout + res.stderr
        assert not _raw_controls(out), (command, out)
    report = runner.invoke(app, ["report", str(demo)]).stdout
    assert "dispatch\\x1b]52" in report, report


def test_a_piped_diff_keeps_the_files_bytes(tmp_path: Path) -> None:
    """Not a terminal: the diff is what `git apply` takes, so the file's own bytes stay."""
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURES / "msopgen_style", repo)
    (repo / ".git").mkdir()
    kernel = repo / "moe_token_permute" / "op_kernel" / "moe_token_permute.cpp"
    data = kernel.read_bytes()
    assert data.count(b'extern "C"') == 1
    kernel.write_bytes(data.replace(b'extern "C"', f"// {TITLE}\n".encode() + b'extern "C"'))
    res = runner.invoke(app, ["apply", str(repo / "moe_token_permute")])
    assert res.exit_code == 0, res.stderr
    assert TITLE in res.stdout  # the context line, with the file's bytes as they are
    assert "\\x1b]0;pwned" not in res.stdout
