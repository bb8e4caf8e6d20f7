"""What optrace generates (the runtime header beside the kernel, a sizes header beside the
host code) goes only where nothing of the user's is: `strip` deletes what starts with the
created-file mark, so apply writing over a file of the user's (or through a link to one)
would have strip delete it afterwards. Refused with the path, nothing written."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from cache_changes import FIXTURE, OP_REL, cli

GENERATED = {
    "runtime header": "op_kernel/optrace_runtime.h",
    "sizes header": "op_host/optrace_moe_fused_gmm_profiling.h",
}


def _tree(root: Path) -> dict[str, str]:
    """Every path under `root` (links as where they lead, not followed) and its bytes' hash."""
    out: dict[str, str] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                out[rel] = "-> " + os.readlink(path)
            elif path.is_file():
                out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
            elif not path.is_dir():
                out[rel] = "special"
    return out


@pytest.mark.parametrize("what", list(GENERATED))
@pytest.mark.parametrize("there", ["own file", "link into the repository", "fifo", "folder"])
def test_something_at_a_generated_file_s_path_is_refused(tmp_path: Path, what: str, there: str) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURE, repo)
    op = repo / OP_REL
    path = op / GENERATED[what]
    if there == "own file":
        path.write_text("// helpers of mine\n#pragma once\nint mine;\n")
    elif there == "link into the repository":
        (repo / "build.sh").write_text("#!/bin/sh\necho building\n")
        path.symlink_to(repo / "build.sh")
    elif there == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    before = _tree(tmp_path)
    for args in (("apply", str(op)), ("apply", str(op), "--write")):
        code, out, err = cli(*args)
        assert code == 2 and "OT030" in err and f"{what} optrace writes is generated at this path" in err, (
            code, out, err)
        assert "Traceback" not in out + err
    assert _tree(tmp_path) == before  # nothing written, the user's file and the link's target kept


def test_python_files_that_start_with_a_byte_order_mark_are_edited_in_place(tmp_path: Path) -> None:
    """A UTF-8 byte-order mark before a Python file (valid Python: LibCST reads it as
    "utf-8-sig"): every edit lands where it does without the mark (a meta function's
    edits were 3 bytes off, a file that no longer parsed; a caller's were refused), and
    strip gives the bytes back."""
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURE, repo)
    plain = tmp_path / "plain"
    shutil.copytree(FIXTURE, plain)
    marked = sorted(p.relative_to(repo) for p in repo.rglob("*.py"))
    assert len(marked) >= 3
    for rel in marked:
        (repo / rel).write_bytes(b"\xef\xbb\xbf" + (repo / rel).read_bytes())
    before = {rel: (repo / rel).read_bytes() for rel in marked}
    assert cli("apply", str(plain / OP_REL), "--write")[0] == 0
    code, out, err = cli("apply", str(repo / OP_REL), "--write")
    assert code == 0, (out, err)
    edited = [rel for rel in marked if (repo / rel).read_bytes() != before[rel]]
    assert edited, "no Python file was edited"
    for rel in edited:  # the same edits as without the mark, after it
        assert (repo / rel).read_bytes() == b"\xef\xbb\xbf" + (plain / rel).read_bytes(), rel
    assert cli("strip", str(repo / OP_REL), "--write")[0] == 0
    assert {rel: (repo / rel).read_bytes() for rel in marked} == before


def test_pytorch_s_own_function_of_the_op_s_name_is_not_the_op(tmp_path: Path) -> None:
    """An operator named `gelu` beside another operator's reference code calling
    PyTorch's `gelu` (`torch.nn.functional.gelu`, `F.gelu`, `torch.gelu`): those calls are
    PyTorch's, not the op's; apply leaves the file alone (its unpack took the last row of
    a real tensor for the profiling buffer)."""
    repo = tmp_path / "repo"
    kernel = repo / "activation" / "gelu" / "op_kernel" / "gelu.cpp"
    kernel.parent.mkdir(parents=True)
    (repo / ".git").mkdir()
    kernel.write_text('#include "kernel_operator.h"\n'
                      'extern "C" __global__ __aicore__ void gelu(GM_ADDR x, GM_ADDR y, GM_ADDR ws,\n'
                      '                                            GM_ADDR tiling)\n'
                      "{\n    for (int i = 0; i < 4; i++) {\n        Compute(x, y, i);\n    }\n}\n")
    golden = repo / "activation" / "gelu_quant" / "tests" / "golden.py"
    golden.parent.mkdir(parents=True)
    golden.write_text("import torch\nimport torch.nn.functional as F\nimport torch.nn.functional as tnf\n"
                      "from torch import nn\n\n\n"
                      "def gelu_quant_golden(x):\n"
                      '    y = torch.nn.functional.gelu(x, approximate="tanh")\n'
                      "    z = F.gelu(x) + torch.gelu(x) + tnf.gelu(x) + nn.functional.gelu(x)\n"
                      "    return y * 2 + z\n")
    # A project's own module bound to `F` calls the project's op, whatever its name says.
    sample = repo / "tests" / "test_gelu.py"
    sample.parent.mkdir(parents=True)
    sample.write_text("import torch\nimport gelu_ops as F\n\n\n"
                      "def test_gelu():\n    y = F.gelu(torch.ones(4))\n    assert y is not None\n")
    before = golden.read_bytes()
    code, out, err = cli("apply", str(kernel.parent.parent), "--write")
    assert code == 0, (out, err)
    assert golden.read_bytes() == before
    assert "golden.py" not in out
    assert b"profiling_data" in sample.read_bytes(), sample.read_text()



def test_a_method_of_python_s_own_types_named_as_the_op_is_not_the_op(tmp_path: Path) -> None:
    """An operator named `index` (ops-nn has one) beside other operators' golden scripts
    calling `str.index` / `list.index` (`data_format.index("H")`, `rows.tolist().index(x)`):
    those are Python's methods, not the op; apply leaves the scripts alone (it unpacked
    them as the op's call). A test calling the op through the library it imports — on one
    line or in a parenthesized import — is still the op's caller."""
    repo = tmp_path / "repo"
    kernel = repo / "index" / "index" / "op_kernel" / "index.cpp"
    kernel.parent.mkdir(parents=True)
    (repo / ".git").mkdir()
    kernel.write_text('#include "kernel_operator.h"\n'
                      'extern "C" __global__ __aicore__ void index(GM_ADDR x, GM_ADDR idx, GM_ADDR y,\n'
                      '                                             GM_ADDR ws, GM_ADDR tiling)\n'
                      "{\n    for (int i = 0; i < 4; i++) {\n        Gather(x, idx, y, i);\n    }\n}\n")
    golden = repo / "pooling" / "avg_pool" / "tests" / "golden.py"
    golden.parent.mkdir(parents=True)
    golden.write_text("import numpy as np\n\n\n"
                      "def avg_pool_golden(x, data_format, rows):\n"
                      '    h = data_format.index("H")\n'
                      "    w = data_format.upper().index('W')\n"
                      "    first = rows.tolist().index(0)\n"
                      "    return np.mean(x, axis=(h, w)) + first\n")
    sample = repo / "tests" / "test_index.py"
    sample.parent.mkdir(parents=True)
    sample.write_text("import torch\nfrom index_lib import (\n    index_ops,\n)\n\n\n"
                      "def test_index():\n"
                      "    y = index_ops.index(torch.ones(4), torch.zeros(2))\n"
                      "    assert y is not None\n")
    before = golden.read_bytes()
    code, out, err = cli("apply", str(kernel.parent.parent), "--write")
    assert code == 0, (out, err)
    assert golden.read_bytes() == before
    assert "golden.py" not in out
    assert b"profiling_data" in sample.read_bytes(), sample.read_text()


_INDEX_CALLERS = {
    # the call's receiver over two lines
    "test_chained.py": "import torch\n\n\ndef test_it():\n    y = (torch.ops.index_lib\n"
                       "         .index(torch.ones(4)))\n    assert y is not None\n",
    # a comment inside a parenthesized import
    "test_commented.py": "import torch\nfrom index_lib import (\n    index_ops,  # the op's library\n)\n\n\n"
                         "def test_it():\n    y = index_ops.index(torch.ones(4))\n    assert y is not None\n",
    # two imports on a line
    "test_semicolon.py": "import torch; import index_lib\n\n\ndef test_it():\n"
                         "    y = index_lib.index(torch.ones(4))\n    assert y is not None\n",
    # the library bound to a name, and to an attribute
    "test_bound.py": "import torch\n\nops = torch.ops.index_lib\n\n\nclass Runner:\n    def __init__(self):\n"
                     "        self.ops = torch.ops.index_lib\n\n    def run(self, x):\n"
                     "        y = self.ops.index(x)\n        return y\n\n\n"
                     "def test_it():\n    y = ops.index(torch.ones(4))\n    assert y is not None\n",
}


def test_an_op_named_as_python_s_methods_is_found_through_every_shape_of_import(tmp_path: Path) -> None:
    """The op `index` called through its library however the file reaches it (over lines,
    a commented import, `;`, a name or an attribute bound to the library): each is the op's
    caller, in the search as in the edit. A standard-library value's `index` (`sys.argv`,
    `string.ascii_uppercase`) is Python's: that script is left alone."""
    repo = tmp_path / "repo"
    kernel = repo / "index" / "index" / "op_kernel" / "index.cpp"
    kernel.parent.mkdir(parents=True)
    (repo / ".git").mkdir()
    kernel.write_text('#include "kernel_operator.h"\n'
                      'extern "C" __global__ __aicore__ void index(GM_ADDR x, GM_ADDR y, GM_ADDR ws,\n'
                      "                                             GM_ADDR tiling)\n"
                      "{\n    for (int i = 0; i < 4; i++) {\n        Gather(x, y, i);\n    }\n}\n")
    tests = repo / "tests"
    tests.mkdir()
    for name, text in _INDEX_CALLERS.items():
        (tests / name).write_text(text)
    tool = repo / "tools" / "gen_cases.py"
    tool.parent.mkdir()
    tool.write_text("import string\nimport sys\n\n\ndef main():\n"
                    "    out = sys.argv[sys.argv.index('--out') + 1]\n"
                    "    column = string.ascii_uppercase.index('C')\n    return out, column\n")
    before = tool.read_bytes()
    code, out, err = cli("plan", str(kernel.parent.parent), "--format", "json")
    assert code == 0, (out, err)
    layers = json.loads(out)["operators"][0]["layers"]
    found = {Path(f["file"]).name for f in layers.get("python_callers", [])}
    assert found == set(_INDEX_CALLERS), found
    code, out, err = cli("apply", str(kernel.parent.parent), "--write")
    assert code == 0, (out, err)
    for name in _INDEX_CALLERS:
        assert b"profiling_data" in (tests / name).read_bytes(), (tests / name).read_text()
    assert tool.read_bytes() == before

def _namesake(folder: Path) -> None:
    """An operator `silu` of the ops-nn shape: a kernel and its aclnn header."""
    (folder / "op_kernel").mkdir(parents=True)
    (folder / "op_api").mkdir()
    (folder / "op_kernel" / "silu.cpp").write_text(
        '#include "kernel_operator.h"\n'
        'extern "C" __global__ __aicore__ void silu(GM_ADDR x, GM_ADDR y, GM_ADDR ws, GM_ADDR tiling)\n'
        "{\n    for (int i = 0; i < 8; i++) {\n        Step(x, y, i);\n    }\n}\n")
    (folder / "op_api" / "aclnn_silu.h").write_text(
        "#pragma once\n#include \"aclnn/aclnn_base.h\"\n\n"
        "ACLNN_API aclnnStatus aclnnSiluGetWorkspaceSize(const aclTensor* self, aclTensor* out,\n"
        "    uint64_t* workspaceSize, aclOpExecutor** executor);\n"
        "ACLNN_API aclnnStatus aclnnSilu(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,\n"
        "                                aclrtStream stream);\n")


def test_another_operator_of_the_same_name_keeps_its_own_layers(tmp_path: Path) -> None:
    """Two operators named `silu` (a current one and an experimental one, as ops-nn has
    them): applying one edits its own aclnn header, never the other's C API."""
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    _namesake(repo / "activation" / "silu")
    _namesake(repo / "experimental" / "activation" / "silu")
    other = repo / "experimental"
    before = _tree(other)
    code, out, err = cli("apply", str(repo / "activation" / "silu"), "--write")
    assert code == 0, (out, err)
    assert b"profiling" in (repo / "activation" / "silu" / "op_api" / "aclnn_silu.h").read_bytes().lower()
    assert _tree(other) == before


def test_a_unit_test_folder_named_like_the_op_is_not_another_operator(tmp_path: Path) -> None:
    """The op's tests in a folder of its name that holds a kernel unit test's
    `op_kernel/` (gtest code, no kernel entry): still this operator's callers, not a
    namesake operator's files."""
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURE, repo)
    tests = sorted(repo.rglob("test_moe_fused_gmm.py"))
    assert tests and tests[0].parent.name == "moe_fused_gmm"
    first = cli("plan", str(repo / OP_REL), "--format", "json")
    assert first[0] == 0
    gtest = tests[0].parent / "op_kernel" / "test_moe_fused_gmm_kernel.cpp"
    gtest.parent.mkdir()
    gtest.write_text('#include <gtest/gtest.h>\nTEST(MoeFusedGmm, Tiles) { EXPECT_EQ(1, 1); }\n')
    assert cli("plan", str(repo / OP_REL), "--format", "json") == first
