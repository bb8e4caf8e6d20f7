"""Per-repository configuration: `optrace.toml` or `[tool.optrace]` in `pyproject.toml`.

Everything auto-detected can be overridden here; the schema is documented in
docs/config.md.

A repository's config is data, never authority: its `[rules] modules` are
imported only when the user trusts it — `--trust-config` (`trusting_config`), or the
repository listed under `[trust] repositories` in the user-level config
(`user_config_path()`, outside every repository). Otherwise they are skipped and the
plan says so (OT005). Trust is never set by a repository's own config.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from optrace.engine.codes import OT001, OT002, OT003, OT004, OT005
from optrace.engine.diagnostics import Diagnostic, InputError
from optrace.engine.probes import looked_at
from optrace.engine.source import DEFAULT_QUALIFIERS
from optrace.runtime.numbers import DENSITY_LABELS, TRIP_COUNT, NumberError, check_number
from optrace.runtime.regular import open_regular, user_config_path

LAYER_KEYS = (
    "entry",
    "base_header",
    "op_def",
    "infer",
    "tiling",
    "aclnn",
    "cpp_callers",
    "torch_adapter",
    "registration",
    "build_script",
    "python_callers",
)


@dataclass
class Config:
    """Resolved settings for one repository."""

    source: Path | None = None
    qualifiers: tuple[str, ...] = DEFAULT_QUALIFIERS
    include_dirs: tuple[Path, ...] = ()
    # Layer name -> explicit files (relative paths resolved against the repo root).
    layers: dict[str, tuple[Path, ...]] = field(default_factory=dict)
    disabled_rules: frozenset[str] = frozenset()
    # `[rules] modules` to import: only those of a trusted config, each checked (OT004).
    rule_modules: tuple[str, ...] = ()
    # Modules an untrusted config named and that were not imported (OT005 says so).
    skipped_rule_modules: tuple[str, ...] = ()
    # Loop variable name or label -> trip count, for the buffer-capacity estimate.
    trip_counts: dict[str, int] = field(default_factory=dict)
    density_min: int = 10
    density_max: int = 30
    density_target: int = 30
    max_depth: int = 7
    # `[naming] max_length`: a whole label (the TRACE_POINT string) at most this long.
    label_max: int = 32
    # `[naming] phase_words`: words added to the default list that marks phase work and is
    # preferred when a name is shortened (engine/words.py DEFAULT_PHASE_WORDS).
    phase_words: tuple[str, ...] = ()
    # `[naming] filler_words` / `short_words`: words dropped from names, and long words'
    # short forms, added to engine/words.py's FILLER_WORDS / DEFAULT_SHORT_WORDS.
    filler_words: tuple[str, ...] = ()
    short_words: dict[str, str] = field(default_factory=dict)
    # `samples`: more Python files that are samples / tests (fnmatch globs, absolute, `*`
    # crossing directories), beside the built-in tests/, examples/, samples/, test_*.py ...
    sample_globs: tuple[str, ...] = ()
    # Notes about the config itself (skipped modules), shown with the plan's findings.
    diagnostics: list[Diagnostic] = field(default_factory=list)


# --- trust: set by the user (a flag, the user-level config), never by a repository --------------

_trust_flag = False


def set_config_trust(trusted: bool) -> None:
    """`--trust-config`: every repository config of this process may name rule modules."""
    global _trust_flag
    _trust_flag = trusted


def config_trust_flag() -> bool:
    return _trust_flag


@contextmanager
def trusting_config(trusted: bool = True) -> Iterator[None]:
    """`--trust-config` for the calls inside the block (library use, tests)."""
    before = _trust_flag
    set_config_trust(trusted)
    try:
        yield
    finally:
        set_config_trust(before)


def trusted_repositories() -> tuple[Path, ...]:
    """`[trust] repositories` of the user-level config, as real paths (`~` expanded)."""
    path = user_config_path()
    if not path.is_file():
        return ()
    data = _load_toml(path)
    trust = data.get("trust", {})
    repos = trust.get("repositories", []) if isinstance(trust, dict) else None
    if not isinstance(repos, list) or not all(isinstance(r, str) for r in repos):
        raise InputError(Diagnostic(OT003, "`trust.repositories` must be a list of paths", path,
                                    _key_line(path, "repositories")))
    listed = [os.path.expanduser(r) for r in repos if r]
    for given in listed:
        looked_at(given)  # where a listed path leads decides what is trusted
    return tuple(Path(os.path.realpath(given)) for given in listed)


def config_is_trusted(config_file: Path) -> bool:
    """May this repository config import code? With `--trust-config`, or when the user-level
    config lists a repository holding it — a user config that lies inside that repository
    (a clone pointing XDG_CONFIG_HOME into itself) does not count."""
    if _trust_flag:
        return True
    looked_at(config_file)
    looked_at(user_config_path())
    real = Path(os.path.realpath(config_file))
    user = Path(os.path.realpath(user_config_path()))
    return any(real.is_relative_to(repo) and not user.is_relative_to(repo) for repo in trusted_repositories())


def find_config_file(repo_root: Path, op_dir: Path) -> tuple[Path, dict[str, object]] | None:
    """`optrace.toml` in the operator dir, then the repo root; else pyproject's table."""
    for base in (op_dir, repo_root):
        candidate = base / "optrace.toml"
        # Whether it is there decides the config (a cached result rests on that too,
        # wherever --repo-root is: not always a folder above the operator).
        looked_at(candidate)
        # Not only regular files: a FIFO or a dangling link there is named (OT001), not
        # silently taken for no config.
        if os.path.lexists(candidate) and not candidate.is_dir():
            return candidate, _load_toml(candidate)
    pyproject = repo_root / "pyproject.toml"
    looked_at(pyproject)
    if os.path.lexists(pyproject) and not pyproject.is_dir():
        data = _load_toml(pyproject)
        tool = data.get("tool")
        if isinstance(tool, dict) and isinstance(tool.get("optrace"), dict):
            return pyproject, tool["optrace"]
    return None


def _load_toml(path: Path) -> dict[str, object]:
    try:
        # Only a regular file, within the config bound (a FIFO would block; runtime/regular.py).
        with open_regular(path, "config") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        # Python 3.11's TOMLDecodeError has no lineno; the message carries it.
        m = re.search(r"at line (\d+)", str(exc))
        line = int(getattr(exc, "lineno", 0) or (m.group(1) if m else 0))
        raise InputError(
            Diagnostic(OT002, f"invalid TOML: {exc}", path, line)
        ) from exc
    except OSError as exc:
        raise InputError(
            Diagnostic(OT001, f"cannot read: {exc.strerror or exc}", path, 0)
        ) from exc


def load_config(repo_root: Path, op_dir: Path) -> Config:
    found = find_config_file(repo_root, op_dir)
    if found is None:
        return Config()
    path, data = found

    def bad(message: str) -> InputError:
        key = re.search(r"`([\w.]+)`", message)
        return InputError(
            Diagnostic(OT003, message, path, _key_line(path, key.group(1)) if key else 0)
        )

    def str_list(key: str) -> list[str]:
        value = data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise bad(f"`{key}` must be a list of strings")
        return list(value)

    if "trust" in data:
        raise bad("`trust` is the user's to set (--trust-config, or the user-level config), "
                  "not a repository's")
    base = path.parent
    cfg = Config(source=path)
    extra_quals = str_list("qualifiers")
    for q in extra_quals:
        # a qualifier is a word the parse blanks (`MY_DEVICE`): anything else would blank
        # text that is not a name, or never match
        if not re.fullmatch(r"[A-Za-z_]\w*", q):
            raise bad(f"`qualifiers`: {q!r} is not a C++ identifier")
    cfg.qualifiers = tuple(dict.fromkeys((*DEFAULT_QUALIFIERS, *extra_quals)))
    # Where each folder leads is what its headers are found by (a `latest` link moved on
    # to another toolkit): an input as the candidates in it are.
    given_dirs = [base / p for p in str_list("include_dirs")]
    for folder in given_dirs:
        looked_at(folder)
    cfg.include_dirs = tuple(folder.resolve() for folder in given_dirs)
    cfg.sample_globs = tuple((base.resolve() / p).as_posix() for p in str_list("samples"))
    layers = data.get("layers", {})
    if not isinstance(layers, dict):
        raise bad("`layers` must be a table")
    for key, value in layers.items():
        if key not in LAYER_KEYS:
            raise bad(f"unknown layer `{key}` (known: {', '.join(LAYER_KEYS)})")
        paths = [value] if isinstance(value, str) else value
        if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
            raise bad(f"`layers.{key}` must be a path or a list of paths")
        for p in paths:
            looked_at(base / p)  # the file a layer reads is the one the path leads to now
        cfg.layers[key] = tuple((base / p).resolve() for p in paths)
        for given, resolved in zip(paths, cfg.layers[key], strict=True):
            # Every layer reads its files: one that is not there is the config's mistake,
            # said here with the config's line, not a read failing deep in a layer.
            if not resolved.is_file():
                raise bad(f"`layers.{key}`: {given!r} ({resolved}) is not a file")
    rules = data.get("rules", {})
    if not isinstance(rules, dict):
        raise bad("`rules` must be a table")
    disable = rules.get("disable", [])
    plugins = rules.get("modules", [])
    if not isinstance(disable, list) or not isinstance(plugins, list):
        raise bad("`rules.disable` and `rules.modules` must be lists")
    cfg.disabled_rules = frozenset(str(d) for d in disable)
    modules = tuple(str(m) for m in plugins)
    if modules:
        line = _key_line(path, "rules.modules")
        if config_is_trusted(path):
            for module in modules:
                problem = rule_module_problem(module)
                if problem:
                    raise InputError(Diagnostic(OT004, f"rule module `{module}`: {problem}", path, line))
            cfg.rule_modules = modules
        else:
            cfg.skipped_rule_modules = modules
            cfg.diagnostics.append(Diagnostic(
                OT005,
                f"rule modules not loaded: {', '.join(modules)} (a repository's config runs no code "
                f"unless you trust it: pass --trust-config, or list the repository under [trust] "
                f"repositories in {user_config_path()})",
                path, line))
    trips = data.get("trip_counts", {})
    if not isinstance(trips, dict):
        raise bad("`trip_counts` must map loop names to integers")
    # Every number a repository's config gives is checked finite and in its documented
    # range (runtime/numbers.py): TOML has nan, inf and 64-bit integers.
    try:
        cfg.trip_counts = {str(k): int(check_number(f"`trip_counts.{k}`", v, TRIP_COUNT))
                           for k, v in trips.items()}
    except NumberError as exc:
        raise bad(str(exc)) from None
    density = data.get("density", {})
    if not isinstance(density, dict):
        raise bad("`density` must be a table")
    try:
        for key in ("min", "max", "target"):
            if key in density:
                value = int(check_number(f"`density.{key}`", density[key], DENSITY_LABELS))
                setattr(cfg, f"density_{key}", value)
    except NumberError as exc:
        raise bad(str(exc)) from None
    if not cfg.density_min <= cfg.density_max:
        raise bad(f"`density.min` ({cfg.density_min}) must not exceed `density.max` ({cfg.density_max})")
    naming = data.get("naming", {})
    if not isinstance(naming, dict):
        raise bad("`naming` must be a table")
    words = naming.get("phase_words", [])
    if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
        raise bad("`naming.phase_words` must be a list of words")
    cfg.phase_words = tuple(w.lower() for w in words)
    fillers = naming.get("filler_words", [])
    if not isinstance(fillers, list) or not all(isinstance(w, str) and _WORD_RE.fullmatch(w)
                                                 for w in fillers):
        raise bad("`naming.filler_words` must be a list of lowercase words ([a-z0-9])")
    cfg.filler_words = tuple(fillers)
    short = naming.get("short_words", {})
    if not isinstance(short, dict) or not all(
            isinstance(v, str) and _WORD_RE.fullmatch(v) and _PHRASE_RE.fullmatch(k)
            for k, v in short.items()):
        raise bad("`naming.short_words` must map lowercase words (or hyphenated phrases) to a short "
                  "lowercase word, e.g. { communication = \"comm\" }")
    cfg.short_words = dict(short)
    max_length = naming.get("max_length", cfg.label_max)
    if not isinstance(max_length, int) or max_length < 12:
        raise bad("`naming.max_length` must be an integer of at least 12")
    cfg.label_max = max_length
    return cfg


_WORD_RE = re.compile(r"[a-z0-9]+")
_PHRASE_RE = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")


# The rule framework's base class, named rather than imported: engine never imports rules.
RULE_BASE_CLASS = "optrace.rules.base.Rule"


def rule_module_problem(name: str) -> str:
    """Why module `name` cannot give rules ("" when it can): it is not found, fails to
    import, or has no non-empty `RULES` of Rule subclasses. Imports it (its code runs)."""
    try:
        if not name or importlib.util.find_spec(name) is None:
            return "no such module on the installed path"
        module = importlib.import_module(name)
    except Exception as exc:  # a module's own error at import: reported, not a traceback
        return f"cannot be imported ({type(exc).__name__}: {exc})"
    rules = getattr(module, "RULES", None)
    if not isinstance(rules, list | tuple) or not rules:
        return "has no RULES list (or an empty one)"
    if not all(_is_rule_class(r) for r in rules):
        return "RULES holds something that is not an optrace Rule class"
    return ""


def _is_rule_class(obj: object) -> bool:
    return isinstance(obj, type) and any(f"{c.__module__}.{c.__qualname__}" == RULE_BASE_CLASS
                                         for c in obj.__mro__)


def _key_line(path: Path, dotted: str) -> int:
    """Line of a key's assignment in a TOML file, for messages (0 if not found)."""
    key = dotted.split(".")[-1]
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return 0
    for n, line in enumerate(lines, 1):
        if re.match(rf"\s*{re.escape(key)}\s*=", line) or line.strip() == f"[{dotted}]":
            return n
    return 0
