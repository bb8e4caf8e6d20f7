"""`display_path` by text gives what `relative_to` gives: the repository-relative path of a
file below the root, the path as it is otherwise (a root of `/` or `//`, a sibling whose
name starts with the root's, `..` kept, the root itself)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from optrace.engine.diagnostics import display_path

_PART = st.sampled_from(["a", "b", "ab", "a.b", "..", ".", "", "x y", "é", "a-"])
_LEAD = st.sampled_from(["/", "//", "///", ""])


def _by_parts(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


@settings(max_examples=2000, deadline=None)
@given(lead=_LEAD, top=st.lists(_PART, max_size=4), below=st.lists(_PART, max_size=3),
       other=st.one_of(st.none(), st.tuples(_LEAD, st.lists(_PART, max_size=4))))
def test_by_text_as_by_parts(lead: str, top: list[str], below: list[str],
                             other: tuple[str, list[str]] | None) -> None:
    root = Path(lead + "/".join(top))
    path = Path(str(root) + "/" + "/".join(below)) if other is None else Path(other[0] + "/".join(other[1]))
    assert display_path(path, root) == _by_parts(path, root)


def test_examples() -> None:
    assert display_path(Path("/r/ops/k.cpp"), Path("/r")) == "ops/k.cpp"
    assert display_path(Path("/rr/k.cpp"), Path("/r")) == "/rr/k.cpp"
    assert display_path(Path("/r"), Path("/r")) == "."
    assert display_path(Path("/r/k.cpp"), Path("/")) == "r/k.cpp"
    assert display_path(Path("/r/k.cpp"), None) == "/r/k.cpp"
