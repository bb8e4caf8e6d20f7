"""The host compile behind `check`'s compile safety and the corpus run's compile diff:
kernel files against the AscendC stub, op_host / op_api files against the CANN host stub."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from unittest import mock

from optrace.engine.host_compile import _irregular_include, host_compile

HOST = """\
#include "register/op_def_registry.h"
namespace ops {
class Demo : public OpDef {
public:
    explicit Demo(const char *name) : OpDef(name)
    {
        this->Output("profiling_data").ParamType(REQUIRED).DataType({ge::DT_INT64, ge::DT_INT64})
            .Format({ge::FORMAT_ND, ge::FORMAT_ND}).UnknownShapeFormat({ge::FORMAT_ND, ge::FORMAT_ND});
    }
};
static ge::graphStatus InferShapeDemo(gert::InferShapeContext *context)
{
    gert::Shape *shape = context->GetOutputShape(2);
    if (shape != nullptr) {
        shape->SetDimNum(1);
        shape->SetDim(0, 4096);
    }
    return ge::GRAPH_SUCCESS;
}
static ge::graphStatus TilingDemo(gert::TilingContext *context)
{
    const gert::CompileTimeTensorDesc *desc = context->GetOutputDesc(2);
    if (desc != nullptr && desc->GetDataType() != ge::DT_INT64) {
        return ge::GRAPH_FAILED;
    }
    return ge::GRAPH_SUCCESS;
}
}  // namespace ops
int aclnnDemo(const aclTensor *x, const aclTensor *profilingData);
"""


def test_host_files_compile_against_the_cann_stub_and_errors_are_theirs(tmp_path: Path) -> None:
    host = tmp_path / "demo" / "op_host" / "demo_def.cpp"
    host.parent.mkdir(parents=True)
    host.write_text(HOST)
    assert host_compile([host], tmp_path / "demo").errors == {host: []}
    # a wrong member is an error on its own line (what the corpus compile diff counts)
    host.write_text(HOST.replace("shape->SetDimNum(1);", "shape->SetDims(1);"))
    errors = host_compile([host], tmp_path / "demo").errors[host]
    assert [(e.line, e.message) for e in errors] == [(15, "no member named 'SetDims' in 'gert::Shape'")]


def test_kernel_files_get_the_ascendc_stub_not_the_host_one(tmp_path: Path) -> None:
    kernel = tmp_path / "demo" / "op_kernel" / "demo.cpp"
    kernel.parent.mkdir(parents=True)
    kernel.write_text('#include "kernel_operator.h"\nextern "C" __global__ __aicore__ void demo(GM_ADDR x)\n'
                      "{\n    AscendC::SyncAll();\n    gert::Shape *s = nullptr;\n}\n")
    errors = host_compile([kernel], tmp_path / "demo").errors[kernel]
    assert [e.line for e in errors] == [5]  # gert is host API: unknown in a kernel


def test_standard_headers_together_are_one_shim(tmp_path: Path) -> None:
    """Every shimmed standard header is one text: a kernel including several of them
    (the stub itself includes <functional>) gets each declaration once."""
    kernel = tmp_path / "demo" / "op_kernel" / "demo.cpp"
    kernel.parent.mkdir(parents=True)
    kernel.write_text("#include <cstddef>\n#include <functional>\n#include <cstdint>\n"
                      '#include "kernel_operator.h"\n'
                      'extern "C" __global__ __aicore__ void demo(GM_ADDR x)\n{\n'
                      "    std::function<void(int)> f = [](int) {};\n    size_t n = sizeof(int64_t);\n"
                      "    (void)n;\n}\n")
    assert host_compile([kernel], tmp_path / "demo").errors == {kernel: []}


def test_fixed_width_types_come_with_the_host_stub(tmp_path: Path) -> None:
    host = tmp_path / "demo" / "op_host" / "demo_infershape.cpp"
    host.parent.mkdir(parents=True)
    host.write_text("static ge::graphStatus InferDemo(gert::InferShapeContext *context)\n{\n"
                    "    constexpr uint32_t index = 1;\n    context->GetOutputShape(index);\n"
                    "    return ge::GRAPH_SUCCESS;\n}\n")
    assert host_compile([host], tmp_path / "demo").errors == {host: []}


def test_headers_errors_come_from_the_source_including_them(tmp_path: Path) -> None:
    """One translation unit per source: a header it includes (directly or through another)
    gets its own errors from it; a header no source reaches is compiled alone; a header
    included twice is not reported twice; `only_lines` keeps the asked lines only."""
    kernel = tmp_path / "demo" / "op_kernel"
    kernel.mkdir(parents=True)
    (kernel / "a.h").write_text('#pragma once\n#include "b.h"\ninline void A() { undeclared_a(); }\n')
    (kernel / "b.h").write_text("#pragma once\ninline void B()\n{\n    undeclared_b();\n}\n")
    (kernel / "lone.h").write_text("#pragma once\ninline void L() { undeclared_l(); }\n")
    (kernel / "demo.cpp").write_text('#include "a.h"\n#include "b.h"\n'
                                     'extern "C" __global__ __aicore__ void demo(GM_ADDR x) { A(); B(); }\n')
    files = [kernel / "lone.h", kernel / "b.h", kernel / "demo.cpp", kernel / "a.h"]
    errors = host_compile(files, tmp_path / "demo").errors
    got = {p.name: [(e.line, e.message) for e in errs] for p, errs in errors.items()}
    assert got == {
        "demo.cpp": [],
        "a.h": [(3, "use of undeclared identifier 'undeclared_a'")],
        "b.h": [(4, "use of undeclared identifier 'undeclared_b'")],
        "lone.h": [(2, "use of undeclared identifier 'undeclared_l'")],
    }
    only = host_compile(files, tmp_path / "demo", {kernel / "b.h": {1, 2, 3}, kernel / "a.h": {3}}).errors
    assert {p.name: [e.line for e in errs] for p, errs in only.items()} == {
        "demo.cpp": [], "a.h": [3], "b.h": [], "lone.h": []}


def test_absent_headers_are_empty_stand_ins_and_present_ones_win(tmp_path: Path) -> None:
    """An include the operator does not have (a submodule, CANN) is an empty stand-in,
    whatever its spelling (`./x.h`, `a//b.h` are written as files: libclang finds an
    unsaved file only by its name as spelled); a header the operator has is read, never
    its stand-in, from the including file's folder or another folder of the operator;
    nothing is left behind."""
    kernel = tmp_path / "demo" / "op_kernel"
    (kernel / "sub").mkdir(parents=True)
    (tmp_path / "demo" / "common").mkdir()
    (tmp_path / "demo" / "common" / "present.h").write_text("#pragma once\nconstexpr int PRESENT = 1;\n")
    (kernel / "sub" / "near.h").write_text("#pragma once\nconstexpr int NEAR = 2;\n")
    (kernel / "demo.cpp").write_text(
        '#include "lib/absent/deep.h"\n#include "./odd//absent.h"\n#include <cann/absent.h>\n'
        '#include "present.h"\n#include "sub/near.h"\n#include "./sub/near.h"\n'
        '#include "kernel_operator.h"\n'
        'extern "C" __global__ __aicore__ void demo(GM_ADDR x) { int n = PRESENT + NEAR; (void)n; }\n')
    private = tmp_path / "tmp"  # this call's temporary folders only, not other processes'
    private.mkdir()
    with mock.patch.object(tempfile, "tempdir", str(private)):
        assert host_compile([kernel / "demo.cpp"], tmp_path / "demo").errors == {kernel / "demo.cpp": []}
    assert not list(private.iterdir())
    # a header the operator has is its own, not an empty stand-in: its errors are seen
    (tmp_path / "demo" / "common" / "present.h").write_text("#pragma once\nconstexpr int PRESENT = nope;\n")
    errors = host_compile([kernel / "demo.cpp", tmp_path / "demo" / "common" / "present.h"],
                          tmp_path / "demo").errors
    assert [e.line for e in errors[tmp_path / "demo" / "common" / "present.h"]] == [2]


def test_a_header_spelt_two_ways_is_found_both_ways(tmp_path: Path) -> None:
    """`lib/x.h` in one source and `./lib/x.h` in another (or after it in the same one),
    `./vector` beside `<vector>`: each spelling finds a stand-in with the same text (an
    unsaved file answers only to its name as spelt), so no include is fatal and the
    errors after it are still seen."""
    kernel = tmp_path / "demo" / "op_kernel"
    kernel.mkdir(parents=True)
    tail = "inline int F() { return undeclared_after; }\n"
    (kernel / "a.cpp").write_text('#include "lib/x.h"\n#include <vector>\n' + tail)
    (kernel / "b.cpp").write_text('#include "./lib/x.h"\n#include "lib//x.h"\n#include "./vector"\n'
                                  "inline std::vector<int> v(2, 0);\n" + tail)
    errors = host_compile([kernel / "a.cpp", kernel / "b.cpp"], tmp_path / "demo").errors
    got = {p.name: [(e.line, e.message) for e in errs] for p, errs in errors.items()}
    assert got == {"a.cpp": [(3, "use of undeclared identifier 'undeclared_after'")],
                   "b.cpp": [(5, "use of undeclared identifier 'undeclared_after'")]}


def test_includes_spelt_anew_each_time_are_followed_once_to_the_fifo(tmp_path: Path) -> None:
    """The FIFO guard follows a header by its identity: a header that includes itself
    as `../inc/self.h` (a new spelling at each step) is read once, and a FIFO further
    down the chain is still found; absent headers are looked for and passed over."""
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "self.h").write_text('#include "../inc/self.h"\n#include "./self.h"\n#include "next.h"\n'
                                '#include "kernel_operator.h"\n')
    (inc / "next.h").write_text('#include "deep/pipe.h"\n')
    (inc / "deep").mkdir()
    src = tmp_path / "k.cpp"
    src.write_text('#include "inc/self.h"\n')
    assert _irregular_include(src, [tmp_path, inc]) is None  # terminates; all regular
    os.mkfifo(inc / "deep" / "pipe.h")
    found = _irregular_include(src, [tmp_path, inc])
    assert found is not None and found.name == "pipe.h" and os.path.samefile(found, inc / "deep" / "pipe.h")


def test_a_header_linked_into_two_folders_is_followed_from_both(tmp_path: Path) -> None:
    """Quoted includes are looked up beside the spelling libclang reached a header by:
    `dir1/a.h`, a link to `dir2/a.h`, includes `x.h`, a FIFO in dir1 and a regular file
    in dir2. Reached first through dir2, the header is still followed from dir1."""
    for d in ("dir1", "dir2"):
        (tmp_path / d).mkdir()
    (tmp_path / "dir2" / "a.h").write_text('#include "x.h"\n')
    (tmp_path / "dir2" / "x.h").write_text("int x;\n")
    (tmp_path / "dir1" / "a.h").symlink_to("../dir2/a.h")
    os.mkfifo(tmp_path / "dir1" / "x.h")
    (tmp_path / "b.h").write_text('#include "dir1/a.h"\n')
    src = tmp_path / "m.cpp"
    src.write_text('#include "b.h"\n#include "dir2/a.h"\n')
    found = _irregular_include(src, [tmp_path])
    assert found is not None and os.path.samefile(found, tmp_path / "dir1" / "x.h")


def test_type_traits_a_kernel_class_tests_its_type_with_are_known(tmp_path: Path) -> None:
    """`static constexpr bool kIsInt32 = std::is_same_v<T, int32_t>;` in a kernel class:
    without the trait the parser's recovery declared a member named `int32_t`, and every
    later `int32_t` in the class — optrace's `TRACE_POINT` cast among them — was "unknown
    type name" (check's OT420 on apply's own output)."""
    kernel = tmp_path / "demo" / "op_kernel" / "demo.h"
    kernel.parent.mkdir(parents=True)
    kernel.write_text('#include <type_traits>\n#include "kernel_operator.h"\n'
                      "template <typename T>\nclass Demo {\npublic:\n"
                      "    static constexpr bool kIsInt32 = std::is_same_v<T, int32_t>;\n"
                      "    using Acc = std::conditional_t<kIsInt32, int64_t, float>;\n"
                      "    template <typename U = T, std::enable_if_t<std::is_same<U, T>::value, int> = 0>\n"
                      "    __aicore__ inline void Process()\n"
                      "    {\n        int32_t id = static_cast<int32_t>(1);\n        (void)id;\n    }\n"
                      "};\n")
    assert host_compile([kernel], tmp_path / "demo").errors == {kernel: []}
