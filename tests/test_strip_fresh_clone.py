"""Strip needs nothing but the repository: on a fresh copy of an applied tree (no `.git`,
no `.optrace`, another path, an empty state directory) it gives every byte back, and
nothing optrace wrote holds encoded data (a reviewer reads every line of the patch)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
UMDK_OPS = "src/cam/comm_operator/ascend_kernels"
SAMPLE = "src/cam/examples/moe_fused_gmm_sample.py"
BUILD = "build/cam/comm_operator/compile_ascend_proj.sh"
# A run of base64 long enough to be a payload, not a word.
_ENCODED_RE = re.compile(rb"[A-Za-z0-9+/]{40,}={0,2}")


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not {".git", ".optrace"} & set(p.relative_to(root).parts)}


def _optrace(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_STATE_HOME": str(state)}
    return subprocess.run([sys.executable, "-m", "optrace", *args], capture_output=True, text=True, env=env,
                          timeout=600)


def _umdk_with_the_hard_cases(root: Path) -> None:
    """umdk_style, plus what used to be kept encoded: a call whose result is used in place
    (hoisted by apply) and a hook block written by hand (taken over by apply)."""
    sample = root / SAMPLE
    sample.write_text(sample.read_text().replace(
        "    torch_npu.npu.synchronize()\n\n    assert output.shape == x.shape\n",
        "    torch_npu.npu.synchronize()\n    first = torch.ops.umdk_cam_op_lib.moe_fused_gmm(\n"
        "        x, expert_ids, gmm1_weight, gmm1_weight_scale, gmm2_weight, gmm2_weight_scale,\n"
        "        expert_scales,\n"
        "        group_ep, world_size, rank, args.moe_expert_num, args.batch_size * world_size)[0]  # again\n"
        "\n    assert output.shape == x.shape == first.shape\n", 1))
    assert "first = torch.ops" in sample.read_text()
    build = root / BUILD
    text = build.read_text()
    at = text.index("build_project() {")
    legacy = ('# TRACE_PREPROCESSOR_HOOK_START\npython3 tools/trace_preprocess.py "${PROJ_DIR}"\n'
              "# TRACE_PREPROCESSOR_HOOK_END\n")
    build.write_text(text[:at] + legacy + text[at:])


@pytest.mark.slow
@pytest.mark.parametrize(("fixture", "ops"), [
    ("umdk_style", (f"{UMDK_OPS}/moe_fused_gmm", f"{UMDK_OPS}/moe_gate_bias")),
    ("direct_launch", ("csrc/ops/moe_gating_topk",)),
    ("scattered_torch", ("csrc/ops/moe_gating_topk", "csrc/ops/moe_token_count")),
])
def test_strip_on_a_fresh_copy_with_no_state_restores_every_byte(tmp_path: Path, fixture: str,
                                                                 ops: tuple[str, ...]) -> None:
    applied = tmp_path / "applied"
    shutil.copytree(FIXTURES / fixture, applied)
    if fixture == "umdk_style":
        _umdk_with_the_hard_cases(applied)
    before = _tree(applied)
    for op in ops:
        res = _optrace(tmp_path / "state-apply", "apply", str(applied / op), "--write")
        assert res.returncode == 0, res.stderr
    after = _tree(applied)
    assert after != before
    written = {k: v for k, v in after.items() if before.get(k) != v}
    if fixture == "umdk_style":
        assert b"_optrace_outputs" in written[SAMPLE] and b"# optrace-off: " in written[BUILD]
    for name, data in written.items():
        new_lines = set(data.splitlines()) - set(before.get(name, b"").splitlines())
        encoded = [ln for ln in new_lines if _ENCODED_RE.search(ln)]
        assert not encoded, (name, encoded[:1])
    # A fresh copy: no .git, no .optrace, another path, a state directory never used.
    fresh = tmp_path / "elsewhere" / "clone"
    shutil.copytree(applied, fresh, ignore=shutil.ignore_patterns(".git", ".optrace"))
    state = tmp_path / "state-empty"
    state.mkdir()
    for op in ops:
        res = _optrace(state, "strip", str(fresh / op), "--write")
        assert res.returncode == 0, res.stderr
    assert _tree(fresh) == before
