"""What the tests of check's and plan's caches share: the CLI run in-process, a count of
the operators actually analysed, and the input changes every cached result must miss on,
made to a copy of the UMDK-style fixture."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from typer.testing import CliRunner

from optrace.cli.app import app

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "umdk_style"
OP_REL = "src/cam/comm_operator/ascend_kernels/moe_fused_gmm"
KERNEL = f"{OP_REL}/op_kernel/moe_fused_gmm.cpp"
HEADER = f"{OP_REL}/op_kernel/moe_fused_gmm/utils/device_macros.h"  # moe_fused_gmm.h includes it
HOST = f"{OP_REL}/op_host/moe_fused_gmm.cpp"
SAMPLE = "src/cam/examples/moe_fused_gmm_sample.py"
UNIT_TEST = "test/cam/ut/moe_fused_gmm/test_moe_fused_gmm.py"
BUILD = "build/cam/comm_operator/compile_ascend_proj.sh"


def cli(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(app, list(args))
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    return res.exit_code, res.stdout, res.stderr


def counted_calls(monkeypatch: pytest.MonkeyPatch, module: ModuleType, name: str) -> list[Path]:
    """The operators `module.name` (the analysis a hit skips) is called on from now."""
    calls: list[Path] = []
    real = getattr(module, name)

    def counted(op_dir: Path, *args: Any, **kwargs: Any) -> Any:
        calls.append(op_dir)
        return real(op_dir, *args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def append(path: Path, text: bytes = b"\n// a comment\n") -> Callable[[Path], None]:
    def change(repo: Path) -> None:
        with open(repo / path, "ab") as handle:
            handle.write(text)
    return change


def _new_sample(repo: Path) -> None:
    shutil.copy(repo / SAMPLE, repo / "src/cam/examples/moe_fused_gmm_sample_two.py")


def _new_header(repo: Path) -> None:
    (repo / OP_REL / "op_kernel" / "moe_fused_gmm" / "utils" / "extra.h").write_text("#pragma once\n")


def _deleted_caller(repo: Path) -> None:
    (repo / UNIT_TEST).unlink()


def _deleted_header(repo: Path) -> None:
    (repo / HEADER).unlink()


def _config(repo: Path) -> None:
    with open(repo / "optrace.toml", "a") as handle:
        handle.write('qualifiers = ["__aicore__", "__gm__"]\n')


def _user_config(repo: Path) -> None:
    path = Path(os.environ["XDG_CONFIG_HOME"]) / "optrace" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("[limits]\nsource_bytes = 67108864\n")


def _marker_above(repo: Path) -> None:
    (repo / "src" / "optrace.toml").write_text("")  # a nearer repository root for the operator


def _moved_out_behind_a_link(repo: Path) -> None:
    # Every byte and every `stat` (which follows the link) as before; the headers are now
    # outside the repository, which the plan and check say (nothing of them is read).
    folder = repo / OP_REL / "op_kernel" / "moe_fused_gmm" / "raw_distributed"
    outside = repo.parent / "outside" / "raw_distributed"
    outside.parent.mkdir()
    folder.rename(outside)
    folder.symlink_to(outside, target_is_directory=True)


CHANGES: dict[str, Callable[[Path], None]] = {
    "kernel file": append(Path(KERNEL)),
    "header the entry includes": append(Path(HEADER)),
    "host layer file": append(Path(HOST)),
    "python caller": append(Path(SAMPLE), b"\n# a comment\n"),
    "build script": append(Path(BUILD), b"\n# a comment\n"),
    "new file discovery finds": _new_sample,
    "new header": _new_header,
    "deleted caller": _deleted_caller,
    "deleted header": _deleted_header,
    "repository config": _config,
    "user config": _user_config,
    "repository marker": _marker_above,
    "kernel folder moved out behind a link": _moved_out_behind_a_link,
}
