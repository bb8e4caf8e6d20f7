"""The l0op layer: an aclnn API under any name -> l0 function -> ADD_TO_LAUNCHER_LIST_AICORE,
on fixtures/l0op_style (modelled on the hand-written op_api operators of public repositories,
where check used to fail with "aclnn not read" on every such operator)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.engine.host_compile import host_compile

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
OP = "norm/moe_norm_grad"
API = f"{OP}/op_api"
runner = CliRunner()


def cli(*args: str) -> tuple[int, str, str]:
    res = runner.invoke(app, list(args))
    return res.exit_code, res.stdout, res.stderr


def copy(tmp: Path) -> Path:
    repo = tmp / "l0op_style"
    shutil.copytree(FIXTURES / "l0op_style", repo)
    return repo


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".optrace" not in p.relative_to(root).parts}


def g2(op: Path) -> dict[str, object]:
    _, out, _ = cli("check", str(op), "--format", "json", "--no-compile")
    doc = json.loads(out)
    return next(g for g in doc["operators"][0]["gates"] if g["gate"] == "G2")


def unwrapped(text: str) -> str:
    """The text with each fragment apply put on lines of its own (its line would have run
    past 120 columns) joined back into one line, as the checks below read them."""
    text = re.sub(r"/\*optrace<\*/,\n\s+", "/*optrace<*/, ", text)
    return re.sub(r"/\*optrace<\*/\n\s+([^\n]*),\n\s+/\*>optrace\*/", r"/*optrace<*/\1, /*>optrace*/", text)


def line_with(path: Path, needle: str) -> str:
    return next(line for line in unwrapped(path.read_text()).splitlines() if needle in line)


def test_the_buffer_travels_from_the_api_down_to_the_launch(tmp_path: Path) -> None:
    repo = copy(tmp_path)
    before = snapshot(repo)
    code, _, err = cli("apply", str(repo / OP), "--write")
    assert code == 0, err
    api = repo / API
    # the launch: profiling last in OP_OUTPUT, after the OpDef's two outputs
    assert re.search(r"OP_OUTPUT\(gradInput, gradGamma/\*optrace<\*/, profilingData/\*>optrace\*/\)",
                     unwrapped((api / "moe_norm_grad.cpp").read_text()))
    # the public l0 prototype is defaulted (other operators call it), its definition is not
    prototype = line_with(api / "moe_norm_grad.h", "aclOpExecutor *executor")
    assert "const aclTensor *profilingData = nullptr" in prototype
    definition = line_with(api / "moe_norm_grad.cpp", "aclTensor *gradGamma, aclOpExecutor *executor")
    assert "const aclTensor *profilingData/*>optrace*/" in definition
    # a static helper has every caller in its file: a plain parameter, passed by each call
    helper = unwrapped((api / "aclnn_moe_norm_backward.cpp").read_text())
    assert "aclOpExecutor *executor/*optrace<*/, const aclTensor *profilingData/*>optrace*/)" in helper
    assert "uniqueExecutor.get()/*optrace<*/, profilingData/*>optrace*/);" in helper
    # the API named for what it computes is the root: right before workspaceSize
    assert "const aclTensor *profilingData,  // optrace" in (api / "aclnn_moe_norm_backward.h").read_text()
    assert "/*optrace<*/const aclTensor *profilingData, /*>optrace*/uint64_t *workspaceSize" in helper
    # the other folder calling the public l0 function is left alone (the default serves it)
    after = snapshot(repo)
    assert after["norm/norm_common/op_api/aclnn_moe_norm_legacy.cpp"] == \
        before["norm/norm_common/op_api/aclnn_moe_norm_legacy.cpp"]
    assert after[f"{API}/aclnn_moe_norm_legacy.h"] == before[f"{API}/aclnn_moe_norm_legacy.h"]

    gate = g2(repo / OP)
    assert gate["status"] == "pass"
    claims = {(e["path"].split("/")[-1], e["note"]) for e in gate["evidence"]}  # type: ignore[union-attr]
    assert ("moe_norm_grad.cpp", "launch of MoeNormGrad: profiling output last in OP_OUTPUT") in claims
    assert ("moe_norm_grad.h", "MoeNormGrad signature: profiling output last") in claims
    assert ("aclnn_moe_norm_backward.cpp", "RunNormGrad call: profiling output last") in claims
    assert any(c.startswith("aclnnMoeNormLegacyGetWorkspaceSize is declared here and defined outside")
               for _, c in claims)
    # idempotent, and strip gives back every byte
    assert cli("apply", str(repo / OP), "--check")[0] == 0
    assert cli("strip", str(repo / OP), "--write")[0] == 0
    assert snapshot(repo) == before


def test_a_launch_left_without_the_buffer_fails_g2_at_its_line(tmp_path: Path) -> None:
    repo = copy(tmp_path)
    assert cli("apply", str(repo / OP), "--write")[0] == 0
    l0 = repo / API / "moe_norm_grad.cpp"
    l0.write_text(unwrapped(l0.read_text()).replace("gradGamma/*optrace<*/, profilingData/*>optrace*/)",
                                                    "gradGamma)"))
    gate = g2(repo / OP)
    assert gate["status"] == "fail"
    bad = [e for e in gate["evidence"] if not e["ok"]]  # type: ignore[union-attr]
    assert [(e["path"].split("/")[-1], e["line"]) for e in bad] == [("moe_norm_grad.cpp", 19)]
    assert "OP_OUTPUT(gradInput, gradGamma) has no profiling output last" in bad[0]["note"]


def test_the_threaded_files_compile_and_an_unthreaded_launch_does_not(tmp_path: Path) -> None:
    """The host stub types the l0 launch lists: after apply, no error the sources did not
    already have (opdev's other API is absent here); a launch naming a buffer its function
    was never given is an error on the launch's line."""
    repo = copy(tmp_path)
    files = sorted((repo / API).glob("*.cpp"))
    op_dir = repo / OP
    before = host_compile(files, op_dir).errors
    assert cli("apply", str(op_dir), "--write")[0] == 0
    after = host_compile(files, op_dir).errors
    for path in files:
        old = {e.message for e in before[path]}
        assert [e for e in after[path] if e.message not in old] == [], path
    assert not any("profilingData" in e.message for errs in after.values() for e in errs)
    l0 = repo / API / "moe_norm_grad.cpp"
    text = unwrapped(l0.read_text())
    cut = "aclOpExecutor *executor/*optrace<*/, const aclTensor *profilingData/*>optrace*/)\n{\n    L0_DFX"
    assert cut in text
    l0.write_text(text.replace(cut, "aclOpExecutor *executor)\n{\n    L0_DFX"))
    errors = host_compile([l0], op_dir).errors[l0]
    assert [(e.line, e.message) for e in errors if "profilingData" in e.message] == [
        (19, "use of undeclared identifier 'profilingData'")]


def _defaulted(repo: Path, default: str) -> None:
    """MoeNormGrad gains a last parameter with a default, which the API's call leaves out."""
    header = repo / API / "moe_norm_grad.h"
    params = "int64_t expertNum, aclTensor *gradGamma, aclOpExecutor *executor"
    header.write_text(header.read_text().replace(params + ")", params + f", bool deterministic = {default})"))
    src = repo / API / "moe_norm_grad.cpp"
    src.write_text(src.read_text().replace(
        "int64_t expertNum, aclTensor *gradGamma, aclOpExecutor *executor)\n{\n    aclTensor",
        "int64_t expertNum, aclTensor *gradGamma, aclOpExecutor *executor, bool deterministic)\n{\n"
        "    (void)deterministic;\n    aclTensor"))


def test_a_call_leaving_arguments_to_their_defaults_gets_them_written_out(tmp_path: Path) -> None:
    """The buffer is the last parameter: a call passing fewer arguments than the function
    has would bind it to a defaulted parameter. The defaults the declaration states are
    written out before it, inside the fragment (strip takes both back); check passes."""
    repo = copy(tmp_path)
    _defaulted(repo, "false")
    before = snapshot(repo)
    code, out, err = cli("apply", str(repo / OP), "--write")
    assert code == 0, out + err
    call = unwrapped((repo / API / "aclnn_moe_norm_backward.cpp").read_text())
    assert re.search(r"l0op::MoeNormGrad\(gradOutputContiguous, [^;]*executor/\*optrace<\*/, false, "
                     r"profilingData/\*>optrace\*/\);", call), call
    assert g2(repo / OP)["status"] == "pass"
    assert cli("strip", str(repo / OP), "--write")[0] == 0
    assert snapshot(repo) == before


def test_a_call_leaving_arguments_to_defaults_two_overloads_state_apart_is_refused(tmp_path: Path) -> None:
    """Two overloads of one arity with other defaults (told apart by an earlier parameter's
    type, which optrace does not resolve): which defaults the call takes is not known.
    Refused with the call's line, nothing written."""
    repo = copy(tmp_path)
    _defaulted(repo, "false")
    header = repo / API / "moe_norm_grad.h"
    header.write_text(header.read_text().replace("}  // namespace l0op", (
        "const aclTensor *MoeNormGrad(const aclTensor *gradOutput, const aclTensor *x,\n"
        "    const aclTensor *rstd, int64_t expertNum, const aclTensor *gradGamma,\n"
        "    aclOpExecutor *executor, int64_t mode = 0);\n}  // namespace l0op")))
    before = snapshot(repo)
    code, out, err = cli("apply", str(repo / OP), "--write")
    assert code == 2, out + err
    assert re.search(r"aclnn_moe_norm_backward\.cpp:22: OT313 this call of `MoeNormGrad` passes 6 argument",
                     err), err
    assert snapshot(repo) == before


def test_a_launch_without_outputs_gets_the_profiling_output_after_its_inputs(tmp_path: Path) -> None:
    """An op that only reads and checks its inputs launches with OP_INPUT and OP_ATTR, no
    OP_OUTPUT: the profiling output becomes its only one, an `OP_OUTPUT(profilingData)`
    argument after the inputs (it was refused: "no OP_OUTPUT(...) to put it in"); G2 reads
    it there, strip takes it back."""
    repo = copy(tmp_path)
    src = repo / API / "moe_norm_grad.cpp"
    src.write_text(src.read_text().replace(" " * 43 + "OP_OUTPUT(gradInput, gradGamma),\n", "", 1))
    before = snapshot(repo)
    code, out, err = cli("apply", str(repo / OP), "--write")
    assert code == 0, out + err
    launch = unwrapped(src.read_text())
    assert re.search(r"OP_INPUT\(gradOutput, x, rstd\)/\*optrace<\*/,\s*"
                     r"OP_OUTPUT\(profilingData\)/\*>optrace\*/,", launch), launch
    assert g2(repo / OP)["status"] == "pass"
    assert cli("strip", str(repo / OP), "--write")[0] == 0
    assert snapshot(repo) == before


def test_an_l0_function_declared_in_a_shared_header_with_another_parameter_list_is_refused(
        tmp_path: Path) -> None:
    """The l0 function's prototype lives in a header other operators include (ops-nn's
    `common/inc/op_api/gather_v2.h`), and it does not match the definition: a parameter
    added to the definition alone would define a new overload and leave the declared one
    undefined at link time. Refused, naming the header; nothing written. (A matching
    declaration is threaded: tests/test_shared_l0_header.py.)"""
    repo = copy(tmp_path)
    api = repo / API
    shared = repo / "common" / "inc" / "op_api" / "moe_norm_grad.h"
    shared.parent.mkdir(parents=True)
    (api / "moe_norm_grad.h").rename(shared)
    shared.write_text(shared.read_text().replace("int64_t expertNum, ", ""))
    before = snapshot(repo)
    code, out, err = cli("apply", str(repo / OP), "--write")
    assert code == 2, out + err
    assert ("OT313 `MoeNormGrad` is declared in common/inc/op_api/moe_norm_grad.h, outside the operator, "
            "with another parameter list") in err
    assert snapshot(repo) == before


def _applied_with_defaulted_helper(tmp_path: Path, prototype: bool) -> str:
    """The static helper `RunNormGrad` given a last parameter `bool withGamma = true` (and,
    with ``prototype``, a declaration before it without the default), applied in place;
    returns the helper file, unwrapped, after checking apply adds no compile error."""
    repo = copy(tmp_path)
    api = repo / API / "aclnn_moe_norm_backward.cpp"
    text = api.read_text()
    head = "aclTensor *gradGamma, aclOpExecutor *executor)\n{"
    assert head in text
    if prototype:
        first = text.index("static const aclTensor *RunNormGrad(")
        text = text[:first] + (
            "static const aclTensor *RunNormGrad(const aclTensor *gradOutput, const aclTensor *x, "
            "const aclTensor *rstd,\n    int64_t expertNum, aclTensor *gradGamma, aclOpExecutor *executor, "
            "bool withGamma);\n") + text[first:]
    api.write_text(text.replace(head, "aclTensor *gradGamma, aclOpExecutor *executor,\n"
                                      "    bool withGamma = true)\n{\n    (void)withGamma;", 1))
    op_dir = repo / OP
    before = {e.message for e in host_compile([api], op_dir).errors[api]}
    code, out, err = cli("apply", str(op_dir), "--write")
    assert code == 0, out + err
    assert [e for e in host_compile([api], op_dir).errors[api] if e.message not in before] == []
    return unwrapped(api.read_text())


def test_a_static_helper_ending_in_a_defaulted_parameter_gets_a_defaulted_buffer(tmp_path: Path) -> None:
    """After a parameter with a default, C++ requires one on each later parameter: the
    static helper's buffer gets `= nullptr` there (it got none, and the file no longer
    compiled: "default argument missing"), and its call still passes it."""
    helper = _applied_with_defaulted_helper(tmp_path, prototype=False)
    assert ("bool withGamma = true/*optrace<*/, const aclTensor *profilingData = nullptr/*>optrace*/)"
            in helper)
    assert "uniqueExecutor.get()/*optrace<*/, true, profilingData/*>optrace*/);" in helper, helper


def test_a_static_helper_whose_prototype_is_edited_gets_no_second_default(tmp_path: Path) -> None:
    """Declared first without the default, defined with `bool withGamma = true`: the
    prototype's buffer carries the default, the definition's does not (stated twice, the
    file does not compile: "redefinition of default argument")."""
    helper = _applied_with_defaulted_helper(tmp_path, prototype=True)
    assert helper.count("profilingData = nullptr") == 1, helper


def _notes(op: Path) -> list[str]:
    return [str(e["note"]) for e in g2(op)["evidence"] if "called again" in str(e["note"])]  # type: ignore[union-attr]


def test_a_second_launch_in_the_same_block_is_said_in_g2(tmp_path: Path) -> None:
    """aclnnKthvalue (ops-nn's gather_v2) calls its helper twice in a row, and each call
    launches the op: both write the one buffer (mode B's output is required, so both get
    it), and the trace holds the last launch. G2 says so at the second call, and passes;
    calls in the two arms of an `if` run one at a time and are not named."""
    repo = copy(tmp_path)
    api = repo / API / "aclnn_moe_norm_backward.cpp"
    text = api.read_text()
    call = "    auto result = RunNormGrad(gradOutput, x, rstd, expertNum, gradGamma, uniqueExecutor.get());\n"
    assert call in text
    api.write_text(text.replace(call, call + call.replace("auto result", "auto again")))
    assert cli("apply", str(repo / OP), "--write")[0] == 0
    notes = _notes(repo / OP)
    lines = api.read_text().splitlines()
    first = next(i for i, ln in enumerate(lines, 1) if "auto result = RunNormGrad" in ln)
    assert notes == [f"`RunNormGrad` is called again in the block of its call at line {first}: both launches "
                     "write the one profiling buffer, and the trace holds the last one's records"], notes
    assert g2(repo / OP)["status"] == "pass"
    assert cli("strip", str(repo / OP), "--write")[0] == 0
    assign = call.replace("auto ", "")
    branches = ("    const aclTensor *result = nullptr;\n    if (expertNum > 1) {\n    " + assign
                + "    } else {\n    " + assign + "    }\n")
    api.write_text(text.replace(call, branches))
    assert cli("apply", str(repo / OP), "--write")[0] == 0
    assert _notes(repo / OP) == []


def test_an_l0_function_another_operator_calls_chooses_mode_a(tmp_path: Path) -> None:
    """`norm_common`'s legacy API calls `l0op::MoeNormGrad` through the operator's own
    header (ops-nn's `threshold_grad_v2_d` calls `l0op::ReluGrad` so): that call passes no
    buffer, so mode B, whose output is required, is refused with the call's place; mode A
    threads the same chain. Without that caller, mode B."""
    repo = copy(tmp_path)
    code, out, err = cli("apply", str(repo / OP), "--mode", "B")
    assert code == 2, out + err
    assert ("OT313 `MoeNormGrad` is called from norm/norm_common/op_api/aclnn_moe_norm_legacy.cpp:12 too, "
            "outside the operator") in err, err
    _, _, err = cli("apply", str(repo / OP))
    assert "mode A: mode B is refused here: OT313 `MoeNormGrad` is called from" in err, err
    (repo / "norm/norm_common/op_api/aclnn_moe_norm_legacy.cpp").unlink()
    _, _, err = cli("apply", str(repo / OP))
    assert "mode B" in err.splitlines()[0], err


# Code nothing runs, appended to the API's file: a static chain down to the public l0
# function (gru's `GruDataGetWorkspaceSize` -> ... -> `l0op::Gru`, which nothing calls),
# and a static function calling the threaded static helper `RunNormGrad`.
_UNUSED_CHAIN = """
static const aclTensor *RunNormGradUnused(const aclTensor *gradOutput, const aclTensor *x,
                                          const aclTensor *rstd, aclTensor *gradGamma,
                                          aclOpExecutor *executor)
{
    return l0op::MoeNormGrad(gradOutput, x, rstd, 8, gradGamma, executor);
}

static aclnnStatus UnusedEntry(const aclTensor *gradOutput, const aclTensor *x, const aclTensor *rstd,
                               aclTensor *gradGamma, aclOpExecutor *executor)
{
    return RunNormGradUnused(gradOutput, x, rstd, gradGamma, executor) == nullptr ? ACLNN_ERR_INNER_NULLPTR
                                                                                : ACLNN_SUCCESS;
}
"""
_UNUSED_CALLER_OF_HELPER = """
static const aclTensor *RunNormGradAgain(const aclTensor *gradOutput, const aclTensor *x,
                                         const aclTensor *rstd, aclTensor *gradGamma, aclOpExecutor *executor)
{
    return RunNormGrad(gradOutput, x, rstd, 8, gradGamma, executor);
}
"""


def test_a_static_chain_nothing_calls_keeps_its_lists_and_compiles(tmp_path: Path) -> None:
    """Nothing calls `UnusedEntry`: the buffer would travel through it nowhere, so its chain
    is left as written (its call of the public `l0op::MoeNormGrad` compiles by the
    prototype's `= nullptr`). `RunNormGradAgain` is unused too, but it calls the threaded
    static `RunNormGrad`, which has no default: it is threaded, or it would not compile."""
    repo = copy(tmp_path)
    src = repo / API / "aclnn_moe_norm_backward.cpp"
    src.write_text(src.read_text() + _UNUSED_CHAIN + _UNUSED_CALLER_OF_HELPER)
    files = sorted((repo / API).glob("*.cpp"))
    op_dir = repo / OP
    before = host_compile(files, op_dir).errors
    assert cli("apply", str(op_dir), "--write")[0] == 0
    text = src.read_text()
    assert _UNUSED_CHAIN in text, text
    again = unwrapped(text)
    assert "aclOpExecutor *executor/*optrace<*/, const aclTensor *profilingData/*>optrace*/)\n{\n" \
           "    return RunNormGrad(gradOutput, x, rstd, 8, gradGamma, executor/*optrace<*/, profilingData" \
           "/*>optrace*/);" in again, again
    after = host_compile(files, op_dir).errors
    for path in files:
        old = {e.message for e in before[path]}
        assert [e for e in after[path] if e.message not in old] == [], path
    assert g2(op_dir)["status"] == "pass"
