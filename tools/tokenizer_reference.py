#!/usr/bin/env python3
"""Reference side of the tokenizer parity tests and benchmark: HF `tokenizers`.

Documents (corpus format: little-endian uint32 length + bytes) are decoded to str with
errors="replace" (the C++ tokenizer's contract for ill-formed UTF-8), then:

  encode    writes each document's ids (uint32 count + int32 ids)
  decode    reads an ids file and writes each decoded text (uint32 length + UTF-8 bytes)
  split     for each --pattern, runs a Split(Regex) pre-tokenizer (matches kept) over the
            first document and writes the matches joined by U+0000 (regex class parity)
  bench     times single-threaded encoding and prints one JSON line
  info      prints facts the C++ tests check (vocab size, special ids, surrogate handling)
"""
import argparse
import json
import os
import struct
import sys
import time


def read_docs(path):
    with open(path, "rb") as f:
        data = f.read()
    docs, pos = [], 0
    while pos < len(data):
        (n,) = struct.unpack_from("<I", data, pos)
        pos += 4
        docs.append(data[pos:pos + n])
        pos += n
    return docs


def read_ids(path):
    with open(path, "rb") as f:
        data = f.read()
    out, pos = [], 0
    while pos < len(data):
        (n,) = struct.unpack_from("<I", data, pos)
        pos += 4
        out.append(list(struct.unpack_from(f"<{n}i", data, pos)))
        pos += 4 * n
    return out


def load(path):
    from tokenizers import Tokenizer
    if os.path.isdir(path):
        path = os.path.join(path, "tokenizer.json")
    return Tokenizer.from_file(path)


def cmd_encode(args):
    tok = load(args.tokenizer)
    if args.no_parse_special:
        tok.encode_special_tokens = True
    texts = [d.decode("utf-8", errors="replace") for d in read_docs(args.input)]
    encs = tok.encode_batch(texts, add_special_tokens=args.add_special_tokens)
    with open(args.output, "wb") as f:
        for e in encs:
            f.write(struct.pack("<I", len(e.ids)))
            f.write(struct.pack(f"<{len(e.ids)}i", *e.ids))


def cmd_decode(args):
    tok = load(args.tokenizer)
    texts = tok.decode_batch(read_ids(args.input), skip_special_tokens=args.skip_special_tokens)
    with open(args.output, "wb") as f:
        for t in texts:
            b = t.encode("utf-8")
            f.write(struct.pack("<I", len(b)))
            f.write(b)


def cmd_split(args):
    from tokenizers import Regex, pre_tokenizers
    text = read_docs(args.input)[0].decode("utf-8", errors="replace")
    with open(args.output, "wb") as f:
        for pattern in args.pattern:
            split = pre_tokenizers.Split(Regex(pattern), behavior="removed", invert=True)
            b = "\0".join(p for p, _ in split.pre_tokenize_str(text)).encode("utf-8")
            f.write(struct.pack("<I", len(b)))
            f.write(b)


def cmd_bench(args):
    if os.environ.get("RAYON_NUM_THREADS") != "1":
        sys.exit("bench: set RAYON_NUM_THREADS=1 (and TOKENIZERS_PARALLELISM=false) for one thread")
    tok = load(args.tokenizer)
    texts = [d.decode("utf-8", errors="replace") for d in read_docs(args.input)]
    best = {}
    for name in ("encode", "encode_batch_fast"):
        if name == "encode_batch_fast" and not hasattr(tok, "encode_batch_fast"):
            continue
        runs = []
        for _ in range(args.repeat):
            w0, c0 = time.perf_counter(), time.process_time()
            if name == "encode":
                ntok = sum(len(tok.encode(t, add_special_tokens=False).ids) for t in texts)
            else:
                ntok = sum(len(e.ids) for e in tok.encode_batch_fast(texts, add_special_tokens=False))
            runs.append((time.perf_counter() - w0, time.process_time() - c0))
        wall, cpu = min(runs)
        best[name] = {"seconds": wall, "cpu_seconds": cpu, "tokens": ntok}
    fastest = min(best, key=lambda k: best[k]["seconds"])
    print(json.dumps({"docs": len(texts), "fastest": fastest, "methods": best}))


def cmd_info(args):
    tok = load(args.tokenizer)
    info = {"vocab_size": tok.get_vocab_size(with_added_tokens=True),
            "model_vocab_size": tok.get_vocab_size(with_added_tokens=False)}
    for name in args.tokens:
        info[name] = tok.token_to_id(name)
    try:
        tok.encode("a\ud800b")
        info["lone_surrogate"] = "accepted"
    except Exception as e:  # the binding cannot convert a str holding a lone surrogate
        info["lone_surrogate"] = "rejected: " + type(e).__name__
    print(json.dumps(info, ensure_ascii=False))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("encode")
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--no-parse-special", action="store_true")
    p.add_argument("--add-special-tokens", action="store_true")
    p = sub.add_parser("decode")
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--skip-special-tokens", action="store_true")
    p = sub.add_parser("split")
    p.add_argument("--pattern", required=True, action="append")
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p = sub.add_parser("bench")
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--input", required=True)
    p.add_argument("--repeat", type=int, default=3)
    p = sub.add_parser("info")
    p.add_argument("--tokenizer", required=True)
    p.add_argument("tokens", nargs="*")
    args = ap.parse_args()
    {"encode": cmd_encode, "decode": cmd_decode, "split": cmd_split, "bench": cmd_bench,
     "info": cmd_info}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
