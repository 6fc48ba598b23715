#!/usr/bin/env python3
"""Builds tests/unit/tokenizer/testdata/tiny_tokenizer.json: a small byte-level BPE trained
with HF `tokenizers` on generated text, with DeepSeek's pre-tokenizer and added tokens that
exercise every matching flag. The unit tests, the variant parity test and the fuzz targets
use it; it is committed so those need no download.

Usage: tokenizer_make_fixture.py --output tests/unit/tokenizer/testdata/tiny_tokenizer.json
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tokenizer_corpus import Gen  # noqa: E402

DEEPSEEK_PRE_TOKENIZER = {
    "type": "Sequence",
    "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"}, "behavior": "Isolated", "invert": False},
        {"type": "Split", "pattern": {"Regex": "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"},
         "behavior": "Isolated", "invert": False},
        {"type": "Split", "pattern": {"Regex":
            "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
            " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"},
         "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
    ],
}

# (content, special, normalized, lstrip, rstrip, single_word)
ADDED = [
    ("<|bos|>", True, False, False, False, False),
    ("<|eos|>", True, False, False, False, False),
    ("<think>", False, True, False, False, False),
    ("</think>", False, True, False, False, False),
    ("[L]", True, False, True, False, False),
    ("[R]", True, False, False, True, False),
    ("[LR]", False, True, True, True, False),
    ("word", False, True, False, False, True),
    ("<|a|>", True, False, False, False, False),
    ("<|ab|>", True, False, False, False, False),
    (None, True, False, False, False, False),  # filled with a model token (id reuse)
    ("｜tool｜", False, True, False, False, False),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--output", required=True)
    args = ap.parse_args()
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    g = Gen(7)
    texts = [g.prose(2000), g.code(2000), g.chinese(1500), g.japanese(800), g.korean(500),
             g.script_text(800), g.emoji_text(300), g.runs(800)]
    tok = Tokenizer(models.BPE())
    steps = DEEPSEEK_PRE_TOKENIZER["pretokenizers"]
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(s["pattern"]["Regex"]), behavior="isolated") for s in steps[:3]] +
        [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=700, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer)
    data = json.loads(tok.to_str())
    data["normalizer"] = {"type": "Sequence", "normalizers": []}
    data["pre_tokenizer"] = DEEPSEEK_PRE_TOKENIZER
    data["post_processor"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                              "use_regex": True}
    data["decoder"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                       "use_regex": True}
    vocab = data["model"]["vocab"]
    shared = min((t for t in vocab if len(t) >= 3 and t.isascii() and t.isalpha()), key=lambda t: (vocab[t], t))
    next_id = len(vocab)
    added = []
    for content, special, normalized, lstrip, rstrip, single_word in ADDED:
        content = content or shared
        if content in vocab:
            tid = vocab[content]
        else:
            tid = next_id
            next_id += 1
        added.append({"id": tid, "content": content, "single_word": single_word, "lstrip": lstrip,
                      "rstrip": rstrip, "normalized": normalized, "special": special})
    data["added_tokens"] = added
    with open(args.output, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, indent=1)
        f.write("\n")
    check = Tokenizer.from_file(args.output)
    print("vocab", check.get_vocab_size(), shared, check.encode("Hello <think>" + shared + "</think> world").ids)


if __name__ == "__main__":
    main()
