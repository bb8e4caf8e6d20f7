"""engine/vocabulary.py: one definition of what optrace writes and reads, so the readers
agree — discovery classifies as a torch adapter exactly what the torch codemod reads a
launch in, and strip removes exactly the markers the codemods write."""

from __future__ import annotations

from pathlib import Path

import pytest

from optrace.codemods.registry import LAYERS
from optrace.codemods.strip import strip_bytes
from optrace.codemods.torch_adapter import launches
from optrace.engine.config import Config
from optrace.engine.discovery import discover
from optrace.engine.vocabulary import (
    FRAG_CLOSE,
    FRAG_OPEN,
    HASH_MARK,
    LINE_MARK,
    MODE_RE,
    RUNTIME_BLOCK_BEGIN,
    RUNTIME_BLOCK_END,
    RUNTIME_BLOCK_VERSION_RE,
    SCAFFOLD_BEGIN,
    SCAFFOLD_END,
    STR_CLOSE,
    STR_OPEN,
    names_profiling,
)

ENTRY = 'extern "C" __global__ __aicore__ void moe_demo(GM_ADDR x, GM_ADDR y) { }\n'


@pytest.mark.parametrize(("call", "launch"), [
    ("EXEC_NPU_CMD(aclnnMoeDemo, x, out);", True),
    ("EXEC_NPU_CMD_V2(aclnnMoeDemo, x, out);", True),
    ("EXEC_NPU_CMD(aclnnMoeDEMO, x, out);", True),  # the op in another spelling
    ("EXEC_KERNEL_CMD(moe_demo, 8, x, out);", True),
    ("MY_EXEC_NPU_CMD(aclnnMoeDemo, x, out);", False),  # a project macro: neither reads it
    ("EXEC_NPU_CMD(aclnnMoeDemoGrad, x, out);", False),  # another op
])
def test_discovery_finds_the_adapters_the_codemod_reads(tmp_path: Path, call: str, launch: bool) -> None:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    op = repo / "ops" / "moe_demo"
    (op / "op_kernel").mkdir(parents=True)
    (op / "op_kernel" / "moe_demo.cpp").write_text(ENTRY)
    adapter = repo / "csrc" / "adapter.cpp"
    adapter.parent.mkdir()
    adapter.write_text(f"at::Tensor moe_demo(const at::Tensor &x) {{\n    at::Tensor out;\n    {call}\n"
                       "    return out;\n}\n")
    layers = discover(op, repo, Config(), LAYERS)
    found = [f.path for f in layers.found.get("torch_adapter", [])]
    read = launches(adapter, adapter.read_bytes(), layers)
    assert bool(found) == bool(read) == launch, (found, read)


def test_strip_removes_exactly_the_markers_the_codemods_write() -> None:
    clean = b"int a;\nint b;\nvoid f() {\n}\n"
    inserted = (b"int a;\nint x = 1;" + LINE_MARK + b"\nint b" + FRAG_OPEN + b" + 1" + FRAG_CLOSE + b";\n"
                b"void f() {\n" + SCAFFOLD_BEGIN + b" mode=B\nTrace();\n" + SCAFFOLD_END + b"\n}\n"
                + RUNTIME_BLOCK_BEGIN + b"1\nstruct MoeTracing {};\n" + RUNTIME_BLOCK_END + b"\n")
    assert strip_bytes(inserted, Path("k.cpp")) == clean
    schema = b'm.def("op(Tensor x) -> (Tensor' + STR_OPEN + b", Tensor" + STR_CLOSE + b')");\n'
    assert strip_bytes(schema, Path("reg.cpp")) == b'm.def("op(Tensor x) -> (Tensor)");\n'
    py = b"import os\nimport sys" + HASH_MARK + b"\n"
    assert strip_bytes(py, Path("s.py")) == b"import os\n"


def test_the_recorded_mode_and_block_version_are_read_back() -> None:
    m = MODE_RE.search(SCAFFOLD_BEGIN + b" mode=A inline")
    assert m is not None and m.group(1) == b"A"
    v = RUNTIME_BLOCK_VERSION_RE.search(RUNTIME_BLOCK_BEGIN + b"12 (generated)")
    assert v is not None and v.group(1) == b"12"


@pytest.mark.parametrize(("name", "named"), [
    ("profiling_data", True), ("profilingData", True), ("ProfilingOut", True),
    (b"outputs[kProfilingIdx]", True), ("workspace", False), (b"tiling", False),
])
def test_names_profiling(name: str | bytes, named: bool) -> None:
    assert names_profiling(name) is named
