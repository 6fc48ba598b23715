"""`peregrine score` (teacher-forced scoring, tools/demo_model_fidelity.py's Peregrine side) on
the embedded demo model: per predicted token the argmax and the next token's logprob, and every
logits row, consistent with each other and with the server's prompt logprobs."""
import json
import subprocess

import numpy as np
import pytest

from conftest import BIN


def test_score_rows_agree_with_their_logits_and_the_server(tmp_path, client):
    rows = np.array([[(t * 131 + r * 17 + 5) % 50000 for t in range(24)] for r in range(2)], dtype=np.int32)
    tokens, pred, logits = tmp_path / "rows.bin", tmp_path / "pred.bin", tmp_path / "logits.bin"
    rows.tofile(tokens)
    run = subprocess.run([BIN, "score", "--tokens", str(tokens), "--seq-len", "24", "--out", str(pred),
                          "--logits-out", str(logits), "--mtp-out", str(tmp_path / "mtp.bin")],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    assert summary["rows"] == 2 and summary["tokens"] == 46
    raw = np.fromfile(pred, dtype=np.int32).reshape(-1, 2)
    argmax, logprob = raw[:, 0], raw[:, 1].copy().view(np.float32)
    x = np.fromfile(logits, dtype=np.float32).reshape(46, -1).astype(np.float64)
    lsm = x - x.max(axis=1, keepdims=True)
    lsm -= np.log(np.exp(lsm).sum(axis=1, keepdims=True))
    targets = rows[:, 1:].reshape(-1)
    assert np.array_equal(argmax, x.argmax(axis=1))
    assert np.allclose(logprob, lsm[np.arange(46), targets], atol=1e-5)
    assert summary["ppl"] == pytest.approx(float(np.exp(-logprob.astype(np.float64).mean())), rel=1e-4)
    # The MTP layer: one prediction of the token after next per position but the last two.
    mtp = np.fromfile(tmp_path / "mtp.bin", dtype=np.int32).reshape(-1, 2)
    assert len(mtp) == 2 * 22 == summary["mtp_tokens"]
    assert summary["mtp_top1"] == pytest.approx(float(np.mean(mtp[:, 0] == rows[:, 2:].reshape(-1))))
    assert np.all(mtp[:, 1].copy().view(np.float32) <= 0)
    # The server scores the same row with the same numbers (prompt logprobs of row 0).
    r = client.completions.create(model=client.models.list().data[0].id, prompt=rows[0].tolist(), max_tokens=1,
                                  extra_body={"prompt_logprobs": 0}).model_dump()
    served = [entry[str(int(t))]["logprob"] for entry, t in zip(r["choices"][0]["prompt_logprobs"][1:], rows[0][1:])]
    assert np.allclose(served, logprob[:23], atol=1e-5)
