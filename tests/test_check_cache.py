"""check's user cache: a hit answers as the check would, every kind of input change misses.

The operator is the UMDK-style fixture, instrumented once per module; each test copies it
and has a cache directory of its own (tests/conftest.py). Whether the analysis ran is seen
by counting calls of `check_operator`, which a hit never makes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cache_changes import CHANGES, FIXTURE, HOST, KERNEL, OP_REL, SAMPLE, append, cli, counted_calls

import optrace.engine.host_compile as host_compile_module
import optrace.pipeline.check as check_module
from optrace.cli import check_cache, check_fast, result_cache
from optrace.engine.journal import Journal, _operator_journals, journal_stem
from optrace.pipeline.check_report import CheckReport
from optrace.runtime.usercache import EXPANDED, cache_root, decode_entry, encode_entry


@pytest.fixture(scope="module")
def instrumented(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("instrumented") / "repo"
    shutil.copytree(FIXTURE, repo)
    code, out, err = cli("apply", str(repo / OP_REL), "--write")
    assert code == 0, out + err
    return repo


@pytest.fixture
def repo(instrumented: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "repo"
    shutil.copytree(instrumented, copy)
    return copy


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The operators the analysis ran on (a hit adds none)."""
    return counted_calls(monkeypatch, check_module, "check_operator")


def _check(repo: Path, *extra: str) -> tuple[int, str, str]:
    return cli("check", str(repo / OP_REL), "--format", "json", *extra)


def _entries() -> list[Path]:
    return sorted((cache_root() / "check").glob("*.json.z"))


def test_a_second_check_is_a_hit_with_the_same_exit_and_output(repo: Path, runs: list[Path]) -> None:
    for fmt in ("text", "json", "sarif"):
        runs.clear()
        first = cli("check", str(repo / OP_REL), "--format", fmt, "--verbose")
        second = cli("check", str(repo / OP_REL), "--format", fmt, "--verbose")
        assert len(runs) == (1 if fmt == "text" else 0), fmt  # json and sarif: text's entry
        assert first == second and first[0] == 0
    assert len(_entries()) == 1


def test_a_hit_with_findings_exits_1_with_the_same_findings(repo: Path, runs: list[Path]) -> None:
    kernel = repo / KERNEL
    data = kernel.read_bytes()
    end = data.index(b'"E")')  # the first E: its B is left open
    start = data.rindex(b"\n", 0, end)
    kernel.write_bytes(data[:start] + data[data.index(b"\n", end):])
    first = cli("check", str(repo / OP_REL))
    second = cli("check", str(repo / OP_REL))
    assert len(runs) == 1
    assert first == second and first[0] == 1 and "OT404" in first[2], first
    strict = cli("check", str(repo / OP_REL), "--strict", "--format", "sarif")
    assert len(runs) == 1 and strict[0] == 1  # --strict is the rendering's: the same entry


@pytest.mark.parametrize("change", list(CHANGES))
@pytest.mark.usefixtures("state_home")  # the user config's change stays this test's
def test_every_kind_of_input_change_misses(repo: Path, runs: list[Path], change: str) -> None:
    _check(repo)
    assert _check(repo) and len(runs) == 1  # a hit before the change
    CHANGES[change](repo)
    after = _check(repo)
    assert len(runs) == 2, f"{change}: taken from the cache"
    assert after == _check(repo, "--no-cache")  # and the miss is the check's own answer
    again = _check(repo)
    assert len(runs) == 3 and again == after  # the new entry is taken


@pytest.mark.parametrize("option", ["--no-compile", "--trust-config", "--repo-root"])
def test_options_the_report_depends_on_are_part_of_the_key(repo: Path, runs: list[Path], option: str) -> None:
    _check(repo)
    extra = (option, str(repo)) if option == "--repo-root" else (option,)
    _check(repo, *extra)
    assert len(runs) == 2
    _check(repo, *extra)
    assert len(runs) == 2


def test_another_optrace_version_misses(repo: Path, runs: list[Path],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    _check(repo)
    monkeypatch.setattr(result_cache, "__version__", "999.0")
    _check(repo)
    assert len(runs) == 2


def test_an_edited_optrace_module_misses(repo: Path, runs: list[Path],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    _check(repo)
    real = result_cache._code_fingerprint
    monkeypatch.setattr(result_cache, "_code_fingerprint", lambda: real() + b"\nengine/cpp.py\x00edited")
    _check(repo)
    assert len(runs) == 2


def test_a_cann_toolchain_appearing_misses(repo: Path, runs: list[Path], tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    first = _check(repo)
    (tmp_path / "cann").mkdir()
    monkeypatch.setenv("ASCEND_HOME_PATH", str(tmp_path / "cann"))
    second = _check(repo)
    assert len(runs) == 2 and "CANN found at" in second[1] and "CANN found at" not in first[1]


def _read(entry: Path) -> Any:
    return decode_entry(entry.read_bytes(), 1 << 30)


CORRUPT: dict[str, Callable[[dict[str, object]], bytes]] = {
    "not zlib": lambda doc: b"\x00\xffnot zlib",
    "not JSON": lambda doc: zlib.compress(b"\x00\xffnot json"),
    "truncated": lambda doc: encode_entry(doc)[:-40],
    "foreign format": lambda doc: encode_entry({**doc, "format": "something-else"}),
    "other schema": lambda doc: encode_entry({**doc, "schema": 0}),
    "other name": lambda doc: encode_entry({**doc, "name": "0" * 32}),
    "a count as a string": lambda doc: encode_entry(
        {**doc, "payload": {**doc["payload"], "points": "12"}}),  # type: ignore[dict-item]
    "a flag as a number": lambda doc: encode_entry(
        {**doc, "payload": {**doc["payload"], "instrumented": 1}}),  # type: ignore[dict-item]
    "an unknown gate": lambda doc: encode_entry(
        {**doc, "payload": {**doc["payload"], "gates": [["G9", "pass", "", []]]}}),  # type: ignore[dict-item]
    "a relative input path": lambda doc: encode_entry({**doc, "files": [["rel.h", None]]}),
    "a list for an object": lambda doc: encode_entry([doc]),
}


@pytest.mark.parametrize("damage", list(CORRUPT))
def test_a_corrupt_or_foreign_entry_is_ignored_and_rebuilt(repo: Path, runs: list[Path], damage: str) -> None:
    first = _check(repo)
    [entry] = _entries()
    entry.write_bytes(CORRUPT[damage](_read(entry)))
    assert _check(repo) == first and len(runs) == 2
    assert _read(entry)  # written whole again
    assert _check(repo) == first and len(runs) == 2


def test_the_index_state_stands_for_the_repository_and_listed_files_are_their_bytes(repo: Path) -> None:
    """The entry holds the repository index's state (every path walked, each searchable
    file's content hash, each C / C++ source's signature) instead of a line per file the
    state stands for; every file it does list is there with the SHA-256 of its bytes."""
    _check(repo)
    [entry] = _entries()
    doc = _read(entry)
    listed = dict(doc["files"])
    assert set(doc["extra"]) == {"index"}
    assert not any(p.endswith((HOST, SAMPLE)) for p in listed)  # the index hashed them
    assert not any(p.endswith(KERNEL) for p in listed)  # the state holds their signatures
    assert listed  # files outside the repository's index (the compile check's)
    for path, want in listed.items():  # None: a file gone since (the compile check's stub)
        assert want == (hashlib.sha256(Path(path).read_bytes()).hexdigest()
                        if os.path.exists(path) else None), path


def _misses_as_no_cache(repo: Path, runs: list[Path]) -> None:
    """The next check is a miss and says what a check without the cache says."""
    before = len(runs)
    assert _check(repo) == _check(repo, "--no-cache") and len(runs) == before + 2


def _another_sample(repo: Path) -> None:
    shutil.copy(repo / SAMPLE, repo / SAMPLE.replace("_sample.py", "_sample_two.py"))
    time.sleep(0.05)


def test_a_file_the_index_answered_for_without_reading_it_is_an_input(repo: Path, runs: list[Path]) -> None:
    """With the index in the cache, discovery answers which files name the op from their
    words without opening the files: a Python file that comes to call the op must miss."""
    sample = repo / SAMPLE
    other = sample.with_name("other_sample.py")
    saved = sample.read_bytes()
    other.write_bytes(saved.replace(b"moe_fused_gmm", b"zz_unrelated"))
    sample.unlink()
    time.sleep(0.05)
    _check(repo)
    append(Path(HOST))(repo)  # a miss over a warm index: nothing else is read again
    time.sleep(0.05)
    _check(repo)
    other.write_bytes(saved)  # a file the last check never opened now names the op
    time.sleep(0.05)
    _misses_as_no_cache(repo, runs)


def test_a_second_operator_of_one_run_and_pre_commit_see_a_new_sample(
        repo: Path, runs: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """The index is built once per run, before any operator is checked (pre-commit builds
    it to map the files to operators): a sample added later misses every operator."""
    other = repo / OP_REL / ".." / "moe_gate_bias"
    cli("check", str(other), str(repo / OP_REL), "-j", "1", "--format", "json")
    assert len(runs) == 2
    _another_sample(repo)
    _misses_as_no_cache(repo, runs)
    (repo / SAMPLE.replace("_sample.py", "_sample_two.py")).unlink()
    time.sleep(0.05)
    monkeypatch.chdir(repo)
    cli("pre-commit", "--", SAMPLE)
    assert len(runs) == 5  # a miss (the sample is gone again), kept
    _another_sample(repo)
    _misses_as_no_cache(repo, runs)


def _meanwhile(monkeypatch: pytest.MonkeyPatch, action: Callable[[], object]) -> Callable[..., CheckReport]:
    """check_operator doing `action` after it read its inputs, before its entry is kept."""
    real = check_module.check_operator

    def then(op_dir: Path, *args: object, **kwargs: object) -> CheckReport:
        report = real(op_dir, *args, **kwargs)  # type: ignore[arg-type]
        action()
        return report

    monkeypatch.setattr(check_module, "check_operator", then)
    return real


def test_a_name_added_while_the_check_runs_is_a_miss_next_time(repo: Path, runs: list[Path],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    real = _meanwhile(monkeypatch, lambda: _another_sample(repo))
    _check(repo)
    monkeypatch.setattr(check_module, "check_operator", real)
    _misses_as_no_cache(repo, runs)


def test_a_file_replaced_with_its_old_mtime_while_the_check_runs_keeps_no_entry(
        repo: Path, runs: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """cp -p, rsync -t, tar x: the bytes change, the mtime is the old one; the change time
    is not the user's to set."""
    kernel = repo / KERNEL
    st = kernel.stat()

    def replace() -> None:
        kernel.write_bytes(kernel.read_bytes() + b"\n// replaced\n")
        os.utime(kernel, ns=(st.st_atime_ns, st.st_mtime_ns))

    real = _meanwhile(monkeypatch, replace)
    _check(repo)
    monkeypatch.setattr(check_module, "check_operator", real)
    assert _entries() == []
    _misses_as_no_cache(repo, runs)


def test_a_file_edited_between_two_operators_of_one_run_is_a_miss_once_undone(
        repo: Path, runs: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Two operators in one check: the index's state is taken for both before either is
    checked; a file the second reads is edited before its check starts. That entry would
    rest on the state's older hash: it is not kept, and undoing the edit is a miss (it was
    a hit with the edited file's report; found by a second review)."""
    from optrace.cli import check_fast

    host = repo / HOST
    before = host.read_bytes()
    other = repo / OP_REL / ".." / "moe_gate_bias"
    real = check_fast._check_one

    def one(op_dir: Path, *args: Any) -> Any:
        if Path(op_dir).name == Path(OP_REL).name:
            host.write_bytes(b"// edited\n" + before)
            time.sleep(0.05)  # past the entry's guard of files modified as the check starts
        return real(op_dir, *args)

    monkeypatch.setattr(check_fast, "_check_one", one)
    code, out, err = cli("check", str(other), str(repo / OP_REL), "-j", "1", "--format", "json")
    assert code == 0, err
    assert len(runs) == 2
    monkeypatch.setattr(check_fast, "_check_one", real)
    host.write_bytes(before)
    time.sleep(0.05)
    edited = json.loads(out)["operators"][1]
    assert json.loads(_check(repo)[1])["operators"][0] != edited and len(runs) == 3


def test_a_compile_cut_by_its_time_bound_is_not_kept(repo: Path, runs: list[Path],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A file skipped for libclang's time bound says as much of the machine's load as of
    the files: that report is not kept, the next check runs again."""
    real_start, real_compile = check_module.start_host_compile, host_compile_module.host_compile

    def bounded(*args: Any, **kwargs: Any) -> Any:
        return real_start(*args, **{**kwargs, "seconds": 0.3})

    def slow(*args: Any, **kwargs: Any) -> Any:  # runs in the child
        time.sleep(1.5)
        return real_compile(*args, **kwargs)

    monkeypatch.setattr(check_module, "start_host_compile", bounded)
    monkeypatch.setattr(host_compile_module, "host_compile", slow)
    _, out, _ = _check(repo)
    assert "took longer than 0.3 s" in out and _entries() == []
    _check(repo)
    assert len(runs) == 2
    monkeypatch.setattr(check_module, "start_host_compile", real_start)
    monkeypatch.setattr(host_compile_module, "host_compile", real_compile)
    _check(repo)
    _check(repo)
    assert len(runs) == 3 and len(_entries()) == 1


@pytest.mark.parametrize("command", ["check", "plan"])
def test_a_folder_the_command_refuses_costs_no_index_of_the_repository(repo: Path, command: str) -> None:
    """A folder holding no operator, or several (ascend_kernels/, the repository root), is
    refused (exit 2) as without a cache; its lookup must not walk and index the repository
    around it first (a second review found `check ~/some/dir` indexing the home folder)."""
    empty = repo / "src" / "nothing_here"
    empty.mkdir()
    for folder in (empty, repo / OP_REL / ".."):
        code, _, err = cli(command, str(folder))
        assert code == 2 and ("OT010" in err or "OT015" in err), err
        assert (code, err) == cli(command, str(folder), "--no-cache")[::2]
    assert not (cache_root() / "index.sqlite").exists()


def test_an_operator_holding_a_unit_tests_kernel_is_cached(repo: Path, runs: list[Path]) -> None:
    # ops-nn's layout (`<op>/tests/ut/op_kernel/`, a test's own `__global__` kernel): the
    # check takes the operator's entry, and so must the cache's lookup.
    ut = repo / OP_REL / "tests" / "ut" / "op_kernel" / "test_moe_fused_gmm.cpp"
    ut.parent.mkdir(parents=True)
    ut.write_text('extern "C" __global__ __aicore__ void test_moe_fused_gmm(GM_ADDR x) {}\n')
    first = _check(repo)
    assert first[0] == 0 and first == _check(repo)
    assert len(runs) == 1 and len(_entries()) == 1


def test_a_sample_gone_after_the_lookups_keeps_no_entry(repo: Path, runs: list[Path],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The index's words are derived at the check's first search, after the lookups took
    its state: a sample removed in between (a stash, a branch switch) is found gone then,
    and a report without it must not be kept under the state that held it — restored with
    the same bytes, that state holds again (a second review)."""
    sample = repo / SAMPLE
    before = sample.read_bytes()
    real = check_fast._check_one

    def removed_first(*args: object) -> object:
        sample.unlink()
        time.sleep(0.05)  # past the entry's guard of files modified as the check starts
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(check_fast, "_check_one", removed_first)
    _check(repo)
    assert len(runs) == 1 and _entries() == []
    monkeypatch.setattr(check_fast, "_check_one", real)
    sample.write_bytes(before)
    time.sleep(0.05)
    cached = _check(repo)
    assert cached == _check(repo, "--no-cache") and SAMPLE.rsplit("/", 1)[1] in cached[1]


def _cache_files() -> dict[str, bytes]:
    root = cache_root()
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_no_cache_neither_reads_nor_writes(repo: Path, runs: list[Path]) -> None:
    _check(repo, "--no-cache")
    assert _entries() == [] and len(runs) == 1
    assert _cache_files() == {}  # the repository index's store is the user cache too
    _check(repo)
    _check(repo, "--no-cache")
    assert len(runs) == 3
    # Not read either: a damaged store would be set aside (removed) by a run that read it.
    store = cache_root() / "index.sqlite"
    assert store.is_file()
    store.write_bytes(b"not a database" * 100)
    before = _cache_files()
    _check(repo, "--no-cache")
    cli("pre-commit", "--repo-root", str(repo), "--no-cache", "--", str(repo / KERNEL))
    assert _cache_files() == before and len(runs) == 5


def test_pre_commit_no_cache_on_a_file_outside_the_operator(repo: Path, runs: list[Path],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A staged sample is mapped to its operators by searching the repository (its index,
    the user cache's too) before any check runs: --no-cache holds from there."""
    monkeypatch.chdir(repo)
    code = cli("pre-commit", "--repo-root", str(repo), "--no-cache", "--", SAMPLE)[0]
    assert code in (0, 1) and len(runs) == 1 and _cache_files() == {}
    store = cache_root() / "index.sqlite"
    store.parent.mkdir(parents=True, exist_ok=True)
    store.write_bytes(b"not a database" * 100)
    cli("pre-commit", "--repo-root", str(repo), "--no-cache", "--", SAMPLE)
    assert _cache_files() == {"index.sqlite": b"not a database" * 100}  # not read: not set aside


@pytest.mark.parametrize("command", ["check", "plan"])
def test_optrace_no_cache_in_the_environment_is_no_cache(repo: Path, tmp_path: Path, command: str) -> None:
    cache = tmp_path / "env-cache"
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "OPTRACE_NO_CACHE": "1"}
    done = subprocess.run([sys.executable, "-m", "optrace", command, str(repo / OP_REL)], env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode in (0, 1), done.stderr
    assert not cache.exists() or not any(p.is_file() for p in cache.rglob("*"))


@pytest.mark.usefixtures("state_home")  # the bound set here stays this test's
def test_the_user_bound_keeps_the_cache_small(repo: Path, runs: list[Path], tmp_path: Path) -> None:
    _check(repo)
    [entry] = _entries()
    size = entry.stat().st_size
    other = tmp_path / "other"
    shutil.copytree(repo, other)
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "optrace" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    # Entries get at least half the bound (the repository index may hold the other half),
    # and an entry's JSON is kept only within EXPANDED times the bound (one that lists
    # little compresses past that ratio): room for one entry, not two.
    bound = max(2 * size + size // 2, len(zlib.decompress(entry.read_bytes())) // EXPANDED + 64)
    assert bound < 4 * size
    config.write_text(f"[limits]\ncache_bytes = {bound}\n")
    _check(other)  # its own entry: the older one goes
    assert len(_entries()) == 1 and len(runs) == 2
    _check(other)
    assert len(runs) == 2
    config.write_text(f"[limits]\ncache_bytes = {size // 2}\n")  # smaller than one entry: none kept
    _check(repo)
    code, out, _ = _check(repo)
    assert len(runs) == 4 and code == 0 and json.loads(out)["operators"]


def test_a_file_changed_while_the_check_runs_keeps_no_entry(repo: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    real = check_module.check_operator

    def edits_meanwhile(op_dir: Path, *args: object, **kwargs: object) -> CheckReport:
        report = real(op_dir, *args, **kwargs)  # type: ignore[arg-type]
        append(Path(HOST))(repo)  # after it was read: the report may be of the old bytes
        return report

    monkeypatch.setattr(check_module, "check_operator", edits_meanwhile)
    _check(repo)
    assert _entries() == []


def test_an_unwritable_cache_does_not_fail_the_check(repo: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # its optrace/ cannot be made
    code, out, err = _check(repo)
    assert code == 0 and "Traceback" not in err and json.loads(out)["operators"]


def _run(repo: Path, script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", script, str(repo / OP_REL)], capture_output=True, text=True,
                          env=os.environ.copy(), timeout=300, check=False)


HIT_IMPORTS = """
import sys
from optrace.cli.check_fast import fast_main
code = fast_main([sys.argv[1]])
sys.stdout.flush()
heavy = sorted(m for m in ("networkx", "tree_sitter", "libcst", "optrace.engine.analysis")
               if m in sys.modules)
print("IMPORTED", heavy, code)
"""


def test_a_hit_imports_neither_the_parser_nor_networkx(repo: Path) -> None:
    cold = _run(repo, HIT_IMPORTS)
    assert "'networkx'" in cold.stdout and "'tree_sitter'" in cold.stdout, cold.stdout + cold.stderr
    warm = _run(repo, HIT_IMPORTS)
    assert "IMPORTED [] 0" in warm.stdout, warm.stdout + warm.stderr
    assert warm.stdout.split("IMPORTED")[0] == cold.stdout.split("IMPORTED")[0]


def test_concurrent_checks_share_the_cache_safely(repo: Path) -> None:
    command = [sys.executable, "-m", "optrace", "check", str(repo / OP_REL), "--format", "json"]
    procs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(3)]
    results = [(*p.communicate(timeout=300), p.returncode) for p in procs]
    assert len({r[0] for r in results}) == 1 and {r[2] for r in results} == {0}, results
    [entry] = _entries()  # one whole entry, no temporary file left
    assert _read(entry)["format"] == check_cache.FORMAT
    assert [p.name for p in entry.parent.iterdir()] == [entry.name]


def test_a_distribution_installed_on_the_path_misses(repo: Path, runs: list[Path], tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    _check(repo)
    _check(repo)
    assert len(runs) == 1
    (site / "optrace_rules_extra-1.0.dist-info").mkdir()  # a rule plugin, say
    _check(repo)
    assert len(runs) == 2


def test_pre_commit_takes_the_same_entries(repo: Path, runs: list[Path]) -> None:
    staged = str(repo / KERNEL)
    first = cli("pre-commit", "--repo-root", str(repo), "--", staged)
    second = cli("pre-commit", "--repo-root", str(repo), "--", staged)
    assert first == second and first[0] == 0 and len(runs) == 1
    cli("pre-commit", "--repo-root", str(repo), "--no-cache", "--", staged)
    assert len(runs) == 2


def test_checks_in_worker_processes_keep_and_take_entries(repo: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    shutil.copytree(repo, other)
    command = [sys.executable, "-m", "optrace", "check", "--jobs", "2", "--format", "json",
               str(repo / OP_REL), str(other / OP_REL)]
    cold = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert cold.returncode == 0, cold.stderr
    written = {p.name: p.stat().st_ino for p in _entries()}  # a rewrite is a new file
    assert len(written) == 2
    warm = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert (warm.returncode, warm.stdout) == (cold.returncode, cold.stdout)
    assert {p.name: p.stat().st_ino for p in _entries()} == written  # taken, not written again


def test_a_journal_appearing_misses(repo: Path, runs: list[Path]) -> None:
    first = _check(repo)
    journal_dir, name = _operator_journals(repo, (repo / OP_REL).resolve())[0]
    assert journal_dir.is_dir()  # apply --write left it (its .gitignore)
    Journal.at(journal_dir, journal_stem(name)).json_path.write_text("{}")  # not optrace's
    after = _check(repo)
    assert len(runs) == 2 and after != first and "journal" in after[1]



@pytest.mark.parametrize("failure", ["libclang not loaded", "memory bound"])
def test_a_check_whose_libclang_failed_is_not_kept(repo: Path, runs: list[Path],
                                                   monkeypatch: pytest.MonkeyPatch, failure: str) -> None:
    """libclang failing in its child (its library not loaded: another, or none, on
    LIBCLANG_LIBRARY_PATH; the memory bound) says nothing of the files: that report is not
    kept, and the check after the failure is fixed finds what it finds."""
    real_compile = host_compile_module.host_compile

    def failing(*args: Any, **kwargs: Any) -> Any:  # runs in the child
        if failure == "memory bound":
            raise MemoryError
        raise OSError("libclang.so: cannot open shared object file")

    monkeypatch.setattr(host_compile_module, "host_compile", failing)
    _, out, _ = _check(repo)
    assert "OT421" in out and _entries() == []
    monkeypatch.setattr(host_compile_module, "host_compile", real_compile)
    fixed = _check(repo)
    assert len(runs) == 2 and "OT421" not in fixed[1] and len(_entries()) == 1

# What libclang reads and looks for runs in a child process, where the cache's recording
# of reads does not reach: the child reports them (engine/host_compile.py, HostCompile).
_BREAKS = "#pragma once\n#define TRACE_POINT(a, b) )))\n"  # any inserted point no longer compiles


def _outside_header(repo: Path, tmp_path: Path) -> Callable[[], None]:
    """A header outside the repository, included by its absolute path: the include graph
    leaves it alone (outside the repository), only libclang reads it."""
    header = tmp_path / "outside" / "ext.h"
    header.parent.mkdir()
    header.write_text("#pragma once\n")
    kernel = repo / KERNEL
    kernel.write_text(f'#include "{header}"\n' + kernel.read_text())
    return lambda: header.write_text(_BREAKS)


def _directory_then_header(repo: Path, tmp_path: Path) -> Callable[[], None]:
    """An include that names a directory (in a dot folder the walk skips), until a header
    takes its place: libclang's child looked the candidate up."""
    place = repo / ".gen" / "gen_defs.h"
    place.mkdir(parents=True)
    kernel = repo / KERNEL
    up = "../" * (len(Path(KERNEL).parts) - 1)
    kernel.write_text(f'#include "{up}.gen/gen_defs.h"\n' + kernel.read_text())

    def change() -> None:
        place.rmdir()
        place.write_text(_BREAKS)
    return change


@pytest.mark.parametrize("setup", [_outside_header, _directory_then_header], ids=["outside header", "kind"])
def test_what_libclang_reads_in_its_child_is_an_input(repo: Path, runs: list[Path], tmp_path: Path,
                                                      setup: Callable[[Path, Path], Callable[[], None]],
                                                      ) -> None:
    change = setup(repo, tmp_path)
    time.sleep(0.05)  # past the tick in which a file just written keeps no entry
    first = _check(repo)
    assert _check(repo) == first and len(runs) == 1  # a hit
    change()
    after = _check(repo)
    assert len(runs) == 2, "taken from the cache"
    assert after == _check(repo, "--no-cache") and after != first
    assert after[0] == 1 and "OT420" in after[1]  # the inserted points no longer compile


@pytest.mark.parametrize("when", ["found later", "changed", "probed"])
def test_a_header_beside_the_stand_ins_folder_is_never_found(
        repo: Path, tmp_path: Path, runs: list[Path], monkeypatch: pytest.MonkeyPatch, when: str) -> None:
    """`#include "../vendor.h"` (or `__has_include`) found in no folder of the operator:
    libclang looks in the compile check's stand-in folder last. That folder sits deep in
    empty folders of the scratch, so the search never reaches the temporary folder above
    it (where anyone may put a header, and which moves with TMPDIR): what a header there
    says changes no check, with or without the cache (reviews' finds: the cached report
    said the inserted code compiled where a fresh check found the header)."""
    import tempfile

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    kernel = repo / KERNEL
    head = ('#if __has_include("../vendor_shared.h")\n#include "../vendor_shared.h"\n#endif\n'
            if when == "probed" else '#include "../vendor_shared.h"\n')
    kernel.write_text(head + kernel.read_text())  # lines of the kernel's own
    shared = scratch / "vendor_shared.h"
    if when == "changed":
        shared.write_text("#pragma once\n")
    time.sleep(0.05)
    first = _check(repo)
    assert first[0] == 0, first
    assert _check(repo) == first and len(runs) == 1, "a hit"
    for spot in (shared, *(scratch / ("../" * k) / "vendor_shared.h" for k in (1, 2))):
        if spot.parent.is_dir() and os.access(spot.parent, os.W_OK):
            spot.write_text("#pragma once\n#define MoeTracing(...) no_such_function_anywhere(0)\n")
    time.sleep(0.05)
    assert _check(repo, "--no-cache") == first
    assert _check(repo) == first


def test_a_header_only_libclang_read_swapped_while_the_check_ran_keeps_no_entry(
        repo: Path, tmp_path: Path, runs: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """A header outside the repository reached by `../` from the kernel: the include graph
    leaves it alone, libclang reads it in the compile check's child. Its folder swapped,
    after that read and before the entry is written, for one of older files whose header
    breaks the inserted code: the entry would pair the new bytes with the old report (a
    third review's find). What the child read is noted as it was then, as the parent's
    own reads are."""
    outside, other = tmp_path / "ext", tmp_path / "ext2"
    outside.mkdir()
    other.mkdir()
    (outside / "v.h").write_text("#pragma once\n")
    (other / "v.h").write_text("#pragma once\n#define MoeTracing(...) no_such_function_anywhere(0)\n")
    kernel = repo / KERNEL
    climb = "../" * (len(Path(KERNEL).parent.parts) + 1)  # up to the folder above the repository
    kernel.write_text(f'#include "{climb}ext/v.h"\n' + kernel.read_text())
    time.sleep(0.05)
    counted = check_module.check_operator
    swapped: list[bool] = []

    def then_swapped(*args: Any, **kwargs: Any) -> Any:
        report = counted(*args, **kwargs)
        if not swapped:
            swapped.append(True)
            outside.rename(tmp_path / "ext.old")
            other.rename(outside)
        return report

    monkeypatch.setattr(check_module, "check_operator", then_swapped)
    first = _check(repo)
    assert first[0] == 0, first
    again = _check(repo)
    assert len(runs) == 2, "no entry was kept: checked again"
    assert again == _check(repo, "--no-cache") and again[0] == 1 and "OT420" in again[1], again
