"""Build hook codemod (G1): where the block goes, what it preprocesses, and strip."""

# ruff: noqa: E501  (inline before / after snippets are verbatim code)

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from layer_snippets import KERNEL, make_repo, run
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.codemods import build_hook as build_hook_module
from optrace.codemods.build_hook import (
    _COPIES_KERNELS_RE,
    BuildHookLayer,
    build_hook_edits,
    ci_or_test_script,
    hook_command,
)
from optrace.codemods.strip import strip_bytes
from optrace.engine.discovery import (
    BUILD_RE,
    LayerFile,
    Layers,
    SearchContext,
    _script_words,
    camel_case,
    word_key,
)

COPYING = """\
#!/bin/bash
set -e
copy_ops() {
    for op_dir in "${SRC}"/*/; do
        if [ -d "${op_dir}/op_kernel" ]; then
            cp -r "${op_dir}/op_kernel/"* "${PROJ}/op_kernel/"
        fi
        cp "${op_dir}/op_kernel/CMakeLists.txt" "${PROJ}/cmake/"
    done
}
build() {
    cmake --build "${PROJ}/build_out"
}
copy_ops
build
"""


def hook_lines(text: str) -> list[str]:
    start = text.index("# TRACE_PREPROCESSOR_HOOK_START")
    end = text.index("# TRACE_PREPROCESSOR_HOOK_END")
    return text[start:end].splitlines()


def test_after_the_copy_at_the_end_of_its_function(tmp_path: Path) -> None:
    op = make_repo(tmp_path, {"build/build.sh": COPYING})
    after = run(build_hook_edits, op)["build/build.sh"]
    head, tail = after.split("    # TRACE_PREPROCESSOR_HOOK_START\n")
    assert head.endswith("    done\n")  # after the loop, inside copy_ops (before its `}`)
    assert tail.split("    # TRACE_PREPROCESSOR_HOOK_END\n")[1].startswith("}\nbuild() {")
    block = "\n".join(hook_lines(after))
    assert 'optrace preprocess "${PROJ}/op_kernel" --out "${PROJ}" --modify || {' in block
    assert "command -v optrace" in block and "exit 1" in block


def test_in_source_builds_read_the_sources_before_the_first_build_command(tmp_path: Path) -> None:
    text = ('#!/bin/bash\nROOT="$(cd "$(dirname "$0")" && pwd)"\nBUILD_DIR="${ROOT}/build"\n'
            'rm -rf "${BUILD_DIR}"\nmkdir -p "${BUILD_DIR}"\ncmake -S "${ROOT}" -B "${BUILD_DIR}"\n')
    op = make_repo(tmp_path, {"build.sh": text, "CMakeLists.txt": "ascendc_library(k STATIC ops/demo_op/op_kernel/demo_op.cpp)\n"})
    after = run(build_hook_edits, op)["build.sh"]
    assert after.index("TRACE_PREPROCESSOR_HOOK_END") < after.index('cmake -S "${ROOT}"')
    assert after.index('mkdir -p "${BUILD_DIR}"') < after.index("TRACE_PREPROCESSOR_HOOK_START")
    # the repository's script builds every operator: each block writes its own map
    assert 'optrace preprocess "${ROOT}/ops/demo_op/op_kernel" --out "${BUILD_DIR}/optrace/demo_op" || {' in after
    assert "--modify" not in after  # never rewrite checked-in sources



# A driver of functions, as large repositories write their build.sh: a cleaning function
# first, the kernels' build reached through `main` for some options only.
DRIVER_OF_FUNCTIONS = """#!/bin/bash
export BASE_PATH=$(cd "$(dirname $0)"; pwd)
export BUILD_PATH="${BASE_PATH}/build"
make_clean() {
  if [ -d "${BUILD_PATH}" ]; then
    cd "${BUILD_PATH}"
    make clean
  fi
}
build_kernels() {
  mkdir -p "${BUILD_PATH}"
  cmake -S "${BASE_PATH}" -B "${BUILD_PATH}"
  cmake --build "${BUILD_PATH}" -j 8
}
main()
{
  parse_options "$@"
  if [[ "${CLEAN}" == "TRUE" ]]; then
    make_clean
  fi
  if [[ "${KERNELS}" == "TRUE" ]]; then
    build_kernels
  fi
}
main "$@"
"""


def test_a_driver_s_hook_runs_in_every_build_not_in_its_clean_function(tmp_path: Path) -> None:
    """ops-nn's build.sh: its first build command is `make clean` in `make_clean()`, the
    kernels built in functions `main` calls for some options; the hook went before `make
    clean` and ran only for `--make_clean`. It goes at the start of `main` (its brace on a
    line of its own), and check's G1 reads it there; moved back into the cleaning
    function, G1 fails."""
    cmake = "ascendc_library(k STATIC ops/demo_op/op_kernel/demo_op.cpp)\n"
    op = make_repo(tmp_path, {"build.sh": DRIVER_OF_FUNCTIONS, "CMakeLists.txt": cmake})
    after = run(build_hook_edits, op)["build.sh"]
    # after the option parsing `main` starts with: `build.sh --help` needs no optrace
    assert after.index('main()\n{\n  parse_options "$@"\n  # TRACE_PREPROCESSOR_HOOK_START') > 0, after
    assert after.index("make clean") < after.index("TRACE_PREPROCESSOR_HOOK_START")
    root = op.parent.parent
    assert CliRunner().invoke(app, ["apply", str(op), "--write"]).exit_code == 0
    assert _g1(op) == "pass"
    hooked = (root / "build.sh").read_text()
    start = hooked.index("  # TRACE_PREPROCESSOR_HOOK_START")
    end = hooked.index("HOOK_END\n") + len("HOOK_END\n")
    block, rest = hooked[start:end], hooked[:start] + hooked[end:]
    (root / "build.sh").write_text(rest.replace("    make clean\n", block.replace("  #", "    #", 1)
                                                + "    make clean\n"))
    assert _g1(op) == "fail"
    # Placed by hand at the top level, before `main "$@"`: it runs before every build.
    (root / "build.sh").write_text(rest.replace('\nmain "$@"\n', "\n" + block.replace("  ", "") + 'main "$@"\n'))
    assert _g1(op) == "pass"
    # ... but not after it.
    (root / "build.sh").write_text(rest + block.replace("  ", ""))
    assert _g1(op) == "fail"


def _g1(op: Path) -> str:
    done = CliRunner().invoke(app, ["check", str(op), "--format", "json", "--no-compile"])
    gates = json.loads(done.stdout)["operators"][0]["gates"]
    return str(next(g for g in gates if g["gate"] == "G1")["status"])


def test_a_build_function_the_top_level_calls_takes_the_hook_before_its_command(tmp_path: Path) -> None:
    text = ('#!/bin/bash\nbuild() {\n  mkdir -p out\n  cmake -S . -B out\n}\nclean() {\n  make clean\n}\n'
            'build\n')
    op = make_repo(tmp_path, {"build.sh": text, "CMakeLists.txt": "ascendc_library(k STATIC x.cpp)\n"})
    after = run(build_hook_edits, op)["build.sh"]
    assert after.index("mkdir -p out") < after.index("TRACE_PREPROCESSOR_HOOK_START")
    assert after.index("TRACE_PREPROCESSOR_HOOK_END") < after.index("cmake -S . -B out")

def test_a_cmake_only_project_gets_a_configure_time_hook(tmp_path: Path) -> None:
    text = "project(x)\nascendc_library(k STATIC ${CMAKE_CURRENT_SOURCE_DIR}/ops/demo_op/op_kernel/demo_op.cpp)\n"
    op = make_repo(tmp_path, {"CMakeLists.txt": text})
    after = run(build_hook_edits, op)["CMakeLists.txt"]
    assert after.startswith("project(x)\n# TRACE_PREPROCESSOR_HOOK_START\n")
    assert "preprocess ${CMAKE_CURRENT_SOURCE_DIR}/ops/demo_op/op_kernel" in after
    assert "message(FATAL_ERROR" in after and after.endswith("# TRACE_PREPROCESSOR_HOOK_END\nascendc_library(k STATIC ${CMAKE_CURRENT_SOURCE_DIR}/ops/demo_op/op_kernel/demo_op.cpp)\n")


def test_a_hand_written_hook_is_replaced_in_place_and_strip_gives_it_back(tmp_path: Path) -> None:
    legacy = "# TRACE_PREPROCESSOR_HOOK_START\npython3 tools/preprocess.py op_kernel\n# TRACE_PREPROCESSOR_HOOK_END"
    text = COPYING.replace("copy_ops\nbuild\n", f"copy_ops\n{legacy}\nbuild\n")
    op = make_repo(tmp_path, {"build/build.sh": text})
    after = run(build_hook_edits, op)["build/build.sh"]
    # optrace's block takes its place; the hand-written one stays readable, turned off line
    # by line, and nothing in the script is encoded
    live = [ln for ln in after.splitlines() if not ln.startswith("# optrace-off: ")]
    assert sum("TRACE_PREPROCESSOR_HOOK_START" in ln for ln in live) == 1
    assert "optrace-hook" in after.split("# optrace-off: ")[0]
    assert "".join(f"# optrace-off: {ln}\n" for ln in legacy.splitlines()) in after
    assert "orig-block" not in after
    assert strip_bytes(after.encode(), Path("build.sh")) == text.encode()


def test_strip_keeps_a_hook_block_optrace_did_not_write() -> None:
    text = b"a\n# TRACE_PREPROCESSOR_HOOK_START\nmine\n# TRACE_PREPROCESSOR_HOOK_END\nb\n"
    assert strip_bytes(text, Path("x.sh")) == text


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash not installed")
def test_the_hooked_script_is_valid_shell_and_fails_loudly_without_optrace(tmp_path: Path) -> None:
    op = make_repo(tmp_path, {"build/build.sh": COPYING})
    script = tmp_path / "hooked.sh"
    after = run(build_hook_edits, op)["build/build.sh"]
    script.write_text(after)
    assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0
    body = "\n".join(line[4:] for line in hook_lines(after)) + "\n"
    probe = tmp_path / "probe.sh"
    probe.write_text(body + "echo reached\n")
    bash = shutil.which("bash") or "bash"
    res = subprocess.run([bash, str(probe)], capture_output=True, text=True, env={"PATH": "/nonexistent"},
                         check=False)
    assert res.returncode == 1 and "optrace is not installed" in res.stderr and "reached" not in res.stdout


# --- reading a hook block back, as the shell / CMake reads it (gate G1) ----------------------------


@pytest.mark.parametrize(("block", "cmake", "src", "out", "modify"), [
    ('optrace preprocess "${PROJ}/op_kernel" --out "${PROJ}" --modify || {\n    exit 1\n}\n', False,
     b'"${PROJ}/op_kernel"', b'"${PROJ}"', True),
    # shell continuation lines, a comment before, `--out=`
    ('# runs `optrace preprocess` here\noptrace preprocess \\\n    "$(cd "$(dirname "$0")" && pwd)/k" \\\n'
     '    --out="${B}" \\\n    --modify\n', False, b'"$(cd "$(dirname "$0")" && pwd)/k"', b'"${B}"', True),
    ('echo "ERROR: optrace preprocess failed" >&2\npython3 -m optrace preprocess src --out build\n', False,
     b"src", b"build", False),
    # CMake: execute_process across lines, comments, a message naming the command
    ("find_program(OPTRACE_EXECUTABLE optrace)\nexecute_process(COMMAND ${OPTRACE_EXECUTABLE} preprocess\n"
     "                # the kernel sources\n                ${CMAKE_CURRENT_SOURCE_DIR}/k\n"
     "                --out ${CMAKE_BINARY_DIR}\n                RESULT_VARIABLE R)\n"
     'message(FATAL_ERROR "optrace preprocess failed")\n', True,
     b"${CMAKE_CURRENT_SOURCE_DIR}/k", b"${CMAKE_BINARY_DIR}", False),
    ('add_custom_command(OUTPUT map.json\n  COMMAND "${OPTRACE}" preprocess "${SRC}" --out "${OUT}" --modify\n'
     "  DEPENDS x)\n", True, b'"${SRC}"', b'"${OUT}"', True),
])
def test_the_hook_command_is_read_across_lines(block: str, cmake: bool, src: bytes, out: bytes, modify: bool) -> None:
    cmd = hook_command(block.encode(), cmake)
    assert cmd is not None and (cmd.src, cmd.out, cmd.modify) == (src, out, modify)


@pytest.mark.parametrize(("block", "cmake"), [
    ('message(FATAL_ERROR "optrace preprocess failed")\n', True),
    ("# optrace preprocess k --out b\n", True),
    ('echo "optrace preprocess k --out b"\n', False),
    ("# optrace preprocess k --out b\n", False),
])
def test_messages_and_comments_are_not_the_command(block: str, cmake: bool) -> None:
    assert hook_command(block.encode(), cmake) is None


def test_the_block_apply_writes_reads_back(tmp_path: Path) -> None:
    # CMake block: `--out` sits on a continuation line of execute_process (OT451).
    text = "project(x)\nascendc_library(k STATIC ${CMAKE_CURRENT_SOURCE_DIR}/ops/demo_op/op_kernel/demo_op.cpp)\n"
    op = make_repo(tmp_path, {"CMakeLists.txt": text, "build/build.sh": COPYING})
    block = "\n".join(hook_lines(run(build_hook_edits, op)["build/build.sh"])).encode()
    cmd = hook_command(block, cmake=False)
    assert cmd is not None and (cmd.src, cmd.out, cmd.modify) == (b'"${PROJ}/op_kernel"', b'"${PROJ}"', True)
    op = make_repo(tmp_path / "c", {"CMakeLists.txt": text})
    block = "\n".join(hook_lines(run(build_hook_edits, op)["CMakeLists.txt"])).encode()
    cmd = hook_command(block, cmake=True)
    assert cmd is not None and cmd.out == b"${CMAKE_BINARY_DIR}" and not cmd.modify


DRIVER = '#!/bin/bash\nset -e\ncd "$(dirname "$0")"\ncmake -S . -B out\ncmake --build out\n'
CMAKE = "project(x)\nascendc_library(k STATIC ${CMAKE_CURRENT_SOURCE_DIR}/../ops/demo_op/op_kernel/demo_op.cpp)\n"


def test_the_shell_script_beside_a_cmake_file_that_runs_cmake_takes_the_hook(tmp_path: Path) -> None:
    """The CMake file is what builds the kernels; the script beside it running cmake (a
    sibling the repository's walk kept) drives it, and gets the hook."""
    op = make_repo(tmp_path, {"proj/CMakeLists.txt": CMAKE, "proj/drive.sh": DRIVER})
    after = run(build_hook_edits, op)
    assert list(after) == ["proj/drive.sh"], list(after)
    assert after["proj/drive.sh"].index("TRACE_PREPROCESSOR_HOOK_END") < after["proj/drive.sh"].index("cmake -S")


def test_a_configured_cmake_file_the_walk_skips_still_finds_its_driver(tmp_path: Path) -> None:
    """A build file the config names in a folder the repository's walk leaves out (a dot
    folder): its siblings are listed from the folder itself."""
    op = make_repo(tmp_path, {".build/CMakeLists.txt": CMAKE, ".build/drive.sh": DRIVER})
    (tmp_path / "repo" / "optrace.toml").write_text('[layers]\nbuild_script = [".build/CMakeLists.txt"]\n')
    after = run(build_hook_edits, op)
    assert list(after) == [".build/drive.sh"], list(after)


# --- ranking the repository's build scripts (issue #30: per run, not per operator) -----

RANKED = {
    # the op in CamelCase, in a comment of a script that only builds
    "a/build_camel.sh": "#!/bin/bash\n# builds the DemoOp kernels\ncmake --build op_kernel\n",
    # in snake case, in a CMake file deeper down
    "b/deep/er/ops.cmake": "ascendc_library(demo_op STATIC x.cpp)\n",
    # only inside longer words: never the op
    "c/substring.sh": "#!/bin/bash\n# op_kernel of demo_op_v2, MyDemoOpGrad, _demo_op, demo_opx\ncmake .\n",
    # copies the kernels, CRLF line ends, names nothing
    "d/copy.sh": "#!/bin/bash\r\nset -e\r\ncp -r \"${SRC}/op_kernel\" \"${DST}\"\r\n",
    # the op spelled with its acronyms and a `-` or a non-ASCII letter around it
    "e/CMakeLists.txt": "add_subdirectory(op_host) # DEMO_OP-stuff \u00e9DemoOP\u00e9\n",
    # builds, names nothing
    "f/g/h/CMakeLists.txt": "add_subdirectory(op_host)\n",
    # copies the kernels and names the op next to a CR
    "copy_named.sh": "#!/bin/bash\r\ncp -r op_kernel/* \"${DST}\"\r\n# demo_op\r\n",
}


def _context(op_dir: Path, name: str = "demo_op") -> SearchContext:
    root = op_dir.parent.parent
    return SearchContext(Layers(name, camel_case(name), op_dir, root), [])


def _regex_ranking(ctx: SearchContext) -> list[LayerFile]:
    """The ranking as the search made it before it kept anything per run: every script
    read and searched with `op_word` and `_COPIES_KERNELS_RE` for every operator."""
    scripts = [ctx.at(path, ctx.data(path), BUILD_RE.pattern, "copies / builds the kernels")
               for path in ctx.index.build_scripts()]

    def score(f: LayerFile) -> tuple[bool, int, int]:
        data = ctx.data(f.path) or b""
        s = (4 if ctx.op_word.search(data) else 0) + (2 if _COPIES_KERNELS_RE.search(data) else 0)
        s += 1 if f.path.suffix in (".sh", ".bash") else 0
        return (ci_or_test_script(f.path, ctx.layers), -s, len(f.path.parts))

    return sorted(scripts, key=score)


def _ranked(ctx: SearchContext) -> list[str]:
    root = ctx.layers.repo_root
    return [f"{f.path.relative_to(root).as_posix()}:{f.line}" for f in BuildHookLayer().search(ctx)]


def test_the_build_scripts_rank_as_a_regex_search_of_each_ranks_them(tmp_path: Path) -> None:
    op = make_repo(tmp_path, RANKED)
    ctx = _context(op)
    assert ctx._word_keys == {b"demoop"}
    assert BuildHookLayer().search(ctx) == _regex_ranking(ctx)
    # the op named (4) + copies (2) + shell (1), then the shallower path first
    assert _ranked(ctx) == ["copy_named.sh:2", "a/build_camel.sh:3", "e/CMakeLists.txt:1",
                            "b/deep/er/ops.cmake:1", "d/copy.sh:3", "c/substring.sh:2",
                            "f/g/h/CMakeLists.txt:1"]
    # a name that is not a plain identifier: every script searched, the same ranking
    odd = _context(op, "demo-op")
    assert odd._word_keys is None
    assert BuildHookLayer().search(odd) == _regex_ranking(odd)


# A CI job's script naming the op in its list of operators with unit tests, and a test
# folder's script that builds a test kernel: neither is the build a user runs.
CI_SCRIPTS = {
    "scripts/ci/check_ut.sh": "#!/bin/bash\n# unit tests of the kernels under op_kernel/\n"
                              "ops=(\"demo_op\" \"other_op\")\nfor op in ${ops[@]}; do run_ut $op; done\n",
    "tests/st/build_st.sh": "#!/bin/bash\ncp -r ../ops/demo_op/op_kernel \"${ST}\"\n",
}


def test_a_ci_or_test_folder_s_script_ranks_after_the_build(tmp_path: Path) -> None:
    """ops-nn's `scripts/ci/check_kernel_ut.sh` names `conv2d_v2` in its list of operators
    with unit tests: it outranked the repository's build.sh, and took the hook."""
    op = make_repo(tmp_path, {**RANKED, **CI_SCRIPTS})
    ctx = _context(op)
    assert BuildHookLayer().search(ctx) == _regex_ranking(ctx)
    ranked = _ranked(ctx)
    assert ranked[:7] == ["copy_named.sh:2", "a/build_camel.sh:3", "e/CMakeLists.txt:1",
                          "b/deep/er/ops.cmake:1", "d/copy.sh:3", "c/substring.sh:2",
                          "f/g/h/CMakeLists.txt:1"]
    assert sorted(ranked[7:]) == ["scripts/ci/check_ut.sh:2", "tests/st/build_st.sh:2"]
    # alone, the CI script is still the one there is
    alone = make_repo(tmp_path / "alone", {"scripts/ci/check_ut.sh": CI_SCRIPTS["scripts/ci/check_ut.sh"]})
    assert _ranked(_context(alone)) == ["scripts/ci/check_ut.sh:2"]


def test_a_test_folder_s_script_copying_the_kernels_does_not_take_the_hook_from_the_build(tmp_path: Path) -> None:
    """The build script runs cmake over every operator; a system-test folder's script
    copies one operator's kernels for its own run. The hook goes into the build, which a
    user runs (apply chose the first script that copies, wherever it lay)."""
    op = make_repo(tmp_path, {
        "build.sh": "#!/bin/bash\n# builds every op_kernel of ops/\nset -e\nmkdir -p build\n"
                    "cmake -S . -B build\ncmake --build build -j\n",
        "CMakeLists.txt": "project(x)\n",
        "tests/st/build_st.sh": "#!/bin/bash\ncp -r ../ops/demo_op/op_kernel \"${ST}\"\n",
    })
    after = run(build_hook_edits, op)
    assert list(after) == ["build.sh"], list(after)
    # with no build outside the test folder, its script is the one there is
    alone = make_repo(tmp_path / "alone", {
        "tests/st/build_st.sh": "#!/bin/bash\ncp -r ../ops/demo_op/op_kernel \"${ST}\"\n"})
    assert list(run(build_hook_edits, alone)) == ["tests/st/build_st.sh"]

def test_an_operator_kept_under_tests_has_its_build_there(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    op = root / "tests" / "kernels" / "demo_op"
    (op / "op_kernel").mkdir(parents=True)
    (op / "op_kernel" / "demo_op.cpp").write_text(KERNEL)
    (root / "tests" / "kernels" / "build.sh").write_text("#!/bin/bash\ncp -r demo_op/op_kernel \"$OUT\"\n")
    (root / "tests" / "ci" / "lint.sh").parent.mkdir(parents=True)
    (root / "tests" / "ci" / "lint.sh").write_text("#!/bin/bash\ncp -r kernels/demo_op/op_kernel /tmp/lint\n")
    layers = Layers("demo_op", camel_case("demo_op"), op, root)
    assert not ci_or_test_script(root / "tests" / "kernels" / "build.sh", layers)
    assert ci_or_test_script(root / "tests" / "ci" / "lint.sh", layers)


@pytest.mark.parametrize("name", ["demo_op", "gather_v2", "_lead", "ab__c", "x"])
def test_the_words_answer_what_a_search_of_the_bytes_answers(tmp_path: Path, name: str) -> None:
    """`op_word` finds a match in some bytes exactly when it matches one of their words
    whole, among the words of the names' normal form."""
    op = make_repo(tmp_path, {})
    ctx = _context(op, name)
    keys = ctx._word_keys
    assert keys is not None
    rng = random.Random(name)
    pieces = [name, name.upper(), camel_case(name), name.replace("_", ""), "_", "__", "-", " ", "x",
              "9", "\r\n", "\u00e9", "$", "Op", "v2", "/"]
    for _ in range(3000):
        data = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 6))).encode()
        words = _script_words(data).encode().split(b"\n")
        by_words = any(ctx.op_word.fullmatch(w) for w in words if word_key(w) in keys)
        assert by_words == bool(ctx.op_word.search(data)), data


def test_a_build_script_edited_in_the_run_is_ranked_by_its_new_bytes(tmp_path: Path) -> None:
    """Apply edits a build script between two operators of one command (the same index):
    the next search ranks it by what it holds now."""
    op = make_repo(tmp_path, RANKED)
    root = tmp_path / "repo"
    before = _context(op)
    assert _ranked(before)[-1] == "f/g/h/CMakeLists.txt:1"
    # as apply writes: a new file put in place of the old one
    target = root / "f/g/h/CMakeLists.txt"
    tmp = target.with_name(".optrace-tmp")
    tmp.write_bytes(b"# DemoOp\ncp -r op_kernel/ build/\n")
    os.replace(tmp, target)
    # and one rewritten in place (another size)
    (root / "c/substring.sh").write_bytes(b"#!/bin/bash\n\n\n# op_kernel of DEMO_OP\ncmake .\n")
    after = _context(op)
    assert after.index is before.index
    assert BuildHookLayer().search(after) == _regex_ranking(after)
    assert _ranked(after) == ["copy_named.sh:2", "f/g/h/CMakeLists.txt:2", "a/build_camel.sh:3",
                              "c/substring.sh:4", "e/CMakeLists.txt:1", "b/deep/er/ops.cmake:1",
                              "d/copy.sh:3"]


_CMAKE_FOR_HOOK = "ascendc_library(k STATIC ops/demo_op/op_kernel/demo_op.cpp)\n"


def _hooked(tmp_path: Path, script: str) -> str:
    op = make_repo(tmp_path, {"build.sh": script, "CMakeLists.txt": _CMAKE_FOR_HOOK})
    return run(build_hook_edits, op)["build.sh"]


@pytest.mark.parametrize("script", [
    # the build directory set inside main, before the call: not yet set at main's start
    '#!/bin/bash\nmain() {\n  BUILD_DIR="$(pwd)/out"\n  mkdir -p "${BUILD_DIR}"\n  if [ -n "$1" ]; then\n'
    '    build_kernels\n  fi\n}\nbuild_kernels() {\n  cmake -S . -B "${BUILD_DIR}"\n}\nmain "$@"\n',
    # a local of the build function
    '#!/bin/bash\nset -eu\nbuild_kernels() {\n  local build_dir=out\n  mkdir -p "$build_dir"\n'
    '  cmake -S . -B "$build_dir"\n}\nmain() {\n  if [ -n "${1:-}" ]; then\n    build_kernels\n  fi\n}\nmain "$@"\n',
])
def test_the_hook_stays_before_the_build_when_its_variables_are_set_only_there(tmp_path: Path, script: str) -> None:
    after = _hooked(tmp_path, script)
    assert after.index("TRACE_PREPROCESSOR_HOOK_END") < after.index("cmake -S")
    assert after.index("build_kernels() {") < after.index("TRACE_PREPROCESSOR_HOOK_START")
    assert ("--out \"${BUILD_DIR}/optrace/demo_op\"" in after
            or "--out \"$build_dir/optrace/demo_op\"" in after), after


@pytest.mark.parametrize("line", ["cmake --build out --clean-first -j 8",
                                  "cmake --build out --target clean && cmake --build out -j 8"])
def test_a_command_that_cleans_and_builds_is_a_build(tmp_path: Path, line: str) -> None:
    after = _hooked(tmp_path, f"#!/bin/bash\nmkdir -p out\ncmake -S . -B out -G Ninja > /dev/null\n{line}\n")
    assert after.index("TRACE_PREPROCESSOR_HOOK_END") < after.index("cmake -S")
    after = _hooked(tmp_path / "f", f"#!/bin/bash\nclean_and_build() {{\n  mkdir -p out\n  {line}\n}}\n"
                                    "clean_and_build\n")
    assert after.index("TRACE_PREPROCESSOR_HOOK_END") < after.index(line)


def test_a_build_function_reached_along_two_chains_keeps_the_hook_before_its_command(tmp_path: Path) -> None:
    script = ('#!/bin/bash\nBUILD=out\nbuild_kernels() {\n  mkdir -p "$BUILD"\n  cmake -S . -B "$BUILD"\n}\n'
              'build_ut() {\n  build_kernels\n  run_tests\n}\nbuild_all() {\n  build_kernels\n}\n'
              'case "$1" in\n  ut)\n    build_ut ;;\n  *)\n    build_all ;;\nesac\n')
    after = _hooked(tmp_path, script)
    assert after.index('mkdir -p "$BUILD"') < after.index("TRACE_PREPROCESSOR_HOOK_START")
    assert after.index("TRACE_PREPROCESSOR_HOOK_END") < after.index('cmake -S . -B "$BUILD"')
    assert after.index("TRACE_PREPROCESSOR_HOOK_END") < after.index("build_ut() {")  # not in one caller


def test_a_script_directory_of_bash_source_set_at_the_top_level_lets_the_hook_move(tmp_path: Path) -> None:
    """`SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)` at the top level: the hook
    reads `SCRIPT_DIR`, set before `main` runs (what its assignment reads is bash's own)."""
    script = ('#!/bin/bash\nSCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)\n'
              'BUILD_DIR="${SCRIPT_DIR}/build"\nbuild_static() {\n  mkdir -p "${BUILD_DIR}"\n'
              '  cmake -S "${SCRIPT_DIR}" -B "${BUILD_DIR}"\n}\nmain() {\n  if [ "$1" = static ]; then\n'
              '    build_static\n  fi\n}\nmain "$@"\n')
    after = _hooked(tmp_path, script)
    assert after.index("main() {\n  # TRACE_PREPROCESSOR_HOOK_START") > 0, after
    assert '--out "${BUILD_DIR}/optrace/demo_op"' in after


# A repository's driver script, as large repositories write theirs: the static build makes
# its scratch folder afresh (`rm -fr` then `mkdir -p`) on every run, after the hook ran at
# the start of `main`; a clean option empties the build folder.
_DRIVER = ('#!/bin/bash\nBASE_PATH=$(cd "$(dirname "$0")" && pwd)\nexport BUILD_PATH="${BASE_PATH}/build"\n'
           'clean_build() {\n  if [ -d "${BUILD_PATH}" ]; then\n    rm -rf ${BUILD_PATH}/*\n  fi\n}\n'
           'build_static_lib() {\n  cd "${BUILD_PATH}" && cmake ..\n  rm -fr ${BUILD_PATH}/bin_tmp\n'
           '  mkdir -p ${BUILD_PATH}/bin_tmp\n  cmake --build . --target kernels_static -j 8\n}\n'
           'main() {\n  checkopts "$@"\n  if [ "$1" = "--static" ]; then\n    build_static_lib\n  fi\n}\n'
           'main "$@"\n')


def test_a_folder_the_build_removes_after_the_hook_is_not_where_the_map_goes(tmp_path: Path) -> None:
    """`--out ${BUILD_PATH}/bin_tmp` was wiped by the `rm -fr` of the build the hook
    served: the map goes to the folder above it (emptied only by the clean option)."""
    after = _hooked(tmp_path, _DRIVER)
    assert after.index('checkopts "$@"') < after.index("TRACE_PREPROCESSOR_HOOK_START")
    assert ('optrace preprocess "${BASE_PATH}/ops/demo_op/op_kernel" --out "${BUILD_PATH}/optrace/demo_op" || {'
            in after), after
    assert "bin_tmp/optrace" not in after


def test_each_operator_of_a_repository_script_writes_its_own_map(tmp_path: Path) -> None:
    """Two operators hooked into one build script: two blocks, two maps (one `--out`
    for both left the first operator's trace without its map)."""
    op = make_repo(tmp_path, {"build.sh": _DRIVER, "CMakeLists.txt": _CMAKE_FOR_HOOK})
    other = op.parent / "other_op"
    (other / "op_kernel").mkdir(parents=True)
    (other / "op_kernel" / "other_op.cpp").write_text(
        'extern "C" __global__ __aicore__ void other_op(GM_ADDR x, GM_ADDR workspace, GM_ADDR tiling)\n'
        "{\n    AscendC::SyncAll();\n}\n")
    outs = set()
    for name in (op, other):
        block = "\n".join(hook_lines(run(build_hook_edits, name)["build.sh"]))
        outs.add(re.search(r'--out ("[^"]*")', block).group(1))  # type: ignore[union-attr]
    assert outs == {'"${BUILD_PATH}/optrace/demo_op"', '"${BUILD_PATH}/optrace/other_op"'}


def test_a_script_of_the_operators_own_writes_its_map_to_its_build_folder(tmp_path: Path) -> None:
    text = ('#!/bin/bash\nROOT="$(cd "$(dirname "$0")" && pwd)"\nmkdir -p "${ROOT}/build"\n'
            'cmake -S "${ROOT}" -B "${ROOT}/build"\n')
    op = make_repo(tmp_path, {"ops/demo_op/build.sh": text,
                              "ops/demo_op/CMakeLists.txt": "ascendc_library(k STATIC op_kernel/demo_op.cpp)\n"})
    after = run(build_hook_edits, op)["ops/demo_op/build.sh"]
    assert 'optrace preprocess "${ROOT}/op_kernel" --out "${ROOT}/build" || {' in after, after


@pytest.mark.parametrize(("path", "root"), [
    ("/r/ops/a/build.sh", "/r"), ("/r/build.sh", "/r"), ("/r", "/r"), ("/rx/build.sh", "/r"),
    ("/r/ops/a/build.sh", "/"), ("/r/../s/x.sh", "/r"), ("/r/ops/a/b.sh", "/r/ops/a"),
    ("ops/a/build.sh", "."), ("ops/a/build.sh", "ops"), ("/r/a.sh", "r"), ("r/a.sh", "/r")])
def test_relative_parts_are_those_of_path_relative_to(path: str, root: str) -> None:
    # the text-only form the search ranks every build script with (`ci_or_test_script`)
    try:
        expected: tuple[str, ...] | None = Path(path).relative_to(root).parts
    except ValueError:
        expected = None
    assert build_hook_module._relative_parts(os.fspath(Path(path)), os.fspath(Path(root))) == expected


def test_a_scan_of_the_scripts_words_answers_what_their_index_holds(tmp_path: Path) -> None:
    """A run that asks the build scripts' words a few times scans each script's words for
    the keys (`RepoIndex.scripts_with_words`); one that asks more looks them up in the
    index of every word. Both give the same words and scripts."""
    op = make_repo(tmp_path, RANKED)
    ctx = _context(op)
    assert ctx._word_keys is not None
    keys = ctx._word_keys | {word_key(b"op_kernel"), word_key(b"MyDemoOpGrad"), b"cmake", b"nothing"}
    index = ctx.index
    scanned = index.scripts_with_words(keys)
    assert index._script_scans == 1 and not index._script_words_of  # no index made
    by_word = index.build_script_words()
    indexed: dict[bytes, set[Path]] = {}
    for key in keys:
        for word, scripts in by_word.get(key, {}).items():
            indexed.setdefault(word, set()).update(scripts)
    assert scanned == indexed
    assert {b"demo_op", b"DemoOp", b"DEMO_OP", b"op_kernel", b"MyDemoOpGrad", b"cmake"} <= set(scanned)
    assert index.scripts_with_words(keys) == indexed and index._script_scans == 1  # from the index now
    # and what the search finds with it, either way
    assert {p.relative_to(tmp_path / "repo").as_posix() for p in ctx.build_scripts_naming_op()} == {
        "a/build_camel.sh", "b/deep/er/ops.cmake", "copy_named.sh", "e/CMakeLists.txt"}
