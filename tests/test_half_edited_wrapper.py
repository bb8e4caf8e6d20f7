"""Every signature apply edits passes G2 after it.

- A property over our fixtures: apply, then every aclnn / l0 parameter or argument list
  in the files apply edited has passing G2 evidence, and each such file has some (none is
  left half-edited or unread).
- The half-edited wrapper, reproduced on fixtures/l0op_style: a declaration that already
  takes a profiling parameter somewhere else (written by hand, say after `executor`)
  made apply edit the definition and leave that declaration, and check then failed G2 on
  apply's own output. apply now refuses (OT313, naming the list's `file:line`, nothing
  written); a hand-written parameter where optrace puts it is kept and the rest threaded.
"""

# ruff: noqa: E501  (inline snippets are verbatim code)

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from source_fuzz import fixture_operators
from test_host_layers import cli, evidence, gates, snapshot

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
OP = "norm/moe_norm_grad"
HEADER = f"{OP}/op_api/aclnn_moe_norm_backward.h"
L0_HEADER = f"{OP}/op_api/moe_norm_grad.h"
DECL_TAIL = "uint64_t *workspaceSize, aclOpExecutor **executor);"


def _host_ops() -> dict[str, tuple[Path, Path]]:
    """Fixture operators with aclnn or l0 files (the layers whose lists G2 orders)."""
    out = {}
    for top, op in fixture_operators():
        if any(p.is_file() for p in op.rglob("op_api/*")):
            out[op.relative_to(top.parent).as_posix()] = (top, op)
    return out


HOST_OPS = _host_ops()


@pytest.mark.parametrize("name", sorted(HOST_OPS))
def test_every_list_apply_edits_passes_g2(tmp_path: Path, name: str) -> None:
    top, op = HOST_OPS[name]
    repo = tmp_path / top.name
    shutil.copytree(top, repo, symlinks=True)
    op = repo / op.relative_to(top)
    before = snapshot(repo)
    code, _, err = cli("apply", str(op), "--write")
    assert code == 0, err
    after = snapshot(repo)
    edited = {rel for rel, data in after.items() if before.get(rel) != data
              and "/op_api/" in f"/{rel}" and rel.endswith((".h", ".cpp"))}
    g2 = gates(op)["G2"]
    ev = evidence(g2)
    bad = [(p, line, note) for p, line, note, ok in ev if not ok]
    assert not bad, bad
    said = {(repo / p).resolve() for p, *_ in ev}  # absolute paths stay as they are
    for rel in edited:
        assert (repo / rel).resolve() in said, (rel, json.dumps(g2)[:2000])


def _copy(tmp_path: Path, other: bool = True) -> Path:
    """The fixture; without `other`, without the other operator's call of the l0 function
    (`norm_common`'s legacy API), which makes mode B refused before a hand-placed
    parameter is looked at."""
    repo = tmp_path / "l0op_style"
    shutil.copytree(FIXTURES / "l0op_style", repo)
    if not other:
        (repo / "norm/norm_common/op_api/aclnn_moe_norm_legacy.cpp").unlink()
    return repo


def test_a_profiling_parameter_placed_by_hand_elsewhere_is_refused(tmp_path: Path) -> None:
    repo = _copy(tmp_path, other=False)
    header = repo / HEADER
    text = header.read_text()
    assert DECL_TAIL in text
    header.write_text(text.replace(DECL_TAIL, "uint64_t *workspaceSize, aclOpExecutor **executor,\n"
                                   "                                                           const aclTensor *profilingData);"))
    before = snapshot(repo)
    code, out, err = cli("apply", str(repo / OP), "--write")
    assert code == 2, out + err
    assert (f"{HEADER}:20: OT313 aclnnMoeNormBackwardGetWorkspaceSize already takes `const aclTensor "
            "*profilingData` here, not right before workspaceSize") in err, err
    assert snapshot(repo) == before


def test_an_l0_parameter_placed_by_hand_not_last_is_refused(tmp_path: Path) -> None:
    repo = _copy(tmp_path, other=False)
    header = repo / L0_HEADER
    text = header.read_text()
    old = "aclTensor *gradGamma, aclOpExecutor *executor);"
    assert old in text
    header.write_text(text.replace(old, "aclTensor *gradGamma, const aclTensor *profilingData, aclOpExecutor *executor);"))
    before = snapshot(repo)
    code, out, err = cli("apply", str(repo / OP), "--write")
    assert code == 2, out + err
    assert "OT313 `MoeNormGrad` already takes `const aclTensor *profilingData` here, not last" in err, err
    assert snapshot(repo) == before


def test_a_profiling_parameter_placed_by_hand_where_optrace_puts_it_is_kept(tmp_path: Path) -> None:
    repo = _copy(tmp_path)
    header = repo / HEADER
    text = header.read_text()
    header.write_text(text.replace(DECL_TAIL, "const aclTensor *profilingData, " + DECL_TAIL))
    before = snapshot(repo)
    op = repo / OP
    code, _, err = cli("apply", str(op), "--write")
    assert code == 0, err
    assert header.read_text().count("profilingData") == 1  # not added twice
    code, out, err = cli("check", str(op), "--no-compile")
    assert code == 0, out + err
    assert gates(op)["G2"]["status"] == "pass"
    code, _, err = cli("strip", str(op), "--write")
    assert code == 0, err
    assert snapshot(repo) == before  # the hand-written parameter stays
