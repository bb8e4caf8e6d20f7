"""Python callers codemod (G4, G5): unpack one more value, sync, save, absolute paths."""

# ruff: noqa: E501  (inline before / after snippets are verbatim code)

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from layer_snippets import dedent, make_repo, run

from optrace.codemods.python_callers_cst import python_caller_edits
from optrace.engine.diagnostics import InputError

SAMPLE = "examples/demo_sample.py"
REG = ("torch/reg.cpp", 'TORCH_LIBRARY(lib, m)\n{\n    m.def("demo_op(Tensor x) -> (Tensor, Tensor)");\n}\n')

BEFORE = '''\
"""Demo."""
import argparse

import torch
import torch.multiprocessing as mp
import torch_npu


def worker(rank, args):
    # keep this comment
    y, n = torch.ops.lib.demo_op(
        torch.ones(4).npu())  # and this one
    torch_npu.npu.synchronize()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--world-size", type=int, default=2)
    args = parser.parse_args()
    mp.spawn(worker, args=(args,), nprocs=args.world_size, join=True)


if __name__ == "__main__":
    main()
'''

AFTER = '''\
"""Demo."""
import argparse

import torch
import torch.multiprocessing as mp
import torch_npu
import os as _optrace_os  # optrace
from pathlib import Path as _OptracePath  # optrace


def worker(rank, args):
    # keep this comment
    # optrace-edit 1
    y, n, profiling_data = torch.ops.lib.demo_op(
        torch.ones(4).npu())  # and this one
    if _optrace_os.environ.get("OPTRACE_PROFILING_DIR"):  # optrace
        torch_npu.npu.synchronize()  # optrace
        from optrace.runtime import save_profiling_data as _optrace_save  # optrace
        _optrace_save(profiling_data, rank, _optrace_os.environ["OPTRACE_PROFILING_DIR"],  # optrace
                      point_map=_optrace_os.environ.get("OPTRACE_POINT_MAP"), tag="demo-op")  # optrace
    torch_npu.npu.synchronize()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--profiling-dir", default=None,  # optrace
                        help="optrace: save the op's profiling_data here (rank files)")  # optrace
    parser.add_argument("--point-map", default=None, help="optrace: the point_map.json the build hook wrote")  # optrace
    parser.add_argument("--chrome-trace", default=None,  # optrace
                        help="optrace: write the Chrome trace here (default: <profiling-dir>/trace.json)")  # optrace
    args = parser.parse_args()
    for _optrace_opt in ("profiling_dir", "point_map", "chrome_trace"):  # optrace
        if getattr(args, _optrace_opt, None):  # optrace
            _optrace_path = _OptracePath(getattr(args, _optrace_opt))  # optrace
            setattr(args, _optrace_opt, str(_optrace_path.expanduser().resolve()))  # optrace
            _optrace_os.environ["OPTRACE_" + _optrace_opt.upper()] = getattr(args, _optrace_opt)  # optrace
    for _optrace_env in ("OPTRACE_PROFILING_DIR", "OPTRACE_POINT_MAP", "OPTRACE_CHROME_TRACE"):  # optrace
        if _optrace_os.environ.get(_optrace_env):  # optrace
            _optrace_path = _OptracePath(_optrace_os.environ[_optrace_env])  # optrace
            _optrace_os.environ[_optrace_env] = str(_optrace_path.expanduser().resolve())  # optrace
    mp.spawn(worker, args=(args,), nprocs=args.world_size, join=True)
    if _optrace_os.environ.get("OPTRACE_PROFILING_DIR") and _optrace_os.environ.get("OPTRACE_POINT_MAP"):  # optrace
        import subprocess as _optrace_subprocess  # optrace
        import sys as _optrace_sys  # optrace
        _optrace_dir = _optrace_os.environ["OPTRACE_PROFILING_DIR"]  # optrace
        _optrace_map = _optrace_os.environ["OPTRACE_POINT_MAP"]  # optrace
        _optrace_out = _optrace_os.environ.get("OPTRACE_CHROME_TRACE")  # optrace
        _optrace_out = _optrace_out or _optrace_os.path.join(_optrace_dir, "trace.json")  # optrace
        _optrace_subprocess.run([_optrace_sys.executable, "-m", "optrace", "collect", _optrace_dir,  # optrace
                                 "--point-map", _optrace_map, "-o", _optrace_out], check=True)  # optrace


if __name__ == "__main__":
    main()
'''


def test_sample_with_argparse_and_spawn(tmp_path: Path) -> None:
    op = make_repo(tmp_path, {SAMPLE: BEFORE, REG[0]: REG[1]})
    got = run(python_caller_edits, op, "B")
    assert got == {SAMPLE: AFTER}
    ast.parse(got[SAMPLE])


def test_mode_a_keeps_python_unchanged(tmp_path: Path) -> None:
    op = make_repo(tmp_path, {SAMPLE: BEFORE, REG[0]: REG[1]})
    assert run(python_caller_edits, op, "A") == {}


@pytest.mark.parametrize(("line", "expected"), [
    ("a, *rest = torch.ops.lib.demo_op(x)", "a, *rest, profiling_data = torch.ops.lib.demo_op(x)"),
    ("(a, b) = torch.ops.lib.demo_op(x)", "(a, b, profiling_data) = torch.ops.lib.demo_op(x)"),
    ("[a, b] = ext.demo_op(x)", "[a, b, profiling_data] = ext.demo_op(x)"),
])
def test_tuple_list_and_starred_targets(tmp_path: Path, line: str, expected: str) -> None:
    text = f"import torch\n\n\ndef f(x):\n    {line}\n    return a\n"
    op = make_repo(tmp_path, {"tests/test_demo.py": text, REG[0]: REG[1]})
    after = run(python_caller_edits, op, "B")["tests/test_demo.py"]
    assert f"\n    {expected}\n" in after
    ast.parse(after)


def test_a_whole_result_keeps_its_arity(tmp_path: Path) -> None:
    text = "def f(x):\n    out = torch.ops.lib.demo_op(x)\n    return out[0]\n"
    op = make_repo(tmp_path, {"tests/test_demo.py": text, REG[0]: REG[1]})
    after = run(python_caller_edits, op, "B")["tests/test_demo.py"]
    assert "    out = torch.ops.lib.demo_op(x)\n    out, profiling_data = out[:-1], out[-1]  # optrace\n" in after


def test_indexing_and_return_hoist_the_call(tmp_path: Path) -> None:
    text = ("def f(x):\n    y = torch.ops.lib.demo_op(x)[0]\n    return y\n\n\n"
            "def g(x):\n    return torch.ops.lib.demo_op(x)\n\n\ndef h(x):\n    torch.ops.lib.demo_op(x)\n")
    op = make_repo(tmp_path, {"tests/test_demo.py": text, REG[0]: REG[1]})
    after = run(python_caller_edits, op, "B")["tests/test_demo.py"]
    assert "    *_optrace_outputs, profiling_data = torch.ops.lib.demo_op(x)\n" in after
    assert "    y = tuple(_optrace_outputs)[0]\n" in after
    assert "    return tuple(_optrace_outputs)\n" in after
    assert after.count("*_optrace_outputs, profiling_data =") == 3
    assert after.index("_optrace_save(") < after.index("    y = tuple(_optrace_outputs)[0]")
    ast.parse(after)


def test_a_single_tensor_op(tmp_path: Path) -> None:
    reg = ("torch/reg.cpp", 'TORCH_LIBRARY(lib, m)\n{\n    m.def("demo_op(Tensor x) -> Tensor");\n}\n')
    text = "def f(x):\n    y = torch.ops.lib.demo_op(x)\n    z = torch.ops.lib.demo_op(x) + 1\n"
    op = make_repo(tmp_path, {"tests/test_demo.py": text, reg[0]: reg[1]})
    after = run(python_caller_edits, op, "B")["tests/test_demo.py"]
    assert "    y, profiling_data = y  # optrace\n" in after
    assert "    z = _optrace_outputs[0] + 1\n" in after


def test_tests_without_argparse_save_when_the_environment_asks(tmp_path: Path) -> None:
    text = dedent("""\
        import pytest


        def test_demo(local_rank=0):
            a, b = torch.ops.lib.demo_op(x)
        """)
    op = make_repo(tmp_path, {"tests/test_demo.py": text, REG[0]: REG[1]})
    after = run(python_caller_edits, op, "B")["tests/test_demo.py"]
    assert "import os as _optrace_os  # optrace\n" in after
    assert '    if _optrace_os.environ.get("OPTRACE_PROFILING_DIR"):  # optrace\n        torch.npu.synchronize()' in after
    assert "_optrace_save(profiling_data, local_rank," in after
    assert "add_argument" not in after and "collect" not in after


def test_a_python_syntax_error_is_bad_input(tmp_path: Path) -> None:
    op = make_repo(tmp_path, {"tests/test_demo.py": "def f(x):\n    a, b = torch.ops.lib.demo_op(x\n",
                              REG[0]: REG[1]})
    with pytest.raises(InputError) as caught:
        run(python_caller_edits, op, "A")  # bad input in either mode
    assert caught.value.diagnostic.code == "OT312"
    assert caught.value.diagnostic.path is not None and caught.value.diagnostic.path.name == "test_demo.py"
    assert caught.value.diagnostic.line >= 2


def test_formatting_crlf_and_non_ascii_are_kept(tmp_path: Path) -> None:
    text = "# 注释\r\ndef f(x):\r\n    a, b = torch.ops.lib.demo_op(x)  # é\r\n"
    root = make_repo(tmp_path, {REG[0]: REG[1]})
    path = root.parent.parent / "tests" / "test_demo.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode())
    after = run(python_caller_edits, root, "B")["tests/test_demo.py"]
    assert "    a, b, profiling_data = torch.ops.lib.demo_op(x)  # é\r\n" in after
    assert all(line.endswith("\r") for line in after.split("\n")[:-1])


def test_a_call_inside_a_lambda_is_left_alone(tmp_path: Path) -> None:
    text = "def f(x):\n    t = bench(lambda: torch.ops.lib.demo_op(x))[0]\n    return [torch.ops.lib.demo_op(y) for y in x]\n"
    op = make_repo(tmp_path, {"tests/test_demo.py": text, REG[0]: REG[1]})
    assert run(python_caller_edits, op, "B") == {}


def test_added_lines_keep_within_120_columns_at_any_depth(tmp_path: Path) -> None:
    """A call deep in a test (five levels in, a long operator name, no rank in sight):
    the save's arguments are laid out on as many lines as it takes, under its bracket,
    each line within 120 columns with its mark; the file still parses and strips back
    (`run` checks the strip)."""
    reg = ("torch/reg.cpp", 'TORCH_LIBRARY(a_rather_long_library_name, m)\n{\n'
           '    m.def("demo_op(Tensor x) -> (Tensor, Tensor)");\n}\n')
    text = dedent("""\
        import pytest


        class TestDemo:
            def test_demo(self, cases):
                for case in cases:
                    with case.context():
                        if case.enabled:
                            first_output_tensor, second_output_tensor = torch.ops.a_rather_long_library_name.demo_op(x)
        """)
    op = make_repo(tmp_path, {"tests/test_demo.py": text, reg[0]: reg[1]})
    after = run(python_caller_edits, op, "B")["tests/test_demo.py"]
    added = [line for line in after.splitlines() if line.endswith("# optrace")]
    assert any("_optrace_save(" in line for line in added)
    assert all(len(line) <= 120 for line in added), [line for line in added if len(line) > 120]
    ast.parse(after)
