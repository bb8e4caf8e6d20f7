"""Plan-level checks of an instrumented tree: tile-loop points, hot phases, density."""

from __future__ import annotations

from pathlib import Path

from optrace.pipeline.check_plan import plan_findings

KERNEL = """
__aicore__ inline void Gemm() {
    for (uint32_t groupIdx = 0; groupIdx < 4; ++groupIdx) {
        MoeTracing(TRACE_POINT("gemm group-loop", "B"), 0, groupIdx);
        for (uint32_t kIdx = 0; kIdx < 8; ++kIdx) {
            MoeTracing(TRACE_POINT("gemm k-step", "B"));
            Mmad(a, b, c);
            MoeTracing(TRACE_POINT("gemm k-step", "E"));
        }
        CrossCoreWaitFlag(ready);
        MoeTracing(TRACE_POINT("gemm group-loop", "E"), 0, groupIdx);
    }
}
extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {
    MoeTracing(TRACE_POINT("processing", "B"));
    MoeTracing(TRACE_POINT("gemm", "B"));
    Gemm();
    MoeTracing(TRACE_POINT("gemm", "E"));
    MoeTracing(TRACE_POINT("processing", "E"));
}
"""


def test_tile_loop_points_hot_phases_and_density(tmp_path: Path) -> None:
    op = tmp_path / "repo" / "demo_op"
    (op / "op_kernel").mkdir(parents=True)
    (tmp_path / "repo" / "optrace.toml").touch()
    (op / "op_kernel" / "demo_op.cpp").write_text(KERNEL)
    found = {(d.code, d.line): d for d in plan_findings(op, None)}
    assert ("OT408", 6) in found and ("OT408", 8) in found  # inside the kIdx tile loop
    assert "kIdx" in found[("OT408", 6)].message
    assert not any(code == "OT408" and line in (4, 11) for code, line in found)  # phase loop: fine
    hot = [d for (code, _), d in found.items() if code == "OT412"]
    assert hot and '"gemm group wait"' in hot[0].message  # the cross-core wait has no points
    # 4 labels, but the kernel offers fewer than 10 candidate regions: no density warning.
    assert not any(code == "OT106" for code, _ in found)
