"""Tensor and expert parallel through the real server and the official openai client:
`--tp 2` and `--tp 2 --ep 2` on the CPU backend (two rank processes over Gloo) answer greedy
and seeded requests, streamed and not, with the text of one process and its logprobs within
fp32 rounding; a rank killed mid-stream gives the client an error and the server a non-zero
exit; splits that cannot run fail at once with a message."""
import os
import signal
import time

import pytest

from conftest import Server, completion_answers, openai_client

PROMPTS = [
    "The history of the city begins",
    "def fibonacci(n):\n",
    "In 1905, Albert Einstein published",
]


@pytest.fixture(scope="module", params=[["--tp", "2"], ["--tp", "2", "--ep", "2"]], ids=["tp2", "tp2_ep2"])
def tp_server(request):
    s = Server(request.param)
    yield s
    s.stop()


def _answers(client, stream):
    out = completion_answers(client, PROMPTS, stream, max_tokens=40, seed_base=7)
    model = client.models.list().data[0].id
    chat = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Name three colours."}],
                                          max_tokens=30, temperature=0)
    return out + [(chat.choices[0].message.content, [])]


def test_a_sharded_server_answers_as_one_process(server, tp_server):
    whole, sharded = openai_client(server), openai_client(tp_server)
    for stream in (False, True):
        want, got = _answers(whole, stream), _answers(sharded, stream)
        for (wt, wl), (gt, gl) in zip(want, got):
            assert gt == wt
            assert gl == pytest.approx(wl, abs=1e-4)
    assert "tensor parallel over 2 ranks" in tp_server.log_text()


def _children(pid):
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


def test_a_rank_killed_mid_stream_fails_the_stream_and_stops_the_server():
    import openai
    s = Server(["--tp", "2"])
    try:
        ranks = _children(s.proc.pid)
        assert len(ranks) == 1
        client = openai_client(s)
        model = client.models.list().data[0].id
        stream = client.completions.create(model=model, prompt="Tell me a long story", max_tokens=2000,
                                           temperature=0, stream=True, extra_body={"ignore_eos": True})
        got_error = False
        chunks = 0
        try:
            for chunk in stream:
                chunks += 1
                if chunks == 3:
                    os.kill(ranks[0], signal.SIGKILL)
        except openai.APIError:
            got_error = True
        assert got_error, f"the stream ended normally after {chunks} chunks"
        assert chunks < 2000
        assert s.proc.wait(timeout=60) != 0
        assert "rank" in s.log_text()
    finally:
        s.stop()


@pytest.mark.parametrize("args,message", [
    (["--tp", "3"], "num_attention_heads"),
    (["--tp", "2", "--ep", "3"], "--ep"),
    (["--tp", "2", "--device", "cuda"], "GPU"),
    (["--tp", "2", "--device", "cuda", "--disable-custom-all-reduce"], "GPU"),  # vLLM's and SGLang's flag
    (["--tp", "2", "--device", "cuda", "--enable-custom-all-reduce"], "GPU"),
    (["--tp", "2", "--nnodes", "2"], "--dist-init-addr"),
])
def test_a_split_that_cannot_run_fails_at_once(args, message):
    start = time.time()
    with pytest.raises(RuntimeError, match=message):
        Server(args)
    assert time.time() - start < 60
