#!/usr/bin/env python3
"""Fetches a pinned source distribution from PyPI, checks its SHA-256 and unpacks it.

C++ libraries that Debian lacks come from their PyPI source distributions (the grammar engine,
xgrammar); this is the one place that downloads them. Usage:

    fetch_sdist.py NAME VERSION SHA256 DEST_DIR

leaves DEST_DIR/NAME-VERSION/ (idempotent: an unpacked tree with a matching stamp is kept).
"""
import hashlib
import json
import os
import sys
import tarfile
import tempfile
import urllib.parse
import urllib.request


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    name, version, sha256, dest = sys.argv[1:]
    tree = os.path.join(dest, f"{name}-{version}")
    stamp = os.path.join(tree, ".sha256")
    if os.path.exists(stamp) and open(stamp).read().strip() == sha256:
        return
    # The simple index (PEP 691 JSON): what pip itself reads.
    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
    request = urllib.request.Request(f"{index}/{name}/",
                                     headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=60) as r:
        files = json.load(r)["files"]
    wanted = f"{name}-{version}.tar.gz"
    hits = [f for f in files if f["filename"] == wanted]
    if not hits:
        sys.exit(f"{wanted}: not on {index}")
    url = urllib.parse.urljoin(f"{index}/{name}/", hits[0]["url"])
    os.makedirs(dest, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=dest, suffix=".tar.gz") as tmp:
        with urllib.request.urlopen(url, timeout=300) as r:
            data = r.read()
        digest = hashlib.sha256(data).hexdigest()
        if digest != sha256:
            sys.exit(f"{url}: SHA-256 {digest}, expected {sha256}")
        tmp.write(data)
        tmp.flush()
        with tarfile.open(tmp.name) as tar:
            tar.extractall(dest, filter="data")
    with open(stamp, "w") as f:
        f.write(sha256 + "\n")


if __name__ == "__main__":
    main()
