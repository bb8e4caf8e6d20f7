"""OT105 naming: labels an expert keeps — no word said twice, distinct regions told
apart by how they differ, at most `naming.max_length` characters (default 32), and no
region lost for its name.

A label is the whole `TRACE_POINT` string, `<phase> <aic|aiv> [<sub>...]`: what a reader
sees in the trace; its words are what splitting it on spaces and hyphens gives. Words come
from the code's own names (engine/words.py: split at case changes with acronyms and digit
runs whole, `CpGM2GMPingPong` -> `cp-gm2gm-ping-pong`; long words short, `initialize` ->
`init`; fillers such as `process` / `impl` dropped). This rule then makes them read:

- **No word twice.** A region drops the words its label already has (`read-buf
  read-buf-weighted-sum` -> `read-buf weighted-sum`), a single letter is never a word, and
  a phase word (level 2) does not repeat the operator's own name words (kept only when
  they are all the name has: then its phase words).
- **Distinct regions, distinct names.** Siblings whose labels say the same, counters
  ignored (`barrier-2`, `wait 3`, `second`), that are different code able to run in one
  launch, are told apart by how they differ, in this order: a word of the function's
  full name the others lack; its class; the AIV role; the flag a handshake waits on or
  sets; the phase a barrier or notify ends (a wait: the phase it starts) —
  `barrier-gmm1`, `barrier-combine`; `exit` on an early return's path; where the step it
  ends has no region, the call beside it (a tile loop: the last other call in it); where
  two end the same call, the step each comes before (`barrier-pre-calc-weight`); a tile
  loop's variable; `loop` for a loop beside a call of the same step; what a loop runs up
  to (a main loop and its tail: `tail`; a bound `loop2` by what it was set from; digits
  alone never tell two loops apart); what a loop accumulates (`below` / `equal`); the
  condition it runs under; what it does first; a call in its code the others lack
  (`first-sort` / `second-gather` for `FirstStep` / `SecondStep`). Where the names that
  would tell them apart read alike (`compute-global-mean` / `compute-global-var` /
  `gather-sum` / `gather-sum-ordered`), each takes the words of its own that some of the
  others lack (`mean` / `var`; `ordered`). Steps are told apart before the handshakes
  between them, so a barrier is named after the step as that step ends up named. The
  same step run again keeps one label: one
  function called in one role, one flag (or family of flags, `evt` / `evt + 1`) set or
  waited on again, calls of one name whose code was not found, the arms of a variant
  dispatch (one launch runs one). Siblings nothing tells apart keep their label, and
  the plan says so; the plan lint counts them.
- **A phase and its handshakes use one name.** A handshake named after a level-2 phase
  (OT109's partner, or the phase a level-2 barrier ends) follows that phase's final word,
  less the words its own label already has, and keeps the word that told it apart from a
  sibling (two notifies of one phase by their flags: `notify-release-v2c-ping` /
  `notify-release-v2c-pong`).
- **The limit.** A label over `naming.max_length` is shortened one cut at a time: the
  longest word on its path first (the deepest on a tie), the phase's word last; each cut
  the gentlest left — two of its phase words, a phase word with its neighbour, its first
  two words, then one word (a word holding a phase word only to a phase word) — never
  into a name a sibling has, a phase's word on every core type at once, a handshake's
  partner word by cutting the partner. Cuts that a later cut made needless are given
  back, and so are words dropped as repeats of an ancestor's word that a cut removed. A
  label no cut fits keeps a short label of its own: the region moves up to the nearest
  ancestor under which its own words fit (its time still nests there), with an OT105
  warning — a region is never folded away for its name.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from optrace.engine.codes import OT105
from optrace.engine.cpp import FunctionDef, without_own_code
from optrace.engine.diagnostics import Severity
from optrace.engine.model import Kind, Region, assign_labels, relabel_below
from optrace.engine.words import Vocabulary, label_kebab, label_name, reductions
from optrace.rules.base import Example, Rule, RuleContext

_BAD = re.compile(r"[^a-z0-9-]+")
_CORE_WORDS = frozenset({"aic", "aiv"})
_ROLE_WORDS = frozenset({"wait", "notify", "barrier"})
# Words of a condition or a flag's name that tell nothing apart.
_PLAIN_WORDS = frozenset(
    {"ascend", "ascendc", "get", "is", "idx", "id", "index", "num", "flag", "flags", "exec", "tpl",
     "enable", "enabled", "mode", "key", "tiling", "if", "ifdef", "ifndef", "elif", "else", "defined",
     "true", "false", "event", "evt", "value", "has", "use", "need", "constexpr", "static", "cast",
     "uint32", "int32", "uint64", "int64", "size", "sizeof", "nullptr", "this", "std", "params"}
)
_HANDSHAKE_HOT = ("wait", "sync", "notify")

# A name longer than any label allows, called in an expert loop.
_LONG = """
__aicore__ inline void DispatchTokensToAllRanksWithQuantisation(GM_ADDR x) {
    for (uint32_t expertIdx = 0; expertIdx < expertNum; ++expertIdx) {
        PrepareExpertWindowsForEveryRemoteRank(x);
        SyncAll();
    }
}
__aicore__ inline void PrepareExpertWindowsForEveryRemoteRank(GM_ADDR x) {
    for (uint32_t tokenIdx = 0; tokenIdx < tokenNum; ++tokenIdx) { DataCopy(dst, src, len); }
    SyncAll();
}
extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {
    DispatchTokensToAllRanksWithQuantisation(x);
}
"""
_STUTTER = """
__aicore__ inline void CpGM2GMPingPong(GM_ADDR dst, GM_ADDR src) {
    for (uint32_t tileIdx = 0; tileIdx < tileNum; ++tileIdx) {
        DataCopy(dst, src, len); Adds(dst, dst, 1, len); Muls(dst, dst, 2, len);
    }
}
__aicore__ inline void LocalCalculationECReshape(GM_ADDR x) {
    for (uint32_t tileIdx = 0; tileIdx < tileNum; ++tileIdx) {
        Muls(x, x, 2, len); Adds(x, x, 1, len); Cast(x, x, len);
    }
}
__aicore__ inline void ShareToShareSlice(GM_ADDR x) {
    for (uint32_t tileIdx = 0; tileIdx < tileNum; ++tileIdx) {
        DataCopy(x, x, len); Adds(x, x, 1, len); Muls(x, x, 2, len);
    }
}
__aicore__ inline void ReadBufferAndWeightedSum(GM_ADDR x) {
    for (uint32_t tokenIdx = 0; tokenIdx < tokenNum; ++tokenIdx) {
        DataCopy(x, x, len); Muls(x, x, 2, len); Adds(x, x, 1, len);
    }
}
__aicore__ inline void ReadBufferFromRemote(GM_ADDR x) {
    ReadBufferAndWeightedSum(x);
    SyncAll();
}
__aicore__ inline void DemoDispatchProcess(GM_ADDR x) {
    CpGM2GMPingPong(x, x);
    LocalCalculationECReshape(x);
    ShareToShareSlice(x);
}
extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {
    DemoDispatchProcess(x);
    ReadBufferFromRemote(x);
}
"""

_FOUR_BARRIERS = """
__aicore__ inline void QuantTokens(GM_ADDR x) {
    for (uint32_t t = 0; t < tileNum; ++t) { Muls(x, x, 2, n); Cast(x, x, n); Adds(x, x, 1, n); }
}
__aicore__ inline void SendTokens(GM_ADDR x) {
    for (uint32_t t = 0; t < tokenNum; ++t) { DataCopy(x, x, n); Adds(x, x, 1, n); Muls(x, x, 2, n); }
}
__aicore__ inline void RecvTokens(GM_ADDR x) {
    for (uint32_t t = 0; t < tokenNum; ++t) { DataCopy(x, x, n); Adds(x, x, 1, n); Muls(x, x, 2, n); }
}
__aicore__ inline void Gmm1(GM_ADDR x) {
    for (uint32_t t = 0; t < tileNum; ++t) { Mmad(x, x, x, n); Adds(x, x, 1, n); Muls(x, x, 2, n); }
}
extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {
    QuantTokens(x);
    SyncAll();
    SendTokens(x);
    SyncAll();
    RecvTokens(x);
    SyncAll();
    Gmm1(x);
    SyncAll();
}
"""

_ROLES = """
__aicore__ inline void Exchange(GM_ADDR x) {
    for (uint32_t rankIdx = 0; rankIdx < rankNum; ++rankIdx) { DataCopy(x, x, len); SyncAll(); }
}
extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {
    if (isSendCore) {
        Exchange(x);
    }
    if (isRecvCore) {
        Exchange(x);
    }
}
"""

_ORDINALS = """
__aicore__ inline void SortIndices(GM_ADDR x) {
    for (uint32_t t = 0; t < tileNum; ++t) { Sort(x, x, n); Adds(x, x, 1, n); Muls(x, x, 2, n); }
}
__aicore__ inline void ScatterValues(GM_ADDR x) {
    for (uint32_t t = 0; t < tileNum; ++t) { Muls(x, x, 2, n); Adds(x, x, 1, n); Cast(x, x, n); }
}
__aicore__ inline void FirstStep(GM_ADDR x) { SortIndices(x); SyncAll(); }
__aicore__ inline void SecondStep(GM_ADDR x) { ScatterValues(x); SyncAll(); }
extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {
    FirstStep(x);
    SecondStep(x);
}
"""


class Naming(Rule):
    code = OT105
    name = "naming"
    VALID = (
        # Words: acronyms and digit runs whole (`cp-gm2gm-ping-pong`), a lone letter kept
        # with its word (`ec-reshape`), long words short (`calculation` -> `calc`, `buffer`
        # -> `buf`), fillers dropped (`process`, `to`, `and`, `from`), the operator's own
        # name (`demo`) not repeated as a phase word, and no word twice in a label
        # (`share-to-share-slice` -> `share-slice`; `read-buf-weighted-sum` under
        # `read-buf-remote` -> `weighted-sum`).
        Example(_STUTTER, tree=(
            "processing",
            "  dispatch @inside:26",
            "    dispatch cp-gm2gm-ping-pong @inside:2",
            "    dispatch local-calc-ec-reshape @inside:7",
            "    dispatch share-slice @inside:12",
            "  read-buf-remote @inside:22",
            "    read-buf-remote weighted-sum @inside:17",
            "    read-buf-remote barrier @around:24",
        )),
        # The limit: the longest words are cut first, the phase's word last and to its
        # phase words (`dispatch-tokens-all-ranks-quant` -> `dispatch-quant` -> `dispatch`),
        # and a cut that a later cut made needless is given back.
        Example(_LONG, tree=(
            "processing",
            "  dispatch @inside:2",
            "    dispatch expert @inside:3",
            "      dispatch expert prepare @inside:8",
            "        dispatch expert prepare copy @around:9",
            "        dispatch expert prepare barrier @around:10",
            "      dispatch expert barrier @around:5",
        )),
    )
    INVALID = (
        # Nothing tells two barriers apart (no phase, no call around them): one label,
        # and the plan says so.
        Example(
            """
extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {
    SyncAll();
    SyncAll();
}
""",
            tree=("processing", "  barrier @around:3", "  barrier @around:4"),
            finding="repeats",
        ),
        # No cut fits 24 characters: a region keeps a short label of its own under the
        # nearest ancestor where it fits (`copy` under `expert`; the callee's barrier under
        # `dispatch`, as `dispatch expert barrier` is the loop's own) — never folded away.
        Example(_LONG, tree=(
            "processing",
            "  dispatch @inside:2",
            "    dispatch expert @inside:3",
            "      dispatch expert prepare @inside:8",
            "      dispatch expert copy @around:9",
            "      dispatch expert barrier @around:5",
            "    dispatch barrier @around:10",
        ), config="[naming]\nmax_length = 24\n", finding="a region of its own"),
        # Four barriers after four phases: each named by the phase it ends.
        Example(_FOUR_BARRIERS, tree=(
            "processing",
            "  quant-tokens @inside:2",
            "  barrier-quant-tokens @around:16",
            "  send-tokens @inside:5",
            "  barrier-send-tokens @around:18",
            "  recv-tokens @inside:8",
            "  barrier-recv-tokens @around:20",
            "  gmm1 @inside:11",
            "  barrier-gmm1 @around:22",
        ), finding="told apart by the phase each ends"),
        # One function called in two AIV roles: named by its role.
        Example(_ROLES, tree=(
            "processing",
            "  exchange-send @around:7",
            "    exchange-send rank @inside:3",
            "      exchange-send rank barrier @around:3",
            "  exchange-recv @around:10",
        ), finding="told apart by the AIV role"),
        # Names that differ by an ordinal only say the same: told apart by what they do.
        Example(_ORDINALS, tree=(
            "processing",
            "  first-step-sort @inside:8",
            "    first-step-sort indices @inside:2",
            "    first-step-sort barrier @around:8",
            "  second-step-scatter @inside:9",
            "    second-step-scatter values @inside:5",
            "    second-step-scatter barrier @around:9",
        ), finding="told apart by what each does first"),
    )

    def apply(self, ctx: RuleContext) -> None:
        cfg = ctx.analysis.config
        self.vocab = Vocabulary.of(cfg.phase_words, cfg.filler_words, cfg.short_words)
        op_name = ctx.analysis.layers.op_name if ctx.analysis.layers is not None else ""
        self.op_parts = frozenset(label_kebab(op_name).split("-")) - {""}
        self.ctx = ctx
        self.cuts: list[tuple[Region, int, str]] = []  # (region, word, before) of each cut kept
        self.dropped: list[tuple[Region, int, list[str]]] = []  # words less what ancestors said
        self.limit = cfg.label_max
        self.told: list[tuple[str, str, list[Region]]] = []  # siblings told apart, said at the end
        self.left: list[tuple[str, list[Region]]] = []  # siblings nothing told apart (one level)
        self.sources = {parsed.src.path: parsed.src for parsed in ctx.analysis.parsed.values()}
        self.calls_of: dict[str, list[str]] = {}  # code text -> the calls it makes (memo)
        self.memo: dict[tuple[str, int], list[str]] = {}  # (what, id(region)) -> found (memo)
        self.spans: dict[Path, list[tuple[int, int]]] = {}  # file -> its functions' byte spans
        for fn in ctx.analysis.index.functions.values():
            self.spans.setdefault(fn.src.path, []).append((fn.node.start_byte, fn.node.end_byte))
        self._name(ctx.root, [])
        self._follow_partners()
        assign_labels(ctx.root)
        # Each region's parent while `_fit` runs, None when a region has moved (`_lift`).
        self._parent_of: dict[int, Region] | None = None
        self._fit(ctx.root, [], cfg.label_max)
        self._follow_partners()
        assign_labels(ctx.root)
        self._relax()
        for key, how, done in self.told:  # with the labels as they are in the end
            ctx.report(f"{len(done)} sibling region(s) `{key}` told apart by {how}: "
                       + ", ".join(f"`{m.label}`" for m in done), done[0])
        ctx.stats["regions_folded_for_length"] = 0  # lifted, never folded (see the docstring)

    # --- words ----------------------------------------------------------------------------

    def _name(self, node: Region, said: list[str]) -> None:
        """Top-down: each child's words without repeats, then siblings told apart."""
        for child in node.children:
            self._clean(child, said)
        for _ in range(3):  # a word given to tell two apart may meet a third sibling
            if not self._distinct(node, said):
                break
        # said once, after the last round (a barrier named after a phase is told apart
        # once that phase is)
        for key, left in self.left:
            self.ctx.report(f"sibling label `{key}` repeats: nothing in the code tells these "
                            f"{len(left)} regions apart (no counter suffix)", left[1])
        for child in node.children:
            self._name(child, [*said, *_parts(child)])

    def _clean(self, region: Region, said: list[str]) -> None:
        seen = set(said)
        words: list[str] = []
        for i, word in enumerate(region.words):
            original = [p for p in self.vocab.parts(_BAD.sub("-", word.lower()).strip("-")) if p]
            phase = i == 0 and not said  # a level-2 region's first word: the phase word
            keep = self._keep(region, phase, original, seen)
            whole = self._keep(region, phase, original, {p for w in words for p in w.split("-")})
            if not keep and i == 0:
                keep = self._fallback(region, seen, original)
            if keep:
                if keep != whole:  # words its ancestors had: given back if a cut frees them
                    self.dropped.append((region, len(words), whole))
                words.append("-".join(keep))
                seen.update(keep)
        region.words = words or region.words[:1]

    def _keep(self, region: Region, phase: bool, original: list[str], seen: set[str]) -> list[str]:
        keep = list(dict.fromkeys(p for p in original if len(p) > 1 and p not in seen))
        keep = [p for p in keep if p not in self.vocab.fillers] or keep
        if phase and self.op_parts and keep and region.partner is None:
            # The operator's name is said by the trace itself: a phase word does not repeat
            # it; one made of nothing else keeps its phase words, else its last word.
            own = [p for p in keep if p not in self.op_parts]
            keep = own or [p for p in keep if self.vocab.is_phase(p)][:2] or keep[-1:]
        return keep

    def _fallback(self, region: Region, seen: set[str], original: list[str]) -> list[str]:
        """A word all of whose parts the label already has: a part of the full name it
        does not, else what kind of region it is."""
        full = [p for p in self.vocab.parts(region.full_word) if len(p) > 1 and p not in seen
                and p not in self.vocab.fillers and p not in _PLAIN_WORDS]
        if full:
            return full[:2]
        kind = {Kind.LOOP: "loop", Kind.WAIT: "wait", Kind.CALL: "call"}.get(region.kind)
        if region.kind == Kind.SYNC:
            kind = "notify" if region.hot == "notify" else "barrier"
        for word in (kind, "step"):
            if word and word not in seen:
                return [word]
        return original[:1]

    # --- distinct siblings ------------------------------------------------------------------

    def _distinct(self, node: Region, said: list[str]) -> bool:
        """Tell apart siblings that say the same (counters ignored); True when a word was given."""
        groups: dict[str, list[Region]] = {}
        for child in node.children:
            groups.setdefault(sibling_key(" ".join(child.words)), []).append(child)
        changed = False
        self.left = []
        # steps before the handshakes between them: a barrier is named after the step it
        # ends as that step is once told apart
        order = sorted(groups.items(), key=lambda kv: all(m.hot in _HANDSHAKE_HOT for m in kv[1]))
        for key, members in order:
            clash = [m for m in members if any(not same_step(m, o) for o in members if o is not m)]
            if len(clash) < 2:
                continue
            left = self._tell_apart(node, clash, said)
            changed = changed or len(left) < len(clash)
            if len(left) > 1:
                self.left.append((key, left))
        return changed

    def _tell_apart(self, node: Region, members: list[Region], said: list[str]) -> list[Region]:
        """Give each clashing sibling the word that says how it differs; the ones left alike."""
        pending = list(members)
        ways = ((self._by_name, "a word of its full name the others lack"),
                (self._by_class, "its class"), (self._by_role, "the AIV role it runs in"),
                (self._by_flag, "the flag it waits on or sets"), (self._by_phase, "the phase each ends"),
                (self._by_exit, "the early return it runs on"),
                (self._by_neighbour, "the call next to it"),
                (self._by_next, "the step it comes before"), (self._by_var, "its loop variable"),
                (self._by_kind, "loop or call"), (self._by_bound, "what its loop runs up to"),
                (self._by_writes, "what its loop accumulates"),
                (self._by_branch, "the condition it runs under"),
                (self._by_first_child, "what each does first"),
                (self._by_code, "a call in its code the others lack"))
        key = sibling_key(" ".join(members[0].words))
        for way, how in ways:
            if len(pending) < 2:
                break
            values = {id(m): way(node, m, pending, said) for m in pending}
            done: list[Region] = []
            for m in pending:
                value = values[id(m)]
                if value is not None and all(
                        same_step(m, o) or values[id(o)] is None or values[id(o)][0] != value[0]  # type: ignore[index]
                        for o in pending if o is not m):
                    done.append(m)
            if not done:
                continue
            for m in done:
                word, partner = values[id(m)]  # type: ignore[misc]
                first, *rest = m.words
                if partner is not None:
                    # Named after a phase of its own level: its word follows that phase's
                    # name (a sibling step's name is its word as it is now).
                    m.partner = partner if any(p is partner for p in self.ctx.root.children) else None
                    m.words = [f"{first.split('-')[0]}-{word}", *rest]
                    # its name as it will read (later rounds group by it)
                    self._follow(m, said)
                else:
                    m.words = [f"{first}-{word}", *rest]
                    m.told = word
            self.told.append((key or " ".join(members[0].words), how, done))
            pending = [m for m in pending if not any(m is d for d in done)]
            keys = {id(m): sibling_key(" ".join(m.words)) for m in node.children}
            pending = [m for m in pending if any(
                o is not m and keys[id(o)] == keys[id(m)] and not same_step(m, o) for o in node.children)]
        return pending

    def _word(self, parts: list[str], m: Region, said: list[str], at_most: int = 2,
              theirs: frozenset[str] | set[str] = frozenset()) -> str | None:
        """Up to `at_most` of `parts` that say something and are not in the label yet — the
        ones `theirs` (the other siblings' words of the same kind) lack first."""
        seen = {*said, *_parts(m), *self.op_parts}
        keep = [p for p in dict.fromkeys(self.vocab.parts("-".join(parts)))
                if len(p) > 1 and p not in seen and p not in self.vocab.fillers and p not in _PLAIN_WORDS
                and not _COUNTER.fullmatch(p)]
        own = [p for p in keep if p not in theirs]
        return "-".join((own or keep)[:at_most]) or None

    def _by_name(self, node: Region, m: Region, pending: list[Region],
                 said: list[str]) -> tuple[str, Region | None] | None:
        """A word of its full name that the others' lack (`gmm-dequant` / `gmm-swiglu`)."""
        if not m.full_word or m.function is None:  # a function's name (not a primitive's)
            return None
        theirs = {p for o in pending if o is not m and not same_step(m, o) for p in o.full_word.split("-")}
        word = self._word([p for p in m.full_word.split("-") if p not in theirs], m, said, 1)
        return (word, None) if word else None

    def _by_role(self, node: Region, m: Region, pending: list[Region],
                 said: list[str]) -> tuple[str, Region | None] | None:
        if not m.role or m.role.startswith("!") or all(o.role == m.role for o in pending if o is not m):
            return None
        theirs = {p for o in pending if o is not m and o.role for p in _condition_parts(o.role)}
        word = self._word(_condition_parts(m.role), m, said, theirs=theirs)
        return (word, None) if word else None

    def _by_class(self, node: Region, m: Region, pending: list[Region],
                  said: list[str]) -> tuple[str, Region | None] | None:
        """Methods of one name in different classes: a word of its class's name the others'
        lack."""
        scope = self._scope(m)
        scopes = {self._scope(o) for o in pending if o is not m and not same_step(m, o)}
        if not scope or scope in scopes:
            return None
        theirs = {p for o in scopes for p in label_kebab(o).split("-")}
        word = self._word([p for p in label_kebab(scope).split("-") if p not in theirs], m, said, 1)
        return (word, None) if word else None

    def _scope(self, m: Region) -> str:
        fn = self.ctx.analysis.index.functions.get(m.function or "")
        return fn.scope.split("::")[-1] if fn is not None and fn.scope else ""

    def _by_flag(self, node: Region, m: Region, pending: list[Region],
                 said: list[str]) -> tuple[str, Region | None] | None:
        if not m.flag:
            return None
        word = self._word(label_kebab(m.flag.split("::")[-1]).split("-"), m, said)
        return (word, None) if word else None

    def _by_phase(self, node: Region, m: Region, pending: list[Region],
                  said: list[str]) -> tuple[str, Region | None] | None:
        """A barrier or notify by the phase it ends (the sibling before it), a wait by the
        one it starts (the sibling after it); where that step has no region, by the
        function its block calls there."""
        if m.hot not in _HANDSHAKE_HOT or m.partner is not None:
            return None
        phase = self._phase_of(node, m)
        if phase is not None:
            parts = _phase_parts(phase)
            word = self._word(parts, m, said)
            # phases whose words start alike (`gather-sum` / `gather-sum-ordered`): by what
            # this one's has that theirs do not
            rivals = [_phase_parts(s) for o in pending if o is not m and not same_step(m, o)
                      and (s := self._phase_of(node, o)) is not None
                      and self._word(_phase_parts(s), o, said) == word]
            own = [p for p in parts if not all(p in r for r in rivals)] if rivals else []
            word = (self._word(own, m, said) if own else None) or word
            return (word, phase) if word else None
        return None

    @staticmethod
    def _phase_of(node: Region, m: Region) -> Region | None:
        """The step a handshake ends (a wait: starts) when it has a region."""
        if m.hot not in _HANDSHAKE_HOT:
            return None
        at = node.children.index(m)
        side = node.children[at + 1:] if m.hot == "wait" else node.children[:at][::-1]
        return next((s for s in side if s.cost != "handshake" and s.cores & m.cores and s.words), None)

    def _by_neighbour(self, node: Region, m: Region, pending: list[Region],
                      said: list[str]) -> tuple[str, Region | None] | None:
        """Where the step it ends (starts) has no region: the function its block calls
        there; a tile loop: the last other function it calls."""
        call = _neighbour(m)
        if not call:
            after = m.between[1]
            if m.hot in _HANDSHAKE_HOT and m.hot != "wait" and after:  # nothing before it: what it starts
                return self._pair(["pre", *label_name(after, self.vocab).split("-")], m, said)
            return None
        parts = label_name(call, self.vocab).split("-")
        theirs = {p for o in pending if o is not m
                  for p in label_name(_neighbour(o), self.vocab).split("-") if p}
        found = self._pair(parts, m, said, theirs)
        # neighbours whose names would read alike (`compute-global-mean` / `-var` /
        # `-mean-ordered`): by the words of its own that some of theirs lack
        rivals = [label_name(n, self.vocab).split("-") for o in pending
                  if o is not m and (n := _neighbour(o)) and n != call
                  and self._pair(label_name(n, self.vocab).split("-"), o, said, theirs) == found]
        own = [p for p in parts if not all(p in r for r in rivals)] if rivals else []
        return (self._pair(own, m, said) if own else None) or found

    def _by_next(self, node: Region, m: Region, pending: list[Region],
                 said: list[str]) -> tuple[str, Region | None] | None:
        """A barrier or notify whose step before says nothing of its own: by the function
        its block calls next (`pre-calc-weight`)."""
        after = m.between[1]
        if m.hot not in _HANDSHAKE_HOT or m.hot == "wait" or not after:
            return None
        parts = label_name(after, self.vocab).split("-")
        rivals = [label_name(o.between[1], self.vocab).split("-") for o in pending
                  if o is not m and o.between[1] and o.between[1] != after]
        own = [p for p in parts if not all(p in r for r in rivals)] if rivals else parts
        return self._pair(["pre", *own], m, said) if own else None

    def _by_bound(self, node: Region, m: Region, pending: list[Region],
                  said: list[str]) -> tuple[str, Region | None] | None:
        """A loop by what it runs up to, less what all the loops share (a main loop and
        its tail: `i < headNum` / `i < tailNum` -> `head` / `tail`)."""
        if m.kind != Kind.LOOP:
            return None
        # digits ignored: bounds `loop1` / `loop2` say nothing apart
        common = set.intersection(*({_undigit(p) for p in self._bound_parts(o)} for o in pending))
        parts = [p for p in self._bound_parts(m) if _undigit(p) and _undigit(p) not in common]
        return self._pair(parts, m, said) if parts else None

    def _by_writes(self, node: Region, m: Region, pending: list[Region],
                   said: list[str]) -> tuple[str, Region | None] | None:
        """A loop by what it accumulates: a name declared outside it that it assigns and
        the others do not (`lo` / `cnt-less`)."""
        if m.kind != Kind.LOOP:
            return None
        theirs = {w for o in pending if o is not m and not same_step(m, o) for w in self._loop_writes(o)}
        for name in self._loop_writes(m):
            if name in theirs:
                continue
            word = self._word(label_kebab(name).split("-"), m, said)
            if word:
                return word, None
        return None

    def _bound_parts(self, m: Region) -> list[str]:
        """The words of a loop's bound: the names in its test, less its own variable."""
        found = self.memo.get(("bound", id(m)))
        if found is None:
            found = self.memo[("bound", id(m))] = self._find_bound_parts(m)
        return found

    def _find_bound_parts(self, m: Region) -> list[str]:
        header = _loop_header(self._text(m, header=True))
        if header is None:
            return []
        test, own = header
        before = self._before(m)
        names: list[str] = []
        for name in re.findall(r"[A-Za-z_]\w*", test):
            if name in own or name in _NOT_CALLS:
                continue
            # a local set just before the loop: what it was set from (`loop2 = hasTail`)
            found = re.findall(rf"\b{re.escape(name)}\s*=(?!=)([^;]*);", before)
            names += re.findall(r"[A-Za-z_]\w*", found[-1]) if found else [name]
        parts = [p for n in names for p in label_kebab(n).split("-")]
        return [p for p in dict.fromkeys(parts) if len(p) > 1 and p not in _PLAIN_WORDS
                and not _COUNTER.fullmatch(p)]

    def _before(self, m: Region) -> str:
        """The code before a region in its own function (where its loop's accumulators
        and bounds are declared)."""
        a = m.anchor
        src = self.sources.get(a.path) if a is not None else None
        if a is None or src is None:
            return ""
        start = max((s for s, e in self.spans.get(a.path, []) if s <= a.start < e), default=a.start)
        return _code(src.text[start:a.start])

    def _loop_writes(self, m: Region) -> list[str]:
        found = self.memo.get(("writes", id(m)))
        if found is None:
            found = self.memo[("writes", id(m))] = self._find_loop_writes(m)
        return found

    def _find_loop_writes(self, m: Region) -> list[str]:
        header = _loop_header(self._text(m, header=True))
        counters = header[1] if header is not None else set()
        return [n for n in _writes(self._text(m), self._before(m)) if n not in counters]

    def _by_code(self, node: Region, m: Region, pending: list[Region],
                 said: list[str]) -> tuple[str, Region | None] | None:
        """What its code does that the others' does not: the first call in it (or, for a
        handshake, in the step it ends) that none of them makes."""
        mine = self._step_calls(node, m)
        theirs = {c for o in pending if o is not m and not same_step(m, o) for c in self._step_calls(node, o)}
        for call in mine:
            if call in theirs:
                continue
            word = self._word(label_name(call, self.vocab).split("-"), m, said)
            if word:
                return word, None
        return None

    def _step_calls(self, node: Region, m: Region) -> list[str]:
        found = self.memo.get(("calls", id(m)))
        if found is None:
            found = self.memo[("calls", id(m))] = self._find_step_calls(node, m)
        return found

    def _find_step_calls(self, node: Region, m: Region) -> list[str]:
        if m.hot not in _HANDSHAKE_HOT:
            return self._calls(self._text(m))
        # a handshake: the step it ends (a wait: starts)
        at = node.children.index(m)
        side = node.children[at + 1:] if m.hot == "wait" else node.children[:at][::-1]
        step = next((s for s in side if s.cost != "handshake" and s.cores & m.cores), None)
        if step is not None:
            return self._calls(self._text(step))
        name = m.between[1] if m.hot == "wait" else m.between[0]
        fns = self.ctx.analysis.index.by_name.get(name, []) if name else []
        # one definition of that name: its code (several: which one runs is not known here)
        return [name, *self._calls(_body_text(fns[0]))] if len(fns) == 1 else ([name] if name else [])

    def _text(self, m: Region, header: bool = False) -> str:
        """The code a region measures: its callee's body, else its own span (with the loop
        header before a loop body when `header`)."""
        fn = self.ctx.analysis.index.functions.get(m.function or "")
        if fn is not None and not header:
            return _body_text(fn)
        a = m.anchor
        src = self.sources.get(a.path) if a is not None else None
        if a is None or src is None:
            return ""
        start = a.start
        if header and a.inside:  # the span is the loop's body: its header is just before it
            before = _code(src.text[max(0, start - 600):start])
            found = list(re.finditer(r"\b(for|while)\s*\(", before))
            return before[found[-1].start():] + "{" if found else ""
        return _code(src.text[start:a.end])

    def _calls(self, code: str, depth: int = 1) -> list[str]:
        """The functions a piece of code calls, in order, and (one level down) the ones those
        of the operator's own call."""
        memo = self.calls_of.get(code) if depth else None
        if memo is not None:
            return memo
        out: list[str] = []
        for name in _call_names(code):
            if name in out:
                continue
            out.append(name)
            fns = self.ctx.analysis.index.by_name.get(name, [])
            if depth and len(fns) == 1:
                out += [c for c in self._calls(_body_text(fns[0]), depth - 1) if c not in out]
        if depth:
            self.calls_of[code] = out
        return out

    def _pair(self, parts: list[str], m: Region, said: list[str],
              theirs: set[str] | frozenset[str] = frozenset()) -> tuple[str, Region | None] | None:
        word = self._word(parts, m, said, 3 if parts[:1] == ["pre"] else 2, theirs)
        return (word, None) if word else None

    def _by_var(self, node: Region, m: Region, pending: list[Region],
                said: list[str]) -> tuple[str, Region | None] | None:
        """A tile loop by its variable (`dim0-loop` / `dim1-loop`)."""
        if not m.tile_loop or not m.between[0]:
            return None
        return self._pair(label_kebab(m.between[0], glue=False).split("-"), m, said)

    def _by_kind(self, node: Region, m: Region, pending: list[Region],
                 said: list[str]) -> tuple[str, Region | None] | None:
        """A loop of a step beside a call of it: `compute-loop` / `compute`."""
        if m.kind != Kind.LOOP or all(o.kind == Kind.LOOP for o in pending if o is not m):
            return None
        return ("loop", None) if "loop" not in {*said, *_parts(m)} else None

    def _by_exit(self, node: Region, m: Region, pending: list[Region],
                 said: list[str]) -> tuple[str, Region | None] | None:
        """A step on an early return's path (`if (...) { SyncAll(); return; }`): `exit`."""
        if m.branch != "return" or "exit" in {*said, *_parts(m)}:
            return None
        return "exit", None

    def _by_branch(self, node: Region, m: Region, pending: list[Region],
                   said: list[str]) -> tuple[str, Region | None] | None:
        """The words of the condition it needs to hold (an else arm says nothing of its own:
        its sibling takes the word)."""
        branch = _positive(m.branch)
        if not branch or branch == "return":
            return None
        theirs = {p for o in pending if o is not m and _positive(o.branch)
                  for p in _condition_parts(o.branch)}
        word = self._word(_condition_parts(branch), m, said, theirs=theirs)
        return (word, None) if word else None

    def _by_first_child(self, node: Region, m: Region, pending: list[Region],
                        said: list[str]) -> tuple[str, Region | None] | None:
        """What it does first."""
        if not m.children or not m.children[0].words:
            return None
        word = self._word(m.children[0].words[0].split("-"), m, said, 1)
        return (word, None) if word else None

    # --- handshakes follow their phase --------------------------------------------------------

    def _follow_partners(self) -> list[Region]:
        """A handshake named after a phase takes that phase's word as it is now (less the words
        its own label already has). Returns the regions whose words changed."""
        return [region for region, said in _partnered_with_said(self.ctx.root) if self._follow(region, said)]

    @staticmethod
    def _follow(region: Region, said: list[str]) -> bool:
        if region.partner is None or not region.words:
            return False
        role = region.words[0].split("-")[0]
        theirs = [p for p in region.partner.words[0].split("-")] if region.partner.words else []
        keep = [p for p in theirs if p not in _ROLE_WORDS and p not in said and p != role]
        told = [p for p in region.told.split("-") if p and p not in keep and p not in said and p != role]
        if not keep:
            return False
        word = "-".join([role, *keep, *told])
        changed = word != region.words[0]
        region.words = [word, *region.words[1:]]
        return changed

    def _parents_now(self) -> dict[int, Region]:
        if self._parent_of is None:
            self._parent_of = dict(_parents(self.ctx.root))
        return self._parent_of

    def _relabel(self, changed: list[Region], parents: dict[int, Region]) -> None:
        """Labels after words of `changed` (only) changed: each one's subtree relabelled from
        its parent's label, the shallowest first, so that a parent is right before the
        regions below it read it (depths do not change: a word is replaced, never added)."""
        for region in sorted(changed, key=lambda r: r.depth):
            parent = parents.get(id(region))
            if parent is None:  # the root, or a region no longer in the tree: all of it
                assign_labels(self.ctx.root)
                return
            relabel_below(region, parent)

    # --- the limit ----------------------------------------------------------------------------

    def _fit(self, node: Region, chain: list[Region], limit: int) -> None:
        for child in list(node.children):
            path = [*chain, child]
            if len(_label(path)) > limit and not self._fit_one(path, limit):
                self._lift(child, node, chain, limit)
                continue
            self._fit(child, path, limit)

    def _fit_one(self, path: list[Region], limit: int) -> bool:
        """Cut words on the path until the label fits; when no cut makes it fit, every cut
        made for it is undone (False)."""
        undo: list[tuple[Region, int, str]] = []
        while len(_label(path)) > limit:
            if not self._cut(path, undo):
                for target, i, word in reversed(undo):
                    target.words[i] = word
                self._follow_partners()
                assign_labels(self.ctx.root)
                return False
        self.cuts += undo
        return True

    def _cut(self, path: list[Region], undo: list[tuple[Region, int, str]]) -> bool:
        """One step shorter: the longest word on the path (the deepest on a tie; the phase's
        word last) to its next shorter form no sibling has. False when no word can be cut."""
        parents = self._parents_now()
        options: list[tuple[bool, int, int, Region, int]] = []
        for depth, node in enumerate(path):
            for i, word in enumerate(node.words):
                if word in _CORE_WORDS or "-" not in word:
                    continue
                if i == 0 and node.partner is not None:
                    # A handshake's partner word is the partner's: shortening the phase
                    # shortens every handshake named after it.
                    partner = node.partner
                    if partner.words and "-" in partner.words[0] and id(partner) in parents:
                        options.append((True, len(partner.words[0]), depth, partner, 0))
                    continue
                phase = i == 0 and parents.get(id(node)) is self.ctx.root
                options.append((phase, len(word), depth, node, i))
        options.sort(key=lambda o: (o[0], -o[1], -o[2]))
        for _, _, _, node, i in options:
            parent = parents.get(id(node))
            if parent is None:
                continue
            old = node.words[i]
            targets = [node]
            if parent is self.ctx.root and i == 0:  # one phase, one name on every core type
                targets += [s for s in parent.children if s is not node and s.words and s.words[0] == old]
            for form in reductions(old, self.vocab, keep_phase=True):
                if self._free(parent, targets, i, form):
                    for target in targets:
                        undo.append((target, i, target.words[i]))
                        target.words[i] = form
                    self._relabel([*targets, *self._follow_partners()], parents)
                    return True
        return False

    @staticmethod
    def _free(parent: Region, targets: list[Region], i: int, form: str) -> bool:
        for target in targets:
            words = [*target.words[:i], form, *target.words[i + 1:]]
            key = sibling_key(" ".join(words))
            if any(s not in targets and not same_step(s, target) and sibling_key(" ".join(s.words)) == key
                   for s in parent.children):
                return False
        return True

    def _lift(self, region: Region, parent: Region, chain: list[Region], limit: int) -> None:
        """No cut fits: the region keeps its own words under the nearest ancestor where they
        fit (its time nests there too), never folded away; at its phase at the highest, and
        there its own words are cut to what fits."""
        before = _label([*chain, region])
        key = sibling_key(" ".join(region.words))
        at = parent.children.index(region)
        # Ancestors from the grandparent up; the phase (level 2) the highest.
        for k in range(len(chain) - 2, -1, -1):
            anc, below = chain[k], chain[k + 1]
            if any(sibling_key(" ".join(c.words)) == key and not same_step(c, region) for c in anc.children):
                continue
            parent.children.remove(region)
            anc.children.insert(anc.children.index(below) + 1, region)
            self._parent_of = None
            assign_labels(self.ctx.root)
            path = [*chain[:k + 1], region]
            if len(_label(path)) > limit and not self._fit_one(path, limit):
                anc.children.remove(region)
                parent.children.insert(at, region)
                self._parent_of = None
                assign_labels(self.ctx.root)
                continue
            self.ctx.report(f"label `{before}` is longer than {limit} characters (naming.max_length) with "
                            f"every word cut: kept as `{region.label}`, a region of its own under "
                            f"`{anc.label}`", region, Severity.WARNING)
            self.ctx.stats["labels_lifted"] = self.ctx.stats.get("labels_lifted", 0) + 1
            self._fit(region, path, limit)
            return
        # Not even under its phase: its own words cut to what fits, never dropped.
        room = limit - len(_label(chain)) - 1
        words = [w.split("-")[0] for w in region.words]
        while len(words) > 1 and len(" ".join(words)) > room:
            words.pop()
        region.words = [w[:max(room, 1)] for w in words] or region.words
        assign_labels(self.ctx.root)
        self.ctx.report(f"label `{before}` is longer than {limit} characters (naming.max_length) with "
                        f"every word cut: its own words cut to `{region.label}`", region, Severity.WARNING)
        self._fit(region, [*chain, region], limit)

    # --- no cut that is not needed ---------------------------------------------------------

    def _relax(self) -> None:
        """Labels are fitted one at a time, so a word cut for one label may have been cut
        again for a later one, and a word's ancestor may have lost the word it repeated:
        give back every cut and every dropped word that still fits (latest cuts first)."""
        score = self._score()
        root = self.ctx.root
        parents = dict(_parents(root))  # giving words back moves no region
        said = {id(r): words for r, words in _with_said(root, [])}
        attempts: list[tuple[Region, int, str]] = [*reversed(self.cuts)]
        for region, i, whole in self.dropped:
            if i < len(region.words) and id(region) in said:
                now = {*said[id(region)], *(p for w in region.words[:i] for p in w.split("-"))}
                extra = [p for p in region.words[i].split("-") if p not in whole]
                attempts.append((region, i, "-".join([*(p for p in whole if p not in now), *extra])))
        for region, i, form in attempts:
            if i >= len(region.words) or region.words[i] == form:
                continue
            targets = [region]
            if i == 0 and region in root.children:  # one phase, one name on every core type
                targets += [s for s in root.children if s is not region and s.words[:1] == region.words[:1]]
            if self._sure_too_long(targets, i, form, parents):
                continue  # what trying it would find, without renaming and relabelling twice
            before = [(t, t.words[i]) for t in targets]
            for t in targets:
                t.words[i] = form
            self._relabel([*targets, *self._follow_partners()], parents)
            new = self._score()
            if new is not None and score is not None and new <= score:
                score = new
                continue
            for t, word in before:
                t.words[i] = word
            self._relabel([*targets, *self._follow_partners()], parents)

    def _sure_too_long(self, targets: list[Region], i: int, form: str, parents: dict[int, Region]) -> bool:
        """Whether giving ``form`` back to word ``i`` of ``targets`` is sure to take a label
        past the limit, so that ``_score`` would refuse it. Following renames only regions
        with a partner, so where neither a target nor any region above it has one, the
        target's label and those of the regions below it, down to the first that has one,
        grow by exactly the word's growth: known from the labels as they are, before
        anything is renamed. Most attempts on a kernel with many phases end here."""
        for target in targets:
            if target.partner is not None:
                continue
            node = target
            while (parent := parents.get(id(node))) is not None and parent.partner is None:
                node = parent
            if parent is not None:
                continue  # under a region that follows a phase: its words may change
            room = self.limit - (len(form) - len(target.words[i]))
            todo = [target]
            while todo:
                region = todo.pop()
                if len(region.label) > room:
                    return True
                todo.extend(c for c in region.children if c.partner is None)
        return False

    def _score(self) -> tuple[int, int] | None:
        """(labels repeating a word, siblings sharing a label), or None when one is too long."""
        labels = [r.label for r in self.ctx.root.regions()]
        if any(len(lb) > self.limit for lb in labels[1:]):
            return None
        return sum(1 for lb in labels if repeats_a_word(lb)), len(sibling_clashes(self.ctx.root))


def _parts(region: Region) -> list[str]:
    return [p for w in region.words for p in w.split("-")]


def _label(path: list[Region]) -> str:
    return " ".join(w for r in path for w in r.words)


def _with_said(node: Region, said: list[str]) -> list[tuple[Region, list[str]]]:
    out: list[tuple[Region, list[str]]] = []
    for child in node.children:
        out.append((child, said))
        out += _with_said(child, [*said, *_parts(child)])
    return out


def _partnered_with_said(root: Region) -> list[tuple[Region, list[str]]]:
    """What ``_with_said`` gives, for the regions with a partner only (the only ones
    ``_follow`` renames), every ``said`` taken before any is renamed. Naming calls this
    after every cut it tries, so it does not build every region's ``said`` (a list copy a
    region: a 65-phase kernel spent half its plan here): ancestors are kept on one stack
    and read where a partnered region needs them."""
    out: list[tuple[Region, list[str]]] = []
    chain: list[Region] = []

    def visit(node: Region) -> None:
        for child in node.children:
            if child.partner is not None:
                out.append((child, [p for r in chain for w in r.words for p in w.split("-")]))
            if child.children:
                chain.append(child)
                visit(child)
                chain.pop()

    visit(root)
    return out


def _parents(root: Region) -> list[tuple[int, Region]]:
    return [(id(c), r) for r in root.regions() for c in r.children]


def _neighbour(region: Region) -> str:
    """The call a handshake is named by when the step it ends (a wait: starts) has no
    region; for a tile loop, the last other function it calls."""
    before, after = region.between
    if region.hot in _HANDSHAKE_HOT:
        return after if region.hot == "wait" else before
    return after if region.tile_loop else ""


# Names before `(` that are not calls that say what code does: keywords, casts, and the
# queue / buffer bookkeeping every step does.
_NOT_CALLS = frozenset({
    "if", "for", "while", "switch", "return", "sizeof", "static_cast", "reinterpret_cast", "const_cast",
    "dynamic_cast", "decltype", "alignof", "min", "max", "Min", "Max", "AllocTensor", "FreeTensor", "EnQue",
    "DeQue", "Get", "GetValue", "SetValue", "GetPhyAddr", "GetBlockIdx", "GetBlockNum", "PipeBarrier",
    "SetFlag", "WaitFlag", "CeilDiv", "CeilAlign", "uint32_t", "int32_t", "uint64_t", "int64_t", "float",
    "half", "dim3", "asc_vf_call"})
_CALL = re.compile(r"\b([A-Za-z_]\w*)\s*(?:<(?:[^<>;{}()]|<[^<>;{}()]*>)*>)?\s*\(")
_VF_CALL = re.compile(r"\basc_vf_call\s*<\s*([A-Za-z_]\w*)")


def _call_names(code: str) -> list[str]:
    """The names a piece of code calls, in order (a vector function launched by
    `asc_vf_call<F>` as F)."""
    found = [(m.start(), m.group(1)) for m in _CALL.finditer(code)]
    found += [(m.start(), m.group(1)) for m in _VF_CALL.finditer(code)]
    return [n for _, n in sorted(found) if n not in _NOT_CALLS and not n.isupper()]


_ASSIGNED = re.compile(r"(?<![\w.>])([A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)?(?:(?:[-+*/|&^]|<<|>>)?=(?!=)|\+\+|--)"
                       r"|(?:\+\+|--)\s*([A-Za-z_]\w*)")


_DESTINATION = re.compile(r"\b[A-Z]\w*\s*(?:<[^;{}()]*>)?\s*\(\s*([A-Za-z_]\w*)")


def _writes(code: str, before: str) -> list[str]:
    """The names a piece of code assigns that were there before it (not its own locals),
    in order."""
    known = set(re.findall(r"[A-Za-z_]\w*", before))
    # its own locals and the counters of loops inside it say nothing of what it computes
    own = set(re.findall(r"[\w>*&]\s+([A-Za-z_]\w*)\s*(?:=|;|\[)", code))
    own |= set(re.findall(r",\s*([A-Za-z_]\w*)\s*=(?!=)", code))  # `int a = 0, b = 1;`
    own |= {n for init in re.findall(r"\bfor\s*\(([^;]*);", code)
            for n in re.findall(r"([A-Za-z_]\w*)\s*=", init)}
    # assigned, or the destination of a vector instruction (`Add(dst, a, b, n)`)
    found = sorted([(m.start(), m.group(1) or m.group(2)) for m in _ASSIGNED.finditer(code)]
                   + [(m.start(), m.group(1)) for m in _DESTINATION.finditer(code)])
    return list(dict.fromkeys(n for _, n in found if n in known and n not in own and n not in _NOT_CALLS))


def _phase_parts(phase: Region) -> list[str]:
    return [p for p in phase.words[0].split("-") if p not in _ROLE_WORDS]


def _undigit(part: str) -> str:
    return re.sub(r"\d+", "", part)


def _body_text(fn: FunctionDef) -> str:
    return _code(fn.src.text[fn.body.start_byte:fn.body.end_byte])


def _code(text: bytes) -> str:
    """Source text as naming reads it: without optrace's own lines and fragments (on an
    instrumented tree, a loop's first call was its `MoeTracing`, so a second apply named
    it anew), decoded."""
    return without_own_code(text).decode("utf-8", "replace")


def _loop_header(code: str) -> tuple[str, set[str]] | None:
    """A loop's test and its own variables (`for (i = a; i < n; ++i)` -> (`i < n`, {i}))."""
    m = re.match(r"\s*(for|while)\s*\(", code)
    if m is None:
        return None
    depth, i = 1, m.end()
    while i < len(code) and depth:
        depth += {"(": 1, ")": -1}.get(code[i], 0)
        i += 1
    inner = code[m.end():i - 1]
    if m.group(1) == "while":
        return inner, set()
    parts = inner.split(";")
    if len(parts) != 3:
        return None
    init, test, step = parts
    own = set(re.findall(r"([A-Za-z_]\w*)\s*(?:=|:)", init)) | set(re.findall(r"[A-Za-z_]\w*", step))
    return test, own


def _positive(branch: str) -> str:
    """The condition a branch needs to hold, or "" when it holds only as a negation
    (`!(x)` -> "", `!(!x)` -> `x`, `#else` -> "")."""
    text = branch.strip()
    negated = False
    while text.startswith("!") and not text.startswith("!="):
        text = text[1:].strip()
        while text.startswith("(") and text.endswith(")"):
            text = text[1:-1].strip()
        negated = not negated
    return "" if negated or not text or text.startswith("#else") else text


def _condition_parts(condition: str) -> list[str]:
    """The words of the names in a condition (`isShareQuantCore` -> share, quant, core)."""
    return [p for name in re.findall(r"[A-Za-z_]\w*", condition) for p in label_kebab(name).split("-")]


# --- the plan lint's figures about names ------------------------------------------------------

# A counter says nothing about how two regions differ: `barrier-2`, `wait 3`, `second`.
_COUNTER = re.compile(r"\d+|\d+(st|nd|rd|th)|first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|"
                      r"tenth")


def label_words(label: str) -> list[str]:
    """A label's words: what splitting on spaces and hyphens gives."""
    return [w for w in re.split(r"[ -]+", label) if w]


def repeats_a_word(label: str) -> bool:
    words = label_words(label)
    return len(words) != len(set(words))


@lru_cache(maxsize=1 << 16)  # naming asks for every sibling's key at every cut it tries
def sibling_key(label: str) -> str:
    """What a label says once counters are ignored (`barrier-2`, `barrier 3` -> `barrier`)."""
    return " ".join(w for w in label_words(label) if not _COUNTER.fullmatch(w))


def same_step(a: Region, b: Region) -> bool:
    """One function called twice in one role, one flag (or family of flags) set or waited on
    again, or two arms of a variant dispatch: the same step (or never in one launch), which
    may share a label."""
    if a.exclusive_with(b) or (a.flag is not None and a.flag == b.flag and a.hot == b.hot) or (
            a.signal and a.signal == b.signal and a.hot == b.hot):
        return True
    if a.role != b.role:
        return False
    # one function; or, where no function was found (an absent class's `op.Process()`, a
    # vector function launched), one name
    return (a.function is not None and a.function == b.function) or (
        a.function is None is b.function and a.kind == b.kind == Kind.CALL and bool(a.full_word)
        and a.full_word == b.full_word)


def sibling_clashes(root: Region) -> list[Region]:
    """Regions that share a label with a sibling (counters ignored) and are different code
    that can run in one launch."""
    out: list[Region] = []
    for node in root.walk():
        keys = [sibling_key(c.label) for c in node.children]
        for i, child in enumerate(node.children):
            if any(j != i and keys[j] == keys[i] and not same_step(child, other)
                   for j, other in enumerate(node.children)):
                out.append(child)
    return out


def name_lint(root: Region, stats: dict[str, int]) -> dict[str, int]:
    """The plan lint's figures about names: each is 0 on a plan that reads well."""
    labels = {r.label for r in root.walk()}
    return {
        "labels_with_repeated_word": sum(1 for lb in labels if repeats_a_word(lb)),
        "sibling_label_clashes": len(sibling_clashes(root)),
        "regions_folded_for_length": stats.get("regions_folded_for_length", 0),
    }
