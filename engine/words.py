"""Label words: how a code name becomes the words of a `TRACE_POINT` label.

A label's words are what splitting it on spaces and hyphens gives. They come from the
code's own names, split at case changes with acronyms and digit runs kept whole
(`CpGM2GMPingPong` -> `cp-gm2gm-ping-pong`, `GMM1Finished` -> `gmm1-finished`), long words
mapped to their short form (`initialize` -> `init`), filler words dropped (`process`,
`impl`, ...). The default lists are here; `[naming] short_words` and `[naming]
filler_words` add to them (docs/config.md), and docs/rules.md "Names" lists them.

The planner makes a region's words with `label_name`; the naming rule (OT105) keeps them
from repeating and, when a whole label is over `[naming] max_length`, shortens it with
`reductions` — phase words are kept first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

# Phase words (docs/rules.md "Names"): they mark phase work and are kept first when a name
# is shortened; `[naming] phase_words` adds to them. Not a vocabulary labels must use:
# words still come from the code's own names.
DEFAULT_PHASE_WORDS = frozenset(
    {"dispatch", "combine", "gmm", "gmm1", "gmm2", "gemm", "matmul", "mmad", "swiglu", "quant",
     "dequant", "unpermute", "permute", "routing", "route", "send", "recv", "barrier", "wait",
     "notify", "alltoall", "all2all", "epilogue", "gather", "scatter", "reduce", "softmax",
     "topk", "sort", "norm", "finalize", "copy", "init"}
)
# Words that say nothing about what a function does: dropped from label words (a name made
# of nothing else keeps them).
FILLER_WORDS = frozenset(
    {"process", "run", "execute", "impl", "kernel", "func", "do", "main", "launch",
     "exec", "forward", "and", "the", "op", "stage", "phase",
     # connectives say nothing alone (`RunWithTiling` was labelled `with`)
     "with", "for", "of", "to", "by", "on", "from", "via", "using"}
)
# Long words and their short forms, the ones engineers write anyway. Phrases (hyphenated
# keys) are matched first. The phase words above stay as they are.
DEFAULT_SHORT_WORDS: dict[str, str] = {
    "all-to-all": "alltoall", "allto-all": "alltoall", "all-gather": "allgather",
    "all-reduce": "allreduce",
    "initialize": "init", "initialise": "init", "initialization": "init", "initialisation": "init",
    "synchronize": "sync", "synchronise": "sync", "synchronization": "sync", "synchronisation": "sync",
    "calculation": "calc", "calculate": "calc", "calculating": "calc",
    "communication": "comm", "communicate": "comm", "information": "info",
    "parameters": "params", "parameter": "param", "configuration": "config", "configure": "config",
    "allocate": "alloc", "allocation": "alloc", "buffer": "buf", "buffers": "bufs",
    "receive": "recv", "received": "recv", "receiver": "recv",
    "quantize": "quant", "quantization": "quant", "quantisation": "quant", "quantise": "quant",
    "dequantize": "dequant", "dequantization": "dequant", "dequantisation": "dequant",
    "normalize": "norm", "normalization": "norm", "normalise": "norm", "normalisation": "norm",
    "permutation": "permute", "reduction": "reduce", "accumulate": "accum", "accumulation": "accum",
    "temporary": "tmp", "destination": "dst", "source": "src", "address": "addr", "number": "num",
    "maximum": "max", "minimum": "min", "average": "avg", "multiply": "mul", "multiplication": "mul",
    "previous": "prev", "current": "cur", "message": "msg", "length": "len", "sequence": "seq",
}


@dataclass(frozen=True)
class Vocabulary:
    """The word lists one repository's labels use: the defaults and its config's additions."""

    phase: frozenset[str] = DEFAULT_PHASE_WORDS
    fillers: frozenset[str] = FILLER_WORDS
    short: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_SHORT_WORDS))

    @classmethod
    def of(cls, phase: tuple[str, ...] = (), fillers: tuple[str, ...] = (),
           short: dict[str, str] | None = None) -> Vocabulary:
        return cls(DEFAULT_PHASE_WORDS | frozenset(phase), FILLER_WORDS | frozenset(fillers),
                   {**DEFAULT_SHORT_WORDS, **(short or {})})

    def is_phase(self, part: str) -> bool:
        return part in self.phase or part.rstrip("0123456789") in self.phase

    def parts(self, word: str) -> list[str]:
        """A label word's parts with long words and phrases in their short form."""
        text = f"-{word}-"
        for long in sorted((k for k in self.short if "-" in k), key=len, reverse=True):
            text = text.replace(f"-{long}-", f"-{self.short[long]}-")
        return [self.short.get(p, p) for p in text.strip("-").split("-") if p]


DEFAULT_VOCABULARY = Vocabulary()

_SPLIT_RE = re.compile(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Z0-9])(?=[A-Z][a-z])")


@lru_cache(maxsize=8192)
def label_kebab(name: str, glue: bool = True) -> str:
    """A code name as label words: split at case changes, acronyms and digit runs kept
    whole, a single letter joined to its neighbour. `CpGM2GMPingPong` ->
    `cp-gm2gm-ping-pong`, `GMM1Finished` -> `gmm1-finished`, `Conv2D` -> `conv2d`,
    `MaxPoolW` -> `max-poolw`,
    `send_token_count` -> `send-token-count`. `glue` false: single letters apart (a loop
    variable's `tIdx` -> `t-idx`, whose `idx` says nothing)."""
    name = re.sub(r"^(m_|g_)", "", name.strip("_"))
    s = _SPLIT_RE.sub("-", name)
    parts = [p for p in re.split(r"[^A-Za-z0-9]+", s.lower()) if p]
    if not glue:
        return "-".join(parts)
    # A single letter is never a word of its own: letters in a row are one word (`e_c_x`
    # -> `ecx`); one alone stays with the word after it (`InitKDirection` ->
    # `init-kdirection`), or before it when it comes last (`MaxPoolW` -> `max-poolw`).
    runs: list[str] = []
    for part in parts:
        if len(part) == 1 and runs and len(runs[-1]) == 1 and runs[-1].isalpha() == part.isalpha():
            runs[-1] += part
        else:
            runs.append(part)
    out: list[str] = []
    carry = ""
    for i, run in enumerate(runs):
        if len(run) > 1:
            out.append(carry + run)
            carry = ""
        elif i == len(runs) - 1 and out:
            out[-1] += run
        else:
            carry += run
    if carry:
        out.append(carry)
    return "-".join(out)


_SENDING = frozenset({"set", "send", "notify", "put", "write", "publish"})


def pure_wait(name: str) -> bool:
    """A function whose name says it only waits (`WaitDispatch`), not one that also
    sends (`SetWaitTpStatusAndDispatch`, `SendCountsAndWait`)."""
    words = set(label_kebab(name).split("-"))
    return "wait" in words and not words & _SENDING


def label_name(name: str, vocab: Vocabulary = DEFAULT_VOCABULARY) -> str:
    """The label word for a code name: its words, long ones short, fillers dropped.
    `MoeTokenDispatchProcess` -> `moe-token-dispatch`, `InitializeBuffers` -> `init-bufs`.
    A function that sends and waits is named by what it sends (the wait inside it is
    its own region): `SetWaitTpStatusAndDispatch` -> `set-tp-status-dispatch`."""
    words = vocab.parts(label_kebab(name))
    kept = [w for w in words if w not in vocab.fillers] or words
    if not pure_wait(name) and "wait" in kept and len(kept) > 1:
        kept = [w for w in kept if w != "wait"]
    return "-".join(kept)


def reductions(word: str, vocab: Vocabulary = DEFAULT_VOCABULARY, keep_phase: bool = False) -> list[str]:
    """Shorter forms of a label word, the gentlest first: two of its phase words, its first
    phase word with the word next to it, its first two words, then one word (its phase
    words first). `grouped-matmul-dequant-swiglu-quant` -> `matmul-dequant`,
    `wait-token-num-ready` -> `wait-token`, `local-window-copy` -> `window-copy`.
    `keep_phase`: a word holding a phase word is never cut to another single word (a
    phase's name, `gmm-deq`, is not cut to `deq`). A single word has none."""
    parts = word.split("-")
    if len(parts) < 2:
        return []
    phase = [p for p in parts if vocab.is_phase(p)]
    out: list[str] = []
    if len(phase) > 1:
        out.append("-".join(phase[:2]))
    if phase:
        at = parts.index(phase[0])
        out += ["-".join(parts[j:j + 2]) for j in (at, at - 1) if 0 <= j < len(parts) - 1]
    out.append("-".join(parts[:2]))
    out += phase
    if not (keep_phase and phase):
        out += parts
    return [c for c in dict.fromkeys(out) if len(c) < len(word)]


def shorten(name: str, vocab: Vocabulary = DEFAULT_VOCABULARY, limit: int = 16) -> str:
    """A code name's label word cut to at most `limit` characters the way OT105 cuts a
    word: `GroupedMatmulDequantSwigluQuant` -> `matmul-dequant`, `MoeTokenDispatch` ->
    `dispatch`, `SendCounts` -> `send-counts`."""
    word = label_name(name, vocab)
    if len(word) <= limit:
        return word
    return next((c for c in reductions(word, vocab) if len(c) <= limit), word.split("-")[0][:limit])
