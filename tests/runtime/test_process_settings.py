"""The settings of a process that runs one collect or one reader (optrace.cli.start):
freed memory kept for reuse, and the heap marked for transparent huge pages, so that a
first collect is not mostly page faults."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

# In a fresh interpreter: the settings are process-wide (malloc's), not for the test run.
PROBE = r"""
import json, re
from optrace.cli.start import keep_freed_memory
keep_freed_memory()
marked, mapping = [], None
with open("/proc/self/smaps", encoding="ascii", errors="replace") as smaps:
    for line in smaps:
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
            mapping = line.split()
        elif line.startswith("VmFlags:") and "hg" in line.split()[1:] and mapping is not None:
            lo, hi = (int(x, 16) for x in mapping[0].split("-"))
            marked.append([mapping[-1] if len(mapping) > 5 else "", hi - lo])
print(json.dumps({"marked": marked}))
"""


def _thp_on_request() -> bool:
    try:
        mode = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return False
    return "[never]" not in mode


@pytest.mark.skipif(sys.platform != "linux" or not _thp_on_request(),
                    reason="transparent huge pages are a Linux feature, here off or absent")
def test_the_heap_is_marked_for_huge_pages() -> None:
    """How many faults the pages then take depends on what the system has free (the
    benchmark shows it: bench/results.md); the mark is what optrace does."""
    from optrace.cli.start import HUGE_HEAP_BYTES

    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    found = json.loads(done.stdout)
    heap = [size for name, size in found["marked"] if name == "[heap]"]
    # The block rounded to whole 2 MiB pages inside it.
    assert heap and max(heap) >= HUGE_HEAP_BYTES - (4 << 20), found
