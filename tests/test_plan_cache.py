"""plan's user cache: a hit prints what the plan would, every kind of input change misses.

The operator is the UMDK-style fixture (as the user has it: not instrumented); each test
copies it and has a cache directory of its own (tests/conftest.py). Whether the operator
was planned is seen by counting calls of `plan_operator`, which a hit never makes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cache_changes import CHANGES, FIXTURE, HOST, KERNEL, OP_REL, SAMPLE, append, cli, counted_calls

import optrace.pipeline.plan as plan_module
from optrace.cli import result_cache
from optrace.engine.discovery import SEARCH_LIMIT_BYTES, RepoIndex
from optrace.engine.plan import Plan
from optrace.runtime.usercache import cache_root, decode_entry, encode_entry


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    copy = tmp_path / "repo"
    shutil.copytree(FIXTURE, copy)
    return copy


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The operators planned (a hit adds none)."""
    return counted_calls(monkeypatch, plan_module, "plan_operator")


def _plan(repo: Path, *extra: str) -> tuple[int, str, str]:
    return cli("plan", str(repo / OP_REL), *extra)


def _entries() -> list[Path]:
    return sorted((cache_root() / "plan").glob("*.json.z"))


def test_a_second_plan_is_a_hit_with_the_same_exit_and_output(repo: Path, runs: list[Path]) -> None:
    for fmt in ("text", "json"):
        runs.clear()
        first = _plan(repo, "--format", fmt)
        second = _plan(repo, "--format", fmt)
        assert len(runs) == 1, fmt  # the second is a hit
        assert first == second and first[0] == 0
        assert "OT105" in first[2]  # warnings for stderr are given back too
    assert len(_entries()) == 2  # one per form of output


def test_an_operator_holding_a_unit_tests_kernel_is_cached(repo: Path, runs: list[Path]) -> None:
    # ops-nn's layout: `<op>/tests/ut/op_kernel/` holds a test's own `__global__` kernel;
    # the plan takes the operator's entry, and so must the cache's lookup.
    ut = repo / OP_REL / "tests" / "ut" / "op_kernel" / "test_moe_fused_gmm.cpp"
    ut.parent.mkdir(parents=True)
    ut.write_text('extern "C" __global__ __aicore__ void test_moe_fused_gmm(GM_ADDR x) {}\n')
    first = _plan(repo, "--format", "json")
    assert first[0] == 0 and first == _plan(repo, "--format", "json")
    assert len(runs) == 1 and len(_entries()) == 1


@pytest.mark.parametrize("change", list(CHANGES))
@pytest.mark.usefixtures("state_home")  # the user config's change stays this test's
def test_every_kind_of_input_change_misses(repo: Path, runs: list[Path], change: str) -> None:
    _plan(repo)
    assert _plan(repo) and len(runs) == 1  # a hit before the change
    CHANGES[change](repo)
    after = _plan(repo)
    assert len(runs) == 2, f"{change}: taken from the cache"
    assert after == _plan(repo, "--no-cache")  # and the miss is the plan's own answer
    again = _plan(repo)
    assert len(runs) == 3 and again == after  # the new entry is taken


def test_a_searchable_file_changed_anywhere_in_the_repository_misses(repo: Path, runs: list[Path]) -> None:
    # A host source of another folder: only the repository index reads it (for its words).
    other = repo / "src" / "cam" / "elsewhere" / "registry.cpp"
    other.parent.mkdir(parents=True)
    other.write_text("// nothing yet\n")
    _plan(repo)
    _plan(repo)
    assert len(runs) == 1
    other.write_text('// registers "moe_fused_gmm" now\n')
    _plan(repo)
    assert len(runs) == 2


@pytest.mark.parametrize("folder", ["build_out/include", ".generated/include", "../generated/include"])
def test_a_missing_header_made_where_the_walk_does_not_look_misses(repo: Path, runs: list[Path],
                                                                   folder: str) -> None:
    """`#include "catlass/catlass.hpp"` is not found in the include folder the config names
    (a build's generated headers: a folder the repository's walk skips, a dot folder, one
    outside the repository), until the build writes it there. Nothing read or listed
    changed, and no path the index keeps: the candidate looked for and not found is the
    input, and the plan after it reads the new header."""
    (repo / folder / "catlass").mkdir(parents=True)
    (repo / "optrace.toml").write_text(f'include_dirs = ["{folder}"]\n')
    first = _plan(repo)
    assert first[0] == 0 and "catlass/catlass.hpp" in first[1] + first[2]
    assert _plan(repo) == first and len(runs) == 1
    (repo / folder / "catlass" / "catlass.hpp").write_text("#pragma once\n__aicore__ inline void Gemm() {}\n")
    after = _plan(repo)
    assert len(runs) == 2, "taken from the cache"
    assert after == _plan(repo, "--no-cache") and after != first


def test_an_include_through_a_link_then_dotdot_is_an_input_where_the_link_leads(repo: Path, runs: list[Path],
                                                                               tmp_path: Path) -> None:
    """`#include "vendor/../vendor_cfg.h"` with `vendor` a link: the system follows the link
    before `..`, so the candidate is the header beside the link's target, not beside the
    link (which `os.path.abspath` would make of it by its text). That header removed,
    the plan misses."""
    sdk = tmp_path / "sdk"
    (sdk / "vendor").mkdir(parents=True)
    (sdk / "vendor_cfg.h").write_text("#pragma once\n")
    kernel_dir = repo / OP_REL / "op_kernel"
    (kernel_dir / "vendor").symlink_to(sdk / "vendor", target_is_directory=True)
    kernel = repo / KERNEL
    kernel.write_text('#include "vendor/../vendor_cfg.h"\n' + kernel.read_text())
    first = _plan(repo, "--format", "json")
    assert first[0] == 0 and "vendor_cfg.h" in first[1] + first[2]
    assert _plan(repo, "--format", "json") == first and len(runs) == 1
    (sdk / "vendor_cfg.h").unlink()
    after = _plan(repo, "--format", "json")
    assert len(runs) == 2, "taken from the cache"
    assert after == _plan(repo, "--format", "json", "--no-cache") and after != first


@pytest.mark.parametrize("option", ["--repo-root", "--trust-config", "--format"])
def test_options_the_output_depends_on_are_part_of_the_key(repo: Path, runs: list[Path], option: str) -> None:
    _plan(repo)
    extra = {"--repo-root": (option, str(repo)), "--format": (option, "json")}.get(option, (option,))
    _plan(repo, *extra)
    assert len(runs) == 2


def test_another_working_directory_misses(repo: Path, runs: list[Path],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    _plan(repo)
    monkeypatch.chdir(repo)  # stderr's paths are relative to it
    here = _plan(repo)
    assert len(runs) == 2 and here == _plan(repo, "--no-cache")


def test_another_optrace_misses(repo: Path, runs: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    _plan(repo)
    monkeypatch.setattr(result_cache, "__version__", "999.0")
    _plan(repo)
    real = result_cache._code_fingerprint
    monkeypatch.setattr(result_cache, "_code_fingerprint", lambda: real() + b"\nengine/planner.py\x00edited")
    _plan(repo)
    assert len(runs) == 3


def test_a_graph_is_drawn_from_a_plan_never_from_the_cache(repo: Path, runs: list[Path],
                                                            tmp_path: Path) -> None:
    _plan(repo)
    code, _, err = _plan(repo, "--graph", str(tmp_path / "g.dot"))
    assert code == 0 and len(runs) == 2, err
    assert (tmp_path / "g.dot").read_text().startswith("digraph")


def test_a_failed_plan_is_not_kept(tmp_path: Path, runs: list[Path]) -> None:
    (tmp_path / "notes").mkdir()
    assert cli("plan", str(tmp_path / "notes"))[0] == 2
    assert _entries() == []


@pytest.mark.parametrize("damage", ["not JSON", "a number for the text", "a dropped message list",
                                    "another index"])
def test_a_corrupt_or_foreign_entry_is_ignored_and_rebuilt(repo: Path, runs: list[Path], damage: str) -> None:
    first = _plan(repo)
    [entry] = _entries()
    doc = decode_entry(entry.read_bytes(), 1 << 30)
    if damage == "not JSON":
        entry.write_bytes(b"\x00{")
    elif damage == "a number for the text":
        entry.write_bytes(encode_entry({**doc, "payload": {**doc["payload"], "text": 12}}))
    elif damage == "a dropped message list":
        entry.write_bytes(encode_entry({**doc, "payload": {"text": doc["payload"]["text"], "doc": None}}))
    else:
        entry.write_bytes(encode_entry({**doc, "extra": {"index": "0" * 64}}))
    assert _plan(repo) == first and len(runs) == 2
    assert _plan(repo) == first and len(runs) == 2  # written whole again, then taken


def test_no_cache_neither_reads_nor_writes(repo: Path, runs: list[Path]) -> None:
    _plan(repo, "--no-cache")
    assert _entries() == [] and len(runs) == 1
    _plan(repo)
    _plan(repo, "--no-cache")
    assert len(runs) == 3


def test_a_file_changed_while_the_plan_runs_keeps_no_entry(repo: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    real = plan_module.plan_operator

    def edits_meanwhile(op_dir: Path, *args: object, **kwargs: object) -> Plan:
        plan = real(op_dir, *args, **kwargs)  # type: ignore[arg-type]
        append(Path(KERNEL))(repo)  # after it was read: the plan may be of the old bytes
        return plan

    monkeypatch.setattr(plan_module, "plan_operator", edits_meanwhile)
    _plan(repo)
    assert _entries() == []


@pytest.mark.parametrize("edited", [HOST, SAMPLE])
def test_a_file_edited_between_two_operators_plans_is_a_miss_once_undone(
        repo: Path, runs: list[Path], monkeypatch: pytest.MonkeyPatch, edited: str) -> None:
    """plan of two operators: every entry is looked up first (the index's state taken
    then), then each operator planned. A file edited after the lookups and before the
    second plan read it (a C++ host file, whose stat signature the state holds, or a
    Python sample, whose content hash it holds): that plan is of the edited bytes, while
    the state its entry would be kept under is of the old ones, so undoing the edit must
    not bring it back (it did for the sample)."""
    host = repo / edited
    before = host.read_bytes()
    other = repo / OP_REL / ".." / "moe_gate_bias"
    real = plan_module.plan_operator

    def edits_first(op_dir: Path, *args: object, **kwargs: object) -> Plan:
        if Path(op_dir).name == Path(OP_REL).name:
            host.write_bytes((b"# edited\n" if edited.endswith(".py") else b"// edited\n") + before)
            time.sleep(0.05)  # past the entry's guard of files modified as the plan starts
        return real(op_dir, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(plan_module, "plan_operator", edits_first)
    assert cli("plan", str(other), str(repo / OP_REL), "-j", "1")[0] == 0
    assert len(runs) == 2
    monkeypatch.setattr(plan_module, "plan_operator", real)
    host.write_bytes(before)
    time.sleep(0.05)
    assert _plan(repo) == _plan(repo, "--no-cache") and len(runs) == 4  # a miss, then no cache


def test_a_sample_edited_after_the_lookups_before_any_plan_is_a_miss_once_undone(
        repo: Path, runs: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """The index's words are derived at a run's first search, after the lookups took its
    state. A sample edited in between (no longer naming the operator) is read by the
    first operator's search; the second operator's plan answers from those words without
    opening the sample itself, and must not be kept under the state of the old bytes
    (undone, that state held again and the entry lacked the sample: a second review)."""
    sample = repo / SAMPLE
    before = sample.read_bytes()
    other = repo / OP_REL / ".." / "moe_gate_bias"
    real = plan_module.plan_operator
    planned: list[Path] = []

    def edits_before_the_first(op_dir: Path, *args: object, **kwargs: object) -> Plan:
        if not planned:
            sample.write_bytes(before.replace(b"moe_fused_gmm", b"another_operator"))
            time.sleep(0.05)  # past the entry's guard of files modified as the plan starts
        planned.append(op_dir)
        return real(op_dir, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(plan_module, "plan_operator", edits_before_the_first)
    assert cli("plan", str(other), str(repo / OP_REL), "-j", "1")[0] == 0
    assert len(runs) == 2
    monkeypatch.setattr(plan_module, "plan_operator", real)
    sample.write_bytes(before)
    time.sleep(0.05)
    cached = _plan(repo)
    assert cached == _plan(repo, "--no-cache") and SAMPLE.rsplit("/", 1)[1] in cached[1]


def test_no_cache_lasts_for_its_own_command(repo: Path, runs: list[Path]) -> None:
    """`plan --no-cache` keeps the repository index in memory for that command only: a
    command after it in the same process (a library caller, the next test) stores again,
    and no worker process of a later command inherits it through the environment."""
    from optrace.engine import index_cache

    before = os.environ.get("OPTRACE_NO_CACHE")
    _plan(repo, "--no-cache")
    assert index_cache._enabled[0] and os.environ.get("OPTRACE_NO_CACHE") == before
    _plan(repo)
    assert (cache_root() / "index.sqlite").exists()


HIT_IMPORTS = """
import sys
from optrace.cli.app import app
try:
    app(["plan", sys.argv[1]])
except SystemExit as exc:
    code = exc.code
sys.stdout.flush()
heavy = sorted(m for m in ("networkx", "tree_sitter", "libcst", "optrace.engine.analysis")
               if m in sys.modules)
print("IMPORTED", heavy, code)
"""


def _run(repo: Path, script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", script, str(repo / OP_REL)], capture_output=True, text=True,
                          env=os.environ.copy(), timeout=300, check=False)


def test_a_hit_imports_neither_the_parser_nor_networkx(repo: Path) -> None:
    cold = _run(repo, HIT_IMPORTS)
    assert "'networkx'" in cold.stdout and "'tree_sitter'" in cold.stdout, cold.stdout + cold.stderr
    warm = _run(repo, HIT_IMPORTS)
    assert "IMPORTED [] 0" in warm.stdout, warm.stdout + warm.stderr
    assert warm.stdout.split("IMPORTED")[0] == cold.stdout.split("IMPORTED")[0]
    assert warm.stderr == cold.stderr


def test_plans_in_worker_processes_keep_and_take_entries(repo: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    shutil.copytree(repo, other)
    command = [sys.executable, "-m", "optrace", "plan", "--jobs", "2", str(repo / OP_REL),
               str(other / OP_REL)]
    cold = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert cold.returncode == 0, cold.stderr
    written = {p.name: p.stat().st_ino for p in _entries()}  # a rewrite is a new file
    assert len(written) == 2
    warm = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert (warm.returncode, warm.stdout, warm.stderr) == (cold.returncode, cold.stdout, cold.stderr)
    assert {p.name: p.stat().st_ino for p in _entries()} == written  # taken, not written again


def test_with_an_output_file_every_operator_is_planned(repo: Path, runs: list[Path]) -> None:
    """`-o` must not replace a file the plan reads, which only a plan that ran has read:
    a host layer outside the operator is refused on the second run as on the first."""
    _plan(repo)
    host = repo / SAMPLE  # a Python caller the plan reads
    before = host.read_bytes()
    for _ in range(2):
        code, _, err = _plan(repo, "-o", str(host))
        assert code == 2 and host.read_bytes() == before, err
    assert len(runs) == 3


def test_the_index_state_follows_other_operators_kernels_and_not_whole_files(repo: Path) -> None:
    """Another operator's kernel source (whose includes are derived without reading it)
    changes the state; a file the store could not read whole is not one the state covers
    by its content (a Python file), but a C / C++ source is covered by its signature
    whatever its size."""
    other = repo / "src" / "cam" / "comm_operator" / "ascend_kernels" / "other_op" / "op_kernel" / "o.cpp"
    other.parent.mkdir(parents=True)
    other.write_text('#include "a.h"\n')
    big = repo / "src" / "cam" / "big_host.cpp"
    big.write_bytes(b"// x\n" * (SEARCH_LIMIT_BYTES // 5 + 1))
    big_py = repo / "src" / "cam" / "big_caller.py"
    big_py.write_bytes(b"# x\n" * (SEARCH_LIMIT_BYTES // 4 + 1))
    first = RepoIndex.build(repo)
    state = first.state()
    covered = first.hashed()
    assert os.fspath(big_py) not in covered and os.fspath(repo / SAMPLE) in covered
    assert os.fspath(big) in covered and os.fspath(other) in covered
    other.write_text('#include "a.h"\n#include "../../moe_fused_gmm/op_kernel/moe_fused_gmm.h"\n')
    assert RepoIndex.build(repo).state() != state


HIT_SEARCHES = """
import sys
from optrace.cli.app import app
from optrace.engine.discovery import RepoIndex
built = []
real = RepoIndex.build_script_words
RepoIndex.build_script_words = lambda self: built.append(1) or real(self)
try:
    app(["plan", sys.argv[1]])
except SystemExit as exc:
    code = exc.code
sys.stdout.flush()
print("SCRIPT WORD INDEXES", len(built), code)
"""


def test_a_hit_builds_no_search_structure(repo: Path) -> None:
    """A lookup the cache answers takes the index's state (each file's content hash), not
    the build scripts' word index that a plan's build-hook search builds (ops-nn's ~1,500
    scripts' words: a good part of a hit, once)."""
    cold = _run(repo, HIT_SEARCHES)
    assert "SCRIPT WORD INDEXES" in cold.stdout and cold.returncode == 0, cold.stdout + cold.stderr
    warm = _run(repo, HIT_SEARCHES)
    assert "SCRIPT WORD INDEXES 0 0" in warm.stdout, warm.stdout + warm.stderr
    assert warm.stdout.split("SCRIPT")[0] == cold.stdout.split("SCRIPT")[0]


def test_the_index_state_is_taken_once_per_run(repo: Path, runs: list[Path],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Every operator's entry names the repository index's state: the lookups take it
    once per run, not once per operator (it stats every file the index searches)."""
    states: list[Path] = []
    real = RepoIndex.state

    def counted(self: RepoIndex) -> str:
        states.append(self.root)
        return real(self)

    monkeypatch.setattr(RepoIndex, "state", counted)
    ops = [str(repo / OP_REL), str(repo / OP_REL.replace("moe_fused_gmm", "moe_gate_bias"))]
    first = cli("plan", *ops, "--format", "json", "--jobs", "1")
    assert len(states) == 1 and len(runs) == 2
    second = cli("plan", *ops, "--format", "json", "--jobs", "1")
    assert len(states) == 2 and len(runs) == 2  # both hits
    assert first == second and first[0] in (0, 1)


@pytest.mark.parametrize("command", ["plan", "check"])
@pytest.mark.parametrize("config", ["optrace.toml", "pyproject.toml"])
def test_a_config_made_at_a_repo_root_not_above_the_operator_misses(tmp_path: Path, command: str,
                                                                   config: str) -> None:
    """An operator copied out of its repository (a build tree's copy), run with
    `--repo-root` naming the repository: a config made there is the run's config, though
    no folder the operator's search climbs holds it."""
    root = tmp_path / "repo"
    shutil.copytree(FIXTURE, root)
    (root / "optrace.toml").unlink()  # no config at first
    op = tmp_path / "build" / "kernels" / "moe_fused_gmm"
    shutil.copytree(root / OP_REL, op)
    first = cli(command, str(op), "--repo-root", str(root))
    assert first == cli(command, str(op), "--repo-root", str(root))
    broken = "[tool.optrace]\nlabels = [\n" if config == "pyproject.toml" else "labels = [\n"
    (root / config).write_text(broken)
    after = cli(command, str(op), "--repo-root", str(root))
    assert after == cli(command, str(op), "--repo-root", str(root), "--no-cache")
    assert after != first and "OT002" in after[2], after


@pytest.mark.usefixtures("state_home")  # the user config stays this test's
@pytest.mark.parametrize("command", ["plan", "check"])
def test_a_config_larger_than_the_sources_bound_is_hashed_by_its_bytes(repo: Path, command: str) -> None:
    """The user lowers `[limits] source_bytes` below the repository config's size: the
    config is still read (under its own bound), so its bytes are an input of the entry —
    not "unreadable", which stays the same whatever the config says."""
    user = Path(os.environ["XDG_CONFIG_HOME"]) / "optrace" / "config.toml"
    user.parent.mkdir(parents=True, exist_ok=True)
    user.write_text("[limits]\nsource_bytes = 16384\n")  # every source of the fixture is smaller
    config = repo / "optrace.toml"
    config.write_text(config.read_text() + "# a comment line that makes the file long\n" * 600)
    assert config.stat().st_size > 16384
    first = cli(command, str(repo / OP_REL))
    assert first == cli(command, str(repo / OP_REL))
    config.write_text(config.read_text() + "labels = [\n")  # broken
    after = cli(command, str(repo / OP_REL))
    assert after == cli(command, str(repo / OP_REL), "--no-cache")
    assert after != first and "OT002" in after[2], after
