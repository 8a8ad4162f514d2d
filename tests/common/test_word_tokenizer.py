"""Tests for common.tiny.word_tokenizer: one id per word, unknown words to unk, specials intact."""

from __future__ import annotations

import pytest

from common.tiny import word_tokenizer


def test_ids_follow_the_vocab_order_and_unknowns_map_to_unk():
    tok = word_tokenizer(["<pad>", "<eos>", "a", "b", "a", "c"], "<pad>", pad_token="<pad>")
    assert tok.get_vocab() == {"<pad>": 0, "<eos>": 1, "a": 2, "b": 3, "c": 4}  # repeat keeps id 2
    assert tok("c a  b\tzzz", add_special_tokens=False)["input_ids"] == [4, 2, 3, 0]
    assert tok.decode([2, 3, 4]) == "a b c"


def test_mapping_vocab_split_regex_and_fused_decoder():
    vocab = {"<unk>": 0, "[C]": 1, "[O]": 2, "<a>": 3}
    tok = word_tokenizer(vocab, "<unk>", split_regex=r"\[[^\]]*\]|<[a-z]+>", fuse_decoder=True)
    assert tok("<a>[C][O] [C]", add_special_tokens=False)["input_ids"] == [3, 1, 2, 1]
    assert tok.decode([1, 2, 1]) == "[C][O][C]"


def test_regex_alone_keeps_whitespace_as_tokens():
    vocab = ["<unk>", " ", "a", "b", "\n"]
    tok = word_tokenizer(vocab, "<unk>", split_regex=r"[\s\S]", whitespace_split=False)
    assert tok("a b\nc", add_special_tokens=False)["input_ids"] == [2, 1, 3, 4, 0]
    with pytest.raises(ValueError, match="split_regex"):
        word_tokenizer(vocab, "<unk>", whitespace_split=False)


def test_a_given_decoder_is_used():
    from tokenizers import decoders

    tok = word_tokenizer(["<unk>", "a", "##b"], "<unk>", decoder=decoders.WordPiece())
    assert tok.decode([1, 2]) == "ab"  # WordPiece glues the ## continuation
    with pytest.raises(ValueError, match="not both"):
        word_tokenizer(["<unk>"], "<unk>", fuse_decoder=True, decoder=decoders.WordPiece())


def test_special_tokens_are_kept_and_skippable():
    tok = word_tokenizer(
        ["<pad>", "<eos>", "x"], "<pad>", special_tokens=["<pad>", "<eos>"], eos_token="<eos>"
    )
    ids = tok("x <eos>", add_special_tokens=False)["input_ids"]
    assert ids == [2, 1] and tok.eos_token_id == 1
    assert tok.decode(ids, skip_special_tokens=True) == "x"


def test_hf_kwargs_reach_the_tokenizer():
    tok = word_tokenizer(["<pad>", "q"], "<pad>", pad_token="<pad>", padding_side="left")
    batch = tok(["q", "q q"], padding=True, add_special_tokens=False)
    assert tok.padding_side == "left" and batch["input_ids"][0] == [0, 1]


def test_bad_vocab_is_refused():
    with pytest.raises(ValueError, match="not in vocab"):
        word_tokenizer(["a", "b"], "<unk>")
    with pytest.raises(ValueError, match="share an id"):
        word_tokenizer({"a": 0, "b": 0}, "a")
