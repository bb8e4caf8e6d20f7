"""Decoder and reader fuzzing: generated and mutated device buffers and `.pt` files.

The contract under test (docs/runtime.md, cli.md): whatever bytes a rank file holds,
reading and decoding it either works or raises a `ProfilingInputError` that names the
file — never another exception, never a hang, never code from the file executed.

Budgets follow the hypothesis profile (tests/conftest.py): `settings.default.max_examples`
x 100 cases per fuzz loop — 10,000 by default, 200,000 with `OPTRACE_LONG_FUZZ=1`. The
loops are seeded numpy generators (`OPTRACE_FUZZ_SEED` to change the seed) rather than
hypothesis, so 10,000 cases cost seconds; every case runs under a time bound, and a
failing case is written to a file whose name is printed, for a replay.
"""

from __future__ import annotations

import io
import json
import math
import os
import signal
import struct
import subprocess
import sys
import textwrap
import time
import traceback
import warnings
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fuzz_tally import SCALE, Tally, tally
from hypothesis import settings
from rt_helpers import FP, LABELS, point_map, well_formed_core, write_point_map
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.runtime import pt_reader
from optrace.runtime.decode import STATUS_NAMES, DecodeOptions, RankDecode, decode_rank
from optrace.runtime.errors import ProfilingInputError
from optrace.runtime.format import RankMeta, capacity, fingerprint_word, pack_event
from optrace.runtime.inspection import format_text, inspect_file, inspection_json
from optrace.runtime.pointmap import PointMap
from optrace.runtime.pt_reader import load_pt
from optrace.runtime.pt_writer import dumps_pickle, write_pt
from optrace.runtime.rankfile import RankBuffer, read_rank_file
from optrace.runtime.synth import SlotWriter, new_buffer

pytestmark = pytest.mark.slow  # fuzzing: tens of thousands of mutated buffers and rank files

# 10,000 by default; 200,000 with OPTRACE_LONG_FUZZ=1; times OPTRACE_FUZZ_SCALE (tests/fuzz_tally.py)
CASES = settings.default.max_examples * 100 * SCALE
SEED = int(os.environ.get("OPTRACE_FUZZ_SEED", "20250601"))
CASE_SECONDS = 5.0  # far above what a case takes (well under a millisecond): a hang, not a slow case
DATA = Path(__file__).parent / "data"
STATES = {"unused", "empty", "ok", "overflow", "clobbered", "corrupt"}
runner = CliRunner()


class CaseTimeout(Exception):
    pass


@contextmanager
def time_bound(seconds: float = CASE_SECONDS) -> Iterator[None]:
    """Interrupt a case that runs longer than `seconds` (SIGALRM: Python-level loops)."""

    def expire(signum: int, frame: object) -> None:
        raise CaseTimeout(f"case ran longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class Failures:
    """Unexpected outcomes, each saved to a file for a replay; reported all at once."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.found: list[str] = []

    def add(self, case: int, what: str, payload: bytes) -> None:
        if len(self.found) >= 20:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        saved = self.directory / f"case{case:06d}.bin"
        saved.write_bytes(payload)
        self.found.append(f"case {case} (seed {SEED}, saved as {saved}): {what}")

    def check(self) -> None:
        assert not self.found, "\n".join(self.found)


# --------------------------------------------------------------------------- invariants


def assert_decoded_well(decoded: RankDecode, slots: int, pmap: PointMap) -> None:
    """What every successful decode promises, however odd the buffer."""
    assert len(decoded.slots) == slots
    for report in decoded.slots:
        assert report.state in STATES
        assert 0 <= report.records <= report.capacity
        assert report.dropped >= 0
    assert decoded.skipped_records >= 0 and decoded.clock_mhz > 0
    for core in decoded.cores:
        n = core.start.size
        assert core.end.size == core.label.size == core.depth.size == core.status.size == n
        assert (core.end >= core.start).all()
        assert (core.depth >= 0).all()
        assert set(core.status.tolist()) <= set(STATUS_NAMES)
        assert ((core.label >= 0) & (core.label < len(pmap.labels))).all()
        # Proper nesting (a Chrome trace requirement): a span at depth d lies inside the
        # last span opened at depth d - 1.
        open_at: list[tuple[int, int]] = []
        for start, end, depth in zip(core.start.tolist(), core.end.tolist(), core.depth.tolist(),
                                     strict=True):
            del open_at[depth:]
            assert len(open_at) == depth, "a span deeper than its parent's depth + 1"
            if depth:
                parent_start, parent_end = open_at[-1]
                assert parent_start <= start and end <= parent_end, "spans cross"
            open_at.append((start, end))


# --------------------------------------------------------------------------- buffers


def base_slots(rng: np.random.Generator, slots: int, words: int) -> np.ndarray:
    """A buffer to start from: well-formed cores, random words, or small numbers."""
    kind = rng.integers(0, 4)
    if kind == 0:
        return rng.integers(-(2**63), 2**63 - 1, size=(slots, words), dtype=np.int64, endpoint=True)
    if kind == 1:
        return rng.integers(-3, 40, size=(slots, words)).astype(np.int64)
    data = new_buffer(slots, words)
    ids = [pack_event(i) for i in range(1, 11)]
    for s in range(slots):
        if rng.random() < 0.1:
            continue  # an unused slot
        start = int(rng.integers(0, 2**64, dtype=np.uint64))
        fingerprint = None if rng.random() < 0.3 else int(rng.choice([FP, FP, 0, 0x12345678]))
        writer = SlotWriter(data[s], start, fingerprint=fingerprint)
        if kind == 2:
            well_formed_core(writer, start + 3, int(rng.integers(0, 6)), int(rng.integers(1, 40)))
        else:  # random records with plausible ids
            t = start
            for _ in range(int(rng.integers(0, capacity(words) + 5))):
                t += int(rng.integers(-2, 50))
                writer._write(int(rng.choice(ids)), t)
    return data


def mutate_buffer(rng: np.random.Generator, data: np.ndarray) -> None:
    """Bit flips, huge / negative counters, negative and foreign ids, clobbered times."""
    slots, words = data.shape
    cap = capacity(words)
    flat = data.reshape(-1)
    for _ in range(int(rng.integers(0, 5))):
        s = int(rng.integers(0, slots))
        what = int(rng.integers(0, 9))
        if what == 0:  # bit flip anywhere
            pos = int(rng.integers(0, flat.size))
            flat[pos] ^= np.int64(1) << np.int64(int(rng.integers(0, 64)))
        elif what == 1:  # counters: huge, negative, at the capacity edges
            data[s, 0] = int(rng.choice([2**62, 2**32, 2**32 + 1, -1, -(2**63), 0, 1, cap, cap + 1,
                                         cap + 2, 2 * cap, 2 * cap + 1, 2 * cap + 2, 2**63 - 1]))
        elif what == 2:  # a negative id (bit 31 of the low word) or a negative event word
            j = int(rng.integers(1, max(2, min(cap, words - 1))))
            data[s, j] = int(rng.choice([pack_event(0x80000000 | int(rng.integers(0, 2**31))),
                                         -int(rng.integers(1, 2**62)), pack_event(0xFFFFFFFF)]))
        elif what == 3:  # the fingerprint record where it does not belong, or another build's
            j = int(rng.integers(1, max(2, min(cap, words - 1))))
            data[s, j] = fingerprint_word(int(rng.integers(0, 2**32)))
        elif what == 4:  # timestamps: random, reversed, near the uint64 wrap
            times = data[s, words - 1 - cap : words - 1]
            choice = int(rng.integers(0, 3))
            if choice == 0:
                times[:] = rng.integers(-(2**63), 2**63 - 1, size=times.size, dtype=np.int64)
            elif choice == 1:
                times[:] = times[::-1].copy()
            else:
                times[:] = (np.arange(times.size, dtype=np.uint64) * np.uint64(7) - np.uint64(20)).view(
                    np.int64)
        elif what == 5:  # truncated: the tail of the slot is zeros
            data[s, int(rng.integers(0, words)) :] = 0
        elif what == 6:  # the start word clobbered
            data[s, words - 1] = int(rng.integers(-(2**63), 2**63 - 1, dtype=np.int64))
        elif what == 7:  # two records swapped (an E before its B)
            if cap >= 3:
                a, b = (int(x) for x in rng.integers(1, cap + 1, size=2))
                data[s, [a, b]] = data[s, [b, a]]
        else:  # indices / extraIds in the high word at their limits
            j = int(rng.integers(1, max(2, min(cap, words - 1))))
            data[s, j] = pack_event(int(rng.integers(1, 11)), 0xFF, 0xFFFFFF)


MAPS = {"fingerprinted": point_map(FP), "plain": point_map(None), "other-build": point_map(0x0BADF00D)}


def random_meta(rng: np.random.Generator, rank: int, slots: int, words: int) -> RankMeta:
    aic = int(rng.integers(0, slots + 1))
    aiv = int(rng.integers(0, slots - aic + 1))
    return RankMeta(
        rank=rank, slot_words=words, aic_cores=aic, aiv_cores=aiv,
        typed_layout=bool(rng.random() < 0.9),
        format_version=None if rng.random() < 0.3 else 1,
        clock_mhz=[None, 50.0, 1e-3, 1e9, 100][int(rng.integers(0, 5))],
        barrier=[None, True, False][int(rng.integers(0, 3))],
        fingerprint=[None, FP, 0, 0x0BADF00D][int(rng.integers(0, 4))],
        aiv_roles={"0": "dispatch", "1": "combine"} if rng.random() < 0.5 else {},
    )


def test_decoder_survives_10000_mutated_buffers(tmp_path: Path) -> None:
    rng = np.random.default_rng(SEED)
    failures = Failures(tmp_path / "failures")
    slowest = 0.0
    with tally("decoder: mutated device buffers", "a buffer decoded") as counts:
        for case in range(CASES):
            slots = int(rng.integers(1, 7))
            words = int(rng.choice([4, 5, 6, 8, 9, 16, 33, 64]))
            rank = int(rng.integers(0, 1000))
            data = base_slots(rng, slots, words)
            mutate_buffer(rng, data)
            buffer = RankBuffer(Path(f"rank{rank:03d}.pt"), random_meta(rng, rank, slots, words), data)
            map_name = list(MAPS)[int(rng.integers(0, len(MAPS)))]
            options = DecodeOptions(
                clock_mhz=[None, 50.0, 1e-6][int(rng.integers(0, 3))],
                ignore_fingerprint=bool(rng.random() < 0.3),
            )
            started = time.perf_counter()
            try:
                with time_bound():
                    decoded = decode_rank(buffer, MAPS[map_name], options)
                    assert_decoded_well(decoded, slots, MAPS[map_name])
            except ProfilingInputError as exc:
                # The one documented refusal: a point map from another build.
                if exc.path != str(buffer.path) or "another build" not in exc.message:
                    failures.add(case, f"unexpected refusal: {exc}", data.tobytes())
                counts.count(2)
            except CaseTimeout as exc:
                failures.add(case, str(exc), data.tobytes())
                counts.count("hang")
            except Exception as exc:  # any other exception is the bug we look for
                failures.add(case, f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=4)}",
                             data.tobytes())
                counts.count("crash")
            else:
                counts.count(0)
            slowest = max(slowest, time.perf_counter() - started)
    failures.check()
    refused, decoded_ok = counts.outcomes["2"], counts.outcomes["0"]
    assert refused > CASES // 100 and decoded_ok > CASES // 2  # both paths really exercised
    assert slowest < CASE_SECONDS


# --------------------------------------------------------------------------- .pt files


def pt_bytes(obj: Any) -> bytes:
    handle = io.BytesIO()
    write_pt(obj, handle)
    return handle.getvalue()


def valid_objects(rng: np.random.Generator) -> list[tuple[str, bytes]]:
    """Rank files in every layout, written by optrace and (data/) by torch."""
    out: list[tuple[str, bytes]] = []
    for words in (8, 16, 33):
        slots = 4
        data = base_slots(np.random.default_rng(words), slots, words)
        meta = RankMeta(rank=0, slot_words=words, aic_cores=2, aiv_cores=2, format_version=1,
                        clock_mhz=50.0, barrier=True, fingerprint=FP, aiv_roles={"0": "dispatch"},
                        extra={"note": "核 AIV", "nested": [1, (2.0, None)]})
        as_dict = meta.to_dict()
        del as_dict["rank"]
        out.append((f"optrace-{words}", pt_bytes({"optrace_profiling": 1, "meta": as_dict, "data": data})))
        out.append((f"legacy-{words}", pt_bytes([data[:2].copy(), data[2:].copy()])))
        out.append((f"bare-{words}", pt_bytes(data)))
    for path in sorted(DATA.glob("*.pt")):
        out.append((path.stem, path.read_bytes()))
    del rng
    return out


def zip_members(raw: bytes) -> list[tuple[str, bytes]]:
    with zipfile.ZipFile(io.BytesIO(raw)) as zf:
        return [(info.filename, zf.read(info)) for info in zf.infolist()]


def rezip(members: list[tuple[str, bytes]], compress: bool = False) -> bytes:
    handle = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # duplicate member names are one of the mutations
        with zipfile.ZipFile(handle, "w", zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED) as zf:
            for name, payload in members:
                zf.writestr(name, payload)
    return handle.getvalue()


FOREIGN_GLOBALS = [("posix", "system"), ("builtins", "eval"), ("subprocess", "Popen"),
                   ("builtins", "getattr"), ("torch", "load"), ("numpy", "load"),
                   ("torch.storage", "_load_from_bytes"), ("numpy.core.multiarray", "_reconstruct")]


def mutate_pickle(rng: np.random.Generator, pkl: bytes) -> bytes:
    """Pickle-aware damage: foreign globals, huge / negative integers, cut opcodes."""
    what = int(rng.integers(0, 6))
    data = bytearray(pkl)
    if what == 0:  # a global the file should never name
        module, name = FOREIGN_GLOBALS[int(rng.integers(0, len(FOREIGN_GLOBALS)))]
        at = data.find(b"ctorch._utils\n_rebuild_tensor_v2\n")
        target = f"c{module}\n{name}\n".encode()
        if at >= 0:
            return bytes(data[:at] + target + data[at + len(b"ctorch._utils\n_rebuild_tensor_v2\n") :])
        return b"\x80\x02" + target + b")R."
    if what == 1:  # a 4-byte int (BININT J) made huge or negative
        spots = [i for i in range(len(data) - 4) if data[i] == ord("J")]
        if spots:
            i = spots[int(rng.integers(0, len(spots)))]
            data[i + 1 : i + 5] = struct.pack("<i", int(rng.choice([-1, -(2**31), 2**31 - 1, 1 << 20])))
        return bytes(data)
    if what == 2:  # a LONG1 with a huge value where an int was
        spots = [i for i in range(len(data) - 4) if data[i] == ord("J")]
        if spots:
            i = spots[int(rng.integers(0, len(spots)))]
            big = (1 << 200) * int(rng.choice([1, -1]))
            raw = big.to_bytes(27, "little", signed=True)
            return bytes(data[:i]) + b"\x8a" + bytes([len(raw)]) + raw + bytes(data[i + 5 :])
        return bytes(data)
    if what == 3:  # cut short
        return bytes(data[: int(rng.integers(0, len(data) + 1))])
    if what == 4:  # a random opcode byte replaced
        if data:
            data[int(rng.integers(0, len(data)))] = int(rng.integers(0, 256))
        return bytes(data)
    # an extension-registry opcode, a persistent id naming a foreign storage class
    return bytes(data).replace(b"ctorch\nLongStorage\n", b"\x82\x07", 1) if rng.random() < 0.5 else (
        bytes(data).replace(b"LongStorage", b"UntypedStorag", 1))


def mutate_pt(rng: np.random.Generator, raw: bytes) -> bytes:
    if len(raw) < 2:
        return raw + rng.integers(0, 256, size=int(rng.integers(0, 8)), dtype=np.uint8).tobytes()
    what = int(rng.integers(0, 10))
    if what == 0:  # bit flips anywhere
        data = bytearray(raw)
        for _ in range(int(rng.integers(1, 9))):
            pos = int(rng.integers(0, len(data)))
            data[pos] ^= 1 << int(rng.integers(0, 8))
        return bytes(data)
    if what == 1:  # truncated
        return raw[: int(rng.integers(0, len(raw)))]
    if what == 2:  # a run of random bytes
        data = bytearray(raw)
        pos = int(rng.integers(0, len(data)))
        run = rng.integers(0, 256, size=int(rng.integers(1, 64)), dtype=np.uint8).tobytes()
        data[pos : pos + len(run)] = run
        return bytes(data)
    if what == 3:  # junk appended / a range deleted
        if rng.random() < 0.5:
            return raw + rng.integers(0, 256, size=int(rng.integers(1, 200)), dtype=np.uint8).tobytes()
        a = int(rng.integers(0, len(raw)))
        return raw[:a] + raw[a + int(rng.integers(1, 100)) :]
    # Structural: re-zip with one member changed.
    try:
        members = zip_members(raw)
    except Exception:  # already damaged beyond what zipfile reads: keep it as it is
        return raw
    names = [n for n, _ in members]
    pkl_at = next((i for i, n in enumerate(names) if n.endswith("data.pkl")), 0)
    if what == 4:
        members[pkl_at] = (members[pkl_at][0], mutate_pickle(rng, members[pkl_at][1]))
    elif what == 5:  # a storage shortened, lengthened or emptied
        storages = [i for i, n in enumerate(names) if "/data/" in n]
        if storages:
            i = storages[int(rng.integers(0, len(storages)))]
            name, payload = members[i]
            members[i] = (name, payload[: int(rng.integers(0, len(payload) + 1))] + b"\x01" * int(
                rng.integers(0, 3)))
    elif what == 6:  # byteorder garbage or big
        members = [(n, p) for n, p in members if not n.endswith("byteorder")]
        members.append((names[pkl_at].replace("data.pkl", "byteorder"),
                        [b"big", b"middle", b"\xff\xfe", b""][int(rng.integers(0, 4))]))
    elif what == 7:  # a member dropped or duplicated
        i = int(rng.integers(0, len(members)))
        members = members[:i] + members[i + 1 :] if rng.random() < 0.5 else [*members, members[i]]
    elif what == 8:  # members deflated (torch writes them stored)
        return rezip(members, compress=True)
    else:  # a second archive prefix, or a path-traversal storage key
        members = [(n.replace("archive/", "../evil/", 1) if rng.random() < 0.5 else n, p) for n, p in members]
    return rezip(members)


def test_readers_survive_10000_mutated_pt_files(tmp_path: Path) -> None:
    """read_rank_file + decode + inspect on mutated files: a result, or a ProfilingInputError
    naming the file."""
    rng = np.random.default_rng(SEED + 1)
    bases = valid_objects(rng)
    failures = Failures(tmp_path / "failures")
    pmap = point_map(FP)
    path = tmp_path / "rank007.pt"
    slowest = 0.0
    with tally("rank files: mutated .pt archives", "a file read, decoded and inspected") as counts:
        for case in range(CASES):
            _name, raw = bases[int(rng.integers(0, len(bases)))]
            for _ in range(int(rng.integers(1, 3))):
                raw = mutate_pt(rng, raw)
            path.write_bytes(raw)
            started = time.perf_counter()
            try:
                with time_bound():
                    buffer = read_rank_file(path)
                    assert buffer.meta.rank == 7  # the file name wins
                    decoded = decode_rank(buffer, pmap, DecodeOptions(ignore_fingerprint=True))
                    assert_decoded_well(decoded, buffer.slots, pmap)
                    if case % 10 == 0:  # what `optrace inspect` prints, text and JSON
                        inspected = inspect_file(path)
                        format_text([inspected])
                        json.dumps(inspection_json([inspected]), default=str)
            except ProfilingInputError as exc:
                if exc.path != str(path) or not exc.message:
                    failures.add(case, f"refusal without the file: {exc!r}", raw)
                counts.count(2)
            except CaseTimeout as exc:
                failures.add(case, str(exc), raw)
                counts.count("hang")
            except Exception as exc:  # any other exception is the bug we look for
                failures.add(case, f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=6)}", raw)
                counts.count("crash")
            else:
                counts.count(0)
            slowest = max(slowest, time.perf_counter() - started)
    failures.check()
    outcomes = {"read": counts.outcomes["0"], "refused": counts.outcomes["2"]}
    assert outcomes["read"] > CASES // 50 and outcomes["refused"] > CASES // 4, outcomes
    assert slowest < CASE_SECONDS


def random_value(rng: np.random.Generator, depth: int = 0) -> Any:
    """A metadata value of any shape a pickle can hold."""
    kind = int(rng.integers(0, 12 if depth < 3 else 8))
    if kind == 0:
        return None
    if kind == 1:
        return bool(rng.random() < 0.5)
    if kind == 2:
        return int(rng.choice([0, 1, -1, 2**31, 2**32, 2**63, -(2**63), 10**30, 72, 2048]))
    if kind == 3:
        return float(rng.choice([0.0, -1.0, 50.0, 1e-300, 1e300, math.inf, -math.inf, math.nan]))
    if kind == 4:
        return ["", "aiv", "核", "x" * 1000, "\x00\udcff"][int(rng.integers(0, 5))].encode(
            "utf-8", "surrogatepass").decode("utf-8", "replace")
    if kind == 5:
        return np.arange(int(rng.integers(0, 4)), dtype=np.int64)
    if kind == 6:
        return np.array([1.5, 2.5], dtype=np.float32)
    if kind == 7:
        return ("abc",)  # dict() of it fails: ValueError, not TypeError
    if kind == 8:
        return [random_value(rng, depth + 1) for _ in range(int(rng.integers(0, 4)))]
    if kind == 9:
        return tuple(random_value(rng, depth + 1) for _ in range(int(rng.integers(0, 3))))
    return {str(rng.integers(0, 5)): random_value(rng, depth + 1) for _ in range(int(rng.integers(0, 4)))}


META_KEYS = ["slot_words", "aic_cores", "aiv_cores", "typed_layout", "format_version", "clock_mhz",
             "barrier", "fingerprint", "tag", "launch", "aiv_roles", "extra", "rank", "other"]


def test_metadata_of_any_shape_is_read_or_refused(tmp_path: Path) -> None:
    """The optrace layout's `meta` dict with values of every type in every field."""
    rng = np.random.default_rng(SEED + 2)
    failures = Failures(tmp_path / "failures")
    path = tmp_path / "rank003.pt"
    data = base_slots(np.random.default_rng(0), 4, 16)
    good = {"slot_words": 16, "aic_cores": 2, "aiv_cores": 2, "format_version": 1, "clock_mhz": 50.0,
            "barrier": True, "fingerprint": FP, "aiv_roles": {}, "extra": {}}
    with tally("rank files: metadata of any shape", "a file read, decoded and inspected") as counts:
        for case in range(CASES // 10):
            meta: dict[str, Any] = dict(good)
            for key in rng.choice(META_KEYS, size=int(rng.integers(1, 4)), replace=False).tolist():
                meta[key] = random_value(rng)
            top: Any = {"optrace_profiling": random_value(rng) if rng.random() < 0.1 else 1, "meta": meta,
                        "data": data if rng.random() < 0.9 else random_value(rng)}
            try:
                raw = pt_bytes(top)
            except (TypeError, ValueError):
                continue  # a value the writer refuses (the reader gets no such file from us)
            path.write_bytes(raw)
            try:
                with time_bound():
                    buffer = read_rank_file(path)
                    decoded = decode_rank(buffer, point_map(None))
                    assert_decoded_well(decoded, buffer.slots, point_map(None))
                    inspected = inspect_file(path)
                    format_text([inspected])
                    json.dumps(inspection_json([inspected]), default=str)
            except ProfilingInputError as exc:
                if exc.path != str(path):
                    failures.add(case, f"refusal without the file: {exc!r}", raw)
                counts.count(2)
            except CaseTimeout as exc:
                failures.add(case, str(exc), raw)
                counts.count("hang")
            except Exception as exc:  # any other exception is the bug we look for
                failures.add(case, f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=6)}", raw)
                counts.count("crash")
            else:
                counts.count(0)
    failures.check()


# --------------------------------------------------------------------------- hostile files


def _memo_bomb(depth: int) -> bytes:
    """A list of two references to a list of two references ... `depth` levels: a few
    hundred bytes of pickle, 2**depth leaves for anything that walks it as a tree."""
    out = bytearray(b"]r\x00\x00\x00\x000")  # EMPTY_LIST, LONG_BINPUT 0, POP
    for i in range(1, depth):
        get = b"j" + struct.pack("<I", i - 1)
        out += b"](" + get + get + b"er" + struct.pack("<I", i) + b"0"
    return bytes(out + b"j" + struct.pack("<I", depth - 1))


def _optrace_pickle_with(extra_pickle: bytes, field: str = "extra") -> tuple[bytes, list[np.ndarray]]:
    """The pickle of a valid optrace rank file whose meta[field] dict gets key "x" = payload."""
    data = base_slots(np.random.default_rng(1), 2, 16)
    meta = {"slot_words": 16, "aic_cores": 1, "aiv_cores": 1, "format_version": 1, field: {}}
    pkl, storages = dumps_pickle({"optrace_profiling": 1, "meta": meta, "data": data})
    key = b"X" + struct.pack("<I", len(field)) + field.encode() + b"}("
    assert key in pkl
    return pkl.replace(key, key + b"X\x01\x00\x00\x00x" + extra_pickle, 1), storages


def _pt_from_pickle(path: Path, pkl: bytes, storages: list[np.ndarray] | None = None) -> None:
    members = [("archive/data.pkl", pkl), ("archive/byteorder", b"little")]
    members += [(f"archive/data/{k}", s.tobytes()) for k, s in enumerate(storages or [])]
    path.write_bytes(rezip(members))


@pytest.mark.parametrize("field", ["extra", "aiv_roles", "tag"])
def test_a_memo_bomb_in_the_metadata_is_refused_fast(tmp_path: Path, field: str) -> None:
    """Shared references make a 1 KB pickle a 2**60-node tree: walking or printing the
    metadata must not be what discovers it."""
    pkl, storages = _optrace_pickle_with(_memo_bomb(60), field)
    path = tmp_path / "rank000.pt"
    _pt_from_pickle(path, pkl, storages)
    assert path.stat().st_size < 4096
    write_point_map(tmp_path)
    started = time.perf_counter()
    with time_bound(10):
        with pytest.raises(ProfilingInputError, match="metadata") as caught:
            read_rank_file(path)
        assert caught.value.path == str(path)
        for command in (["inspect", str(path), "--format", "json"], ["inspect", str(path)],
                        ["collect", str(tmp_path), "-o", str(tmp_path / "t.json")]):
            res = runner.invoke(app, command)
            assert res.exit_code == 2 and str(path) in res.stderr, (command, res.output)
    assert time.perf_counter() - started < 5


def test_a_self_referencing_metadata_is_refused(tmp_path: Path) -> None:
    # EMPTY_LIST, BINPUT 0, BINGET 0, APPEND: a list that contains itself.
    pkl, storages = _optrace_pickle_with(b"]q\x00h\x00a")
    path = tmp_path / "rank000.pt"
    _pt_from_pickle(path, pkl, storages)
    with time_bound(10), pytest.raises(ProfilingInputError, match="metadata"):
        read_rank_file(path)
    assert runner.invoke(app, ["inspect", str(path), "--format", "json"]).exit_code == 2


def _tensor_pickle() -> tuple[bytes, list[np.ndarray]]:
    pkl, storages = dumps_pickle({"t": np.arange(4, dtype=np.int64)})
    assert pkl.count(b"(J\x04\x00\x00\x00t") == 1 and pkl.count(b"(J\x01\x00\x00\x00t") == 1
    return pkl, storages


def _forged(size: bytes, stride: bytes) -> tuple[bytes, list[np.ndarray]]:
    """The pickle of a 4-element tensor with its size and stride tuples replaced."""
    pkl, storages = _tensor_pickle()
    pkl = pkl.replace(b"(J\x04\x00\x00\x00t", b"(" + size + b"t").replace(b"(J\x01\x00\x00\x00t",
                                                                        b"(" + stride + b"t")
    return pkl, storages


def _bomb_in_meta_version() -> tuple[bytes, list[np.ndarray]]:
    data = base_slots(np.random.default_rng(1), 2, 16)
    pkl, storages = dumps_pickle({"optrace_profiling": 1, "meta": {}, "data": data})
    return pkl.replace(b"X\x11\x00\x00\x00optrace_profilingJ\x01\x00\x00\x00",
                       b"X\x11\x00\x00\x00optrace_profiling" + _memo_bomb(60), 1), storages


J = b"J" + struct.pack("<i", 1 << 20)  # BININT 2**20
HOSTILE_TENSORS = {
    # 2**40 elements over a 4-element storage, every stride 0: copying it takes 8 TB.
    "overlapping strides": (_forged(J + J, b"J\x00\x00\x00\x00" * 2), "overlapping strides"),
    "100 dimensions": (_forged(b"J\x01\x00\x00\x00" * 100, b"J\x00\x00\x00\x00" * 100), "invalid size"),
    # Messages that show a value must not walk a 2**60-node structure to print it.
    "size with a memo bomb": (_forged(_memo_bomb(60) + J, b"J\x01\x00\x00\x00"), "invalid size"),
    "persistent id with a memo bomb": ((b"\x80\x02" + _memo_bomb(60) + b"Q.", []),
                                       "unexpected persistent id"),
    "format version with a memo bomb": (_bomb_in_meta_version(), "optrace format version"),
    # CPython's C unpickler sizes its memo by the largest index stored: 2**30 is 8 GB.
    "memo index 2**30 (LONG_BINPUT)": ((b"\x80\x02]r\x00\x00\x00\x40.", []), "memo index"),
    "memo index 2**30 (PUT)": ((b"\x80\x02]p1073741824\n.", []), "memo index"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_TENSORS))
def test_hostile_tensor_shapes_and_values_are_refused_fast(tmp_path: Path, name: str) -> None:
    (pkl, storages), message = HOSTILE_TENSORS[name]
    path = tmp_path / "rank000.pt"
    _pt_from_pickle(path, pkl, storages)
    started = time.perf_counter()
    with time_bound(10), pytest.raises(ProfilingInputError, match=message) as caught:
        read_rank_file(path)
    assert caught.value.path == str(path) and len(str(caught.value)) < 2000
    assert time.perf_counter() - started < 1.0


def test_a_pickle_walked_once_is_trusted_for_its_bytes_only(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank files of one run share their data.pkl: its opcodes are walked once, the next
    file with the same bytes is not walked again, and a file whose pickle differs (the
    memo bomb) is walked and refused even after a sound one was remembered."""
    monkeypatch.setattr(pt_reader, "_SOUND_PICKLES", set())
    walked: list[int] = []
    walk = pt_reader._memo_indices_damaged

    def counting(source: str, pickled: bytes) -> bool:
        walked.append(len(pickled))
        return walk(source, pickled)

    monkeypatch.setattr(pt_reader, "_memo_indices_damaged", counting)
    sound = pt_bytes([base_slots(np.random.default_rng(3), 2, 16)])
    for rank in range(3):
        (tmp_path / f"rank00{rank}.pt").write_bytes(sound)
        assert read_rank_file(tmp_path / f"rank00{rank}.pt").data.shape == (2, 16)
    assert len(walked) == 1
    (pkl, storages), message = HOSTILE_TENSORS["memo index 2**30 (LONG_BINPUT)"]
    _pt_from_pickle(tmp_path / "rank009.pt", pkl, storages)
    with pytest.raises(ProfilingInputError, match=message):
        read_rank_file(tmp_path / "rank009.pt")
    with pytest.raises(ProfilingInputError, match=message):  # refused again: never remembered
        read_rank_file(tmp_path / "rank009.pt")
    assert len(walked) == 3


def test_a_zip_bomb_is_refused_before_it_is_inflated(tmp_path: Path) -> None:
    """A storage deflated from 512 MiB of zeros: a 0.5 MB file. torch writes members stored;
    the reader must refuse to inflate it rather than allocate it."""
    data = base_slots(np.random.default_rng(1), 2, 16)
    pkl, _ = dumps_pickle([data])
    handle = io.BytesIO()
    with zipfile.ZipFile(handle, "w") as zf:
        zf.writestr("archive/data.pkl", pkl)
        info = zipfile.ZipInfo("archive/data/0")
        info.compress_type = zipfile.ZIP_DEFLATED
        with zf.open(info, "w", force_zip64=True) as member:
            block = bytes(1 << 20)
            for _ in range(512):
                member.write(block)
    path = tmp_path / "rank000.pt"
    path.write_bytes(handle.getvalue())
    assert path.stat().st_size < 1 << 20
    started = time.perf_counter()
    with time_bound(20), pytest.raises(ProfilingInputError, match="inflate") as caught:
        read_rank_file(path)
    assert caught.value.path == str(path)
    assert time.perf_counter() - started < 1.0  # refused from the zip directory, not inflated


def test_deflated_members_of_a_normal_size_are_read(tmp_path: Path) -> None:
    raw = pt_bytes([base_slots(np.random.default_rng(2), 3, 64)])
    path = tmp_path / "rank000.pt"
    path.write_bytes(rezip(zip_members(raw), compress=True))
    assert read_rank_file(path).data.shape == (3, 64)


# --------------------------------------------------------------------------- malicious pickles


def _short_str(text: str) -> bytes:
    data = text.encode()
    return b"\x8c" + bytes([len(data)]) + data  # SHORT_BINUNICODE


def _call(module: str, name: str, args: bytes, form: str) -> bytes:
    """`module.name(*args)` in one of the pickle forms that call a global.

    `args` is the opcode text pushing the arguments (no MARK)."""
    if form == "GLOBAL+REDUCE":  # protocol 0-2: 'c' module\nname\n, args tuple, 'R'
        return b"c" + f"{module}\n{name}\n".encode() + b"(" + args + b"tR"
    if form == "STACK_GLOBAL+REDUCE":  # protocol 4: two strings, '\x93', args, 'R'
        return _short_str(module) + _short_str(name) + b"\x93(" + args + b"tR"
    if form == "INST":  # MARK args 'i' module\nname\n: calls the global with the args
        return b"(" + args + b"i" + f"{module}\n{name}\n".encode()
    if form == "OBJ":  # MARK global args 'o'
        return b"(c" + f"{module}\n{name}\n".encode() + args + b"o"
    raise AssertionError(form)


def _payloads(marker: Path) -> dict[str, tuple[str, str, bytes]]:
    """Calls (module, name, pushed arguments) that create `marker` when a plain unpickler
    runs them."""
    m = str(marker)
    touch = _short_str(f"touch {m}")
    py = _short_str(f"open({m!r}, 'w').close()")
    argv = b"(" + _short_str("touch") + _short_str(m) + b"l"  # a list ['touch', marker]
    return {
        "os.system": ("posix", "system", touch),
        "builtins.eval": ("builtins", "eval", py),
        "builtins.exec": ("builtins", "exec", py),
        "subprocess.Popen": ("subprocess", "Popen", argv),
        "subprocess.call": ("subprocess", "call", argv),
    }


FORMS = ["GLOBAL+REDUCE", "STACK_GLOBAL+REDUCE", "INST", "OBJ"]
TARGETS = ["os.system", "builtins.eval", "builtins.exec", "subprocess.Popen", "subprocess.call"]


def _payload(marker: Path, target: str, form: str) -> bytes:
    module, name, args = _payloads(marker)[target]
    return b"\x80\x04" + _call(module, name, args, form) + b"."


CONTROL = textwrap.dedent(
    """
    import pickle, sys, time
    from pathlib import Path
    try:
        pickle.loads(Path(sys.argv[1]).read_bytes())
    except Exception:
        pass  # e.g. Popen's return value; what matters is whether the call ran
    deadline = time.time() + 5
    while not Path(sys.argv[2]).exists() and time.time() < deadline:
        time.sleep(0.01)
    """
)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("target", TARGETS)
def test_a_malicious_pickle_runs_under_pickle_but_never_under_optrace(
    tmp_path: Path, target: str, form: str
) -> None:
    """The same data.pkl: plain `pickle.loads` (in a child process) creates the marker,
    which proves the payload is live; optrace's reader, its decoder and the CLI refuse it,
    name the file and the global, and the marker never appears."""
    control_marker = tmp_path / "control-ran"
    control = tmp_path / "control.pkl"
    control.write_bytes(_payload(control_marker, target, form))
    subprocess.run([sys.executable, "-c", CONTROL, str(control), str(control_marker)], check=False,
                   timeout=60, cwd=tmp_path)
    assert control_marker.exists(), "the payload does not run even under plain pickle: not a proof"

    marker = tmp_path / "pwned"
    module, name, _ = _payloads(marker)[target]
    pkl = _payload(marker, target, form)
    nested, storages = _optrace_pickle_with(pkl[2:-1])  # the same call deep inside the metadata
    for variant, payload, extra in (("top", pkl, None), ("nested", nested, storages)):
        path = tmp_path / f"rank00{1 if variant == 'top' else 2}.pt"
        _pt_from_pickle(path, payload, extra)
        with pytest.raises(ProfilingInputError) as caught:
            load_pt(path)
        assert caught.value.path == str(path)
        assert f"refused to load global '{module}.{name}'" in caught.value.message
        with pytest.raises(ProfilingInputError):
            read_rank_file(path)
    write_point_map(tmp_path)
    for command in (["inspect", str(tmp_path)], ["collect", str(tmp_path), "-o", str(tmp_path / "t.json")]):
        res = runner.invoke(app, command)
        assert res.exit_code == 2 and "refused to load global" in res.stderr, res.output
    time.sleep(0.05)  # a Popen would have had time to run
    assert not marker.exists()


@pytest.mark.parametrize(
    "payload",
    [
        # getattr(__import__('os'), 'system')('touch ...'): two allowed-looking steps
        b"\x80\x02cbuiltins\ngetattr\n(cbuiltins\n__import__\n(X\x02\x00\x00\x00ostRX\x06\x00\x00\x00systemtR"
        b"(X\x05\x00\x00\x00touchtR.",
        b"\x80\x02\x82\x01.",  # EXT1: a global from the copyreg extension registry
        b"\x80\x02\x83\x01\x00.",  # EXT2
        b"\x80\x02\x84\x01\x00\x00\x00.",  # EXT4
        b"\x80\x02ctorch\nload\n(X\x03\x00\x00\x00x.pttR.",  # torch names outside the allow-list
        b"\x80\x02ctorch._utils\n_rebuild_tensor\n.",
        b"\x80\x02ccollections\nOrderedDict\n)R}(X\x08\x00\x00\x00__class__cposix\nsystem\nub.",  # BUILD
        b"\x80\x02(X\x07\x00\x00\x00storagecposix\nsystem\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuJ"
        b"\x01\x00\x00\x00tQ.",  # a persistent id naming a foreign class
    ],
)
def test_other_pickle_routes_to_a_foreign_global_are_refused(tmp_path: Path, payload: bytes) -> None:
    path = tmp_path / "rank000.pt"
    _pt_from_pickle(path, payload)
    with pytest.raises(ProfilingInputError) as caught:
        read_rank_file(path)
    assert caught.value.path == str(path)


# --------------------------------------------------------------------------- through the CLI


def test_fuzzed_profiling_directories_through_the_cli(tmp_path: Path) -> None:
    """A sample of mutated files through `collect`, `inspect`, `report` and `compare`: exit
    0, 1 or 2, never 3 (nor a traceback, nor a numpy warning); the trace is valid JSON;
    every unusable file is named on stderr."""
    rng = np.random.default_rng(SEED + 3)
    bases = valid_objects(rng)
    failures = Failures(tmp_path / "failures")
    runs = max(20, CASES // 250)
    with tally("rank files through the CLI: collect, inspect, report, compare",
               "a command on a profiling directory of mutated files") as counts:
        for run in range(runs):
            _cli_run(rng, bases, tmp_path, run, failures, counts)
    failures.check()


def _cli_run(rng: np.random.Generator, bases: list[tuple[str, bytes]], tmp_path: Path, run: int,
             failures: Failures, counts: Tally) -> None:
    directory = tmp_path / f"prof{run}"
    directory.mkdir()
    write_point_map(directory, FP if rng.random() < 0.5 else None)
    files = []
    for rank in range(int(rng.integers(1, 4))):
        raw = bases[int(rng.integers(0, len(bases)))][1]
        if rng.random() < 0.7:
            raw = mutate_pt(rng, raw)
        path = directory / f"rank{rank:03d}.pt"
        path.write_bytes(raw)
        files.append(path)
    out = tmp_path / f"trace{run}.json"
    commands = {"collect": ["collect", str(directory), "-o", str(out), "--ignore-fingerprint"],
                "inspect": ["inspect", str(directory), "--format", "json"],
                "report": ["report", str(directory), "--format", "json"],
                "compare": ["compare", str(directory), str(directory)]}
    results = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for what, args in commands.items():
            try:
                with time_bound(30):
                    results[what] = runner.invoke(app, args)
            except CaseTimeout as exc:
                failures.add(run, f"{what}: {exc}", b"".join(p.read_bytes() for p in files))
                counts.count("hang")
    for warning in caught:  # numpy overflow warnings would reach the user's terminal
        if "/runtime/" in warning.filename:
            failures.add(run, f"warning: {warning.filename}:{warning.lineno}: {warning.message}",
                         b"".join(p.read_bytes() for p in files))
    for what, res in results.items():
        uncaught = not isinstance(res.exception, (SystemExit, type(None)))  # CliRunner's exit 1 for it
        if (res.exit_code not in (0, 1, 2) or uncaught or "Traceback" in res.output
                or "internal error" in res.stderr):
            failures.add(run, f"{what} exit {res.exit_code}: {res.output[-2000:]}",
                         b"".join(p.read_bytes() for p in files))
            counts.count("crash")
        else:
            counts.count(res.exit_code)
    collected = results.get("collect")
    if collected is None:
        return
    if collected.exit_code in (0, 1, 2) and out.exists():
        try:
            json.loads(out.read_text(), parse_constant=_no_constants)
        except ValueError as exc:
            failures.add(run, f"collect wrote invalid JSON: {exc}", out.read_bytes()[:100_000])
    for path in files:
        try:
            read_rank_file(path)
        except ProfilingInputError:
            if str(path) not in collected.stderr:
                failures.add(run, f"collect did not name {path}: {collected.stderr}", path.read_bytes())


def test_corrupt_cycle_counts_and_the_slowest_clock_still_give_a_valid_trace(tmp_path: Path) -> None:
    """Timestamps 2**62 cycles apart at the slowest clock accepted (1 kHz; a slower one is
    refused, tests/runtime/test_hostile_inputs.py): numbers saturate, no overflow warning,
    no NaN / Infinity in the JSON."""
    data = new_buffer(2, 16)
    for slot in range(2):
        writer = SlotWriter(data[slot], 0, fingerprint=FP)
        for i in range(9):  # more than the 7 records a 16-word slot holds: drops too
            b, e = list(LABELS.values())[i % 2]
            writer.record(b if i % 2 == 0 else e, (i * 2**61) % 2**64)
    meta = {"slot_words": 16, "aic_cores": 1, "aiv_cores": 1, "format_version": 1,
            "clock_mhz": 0.001, "fingerprint": FP}
    (tmp_path / "rank000.pt").write_bytes(pt_bytes({"optrace_profiling": 1, "meta": meta, "data": data}))
    write_point_map(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = runner.invoke(app, ["collect", str(tmp_path), "-o", str(tmp_path / "t.json")])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert res.exit_code == 1, res.output
    trace = json.loads((tmp_path / "t.json").read_text(), parse_constant=_no_constants)
    assert all(math.isfinite(event.get("ts", 0)) for event in trace["traceEvents"])


def _no_constants(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


# --------------------------------------------------------------------------- guards on the tests


def test_the_fuzz_budget_is_at_least_10000_cases() -> None:
    assert CASES >= 10_000


def test_the_time_bound_interrupts_a_hang() -> None:
    with pytest.raises(CaseTimeout), time_bound(0.2):
        while True:
            pass


def test_the_base_files_are_valid(tmp_path: Path) -> None:
    """Mutations start from files that read and decode cleanly."""
    bases = valid_objects(np.random.default_rng(0))
    assert len(bases) >= 12
    for name, raw in bases:
        path = tmp_path / "rank000.pt"
        path.write_bytes(raw)
        if name.startswith(("optrace", "legacy", "bare", "rank")):
            decode_rank(read_rank_file(path), point_map(None))
        else:
            assert load_pt(path) is not None
