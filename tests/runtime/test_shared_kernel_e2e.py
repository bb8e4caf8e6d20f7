"""Two operators sharing a kernel class, end to end on the host (issue #11 §4).

fixtures/shared_norm: `rms_norm_v2` reuses `rms_norm`'s class through `../rms_norm/...`.
optrace is applied to v2 alone; v1's files stay byte for byte, both kernels compile with
g++ against the AscendC host stub and run on simulated vector cores, they compute the
same normalisation, v2's trace decodes (the shared class measured at v2's call site),
and v2's strip restores the tree.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.runtime import save_profiling_data
from optrace.runtime.format import PROF_SIZE_PER_CORE

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "fixtures" / "shared_norm"
STUB_DIR = ROOT / "runtime" / "stub"
CORES = 4
FLOATS = 4 * 8  # RMS_NORM_GROUPS * RMS_NORM_GROUP_LEN per core

pytestmark = [
    pytest.mark.slow,  # compiles and runs kernels on the host
    pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not available"),
]

HARNESS = """\
#include <cstdio>
#include <vector>
#include "kernel_operator.h"
extern "C" void {entry}(GM_ADDR x, GM_ADDR y, {profiling}GM_ADDR workspace, GM_ADDR tiling);
int main(int argc, char** argv)
{{
    const int cores = {cores};
    std::vector<float> x(cores * {floats}), y(cores * {floats}, 0.0f);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(static_cast<int>(i % 13) - 6) * 0.25f;
    std::vector<int64_t> prof(static_cast<size_t>(cores) * PROF_SIZE_PER_CORE, 0);
    uint8_t workspace[16] = {{0}}, tiling[16] = {{0}};
    optrace_host::RunCores(0, cores, 1000000, 41, [&] {{
        {entry}(reinterpret_cast<GM_ADDR>(x.data()), reinterpret_cast<GM_ADDR>(y.data()),
                {profiling_arg}workspace, tiling);
    }});
    for (float v : y) std::printf("%.6f\\n", v);
    if (argc > 1) {{
        FILE* out = std::fopen(argv[1], "wb");
        std::fwrite(prof.data(), sizeof(int64_t), prof.size(), out);
        std::fclose(out);
    }}
    return 0;
}}
"""


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".optrace" not in p.parts and ".git" not in p.parts}


def build(work: Path, name: str, entry_source: Path, traced: bool) -> Path:
    """g++ (host run) of one operator's entry with a harness calling it on CORES vector
    cores; `kernel_operator.h` is the stub. The kernels are laid out as the operators'
    build lays them out (`<build>/<op>/` = a copy of `<op>/op_kernel/`), where v2's
    `../rms_norm/...` resolves."""
    include = work / f"{name}_include"
    include.mkdir()
    kernels = work / f"{name}_kernels"
    kernels.mkdir()
    for op_kernel in sorted(entry_source.parents[2].glob("*/op_kernel")):
        shutil.copytree(op_kernel, kernels / op_kernel.parent.name)  # a copy: `..` of a link is its target's
    (include / "kernel_operator.h").write_text(
        '#pragma once\n#include "ascendc_host_stub.h"\n'
        "#ifndef PROF_SIZE_PER_CORE\n#define PROF_SIZE_PER_CORE 2048\n#endif\n")
    harness = work / f"{name}_main.cpp"
    harness.write_text(HARNESS.format(
        entry=entry_source.stem, cores=CORES, floats=FLOATS,
        profiling="GM_ADDR profiling_data, " if traced else "",
        profiling_arg="reinterpret_cast<GM_ADDR>(prof.data()), " if traced else ""))
    binary = work / name
    done = subprocess.run(["g++", "-O1", "-std=c++17", "-DOPTRACE_HOST_RUN", f"-I{include}", f"-I{STUB_DIR}",
                           f"-I{kernels / entry_source.parents[1].name}",
                           str(kernels / entry_source.parents[1].name / entry_source.name), str(harness),
                           "-o", str(binary)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return binary


def run(binary: Path, *args: str) -> list[float]:
    done = subprocess.run([str(binary), *args], capture_output=True, text=True, check=True)
    return [float(v) for v in done.stdout.split()]


def spans(trace: dict[str, Any]) -> dict[str, list[str]]:
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    out: dict[str, list[str]] = {}
    spans_only = (e for e in trace["traceEvents"] if e["ph"] == "X" and e.get("cat") != "optrace.launch")
    for e in sorted(spans_only, key=lambda e: e["ts"]):
        out.setdefault(names[(e["pid"], e["tid"])], []).append(e["name"])
    return out


def test_applying_one_operator_leaves_the_other_running_as_before(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURE, repo)
    (repo / ".git").mkdir()
    v1 = repo / "norm" / "rms_norm" / "op_kernel" / "rms_norm.cpp"
    v2_dir = repo / "norm" / "rms_norm_v2"
    before = snapshot(repo)
    v1_before = run(build(tmp_path, "v1_before", v1, traced=False))

    runner = CliRunner()
    res = runner.invoke(app, ["apply", str(v2_dir), "--write"])
    assert res.exit_code == 0, res.output
    after = snapshot(repo)
    changed = sorted(k for k in after if after.get(k) != before.get(k))
    assert changed and all(k.startswith("norm/rms_norm_v2/") for k in changed), changed

    # v1, built again from the same (untouched) files, computes what it did
    v1_after = run(build(tmp_path, "v1_after", v1, traced=False))
    assert v1_after == v1_before
    # v2 runs the shared class and its own step, and records its trace
    buffer_file = tmp_path / "prof.bin"
    y2 = run(build(tmp_path, "v2", v2_dir / "op_kernel" / "rms_norm_v2.cpp", traced=True), str(buffer_file))
    assert y2 == pytest.approx([min(max(v, -2.0), 2.0) + 1.0 for v in v1_before], abs=1e-5)

    mapped = runner.invoke(app, ["preprocess", str(v2_dir / "op_kernel"), "--out", str(tmp_path / "map")])
    assert mapped.exit_code == 0, mapped.output
    buffer = np.fromfile(buffer_file, dtype=np.int64).reshape(CORES, PROF_SIZE_PER_CORE)
    profiling = tmp_path / "profiling"
    save_profiling_data(buffer, 0, profiling, point_map=tmp_path / "map" / "point_map.json")
    res = runner.invoke(app, ["collect", str(profiling), "-o", str(tmp_path / "trace.json")])
    assert res.exit_code == 0, res.output
    tracks = spans(json.loads((tmp_path / "trace.json").read_text()))
    assert sorted(tracks) == [f"AIV {i}" for i in range(CORES)]
    for names in tracks.values():
        # the shared class is one region at v2's call site; v2's own step has its points
        assert names == ["processing", "init", "norm", "finalize", "finalize barrier"], names

    assert runner.invoke(app, ["strip", str(v2_dir), "--write"]).exit_code == 0
    assert snapshot(repo) == before
