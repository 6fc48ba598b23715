#!/usr/bin/env python3
"""Builds tokenizer.json variants of the tiny fixture that exercise each supported component
option, and records what HF `tokenizers` makes of a fixed text list under each.

Writes into --out-dir: texts.bin (corpus format), one <name>.json per variant, and
<name>.ids / <name>.decoded / <name>.decoded_skip (formats of tokenizer_reference.py), plus
manifest.json: [{"name", "json", "parse_special", "add_special_tokens"}].

Usage: tokenizer_variants.py --base tiny_tokenizer.json --out-dir DIR
"""
import argparse
import copy
import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tokenizer_corpus import EDGE_CASES, Gen  # noqa: E402

FIXTURE_CASES = [
    "[L]", "  [L]  ", "a [L]b", "a\u3000\t[L]", "[R]", "a [R]   b", "[R]\n\nx", "[LR]", "x  [LR]  y",
    "word", "words", "a word b", "sword", "word_", "wordé", "(word)", "word\u0301", "éword",
    "<|a|>", "<|ab|>", "<|a|><|ab|>", "<|a", "<|abc|>", "<|bos|>hi<|eos|>", "<|bos|><|bos|>",
    "<think>x</think>", "▁<think>", "ver", "over", "verver", " ver ", "｜tool｜", "a｜tool｜b",
    "1 2  3   4", "a,b.c", "x  y\tz\n", "  ", "hello world", "aaa bbb ccc", "...", "a1b22c333d4444",
]


def bl(prefix=False, regex=False):
    return {"type": "ByteLevel", "add_prefix_space": prefix, "trim_offsets": True, "use_regex": regex}


def seq(*steps):
    return {"type": "Sequence", "pretokenizers": list(steps)}


def split(kind, pattern, behavior, invert=False):
    return {"type": "Split", "pattern": {kind: pattern}, "behavior": behavior, "invert": invert}


def variants(base):
    out = []

    def add(name, mutate, parse_special=True, add_special_tokens=False):
        v = copy.deepcopy(base)
        mutate(v)
        out.append((name, v, parse_special, add_special_tokens))

    add("base", lambda v: None)
    add("base_no_parse_special", lambda v: None, parse_special=False)

    def legacy(v):
        v["model"]["merges"] = [a + " " + b for a, b in v["model"]["merges"]]
    add("merges_legacy", legacy)
    for behavior in ["Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"]:
        add("split_string_" + behavior,
            lambda v, b=behavior: v.update(pre_tokenizer=seq(split("String", " ", b), bl())))
        add("split_regex_invert_" + behavior,
            lambda v, b=behavior: v.update(pre_tokenizer=seq(split("Regex", "\\s+|[,.]", b, True), bl())))
        add("split_regex_empty_" + behavior,
            lambda v, b=behavior: v.update(pre_tokenizer=seq(split("Regex", "a*|\\d", b), bl())))
    add("split_regex_features", lambda v: v.update(pre_tokenizer=seq(
        split("Regex", "(?i:ab)|\\h+|[\\w]x|^x|y$|\\u00e9|\\d{,2}", "Isolated"), bl())))
    add("digits_individual", lambda v: v.update(pre_tokenizer=seq(
        {"type": "Digits", "individual_digits": True}, bl(regex=True))))
    add("digits_contiguous", lambda v: v.update(pre_tokenizer=seq(
        {"type": "Digits", "individual_digits": False}, bl(regex=True))))
    add("bytelevel_gpt2", lambda v: v.update(pre_tokenizer=bl(prefix=True, regex=True)))
    add("bytelevel_gpt2_noprefix", lambda v: v.update(pre_tokenizer=bl(prefix=False, regex=True)))
    add("bytelevel_prefix_after_split", lambda v: v.update(pre_tokenizer=seq(
        {"type": "WhitespaceSplit"}, bl(prefix=True))))
    add("whitespace", lambda v: v.update(pre_tokenizer=seq({"type": "Whitespace"}, bl())))
    add("punctuation", lambda v: v.update(pre_tokenizer=seq(
        {"type": "Punctuation", "behavior": "Contiguous"}, bl())))
    add("normalizer_prepend", lambda v: v.update(normalizer={"type": "Prepend", "prepend": "▁"}))
    add("normalizer_replace", lambda v: v.update(normalizer={"type": "Sequence", "normalizers": [
        {"type": "Replace", "pattern": {"String": " "}, "content": "_"},
        {"type": "Replace", "pattern": {"Regex": "\\d+"}, "content": "#"}]}))
    add("normalizer_strip", lambda v: v.update(normalizer={"type": "Strip", "strip_left": True,
                                                          "strip_right": True}))
    add("normalizer_strip_right", lambda v: v.update(normalizer={"type": "Strip", "strip_left": False,
                                                                "strip_right": True}))

    def template(v):
        v["post_processor"] = {"type": "TemplateProcessing",
                               "single": [{"SpecialToken": {"id": "<|bos|>", "type_id": 0}},
                                          {"Sequence": {"id": "A", "type_id": 0}},
                                          {"SpecialToken": {"id": "<|eos|>", "type_id": 0}}],
                               "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                                        {"Sequence": {"id": "B", "type_id": 1}}],
                               "special_tokens": {
                                   "<|bos|>": {"id": "<|bos|>", "ids": [base_id(v, "<|bos|>")], "tokens": ["<|bos|>"]},
                                   "<|eos|>": {"id": "<|eos|>", "ids": [base_id(v, "<|eos|>")], "tokens": ["<|eos|>"]}}}
    add("template", template, add_special_tokens=True)
    add("ignore_merges", lambda v: v["model"].update(ignore_merges=True))

    def char_mode(v, unk, fuse, fallback):
        v["pre_tokenizer"] = split("Regex", "\\s+", "Isolated")
        vocab = v["model"]["vocab"]
        n = max(vocab.values()) + 1
        if unk:
            vocab["<unk>"] = n
            n += 1
            v["model"]["unk_token"] = "<unk>"
        v["model"]["fuse_unk"] = fuse
        if fallback:
            for b in range(0, 256, 3):  # only some bytes: exercises fallback and its failure
                vocab["<0x%02X>" % b] = n
                n += 1
            v["model"]["byte_fallback"] = True
    add("char_mode", lambda v: char_mode(v, False, False, False))
    add("char_mode_unk", lambda v: char_mode(v, True, False, False))
    add("char_mode_unk_fused", lambda v: char_mode(v, True, True, False))
    add("char_mode_byte_fallback", lambda v: char_mode(v, True, False, True))
    return out


def base_id(v, content):
    for t in v["added_tokens"]:
        if t["content"] == content:
            return t["id"]
    raise KeyError(content)


def texts():
    g = Gen(99)
    out = list(EDGE_CASES) + FIXTURE_CASES
    out += [" " + t + " " for t in FIXTURE_CASES]
    for _ in range(40):
        out += [g.sentence(), g.code(300), g.chinese(60), g.japanese(60), g.script_text(80),
                g.emoji_text(40), g.runs(120), g.chat(300)[:400]]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True)
    ap.add_argument("--out-dir", required=True)
    args = ap.parse_args()
    from tokenizers import Tokenizer
    os.makedirs(args.out_dir, exist_ok=True)
    with open(args.base, encoding="utf-8") as f:
        base = json.load(f)
    docs = [t.encode("utf-8") for t in texts()]
    with open(os.path.join(args.out_dir, "texts.bin"), "wb") as f:
        for d in docs:
            f.write(struct.pack("<I", len(d)) + d)
    manifest = []
    for name, v, parse_special, add_special in variants(base):
        path = os.path.join(args.out_dir, name + ".json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(v, f, ensure_ascii=False)
        tok = Tokenizer.from_file(path)
        tok.encode_special_tokens = not parse_special
        encs = tok.encode_batch([d.decode("utf-8") for d in docs], add_special_tokens=add_special)
        ids = [e.ids for e in encs]
        with open(os.path.join(args.out_dir, name + ".ids"), "wb") as f:
            for row in ids:
                f.write(struct.pack("<I", len(row)) + struct.pack(f"<{len(row)}i", *row))
        for suffix, skip in (("decoded", False), ("decoded_skip", True)):
            with open(os.path.join(args.out_dir, name + "." + suffix), "wb") as f:
                for t in tok.decode_batch(ids, skip_special_tokens=skip):
                    b = t.encode("utf-8")
                    f.write(struct.pack("<I", len(b)) + b)
        manifest.append({"name": name, "json": path, "parse_special": parse_special,
                         "add_special_tokens": add_special})
    with open(os.path.join(args.out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(f"{len(manifest)} variants, {len(docs)} texts")


if __name__ == "__main__":
    main()
