"""Generate the torch-written .pt fixtures and check torch accepts optrace's writer.

Run with a Python that has torch (NOT the project venv, which must not need it):

    python -m venv /tmp/torchvenv && /tmp/torchvenv/bin/pip install torch==2.13.0 numpy
    /tmp/torchvenv/bin/python tests/runtime/data/generate_pt_fixtures.py

It builds the buffers with its own few lines of code (independent of optrace, so the
fixtures test the reader against an outside writer), saves them with torch.save, then
loads optrace's pt_writer output (written by the test suite's recipe, see
test_pt_io.writer_sample) with torch.load(weights_only=True) and records its sha256 and
what torch saw in writer_check.json. test_pt_io re-creates the same bytes and compares.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections import OrderedDict
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
WORDS = 64  # small slots keep the fixtures a few KB
CAP = (WORDS - 2) // 2


def event(point_id: int, extra: int = 0, index: int = 0) -> int:
    word = (((extra & 0xFF) | (index << 8)) << 32) | point_id
    return word - (1 << 64) if word >= 1 << 63 else word


def slot(start: int, records: list[tuple[int, int, int, int]]) -> list[int]:
    """A legacy slot (no guard, no fingerprint): records are (id, extra, index, cycle)."""
    words = [0] * WORDS
    words[0] = 1 + len(records)
    words[WORDS - 1] = start
    for k, (pid, extra, index, cycle) in enumerate(records):
        words[1 + k] = event(pid, extra, index)
        words[WORDS - 2 - k] = cycle
    return words


def core_records(start: int, loops: int) -> list[tuple[int, int, int, int]]:
    t = start + 5
    out = [(1, 0, 0, t)]
    for i in range(loops):
        out += [(3, 0, i, t + 10 + 20 * i), (4, 0, i, t + 25 + 20 * i)]
    out.append((2, 0, 0, t + 30 + 20 * loops))
    return out


def legacy_buffers() -> tuple[torch.Tensor, torch.Tensor]:
    aic = torch.tensor([slot(1000 + 10 * c, core_records(1000 + 10 * c, 3)) for c in range(2)])
    aiv = torch.tensor(
        [slot(1003 + 10 * c, core_records(1003 + 10 * c, 2)) for c in range(3)] + [[0] * WORDS]
    )
    return aic, aiv


def main() -> None:
    aic, aiv = legacy_buffers()
    # What the legacy helper writes: a list, one [cores, size] int64 tensor per core type.
    torch.save([aic, aiv], HERE / "rank000_legacy.pt")
    # The same data as views into one storage (slices of the device output, offset != 0).
    whole = torch.cat([torch.zeros(1, WORDS, dtype=torch.int64), aic, aiv])
    torch.save([whole[1:3], whole[3:]], HERE / "rank001_legacyviews.pt")
    # An optrace-layout dict written by torch itself.
    torch.save(
        {
            "optrace_profiling": 1,
            "meta": {"slot_words": WORDS, "aic_cores": 2, "aiv_cores": 4, "format_version": 1,
                     "clock_mhz": 100.0, "barrier": False, "fingerprint": None},
            "data": torch.cat([aic, aiv]),
        },
        HERE / "rank002_torchdict.pt",
    )
    # Other things torch writes: unsigned (rebuild_tensor_v3), Parameter, OrderedDict,
    # float / bool / transposed tensors.
    torch.save(
        OrderedDict(
            u64=torch.tensor([1, 2**63 + 5], dtype=torch.uint64),
            param=torch.nn.Parameter(torch.tensor([1.5, -2.0])),
            flags=torch.tensor([True, False]),
            transposed=torch.arange(6, dtype=torch.int32).reshape(2, 3).t(),
            scalar=torch.tensor(7, dtype=torch.int16),
        ),
        HERE / "misc_tensors.pt",
    )

    # optrace's writer, run from the project venv, checked by torch here.
    sample = HERE / "writer_sample.pt"
    subprocess.run(
        [str(ROOT.parents[0] / ".venv" / "bin" / "python"), "-c",
         "import sys; sys.path.insert(0, 'tests/runtime');"
         "from test_pt_io import writer_sample; writer_sample(sys.argv[1])", str(sample)],
        cwd=ROOT, check=True,
    )
    loaded = torch.load(sample, weights_only=True)
    mmapped = torch.load(sample, weights_only=True, mmap=True)  # needs 64-byte alignment
    check = {
        "sha256": hashlib.sha256(sample.read_bytes()).hexdigest(),
        "torch": torch.__version__,
        "meta": loaded["meta"],
        "tensors": {
            name: {"shape": list(t.shape), "dtype": str(t.dtype), "sum": float(t.double().sum())}
            for name, t in loaded["tensors"].items()
        },
        "mmap_equal": all(
            torch.equal(loaded["tensors"][k], mmapped["tensors"][k]) for k in loaded["tensors"]
        ),
    }
    (HERE / "writer_check.json").write_text(json.dumps(check, indent=2, sort_keys=True) + "\n")
    sample.unlink()
    print(json.dumps(check, indent=2), file=sys.stderr)


if __name__ == "__main__":
    main()
