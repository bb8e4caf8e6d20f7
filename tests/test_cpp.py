from __future__ import annotations

from pathlib import Path

from optrace.engine.cpp import (
    CodeIndex,
    base_type_name,
    core_of_condition,
    new_parser,
    parse_file,
    role_of_condition,
)
from optrace.engine.source import DEFAULT_QUALIFIERS, SourceFile, normalise

KERNEL = b"""
namespace Catlass::Gemm::Kernel {
template <class BlockMmad_>
class GroupedMatmul {
public:
    using BlockMmad = BlockMmad_;
    template <int32_t CORE_TYPE = g_coreType>
    CATLASS_DEVICE void operator()(Params const &params);
    template <>
    CATLASS_DEVICE void operator()<AscendC::AIC>(Params const &params) { Run(); }
    template <>
    CATLASS_DEVICE void operator()<AscendC::AIV>(Params const &params) { Run(); }
private:
    BlockMmad mmad_;
};
}
template <class T>
__aicore__ inline void Dispatch<T>::Process() { SendTokens(); }
"""


def index_of(data: bytes) -> CodeIndex:
    src = SourceFile(Path("k.h"), data)
    src.text = normalise(data, DEFAULT_QUALIFIERS)
    pf = parse_file(new_parser(), src)
    assert pf.error_lines == []
    idx = CodeIndex()
    idx.add_file(pf)
    return idx


def test_specialisations_out_of_class_methods_and_fields() -> None:
    idx = index_of(KERNEL)
    ops = sorted((f.scope, f.core) for f in idx.by_name["operator()"])
    assert ops == [("GroupedMatmul", "AIC"), ("GroupedMatmul", "AIV")]
    (proc,) = idx.by_name["Process"]
    assert proc.scope == "Dispatch" and proc.line == 18
    assert idx.classes["GroupedMatmul"].fields["mmad_"] == "BlockMmad"
    assert idx.classes["GroupedMatmul"].aliases["BlockMmad"] == "BlockMmad_"


def test_base_type_name() -> None:
    assert base_type_name("typename Gemm::Kernel::Foo<A, B<C>>::Params const &") == "Params"
    assert base_type_name("MoeDispatchImpl::MoeTokenDispatch<X, 3>") == "MoeTokenDispatch"


def test_core_conditions() -> None:
    assert core_of_condition("(g_coreType == AscendC::AIV)") == "AIV"
    assert core_of_condition("(g_coreType != AscendC::AIV)") == "AIC"
    assert core_of_condition("(ASCENDISAIC)") == "AIC"
    assert core_of_condition("(!ASCEND_IS_AIV)") == "AIC"
    assert core_of_condition("(std::is_same_v<ArchTag, AscendC::AIC>)") == "AIC"
    assert core_of_condition("(EXEC_FLAG & 1)") is None


def test_role_conditions() -> None:
    assert role_of_condition("(isSendCore)") == "(isSendCore)"
    assert role_of_condition("(AscendC::GetSubBlockIdx() == 1)") is not None
    assert role_of_condition("(aivIdx < sendCoreNum)") is not None
    assert role_of_condition("(tokenNum > 0)") is None
