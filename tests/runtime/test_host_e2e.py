"""Host end to end: the device runtime block, run on the host, read back by the decoder.

The fixture kernel (e2e/moe_demo_kernel.cpp) gets the entry scaffold from
codemods/templates/entry_scaffold.h substituted in, as `optrace apply` would, and is
compiled with g++ against runtime/stub/ascendc_host_stub.h and the runtime block
template. It runs as N AIC + 2N AIV simulated cores; the buffer it writes goes through
save_profiling_data and `optrace collect`, and the trace must show what the kernel did.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.runtime import save_profiling_data
from optrace.runtime.format import PROF_SIZE_PER_CORE, capacity, trace_point_hash

ROOT = Path(__file__).resolve().parents[2]
E2E = Path(__file__).parent / "e2e"
STUB_DIR = ROOT / "runtime" / "stub"
TEMPLATES = ROOT / "codemods" / "templates"
FINGERPRINT = 0x5EEDF00D
BLOCKS = 4
SLOTS = 18  # sized for 6 blocks (an upper bound, as infer must): 6 slots stay unused
SKEW = 37

pytestmark = [
    pytest.mark.slow,  # compiles and runs kernels on the host
    pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not available"),
]


def scaffold_sections(text: str) -> dict[str, str]:
    """The `// @@name` sections of the entry-scaffold snippet file."""
    sections: dict[str, str] = {}
    current: str | None = None
    for line in text.splitlines(keepends=True):
        marker = re.match(r"// @@(\w+)\s*$", line)
        if marker:
            current = None if marker[1] == "end" else marker[1]
            if current:
                sections[current] = ""
        elif current:
            sections[current] += line
    return sections


def instrumented_source(cores: str = "OPTRACE_CORES_MIXED") -> str:
    """The fixture kernel with the scaffold inserted where apply would insert it, for a
    kernel of core mix `cores` (what apply derives from KERNEL_TASK_TYPE)."""
    sections = scaffold_sections((TEMPLATES / "entry_scaffold.h").read_text())
    source = (E2E / "moe_demo_kernel.cpp").read_text()
    assert source.count("    // @@prologue\n") == 1
    prologue = sections["prologue"].replace("@PROFILING_ARG@", "profilingData").replace("@CORES@", cores)
    return source.replace("    // @@prologue\n", prologue)


def traced_source() -> str:
    """The same kernel as its author writes it: TRACE_POINT("label", "B"|"E"), no ids."""
    points = json.loads((E2E / "point_map.json").read_text())["points"]

    def named(match: re.Match[str]) -> str:
        point = points[match[1]]
        return f'MoeTracing(TRACE_POINT("{point["label"]}", "{point["event_type"]}")'

    return re.sub(r"MoeTracing\((\d+)", named, instrumented_source())


def compile_kernel(workdir: Path, name: str, *defines: str, source_text: str | None = None,
                   include: Path = TEMPLATES) -> Path:
    source = workdir / f"{name}.cpp"
    source.write_text(instrumented_source() if source_text is None else source_text)
    binary = workdir / name
    command = [
        "g++", "-O2", "-std=c++17", "-Wall", "-Wextra", "-Werror",
        f"-I{STUB_DIR}", f"-I{include}", *[f"-D{d}" for d in defines],
        str(source), "-o", str(binary),
    ]
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return binary


def kernel_report(stdout: str) -> dict[str, list[int]]:
    """The harness's report: `dcci N`, `cycles N`, `barriers N`, `y v0 v1 ...`."""
    return {line.split()[0]: [int(v) for v in line.split()[1:]] for line in stdout.splitlines() if line}


def run_kernel_report(binary: Path, out: Path, *, start: int = 1_000_000, skew: int = SKEW,
                      slots: int = SLOTS, null: bool = False) -> tuple[np.ndarray, dict[str, list[int]]]:
    """The buffer the kernel wrote and the harness's counters (a null buffer: `null`)."""
    done = subprocess.run(
        [str(binary), str(out), str(BLOCKS), str(slots), str(start), str(skew), *(["null"] if null else [])],
        capture_output=True, text=True,
    )
    assert done.returncode == 0, done.stderr
    return np.fromfile(out, dtype=np.int64).reshape(slots, PROF_SIZE_PER_CORE), kernel_report(done.stdout)


def run_kernel(binary: Path, out: Path, *, start: int = 1_000_000, skew: int = SKEW) -> np.ndarray:
    buffer, report = run_kernel_report(binary, out, start=start, skew=skew)
    # Every written slot's 64-byte lines were flushed by the write-back.
    assert report["dcci"] == [3 * BLOCKS * PROF_SIZE_PER_CORE // 8]
    return buffer


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("e2e_build")


@pytest.fixture(scope="module")
def kernel(build: Path) -> Path:
    return compile_kernel(build, "moe_demo", f"OPTRACE_BUILD_FINGERPRINT={FINGERPRINT:#x}u")


def collect(profiling: Path, out: Path, *extra: str) -> Any:
    return CliRunner().invoke(app, ["collect", str(profiling), "-o", str(out), *extra])


def spans_by_track(trace: dict[str, Any]) -> dict[tuple[int, int], list[dict[str, Any]]]:
    """Per (pid, tid): its spans (the launch slices left out)."""
    tracks: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for event in trace["traceEvents"]:
        if event["ph"] == "X" and event.get("cat") != "optrace.launch":
            tracks.setdefault((event["pid"], event["tid"]), []).append(event)
    return tracks


def thread_names(trace: dict[str, Any]) -> dict[tuple[int, int], str]:
    return {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name"
    }


def assert_properly_nested(events: list[dict[str, Any]]) -> None:
    """Every pair of spans on a track is either disjoint or one contains the other."""
    ordered = sorted(events, key=lambda e: (e["ts"], -e["dur"]))
    stack: list[tuple[float, float]] = []
    for event in ordered:
        begin, end = event["ts"], event["ts"] + event["dur"]
        while stack and begin >= stack[-1][1] - 1e-9:
            stack.pop()
        if stack:
            assert end <= stack[-1][1] + 1e-9, f"{event} crosses its parent"
        stack.append((begin, end))


def test_kernel_trace_end_to_end(kernel: Path, tmp_path: Path) -> None:
    profiling = tmp_path / "profiling"
    for rank, start in ((0, 1_000_000), (1, 5_000_000)):
        buffer = run_kernel(kernel, tmp_path / f"gm{rank}.bin", start=start)
        saved = save_profiling_data(
            buffer, rank, profiling, aic_cores=BLOCKS, point_map=E2E / "point_map.json",
            barrier=True,
        )
        assert saved == profiling / f"rank{rank:03d}.pt"
    result = collect(profiling, tmp_path / "trace.json")
    assert result.exit_code == 0, result.output
    assert "12 unused core slots" in result.output  # 6 spare slots per rank
    trace = json.loads((tmp_path / "trace.json").read_text())

    names = thread_names(trace)
    expected = {f"AIC {i}" for i in range(BLOCKS)} | {f"AIV {i}" for i in range(2 * BLOCKS)}
    for rank in (0, 1):
        assert {n for (pid, _), n in names.items() if pid == rank} == expected
    tracks = spans_by_track(trace)
    assert set(tracks) == set(names)  # one track per core that ran, nothing else

    for (pid, tid), events in tracks.items():
        assert_properly_nested(events)
        labels = [e["name"] for e in events]
        core = names[(pid, tid)]
        phase = "aic" if core.startswith("AIC") else "aiv"
        assert labels.count("processing") == 1
        assert labels.count("processing setup") == 1
        if core == f"AIV {2 * BLOCKS - 1}":
            # returned early: the scaffold's guard still closed `processing`
            assert labels == ["processing", "processing setup"]
            continue
        assert labels.count("processing combine") == 1
        loop = [e for e in events if e["name"] == f"processing expert {phase}"]
        assert [e["args"].get("index", 0) for e in loop] == [0, 1, 2, 3]
        if phase == "aiv":
            # extraId carries the sub-block (1C2V role): AIV i is sub-block i % 2.
            assert {e["args"].get("extraId", 0) for e in loop} == {int(core.split()[1]) % 2}
            assert sum(e["name"] == "processing expert aiv wait" for e in events) == 4
        root = next(e for e in events if e["name"] == "processing")
        assert all(root["ts"] <= e["ts"] and e["ts"] + e["dur"] <= root["ts"] + root["dur"] + 1e-9
                   for e in events)
        assert root["args"]["src"] == "moe_demo_kernel.cpp:36"  # the scaffold's B point

    # Launch skew: simulated core k starts SKEW cycles after core k-1, and each rank is
    # aligned to its own earliest core, so both ranks show the same staircase.
    for rank in (0, 1):
        starts = []
        cores = [f"AIC {i}" for i in range(BLOCKS)] + [f"AIV {i}" for i in range(2 * BLOCKS)]
        for i, name in enumerate(cores):
            tid = next(t for (p, t), n in names.items() if p == rank and n == name)
            root = next(e for e in tracks[(rank, tid)] if e["name"] == "processing")
            starts.append((i, root["ts"]))
        deltas = np.diff([ts for _, ts in starts])
        assert np.allclose(deltas, SKEW / 50.0, atol=0.001), deltas


def test_cycle_counter_wraparound(kernel: Path, tmp_path: Path) -> None:
    """A core whose 64-bit counter wraps mid-launch still decodes with sane durations."""
    profiling = tmp_path / "profiling"
    buffer = run_kernel(kernel, tmp_path / "gm.bin", start=(1 << 64) - 300)
    starts = buffer[:, -1].view(np.uint64)
    assert starts[0] > starts[3 * BLOCKS - 1]  # the counter did wrap between cores
    save_profiling_data(buffer, 0, profiling, aic_cores=BLOCKS, point_map=E2E / "point_map.json")
    result = collect(profiling, tmp_path / "trace.json")
    assert result.exit_code == 0, result.output
    events = [e for e in json.loads((tmp_path / "trace.json").read_text())["traceEvents"] if e["ph"] == "X"]
    assert all(0 <= e["ts"] < 1000 and 0 <= e["dur"] < 1000 for e in events)


def test_overflow_reports_drops_and_exits_1(build: Path, tmp_path: Path) -> None:
    experts = 600  # AIC: 2 * 600 loop records alone exceed the 1023-record capacity
    binary = compile_kernel(build, "moe_demo_overflow", f"E2E_EXPERTS={experts}",
                            f"OPTRACE_BUILD_FINGERPRINT={FINGERPRINT:#x}u")
    buffer = run_kernel(binary, tmp_path / "gm.bin")
    cap = capacity(PROF_SIZE_PER_CORE)
    # fingerprint, processing B, setup B/E, the loop, combine B/E, processing E
    aic_written = 1 + 1 + 2 + 2 * experts + 2 + 1
    assert buffer[0, 0] == aic_written + 1  # the guard kept counting
    profiling = tmp_path / "profiling"
    save_profiling_data(buffer, 0, profiling, aic_cores=BLOCKS, point_map=E2E / "point_map.json")
    result = collect(profiling, tmp_path / "trace.json")
    assert result.exit_code == 1, result.output
    assert f"AIC 0: {aic_written - cap} records dropped" in result.output
    trace = json.loads((tmp_path / "trace.json").read_text())
    for events in spans_by_track(trace).values():
        assert_properly_nested(events)
    markers = [e for e in trace["traceEvents"] if e["ph"] == "i"]
    # every core but the last AIV one (it returns before the loop) overflowed
    assert len(markers) == 3 * BLOCKS - 1 and all("dropped" in e["name"] for e in markers)


def test_stale_map_is_refused(kernel: Path, tmp_path: Path) -> None:
    profiling = tmp_path / "profiling"
    buffer = run_kernel(kernel, tmp_path / "gm.bin")
    save_profiling_data(buffer, 0, profiling, aic_cores=BLOCKS)
    stale = json.loads((E2E / "point_map.json").read_text())
    stale["fingerprint"] = 0x12345678
    (tmp_path / "stale.json").write_text(json.dumps(stale))
    result = collect(profiling, tmp_path / "trace.json", "--point-map", str(tmp_path / "stale.json"))
    assert result.exit_code == 2
    assert "rank000.pt: built with fingerprint 0x5eedf00d" in result.output
    assert "another build" in result.output
    assert "Traceback" not in result.output


def test_profiling_disabled_compiles_away(build: Path, tmp_path: Path) -> None:
    binary = compile_kernel(build, "moe_demo_off", "ENABLE_MOE_PROFILING=0")
    done = subprocess.run(
        [str(binary), str(tmp_path / "gm.bin"), str(BLOCKS), str(SLOTS), "1000", "1"],
        capture_output=True, text=True,
    )
    assert done.returncode == 0, done.stderr
    report = kernel_report(done.stdout)
    assert report["dcci"] == [0] and report["cycles"] == [0] and report["barriers"] == [0]
    assert not np.fromfile(tmp_path / "gm.bin", dtype=np.int64).any()


def test_trace_point_fallback_is_the_documented_hash(build: Path) -> None:
    source = build / "tp.cpp"
    source.write_text(
        '#include "ascendc_host_stub.h"\n#include "moe_tracing_runtime.h"\n#include <cstdio>\n'
        "static_assert(TRACE_POINT(\"processing\", \"B\") != 0, \"integer, not a string\");\n"
        'int main() { std::printf("%u %u\\n", static_cast<uint32_t>(TRACE_POINT("processing", "B")),'
        ' static_cast<uint32_t>(TRACE_POINT("dispatch aiv token-copy", "E"))); }\n'
    )
    binary = build / "tp"
    done = subprocess.run(
        ["g++", "-std=c++17", "-Wall", "-Werror", f"-I{STUB_DIR}", f"-I{TEMPLATES}",
         str(source), "-o", str(binary)],
        capture_output=True, text=True,
    )
    assert done.returncode == 0, done.stderr
    out = subprocess.run([str(binary)], capture_output=True, text=True, check=True).stdout.split()
    assert [int(v) for v in out] == [
        trace_point_hash("processing", "B"),
        trace_point_hash("dispatch aiv token-copy", "E"),
    ]


def _labels_per_core(trace_path: Path) -> dict[str, list[str]]:
    trace = json.loads(trace_path.read_text())
    names = thread_names(trace)
    return {names[key]: [e["name"] for e in events] for key, events in spans_by_track(trace).items()}


def test_preprocess_compile_run_collect_chain(tmp_path: Path) -> None:
    """G1 end to end: `optrace preprocess --modify` on the build tree, the kernel built from
    it, its buffer collected with the map preprocess wrote (fingerprints must agree)."""
    if "preprocess" not in {c.name or getattr(c.callback, "__name__", "") for c in app.registered_commands}:
        pytest.skip("no `optrace preprocess` command in this build")
    src = tmp_path / "src"
    src.mkdir()
    (src / "moe_demo.cpp").write_text(traced_source())
    shutil.copy(TEMPLATES / "moe_tracing_runtime.h", src)
    done = CliRunner().invoke(app, ["preprocess", str(src), "--out", str(tmp_path / "build"), "--modify"])
    assert done.exit_code == 0, done.output
    document = json.loads((tmp_path / "build" / "point_map.json").read_text())
    assert document["cores"] == ["AIC", "AIV"]  # the scaffold's OPTRACE_CORES_MIXED
    assert f"#define OPTRACE_BUILD_FINGERPRINT {document['fingerprint']}u" in (
        src / "moe_tracing_runtime.h").read_text()
    binary = compile_kernel(tmp_path, "built", source_text=(src / "moe_demo.cpp").read_text(), include=src)
    profiling = tmp_path / "profiling"
    save_profiling_data(run_kernel(binary, tmp_path / "gm.bin"), 0, profiling, aic_cores=BLOCKS,
                        point_map=tmp_path / "build" / "point_map.json")
    result = collect(profiling, tmp_path / "trace.json")
    assert result.exit_code == 0, result.output
    trace = json.loads((tmp_path / "trace.json").read_text())
    assert trace["otherData"]["ranks"][0]["fingerprint"] == document["fingerprint"]
    reference = tmp_path / "reference"
    save_profiling_data(run_kernel(compile_kernel(tmp_path, "ref"), tmp_path / "ref.bin"), 0, reference,
                        aic_cores=BLOCKS, point_map=E2E / "point_map.json")
    assert collect(reference, tmp_path / "reference.json").exit_code == 0
    assert _labels_per_core(tmp_path / "trace.json") == _labels_per_core(tmp_path / "reference.json")

    # The same sources compiled WITHOUT preprocessing: TRACE_POINT's fallback yields the
    # same ids, so the map still decodes them; fingerprint 0 says it cannot be verified.
    raw = compile_kernel(tmp_path, "raw", source_text=traced_source())
    unprocessed = tmp_path / "unprocessed"
    save_profiling_data(run_kernel(raw, tmp_path / "raw.bin"), 0, unprocessed, aic_cores=BLOCKS,
                        point_map=tmp_path / "build" / "point_map.json")
    result = collect(unprocessed, tmp_path / "raw.json")
    assert result.exit_code == 0, result.output
    assert "fingerprint 0" in result.output
    assert _labels_per_core(tmp_path / "raw.json") == _labels_per_core(tmp_path / "reference.json")


@pytest.mark.parametrize("split", ["SPLIT_CORE_CUBE", "SPLIT_CORE_VEC"])
def test_split_core_builds_use_their_own_pointer(build: Path, tmp_path: Path, split: str) -> None:
    """AIC-only / AIV-only compilation passes: one block-local pointer per core type."""
    binary = compile_kernel(build, f"moe_demo_{split.lower()}", split,
                            f"OPTRACE_BUILD_FINGERPRINT={FINGERPRINT:#x}u")
    buffer = run_kernel(binary, tmp_path / "gm.bin")
    profiling = tmp_path / "profiling"
    save_profiling_data(buffer, 0, profiling, aic_cores=BLOCKS, point_map=E2E / "point_map.json")
    assert collect(profiling, tmp_path / "trace.json").exit_code == 0
    if shutil.which("nm") is None:
        return
    symbols = subprocess.run(["nm", "-C", str(binary)], capture_output=True, text=True).stdout
    pointer = "g_moeProfilePtrCube" if split == "SPLIT_CORE_CUBE" else "g_moeProfilePtrVec"
    assert pointer in symbols and "g_moeProfilePtr\n" not in symbols


def _run_with_slots(binary: Path, out: Path, slots: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(binary), str(out), str(BLOCKS), str(slots), "1000", "1"],
                          capture_output=True, text=True)


def test_cores_past_the_allocated_slots_do_not_write_past_the_buffer(build: Path, tmp_path: Path) -> None:
    """Built for 2 AIC + 4 AIV slots, run on 4 AIC + 8 AIV cores: the six slots that exist
    are written (AIC 0-3, then AIV 0-1 from slot GetBlockNum()), nothing past them."""
    binary = compile_kernel(build, "moe_demo_small", "OPTRACE_MAX_AIC_CORES=2", "OPTRACE_MAX_AIV_CORES=4")
    done = _run_with_slots(binary, tmp_path / "gm.bin", 6)
    assert done.returncode == 0, done.stderr
    assert kernel_report(done.stdout)["dcci"] == [6 * PROF_SIZE_PER_CORE // 8]
    data = np.fromfile(tmp_path / "gm.bin", dtype=np.int64).reshape(6, PROF_SIZE_PER_CORE)
    assert (data[:, 0] > 1).all()  # every slot carries records


def test_the_sentinel_catches_a_write_past_the_buffer(build: Path, tmp_path: Path) -> None:
    """The same run with the guard taken out of the runtime block fails: the check above
    can fail."""
    include = tmp_path / "templates"
    include.mkdir()
    block = (TEMPLATES / "moe_tracing_runtime.h").read_text()
    guard = re.search(r"    if \(slot >= .*?\n        return;.*?\n    \}\n", block)
    assert guard is not None
    (include / "moe_tracing_runtime.h").write_text(block.replace(guard[0], "    (void)slots;\n"))
    binary = compile_kernel(build, "moe_demo_unguarded", "OPTRACE_MAX_AIC_CORES=2",
                            "OPTRACE_MAX_AIV_CORES=4", include=include)
    done = _run_with_slots(binary, tmp_path / "gm.bin", 6)
    assert done.returncode == 3 and "wrote past" in done.stderr


def test_the_kernel_and_the_host_agree_on_the_slot_bounds() -> None:
    """The runtime block's defaults are the profiling-sizes header's (infer, torch adapter)."""
    from optrace.codemods.layer_common import sizes_header_content

    block = (TEMPLATES / "moe_tracing_runtime.h").read_text()
    header = sizes_header_content().decode()
    for name in ("PROF_SIZE_PER_CORE", "OPTRACE_MAX_AIC_CORES", "OPTRACE_MAX_AIV_CORES"):
        pattern = rf"#define {name} (\d+)\b"
        assert re.findall(pattern, block) == re.findall(pattern, header), name


# --- the runtime switch: a launch given no buffer (issue #15 §5) --------------------------------


def test_a_null_buffer_records_nothing_and_computes_the_same(kernel: Path, tmp_path: Path) -> None:
    """One binary, traced and untraced: with profiling_data null no core reads the clock,
    waits on a point's barrier, writes a record or flushes a line, and the kernel's own
    output is the traced run's."""
    traced, on = run_kernel_report(kernel, tmp_path / "on.bin")
    untraced, off = run_kernel_report(kernel, tmp_path / "off.bin", null=True)
    assert (traced[:, 0] > 1).sum() == 3 * BLOCKS and on["cycles"][0] > 0 and on["barriers"][0] > 0
    assert off["cycles"] == [0] and off["barriers"] == [0] and off["dcci"] == [0]
    assert not untraced.any()  # the zeroed buffer (and the sentinel past it) untouched
    assert off["y"] == on["y"] and len(set(on["y"][:BLOCKS])) > 1  # real, per-core results


# --- single-type kernels: no slots of the other type (issue #11 §3) -----------------------------


@pytest.mark.parametrize(("core_type", "define", "mix"), [
    ("AIV", "E2E_CORE_TYPE=1", "OPTRACE_CORES_AIV_ONLY"),
    ("AIC", "E2E_CORE_TYPE=2", "OPTRACE_CORES_AIC_ONLY"),
])
def test_single_type_kernel_buffer_is_laid_out_and_decoded_by_the_maps_core_mix(
    build: Path, tmp_path: Path, core_type: str, define: str, mix: str,
) -> None:
    """A vector-only (cube-only) kernel writes its core i to slot i, sized by its own
    bound: the buffer has no slots of the other type; the map's "cores" makes save and
    collect read every slot as that type."""
    bound = {"AIV": "OPTRACE_MAX_AIV_CORES", "AIC": "OPTRACE_MAX_AIC_CORES"}[core_type]
    other = {"AIV": "OPTRACE_MAX_AIC_CORES", "AIC": "OPTRACE_MAX_AIV_CORES"}[core_type]
    # its own bound is the buffer (BLOCKS + 2 spare slots); the other type's bound is 0
    binary = compile_kernel(build, f"moe_demo_{core_type.lower()}", define, f"{bound}={BLOCKS + 2}",
                            f"{other}=0", f"OPTRACE_BUILD_FINGERPRINT={FINGERPRINT:#x}u",
                            source_text=instrumented_source(mix))
    buffer, report = run_kernel_report(binary, tmp_path / "gm.bin", slots=BLOCKS + 2)
    assert report["dcci"] == [BLOCKS * PROF_SIZE_PER_CORE // 8]
    assert (buffer[:BLOCKS, 0] > 1).all() and not buffer[BLOCKS:].any()  # core i -> slot i
    point_map = json.loads((E2E / "point_map.json").read_text())
    point_map["cores"] = [core_type]
    (tmp_path / "map.json").write_text(json.dumps(point_map))
    profiling = tmp_path / "profiling"
    saved = save_profiling_data(buffer, 0, profiling, point_map=tmp_path / "map.json")
    assert saved is not None
    result = collect(profiling, tmp_path / "trace.json")
    assert result.exit_code == 0, result.output
    trace = json.loads((tmp_path / "trace.json").read_text())
    names = thread_names(trace)
    assert set(names.values()) == {f"{core_type} {i}" for i in range(BLOCKS)}
    phase = core_type.lower()
    for events in spans_by_track(trace).values():
        assert_properly_nested(events)
        labels = [e["name"] for e in events]
        assert labels.count("processing") == 1 and labels.count(f"processing expert {phase}") == 4

    # A rank file saved without the map (the old default split, a third AIC) decodes the
    # same once collect is given the map: the map's core mix wins.
    unmapped = tmp_path / "unmapped"
    save_profiling_data(buffer, 0, unmapped)
    result = collect(unmapped, tmp_path / "trace2.json", "--point-map", str(tmp_path / "map.json"))
    assert result.exit_code == 0, result.output
    again = thread_names(json.loads((tmp_path / "trace2.json").read_text()))
    assert set(again.values()) == set(names.values())


def test_an_older_scaffold_still_builds_and_runs_with_the_current_block(build: Path, tmp_path: Path) -> None:
    """Between a block upgrade and a scaffold upgrade (or with a hand-kept v1 scaffold):
    the v1 prologue, which passes no core mix, compiles against the current block and
    writes the mixed layout as before."""
    v1 = ("    int64_t moeProfBuf[PROF_SIZE_PER_CORE];\n    moeProfBuf[0] = 1;\n"
          "    moeProfBuf[PROF_SIZE_PER_CORE - 1] = static_cast<int64_t>(AscendC::GetSystemCycle());\n"
          "    SetMoeProfilePtr(moeProfBuf);\n    MoeTracingFingerprint();\n"
          '    MoeTracing(TRACE_POINT("processing", "B"));\n'
          '    OptraceEntryEnd optraceEntryEnd(TRACE_POINT("processing", "E"), profilingData, moeProfBuf);\n')
    source = (E2E / "moe_demo_kernel.cpp").read_text().replace("    // @@prologue\n", v1)
    binary = compile_kernel(build, "moe_demo_v1", f"OPTRACE_BUILD_FINGERPRINT={FINGERPRINT:#x}u",
                            source_text=source)
    buffer = run_kernel(binary, tmp_path / "gm.bin")
    profiling = tmp_path / "profiling"
    save_profiling_data(buffer, 0, profiling, aic_cores=BLOCKS, point_map=E2E / "point_map.json")
    assert collect(profiling, tmp_path / "trace.json").exit_code == 0
    names = thread_names(json.loads((tmp_path / "trace.json").read_text()))
    expected = {f"AIC {i}" for i in range(BLOCKS)} | {f"AIV {i}" for i in range(2 * BLOCKS)}
    assert set(names.values()) == expected
