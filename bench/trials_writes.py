"""Trials of what `apply --write` leaves behind when it is killed or the disk fills up.

Two kinds, on a copy of the bundled operator (fixtures/umdk_style), each through the
installed `optrace` as a user runs it:

- **kill -9**: `apply --write` is started and sent SIGKILL after a delay spread over its
  uninterrupted run time (measured first, same run), so the kills land in the planning,
  the temp-file writes, the exchanges and the journal's removal. Then the repository is
  left where it is, or moved (`mv repo moved`) as a user tidying up would, and the next
  command (`strip --write`, which recovers first) runs. Counted: bytes lost (bytes of the
  original files that are not back, byte for byte), stray files (anything outside
  `.optrace/` that was not there before — `.X.optrace-<token>.tmp` files, a half-made
  header), dead journals (a journal left in `.optrace/` after the recovery).
- **disk full**: the copy sits on a tmpfs of its own whose free space is set, trial by
  trial, from nothing to a little more than `apply --write` needs (that need measured
  first, same run). The write either completes or changes nothing: the tree is compared
  with the original and with the fully applied tree; anything else is a failure. Needs
  root (mount); skipped with the reason otherwise.

    python bench/trials_writes.py [--kills N] [--sizes N] [--json FILE]

Figures go into docs/input-matrix.md ("Writes killed or out of space"), with the command.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "fixtures" / "umdk_style"
OP = Path("src/cam/comm_operator/ascend_kernels/moe_fused_gmm")
OPTRACE = [sys.executable, "-m", "optrace"]


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under root but optrace's own bookkeeping (`.optrace/`), by relative path."""
    out: dict[str, bytes] = {}
    for path in root.rglob("*"):
        rel = path.relative_to(root)
        if ".optrace" in rel.parts or not path.is_file() or path.is_symlink():
            continue
        out[str(rel)] = path.read_bytes()
    return out


def dead_journals(root: Path) -> int:
    journal_dir = root / ".optrace"
    if not journal_dir.is_dir():
        return 0
    # A journal (`journal-<op>.json`), its temp file or its backups still there after the
    # recovery; the lock file is kept on purpose, and `unresolved/` is a kept journal the
    # message names (counted too: nothing should need it here).
    return sum(1 for p in journal_dir.iterdir()
               if (p.name.startswith("journal-") and not p.name.endswith(".lock")) or p.name == "unresolved")


def compare(before: dict[str, bytes], after: dict[str, bytes]) -> tuple[int, int]:
    """(bytes lost, stray files): original bytes not back, files that were not there."""
    lost = sum(len(data) for rel, data in before.items() if after.get(rel) != data)
    stray = sum(1 for rel in after if rel not in before)
    return lost, stray


def run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*OPTRACE, *args], cwd=cwd, env=env, capture_output=True, timeout=600)


def fresh(where: Path) -> Path:
    repo = where / "repo"
    shutil.copytree(FIXTURE, repo, symlinks=True)
    return repo


def kill_trials(count: int, work: Path, env: dict[str, str]) -> list[dict[str, object]]:
    # The uninterrupted run, for the delays: median of three.
    times = []
    for k in range(3):
        repo = fresh(work / f"clock{k}")
        start = time.perf_counter()
        done = run(["apply", str(OP), "--write"], repo, env)
        times.append(time.perf_counter() - start)
        if done.returncode != 0:
            raise SystemExit(f"apply --write failed on the fixture: {done.stderr.decode()}")
    full = sorted(times)[1]
    results: list[dict[str, object]] = []
    for phase in ("anytime", "commit"):
        for i in range(count):
            for moved in (False, True):
                results.append(_kill_once(work / f"kill-{phase}{i}{'m' if moved else ''}", env, phase,
                                          full, i, count, moved))
    return results


def _kill_once(place: Path, env: dict[str, str], phase: str, full: float, i: int, count: int,
               moved: bool) -> dict[str, object]:
    """One trial: `anytime` kills after a delay spread over 30-110 % of the uninterrupted
    run; `commit` watches for the journal to appear in `.optrace/` (the commit has begun:
    temp files are being written and swapped in) and kills 0-40 ms after it."""
    repo = fresh(place)
    before = snapshot(repo)
    proc = subprocess.Popen([*OPTRACE, "apply", str(OP), "--write"], cwd=repo, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    journal_dir = repo / ".optrace"
    if phase == "anytime":
        delay = full * (0.3 + 0.8 * (i + 0.5) / count)
        time.sleep(delay)
    else:
        delay = 0.040 * i / max(1, count - 1)
        deadline = time.perf_counter() + 60
        while proc.poll() is None and time.perf_counter() < deadline:
            try:
                if any(n.startswith("journal-") and not n.endswith(".lock") for n in os.listdir(journal_dir)):
                    break
            except FileNotFoundError:
                pass
            time.sleep(0.0005)
        time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    killed = proc.wait() == -signal.SIGKILL
    if moved:
        target = place / "moved"
        repo.rename(target)
        repo = target
    recovery = run(["strip", str(OP), "--write"], repo, env)
    after = snapshot(repo)
    lost, stray = compare(before, after)
    result: dict[str, object] = {
        "phase": phase, "trial": i, "moved": moved, "delay_s": round(delay, 4), "killed": killed,
        "recovery_exit": recovery.returncode, "bytes_lost": lost, "stray_files": stray,
        "dead_journals": dead_journals(repo), "strays": sorted(r for r in after if r not in before)[:5]}
    shutil.rmtree(place, ignore_errors=True)
    return result


def _mount(point: Path, size: int) -> None:
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(point)], check=True,
                   capture_output=True)


def _resize(point: Path, size: int) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(point)], check=True, capture_output=True)


def used_bytes(point: Path) -> int:
    st = os.statvfs(point)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def disk_trials(count: int, work: Path, env: dict[str, str]) -> list[dict[str, object]] | str:
    if os.geteuid() != 0:
        return "not root: the trials mount a tmpfs of their own"
    point = work / "tmpfs"
    point.mkdir()
    try:
        _mount(point, 64 << 20)
    except (subprocess.CalledProcessError, FileNotFoundError) as exc:
        return f"cannot mount a tmpfs here: {exc}"
    page = os.sysconf("SC_PAGE_SIZE")
    try:
        # What apply --write needs beyond the tree: its temp files, backups and journal.
        repo = fresh(point)
        original = snapshot(repo)
        base = used_bytes(point)
        if run(["apply", str(OP), "--write"], repo, env).returncode != 0:
            raise SystemExit("apply --write failed on the tmpfs")
        applied = snapshot(repo)
        peak_need = used_bytes(point) - base
        shutil.rmtree(repo)
        # The peak is above what is left at the end (temp files and backups are removed):
        # sizes reach past twice the final growth and the whole new tree.
        need = max(peak_need, 0) + sum(len(v) for v in applied.values())
        results: list[dict[str, object]] = []
        for k in range(count):
            repo = fresh(point)
            used = used_bytes(point)
            free = (need * 2 * k // max(1, count - 1)) // page * page
            _resize(point, used + free + page)  # one page of slack: tmpfs rounds up
            done = run(["apply", str(OP), "--write"], repo, env)
            _resize(point, 64 << 20)
            after = snapshot(repo)
            state = "original" if after == original else "applied" if after == applied else "MIXED"
            lost, stray = compare(original if state != "applied" else applied, after)
            results.append({"free_bytes": free, "exit": done.returncode, "state": state, "stray_files": stray,
                            "bytes_lost": lost if state == "MIXED" else 0,
                            "message": done.stderr.decode(errors="replace").strip().splitlines()[-1:]})
            shutil.rmtree(repo)
        return results
    finally:
        subprocess.run(["umount", str(point)], capture_output=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=12,
                        help="kill -9 trials per phase (any time, in the commit), each also with a move")
    parser.add_argument("--sizes", type=int, default=18, help="disk-full sizes")
    parser.add_argument("--json", type=Path, help="write every trial here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="optrace-trials-") as scratch:
        work = Path(scratch)
        env = {**os.environ, "XDG_STATE_HOME": str(work / "state"), "XDG_CACHE_HOME": str(work / "cache")}
        kills = kill_trials(args.kills, work, env)
        disk = disk_trials(args.sizes, work, env)
    print("| killed | trials | killed mid-run | repository moved | bytes lost | stray files | dead journals "
          "| recovery exit |")
    print("|---|---|---|---|---|---|---|---|")
    for phase, moved in ((p, m) for p in ("anytime", "commit") for m in (False, True)):
        rows = [r for r in kills if r["moved"] is moved and r["phase"] == phase]

        def total(key: str, rows: list[dict[str, object]] = rows) -> int:
            return sum(int(str(r[key])) for r in rows)

        when = "any time (30-110 % of the run)" if phase == "anytime" else "in the commit (0-40 ms in)"
        killed = sum(1 for r in rows if r["killed"])
        print(f"| {when} | {len(rows)} | {killed} | {'yes' if moved else 'no'} | "
              f"{total('bytes_lost')} | {total('stray_files')} | {total('dead_journals')} | "
              f"{', '.join(sorted({str(r['recovery_exit']) for r in rows}))} |")
    print()
    if isinstance(disk, str):
        print(f"disk-full trials skipped: {disk}")
    else:
        states = {s: sum(1 for r in disk if r["state"] == s) for s in ("original", "applied", "MIXED")}
        print("| sizes | refused, original | applied | mixed | stray files | exits |")
        print("|---|---|---|---|---|---|")
        print(f"| {len(disk)} | {states['original']} | {states['applied']} | {states['MIXED']} | "
              f"{sum(int(str(r['stray_files'])) for r in disk)} | "
              f"{', '.join(sorted({str(r['exit']) for r in disk}))} |")
    if args.json is not None:
        args.json.write_text(json.dumps({"kill": kills, "disk": disk}, indent=1) + "\n")
    bad = any(r["bytes_lost"] or r["stray_files"] or r["dead_journals"] for r in kills)
    bad = bad or (not isinstance(disk, str) and any(r["state"] == "MIXED" or r["stray_files"] for r in disk))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
