"""plan's cache and the paths a plan decides by without reading them (engine/probes.py):
where a path leads, or that nothing is there, changes the plan while every byte, name and
signature the entry rests on stays. Each change here once left the cache answering with
the plan from before it (a second review's finds); each must now miss, and the miss
must be the plan a run without the cache prints."""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from cache_changes import FIXTURE, OP_REL, cli, counted_calls

import optrace.pipeline.plan as plan_module
from optrace.cli import result_cache

FIXTURES = FIXTURE.parent


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    return counted_calls(monkeypatch, plan_module, "plan_operator")


def _settle() -> None:
    """Past the window in which a file just written keeps no entry (it may be written
    again with the same signature): the tests' filesystems keep nanoseconds."""
    time.sleep(0.05)


def _misses_after(op: Path, change: Callable[[], None], runs: list[Path]) -> None:
    """A first plan of `op`, taken back the second time; `change()`; then a miss, whose
    output is the plan without the cache and not the first one."""
    _settle()
    first = cli("plan", str(op))
    assert first[0] == 0, first
    assert cli("plan", str(op)) == first and len(runs) == 1, "the second plan is a hit"
    change()
    _settle()
    after = cli("plan", str(op))
    assert len(runs) == 2, "taken from the cache"
    assert after == cli("plan", str(op), "--no-cache") and after != first


def _repointed(link: Path, target: Path | str) -> Callable[[], None]:
    """A change: `link` made again, to `target` (a toolkit's `latest` moved on)."""
    def change() -> None:
        link.unlink()
        link.symlink_to(target)
    return change


def _copy(name: str, into: Path) -> Path:
    shutil.copytree(FIXTURES / name, into)
    return into


def test_a_header_a_torch_adapter_includes_made_by_the_build(tmp_path: Path, runs: list[Path]) -> None:
    """The adapter's declarations header is in a folder the build makes (not there yet,
    and one the repository's walk skips): once it is, the plan lists it as a host file
    apply edits."""
    repo = _copy("umdk_style", tmp_path / "repo")
    pybind = repo / "src/cam/comm_operator/pybind"
    adapter = pybind / "moe_fused_gmm.cpp"
    included = '#include "functions.h"\n#include "output/moe_decl.h"'  # a folder the walk skips
    adapter.write_text(adapter.read_text().replace('#include "functions.h"', included, 1))

    def build() -> None:
        (pybind / "output").mkdir()
        (pybind / "output" / "moe_decl.h").write_text(
            "#pragma once\n#include <tuple>\n#include <ATen/ATen.h>\n"
            "std::tuple<at::Tensor, at::Tensor> moe_fused_gmm_impl(const at::Tensor &x, const at::Tensor "
            "&expert_ids, const at::Tensor &gmm1_weight, const at::Tensor &gmm1_weight_scale, const "
            "at::Tensor &gmm2_weight, const at::Tensor &gmm2_weight_scale, const at::Tensor &expert_scales, "
            "c10::string_view group_ep, int64_t ep_rank_size, int64_t ep_rank_id, int64_t moe_expert_num, "
            "int64_t global_bs);\n")

    _misses_after(repo / OP_REL, build, runs)


def test_a_shared_header_no_longer_reached_through_a_link(tmp_path: Path, runs: list[Path]) -> None:
    """Another operator includes the shared header through a link in a folder its build
    makes; the folder cleaned, it no longer shares it."""
    repo = _copy("shared_norm", tmp_path / "repo")
    v3 = repo / "norm/rms_norm_v3/op_kernel"
    (v3 / "output").mkdir(parents=True)  # a folder the walk skips
    (v3 / "rms_norm_v3.cpp").write_text(
        '#include "kernel_operator.h"\n#include "output/rms_norm_kernel.h"\n\n'
        'extern "C" __global__ __aicore__ void rms_norm_v3(GM_ADDR x, GM_ADDR y, GM_ADDR workspace, '
        "GM_ADDR tiling)\n{\n    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);\n    RmsNormKernel op;\n"
        "    op.Init(x, y, workspace);\n    op.Process();\n}\n")
    (v3 / "output" / "rms_norm_kernel.h").symlink_to("../../../rms_norm/op_kernel/rms_norm_kernel.h")
    _misses_after(repo / "norm/rms_norm_v2", lambda: shutil.rmtree(v3 / "output"), runs)


def test_an_include_folder_behind_a_link_that_moves_on(tmp_path: Path, runs: list[Path]) -> None:
    """`include_dirs` names a toolkit's `latest/include`; an upgrade points `latest` at the
    next version, whose headers the kernel now reaches."""
    repo = _copy("shared_norm", tmp_path / "repo")
    toolkit = tmp_path / "toolkit"
    for version, text in (("8.0", "// 8.0\n"), ("8.1", '// 8.1\n#include "kernel_operator_intf.h"\n')):
        (toolkit / version / "include").mkdir(parents=True)
        (toolkit / version / "include" / "kernel_operator.h").write_text("#pragma once\n" + text)
    (toolkit / "8.1" / "include" / "kernel_operator_intf.h").write_text("#pragma once\n")
    (toolkit / "latest").symlink_to("8.0")
    with open(repo / "optrace.toml", "a") as handle:
        handle.write(f'include_dirs = ["{toolkit / "latest" / "include"}"]\n')
    _misses_after(repo / "norm/rms_norm", _repointed(toolkit / "latest", "8.1"), runs)


def test_a_layer_file_the_config_names_through_a_link(tmp_path: Path, runs: list[Path]) -> None:
    """`[layers] tiling` names a vendored file through a `current` link; moved on to the
    next version, the plan names the file apply would edit now."""
    repo = _copy("umdk_style", tmp_path / "repo")
    op = repo / OP_REL
    vendor = tmp_path / "vendor"
    for version in ("v1", "v2"):
        (vendor / version).mkdir(parents=True)
        shutil.copy(op / "op_host" / "moe_fused_gmm_tiling.cpp", vendor / version)
    (vendor / "current").symlink_to("v1")
    with open(repo / "optrace.toml", "a") as handle:
        handle.write(f'[layers]\ntiling = ["{vendor / "current" / "moe_fused_gmm_tiling.cpp"}"]\n')
    _misses_after(op, _repointed(vendor / "current", "v2"), runs)


@pytest.mark.usefixtures("state_home")
def test_a_trusted_path_that_leads_elsewhere(tmp_path: Path, runs: list[Path],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The user config trusts the repository by a linked path; the link pointed elsewhere,
    the repository's rule module is no longer loaded (OT005)."""
    repo = tmp_path / "repo"
    (repo / "demo_op" / "op_kernel").mkdir(parents=True)
    (repo / "demo_op" / "op_kernel" / "demo_op.cpp").write_text(
        'extern "C" __global__ __aicore__ void demo_op(GM_ADDR x, GM_ADDR workspace, GM_ADDR tiling)\n'
        "{\n    AscendC::SyncAll();\n}\n")
    (repo / "optrace.toml").write_text('[rules]\nmodules = ["optrace_test_team_rules"]\n')
    site = tmp_path / "site"
    site.mkdir()
    (site / "optrace_test_team_rules.py").write_text(
        "from optrace.engine.diagnostics import Severity\nfrom optrace.rules.base import Rule\n\n\n"
        "class TeamRule(Rule):\n    code = \"OT950\"\n    name = \"team-rule\"\n\n"
        "    def apply(self, ctx):\n        ctx.report(\"the team rule ran\", None, Severity.WARNING)\n\n\n"
        "RULES = [TeamRule]\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, "optrace_test_team_rules", raising=False)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "trusted").symlink_to(repo)
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "optrace" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f'[trust]\nrepositories = ["{tmp_path / "trusted"}"]\n')
    _misses_after(repo / "demo_op", _repointed(tmp_path / "trusted", tmp_path / "elsewhere"), runs)


def test_compiled_kernel_metadata_copied_in_place_of_a_link(tmp_path: Path, runs: list[Path]) -> None:
    """A kernel without a declared type: the build's metadata says what cores it runs on,
    except a link, which is not followed. The build copying it instead of linking it, the
    plan takes the metadata's word."""
    op = tmp_path / "repo" / "demo_op"
    (op / "op_kernel").mkdir(parents=True)
    (op / "op_kernel" / "demo_op.cpp").write_text(
        'extern "C" __global__ __aicore__ void demo_op(GM_ADDR x, GM_ADDR workspace, GM_ADDR tiling)\n'
        "{\n    AscendC::SyncAll();\n}\n")
    (op.parent / "optrace.toml").write_text("# demo\n")
    meta = op / "build_out" / "kernel_meta"
    meta.mkdir(parents=True)
    artifact = tmp_path / "artifacts" / "demo_op_1.json"
    artifact.parent.mkdir()
    artifact.write_text('{"kernelName": "demo_op_1", "magic": "RT_DEV_BINARY_MAGIC_ELF_AIVEC"}\n')
    (meta / "demo_op_1.json").symlink_to(artifact)

    def copy_instead() -> None:
        (meta / "demo_op_1.json").unlink()
        shutil.copy(artifact, meta / "demo_op_1.json")

    _misses_after(op, copy_instead, runs)


@pytest.mark.parametrize("before", ["a directory", "a link that leads nowhere"])
def test_an_include_candidate_that_becomes_a_header(tmp_path: Path, runs: list[Path], before: str) -> None:
    """An include folder of generated headers the walk skips (a dot folder): where the
    header will be, a directory at first (OT011), or a link to a header not generated yet
    (OT014). Its place keeps its name, and no folder listed changes; what is there does."""
    repo = _copy("umdk_style", tmp_path / "repo")
    generated = repo / ".gen"
    generated.mkdir()
    (repo / "optrace.toml").write_text('include_dirs = [".gen"]\n')
    kernel = repo / OP_REL / "op_kernel" / "moe_fused_gmm.cpp"
    kernel.write_text('#include "gen_defs.h"\n' + kernel.read_text())
    place, store = generated / "gen_defs.h", repo / ".store" / "gen_defs.h"
    if before == "a directory":
        place.mkdir()
    else:
        store.parent.mkdir()
        place.symlink_to("../.store/gen_defs.h")

    def generate() -> None:
        if before == "a directory":
            place.rmdir()
        made = place if before == "a directory" else store
        made.write_text("#pragma once\n__aicore__ inline void Gen() {}\n")

    _misses_after(repo / OP_REL, generate, runs)


def test_a_pregen_folder_the_build_makes_above_the_operator(tmp_path: Path, runs: list[Path]) -> None:
    """Older UMDK trees keep generated aclnn wrappers in `<folder above>/pregen/build_out/`,
    looked for by a glob whose first part is a name (a `stat`, no listing): the build
    making that folder adds a host file to the plan."""
    repo = _copy("umdk_style", tmp_path / "repo")
    kernels = repo / "src/cam/comm_operator/ascend_kernels"
    wrapper = kernels / "moe_fused_gmm" / "op_api" / "aclnn_moe_fused_gmm.h"

    def build() -> None:
        generated = kernels / "pregen" / "build_out" / "autogen"
        generated.mkdir(parents=True)
        (generated / wrapper.name).write_bytes(wrapper.read_bytes())

    _misses_after(kernels / "moe_fused_gmm", build, runs)


@pytest.mark.parametrize("variable", ["XDG_STATE_HOME", "HOME", "LIBCLANG_LIBRARY_PATH"])
def test_another_state_directory_home_or_libclang_misses(tmp_path: Path, runs: list[Path],
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         variable: str) -> None:
    """Where optrace keeps its journals' records decides whether a journal in the tree is
    pending or another's; the home is what `~` in the user config expands to; the libclang
    library path, which libclang compile safety loads. Any moved, the entry is not this
    run's."""
    repo = _copy("umdk_style", tmp_path / "repo")
    if variable == "HOME":
        monkeypatch.delenv("XDG_STATE_HOME", raising=False)
        monkeypatch.setenv("HOME", str(tmp_path / "home-a"))
    _settle()
    first = cli("plan", str(repo / OP_REL))
    assert cli("plan", str(repo / OP_REL)) == first and len(runs) == 1
    monkeypatch.setenv(variable, str(tmp_path / "elsewhere"))
    assert cli("plan", str(repo / OP_REL)) == first and len(runs) == 2


def _with_outside_header(tmp_path: Path) -> tuple[Path, Path]:
    """umdk_style whose config adds an include folder outside the repository, holding the
    `catlass/catlass.hpp` its kernel includes (a submodule's header found there): the
    repository's walk and index never see that file; only the entry's files do."""
    repo = _copy("umdk_style", tmp_path / "repo")
    sdk = tmp_path / "sdk" / "include"
    (sdk / "catlass").mkdir(parents=True)
    (sdk / "catlass" / "catlass.hpp").write_text("#pragma once\nnamespace catlass { int x; }\n")
    config = repo / "optrace.toml"
    config.write_text(config.read_text().replace("include_dirs = []", f'include_dirs = ["{sdk}"]', 1))
    return repo / OP_REL, sdk / "catlass" / "catlass.hpp"


def _just_before_the_entry(monkeypatch: pytest.MonkeyPatch, change: Callable[[], None]) -> None:
    """`change()` once, after the plan read its files and before its entry is written: the
    moment a file deleted, or a folder swapped, while plan runs falls in."""
    real = result_cache.store
    done: list[bool] = []

    def store(*args: object, **kwargs: object) -> bool:
        if not done:
            done.append(True)
            change()
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(result_cache, "store", store)


def test_a_header_deleted_after_it_was_read_keeps_no_entry(
        tmp_path: Path, runs: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Deleted while plan ran: the entry would list it as absent, beside the plan made with
    it, and the next plan (the header gone) would take that plan."""
    op, header = _with_outside_header(tmp_path)
    _settle()
    _just_before_the_entry(monkeypatch, header.unlink)
    first = cli("plan", str(op))
    assert first[0] == 0 and "sdk/include/catlass/catlass.hpp" in first[1], first  # found when read
    again = cli("plan", str(op))
    assert len(runs) == 2, "no entry was kept: planned again"
    assert again == cli("plan", str(op), "--no-cache") and again != first


def test_a_folder_above_a_header_swapped_after_it_was_read_keeps_no_entry(
        tmp_path: Path, runs: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """The folder above the include folder swapped for another whose header (older than
    the run: its times say nothing) includes one more file: the path's bytes and place at
    the entry's writing are the new header's, the plan the old one's."""
    op, header = _with_outside_header(tmp_path)
    sdk = header.parent.parent.parent
    other = tmp_path / "sdk.new" / "include" / "catlass"
    other.mkdir(parents=True)
    (other / "catlass.hpp").write_text(
        '#pragma once\n#include "detail/more.hpp"\nnamespace catlass { int x; }\n')

    def swap() -> None:
        sdk.rename(tmp_path / "sdk.old")
        (tmp_path / "sdk.new").rename(sdk)

    _settle()
    _just_before_the_entry(monkeypatch, swap)
    first = cli("plan", str(op))
    assert first[0] == 0, first
    again = cli("plan", str(op))
    assert len(runs) == 2, "no entry was kept: planned again"
    assert again == cli("plan", str(op), "--no-cache") and again != first


def test_a_header_refused_then_deleted_keeps_no_entry(
        tmp_path: Path, runs: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """A header plan opened and refused (a FIFO: OT011 "cannot read") is as much an input
    as one it read: deleted before the entry was written, the entry said it was absent
    beside the plan that warned of it."""
    op, header = _with_outside_header(tmp_path)
    header.unlink()
    os.mkfifo(header)
    _settle()
    _just_before_the_entry(monkeypatch, header.unlink)
    first = cli("plan", str(op))
    assert first[0] == 0 and "OT011" in first[2], first
    again = cli("plan", str(op))
    assert len(runs) == 2, "no entry was kept: planned again"
    assert again == cli("plan", str(op), "--no-cache") and again != first


def test_a_path_out_of_the_compile_checks_stand_ins_is_an_input() -> None:
    """libclang searches `../x.h` in the stand-ins' folder too (`-isystem`, last): what it
    finds through the folder's `..` is a real file of its parent, an input spelt as it still
    leads once the folder is gone; what lies inside the folder is none."""
    from optrace.engine.host_compile import _outside_of
    from optrace.engine.probes import Noted

    stub = "/tmp/optrace-stub-abcd1234"
    found = {stub, f"{stub}/acl/acl.h", f"{stub}/deep/../acl.h", f"{stub}/../vendor.h",
             f"{stub}x/other.h", "/repo/kernel.h"}
    assert _outside_of(found, stub) == {"/tmp/vendor.h", f"{stub}x/other.h", "/repo/kernel.h"}
    noted = Noted(scratch={stub})
    assert noted.in_scratch(stub) and noted.in_scratch(f"{stub}/deep/../acl.h")
    assert not noted.in_scratch(f"{stub}/../vendor.h") and not noted.in_scratch(f"{stub}x/other.h")


def _stat_at(mtime_ns: int, ctime_ns: int) -> os.stat_result:
    # mode, ino, dev, nlink, uid, gid, size, three float times, then the ns times
    return os.stat_result((0o100644, 7, 1, 1, 0, 0, 12, 0, 0, 0, 0.0, 0.0, 0.0, 0, mtime_ns, ctime_ns))


def test_a_change_within_a_whole_second_filesystem_s_tick_is_a_change() -> None:
    """A filesystem that keeps whole seconds (ext3, FAT, some NFS exports) shows a file
    rewritten 0.5 s after the command started, in the same second, with a time before the
    start: within that tick it may have been read before the change, and keeps no entry.
    On a filesystem of finer times a file last changed 0.5 s before the start did not."""
    second = 1_700_000_000 * 1_000_000_000
    started = second + 500_000_000
    assert result_cache._changed_since(_stat_at(second, second), started)
    assert result_cache._changed_since(_stat_at(second - 1_000_000_000, second), started, ctime_only=True)
    assert not result_cache._changed_since(_stat_at(second + 1, second + 1), started + 500_000_000)
    assert result_cache._changed_since(_stat_at(started - 5_000_000, started - 5_000_000), started)
    assert not result_cache._changed_since(_stat_at(second - 3_000_000_000, second - 3_000_000_000), started)
