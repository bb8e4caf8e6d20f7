"""How code names become label words (engine/words.py): splitting, short forms, fillers,
and the shorter forms OT105 cuts a word to."""

from __future__ import annotations

import pytest

from optrace.engine.words import Vocabulary, label_kebab, label_name, reductions


@pytest.mark.parametrize(("name", "words"), [
    ("CpGM2GMPingPong", "cp-gm2gm-ping-pong"),  # an acronym with a digit run inside stays whole
    ("GMM1Finished", "gmm1-finished"),
    ("Conv2D", "conv2d"),
    ("ECReshape", "ec-reshape"),
    ("e_c_reshape", "ec-reshape"),  # letters in a row are one word
    ("MaxPoolW", "max-poolw"),  # a single letter stays with its neighbour
    ("InitKDirection", "init-kdirection"),
    ("send_token_count", "send-token-count"),
    ("AIVInitParams", "aiv-init-params"),
    ("m_expertNum", "expert-num"),
])
def test_names_split_at_case_changes_keeping_acronyms_and_digit_runs(name: str, words: str) -> None:
    assert label_kebab(name) == words
    assert all(len(w) > 1 for w in words.split("-"))


def test_a_loop_variable_keeps_its_letters_apart() -> None:
    assert label_kebab("tIdx", glue=False) == "t-idx"


def test_long_words_take_their_short_form_and_fillers_go() -> None:
    assert label_name("InitializeBuffers") == "init-bufs"
    assert label_name("SynchronizeAllCores") == "sync-all-cores"
    assert label_name("LocalCalculation") == "local-calc"
    assert label_name("AllToAllDispatchProcess") == "alltoall-dispatch"
    assert label_name("RunKernelImpl") == "run-kernel-impl"  # nothing but fillers: kept
    vocab = Vocabulary.of(fillers=("tokens",), short={"expert": "exp"})
    assert label_name("SendExpertTokens", vocab) == "send-exp"


def test_a_word_is_cut_gently_first_and_a_phase_word_never_to_another_word() -> None:
    assert reductions("wait-token-num-ready")[:2] == ["wait-token", "wait"]
    assert reductions("grouped-matmul-dequant-swiglu-quant")[0] == "matmul-dequant"
    assert reductions("local-window-copy")[0] == "window-copy"
    assert reductions("gmm-deq", keep_phase=True) == ["gmm"]  # never `deq`
    assert reductions("gmm-deq") == ["gmm", "deq"]
    assert reductions("copy") == []
