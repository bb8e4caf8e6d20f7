"""Issue 14 §2: nothing is written at a stale offset.

Another program edits a file of the operator while optrace computes the apply: after the
plan parsed it (or the layer codemods read it) and before the edits are turned into new
bytes. Injected at that exact moment for a kernel file, a host file and the shared
`pybind.cpp`, then at random moments by a writer racing a real `apply --write` process.
The writer *prepends* a line, so edits applied at the old offsets would land inside
other code: after every trial, `strip` must give back exactly the writer's bytes (or the
original, when the writer lost a race with the rename) — never optrace's edits at stale
offsets.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import optrace.pipeline.apply as apply_module
from optrace.cli import app

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
OP = "src/cam/comm_operator/ascend_kernels/moe_fused_gmm"
LINE = b"// a line another editor put first\n"
LONG = os.environ.get("OPTRACE_LONG_FUZZ", "") not in ("", "0")
VICTIMS = [
    f"{OP}/op_kernel/moe_fused_gmm.cpp",  # parsed by the plan
    f"{OP}/op_host/moe_fused_gmm.cpp",  # read by the layer codemods
    "src/cam/comm_operator/pybind/pybind.cpp",  # shared by the operators of the repository
]

Tree = dict[str, bytes]


def line_for(path: str) -> bytes:
    """The writer's first line, in the file's own language."""
    return LINE.replace(b"//", b"#") if path.endswith((".py", ".sh", ".txt", ".cmake")) else LINE


def tree(root: Path) -> Tree:
    out: Tree = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".optrace"]
        for name in filenames:
            out[str((Path(dirpath) / name).relative_to(root))] = (Path(dirpath) / name).read_bytes()
    return out


def fresh(tmp: Path) -> tuple[Path, Path]:
    repo = tmp / "repo"
    shutil.copytree(FIXTURES / "umdk_style", repo)
    return repo, repo / OP


def cli(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(app, list(args))
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    return res.exit_code, res.stdout, res.stderr


@pytest.mark.slow  # fault injection at two moments of a real apply
@pytest.mark.parametrize("moment", ["after-the-codemods", "before-the-re-read"])
@pytest.mark.parametrize("victim", VICTIMS, ids=["kernel", "host", "shared-pybind"])
def test_a_file_edited_while_apply_computes_is_refused_not_mangled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, state_home: Path, victim: str, moment: str
) -> None:
    """The edit lands after the plan parsed the kernel and the layer codemods read their
    files (their edits computed), or just before `new_contents` reads every file again."""
    repo, op = fresh(tmp_path)
    before = tree(repo)
    hooked = "layer_edits" if moment == "after-the-codemods" else "new_contents"
    real = getattr(apply_module, hooked)
    path = repo / victim
    edits: list[int] = []

    def someone_edits_then(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs) if hooked == "layer_edits" else None
        # Once, in the call that computes this operator's edits (not a call that only
        # looks, e.g. to choose a mode, nor another operator's).
        if not edits and (hooked == "new_contents" or sys._getframe(1).f_code.co_name == "_layer_side"):
            path.write_bytes(LINE + path.read_bytes())
            edits.append(1)
        return out if hooked == "layer_edits" else real(*args, **kwargs)

    monkeypatch.setattr(apply_module, hooked, someone_edits_then)
    code, out, err = cli("apply", str(op), "--write")
    assert edits, "the edit was not injected (the hook point moved?)"
    assert code == 2, out + err
    assert f"{path.resolve()}: OT042 changed while optrace was planning it; nothing written" in err
    assert tree(repo) == {**before, victim: LINE + before[victim]}  # only the other editor's change
    monkeypatch.undo()
    assert cli("apply", str(op), "--write")[0] == 0  # planned again on the new bytes: applies
    assert cli("strip", str(op), "--write")[0] == 0
    assert tree(repo) == {**before, victim: LINE + before[victim]}


@pytest.fixture(scope="module")
def changed(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The files `apply` changes in the fixture (and that exist before it)."""
    repo, op = fresh(tmp_path_factory.mktemp("reference"))
    before = tree(repo)
    assert cli("apply", str(op), "--write")[0] == 0
    after = tree(repo)
    return sorted(k for k in before if after.get(k) != before[k])


TRIALS = 50 if LONG else 5


@pytest.mark.slow  # trials of a writer process racing real applies
def test_a_writer_racing_apply_never_gets_edits_at_stale_offsets(
    tmp_path: Path, changed: list[str], state_home: Path
) -> None:
    rng = random.Random("optrace-stale-offsets")
    outcomes: dict[str, int] = {}
    for trial in range(TRIALS):
        repo, op = fresh(tmp_path / f"t{trial}")
        before = tree(repo)
        victim = rng.choice(changed)
        delay = rng.uniform(0.2, 1.4)  # apply --write of this operator: ~0.9 s from start

        line = line_for(victim)

        def writer(path: Path = repo / victim, delay: float = delay, line: bytes = line) -> None:
            time.sleep(delay)
            tmp = path.with_name(path.name + ".editor~")  # as editors save: a new file, renamed
            tmp.write_bytes(line + path.read_bytes())
            os.replace(tmp, path)

        proc = subprocess.Popen([sys.executable, "-m", "optrace", "apply", str(op), "--write"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        thread = threading.Thread(target=writer)
        thread.start()
        _out, err = proc.communicate(timeout=300)
        thread.join()
        assert "Traceback" not in err, err
        assert proc.returncode == 0 or (proc.returncode == 2 and "OT042" in err), err
        outcomes[f"exit {proc.returncode}"] = outcomes.get(f"exit {proc.returncode}", 0) + 1
        code, _, err = cli("strip", str(op), "--write")
        assert code == 0, err
        state = tree(repo)
        # Everything but the victim is the original; the victim is the writer's bytes, or
        # the original when the writer lost its race with optrace's rename (a window of
        # milliseconds, docs/edits.md) — never anything else.
        others = {k: v for k, v in before.items() if k != victim}
        assert {k: v for k, v in state.items() if k != victim} == others
        assert state[victim] in (line + before[victim], before[victim]), f"trial {trial}: {victim} mangled"
        shutil.rmtree(repo)
    print(f"stale-offset trials: {outcomes}")
