"""The Python the callers codemod writes really runs: from another working directory, a
sample with argparse saves the buffer (relative paths made absolute), and the parent
runs the collector into a Chrome trace. The NPU extension and torch_npu are fakes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from layer_snippets import make_repo, run

from optrace.codemods.python_callers_cst import python_caller_edits
from optrace.runtime.format import trace_point_hash

SAMPLE = '''\
import argparse

import numpy as np
import torch_npu

import ext


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=2)
    args = parser.parse_args()
    for _ in range(args.iters):
        y, n = ext.demo_op(np.zeros(4))
    torch_npu.npu.synchronize()
    print("done", y.shape, n.shape)


if __name__ == "__main__":
    main()
'''

FAKE_EXT = f'''\
import numpy as np
from optrace.runtime.synth import SlotWriter, new_buffer


def demo_op(x):
    """The instrumented op (mode B): its outputs, then profiling_data."""
    buf = new_buffer(3)
    for slot in range(3):
        w = SlotWriter(buf[slot], 1000 * slot, fingerprint=0)
        w.record({trace_point_hash("processing", "B")}, 1000 * slot + 50)
        w.record({trace_point_hash("processing", "E")}, 1000 * slot + 550)
    return x, x, buf
'''

FAKE_NPU = "class npu:\n    @staticmethod\n    def synchronize():\n        pass\n"


def test_the_instrumented_sample_saves_and_collects(tmp_path: Path) -> None:
    reg = ("torch/reg.cpp",
           'TORCH_LIBRARY(lib, m)\n{\n    m.def("demo_op(Tensor x) -> (Tensor, Tensor)");\n}\n')
    op = make_repo(tmp_path, {"examples/sample.py": SAMPLE, reg[0]: reg[1]})
    root = op.parent.parent
    sample = root / "examples" / "sample.py"
    sample.write_text(run(python_caller_edits, op)["examples/sample.py"])
    fakes = tmp_path / "fakes"
    fakes.mkdir()
    (fakes / "ext.py").write_text(FAKE_EXT)
    (fakes / "torch_npu.py").write_text(FAKE_NPU)
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    (kernels / "k.cpp").write_text('void k() {\n    MoeTracing(TRACE_POINT("processing", "B"));\n'
                                   '    MoeTracing(TRACE_POINT("processing", "E"));\n}\n')
    build = tmp_path / "build"
    subprocess.run([sys.executable, "-m", "optrace", "preprocess", str(kernels), "--out", str(build)],
                   check=True, capture_output=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home),
           "PYTHONPATH": os.pathsep.join([str(fakes), os.environ.get("PYTHONPATH", "")])}
    for key in ("OPTRACE_PROFILING_DIR", "OPTRACE_POINT_MAP", "OPTRACE_CHROME_TRACE"):
        env.pop(key, None)
    res = subprocess.run([sys.executable, str(sample), "--profiling-dir", "prof", "--point-map",
                          str(build / "point_map.json"), "--chrome-trace", "~/trace.json"],
                         cwd=elsewhere, env=env, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    saved = sorted(p.name for p in (elsewhere / "prof").glob("rank*.pt"))
    assert saved == ["rank000_demo-op.pt", "rank000_demo-op_launch1.pt"]  # two launches, relative dir -> cwd
    assert (elsewhere / "prof" / "point_map.json").is_file()  # the map beside the rank files
    trace = home / "trace.json"  # `~` expanded before anything ran
    doc = json.loads(trace.read_text())
    names = {e.get("name") for e in doc["traceEvents"] if e.get("ph") == "X"}
    assert "processing" in names
    # Without the options the sample runs as before and writes nothing.
    res = subprocess.run([sys.executable, str(sample)], cwd=tmp_path, env=env, capture_output=True, text=True,
                         check=False)
    assert res.returncode == 0 and "done" in res.stdout
    assert not (tmp_path / "prof").exists()
