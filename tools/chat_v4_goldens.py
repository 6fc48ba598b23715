#!/usr/bin/env python3
"""Regenerates tests/unit/chat/golden/v4/*.json: DeepSeek-V4 prompts rendered by the official
reference encoder (encoding_dsv4.py of the DeepSeek-V4 release).

The encoder is taken from a PyPI package that ships it unchanged in its rendering logic:
SGLang 0.5.15 vendors it as sglang/srt/entrypoints/openai/encoding_dsv4.py. Install that wheel
without dependencies into a throwaway virtual environment and run this script with it:

    python3 -m venv /tmp/v4gold && /tmp/v4gold/bin/pip install --no-deps sglang==0.5.15
    /tmp/v4gold/bin/python tools/chat_v4_goldens.py

or point --encoder at any copy of encoding_dsv4.py. Only that one file is loaded (it needs
nothing beyond the standard library), never the sglang package itself.

Requests go through the same adaptation as Peregrine's encoder (src/chat/v4_messages.cc) before
the reference sees them: null content becomes "", text-part arrays are joined with "\n", tool
call arguments given as objects are serialized, empty arguments become "{}", and request-level
tools are attached to the first system message (a new empty one when there is none). With
add_generation_prompt false the trailing assistant header is cut from the reference output.
"""

import argparse
import copy
import importlib.metadata
import importlib.util
import json
import pathlib
import sys

from chat_v4_cases import CASES

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "tests" / "unit" / "chat" / "golden" / "v4"
ENCODER_IN_WHEEL = "sglang/srt/entrypoints/openai/encoding_dsv4.py"


def load_encoder(path):
    if path is None:
        path = importlib.metadata.distribution("sglang").locate_file(ENCODER_IN_WHEEL)
    spec = importlib.util.spec_from_file_location("encoding_dsv4", str(path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def adapt(messages, tools):
    msgs = copy.deepcopy(messages)
    for m in msgs:
        content = m.get("content")
        if content is None:
            m["content"] = ""
        elif isinstance(content, list):
            m["content"] = "\n".join(part["text"] for part in content)
        for call in m.get("tool_calls") or []:
            args = call["function"].get("arguments")
            if args is None or (isinstance(args, str) and not args.strip()):
                args = "{}"
            elif not isinstance(args, str):
                args = json.dumps(args, ensure_ascii=False)
            call["function"]["arguments"] = args
    if tools:
        if msgs[0]["role"] != "system":
            msgs.insert(0, {"role": "system", "content": ""})
        msgs[0]["tools"] = tools
    return msgs


def render(encoder, case):
    opts = case["options"]
    thinking = opts.get("thinking", False)
    prompt = encoder.encode_messages(
        adapt(case["messages"], case.get("tools")),
        thinking_mode="thinking" if thinking else "chat",
        drop_thinking=opts.get("drop_thinking", True),
        reasoning_effort=opts.get("reasoning_effort"),
    )
    if not opts.get("add_generation_prompt", True):
        for suffix in ("<｜Assistant｜><think>", "<｜Assistant｜></think>"):
            if prompt.endswith(suffix) and case["messages"][-1]["role"] in ("user", "developer", "tool"):
                prompt = prompt[: -len(suffix)]
                break
    return prompt


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--encoder", help="path to encoding_dsv4.py (default: from the sglang wheel)")
    args = parser.parse_args()
    encoder = load_encoder(args.encoder)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    names = set()
    for case in CASES:
        if case["name"] in names:
            sys.exit(f"duplicate case {case['name']}")
        names.add(case["name"])
        golden = dict(case)
        golden["expected"] = render(encoder, case)
        path = OUT_DIR / f"{case['name']}.json"
        path.write_text(json.dumps(golden, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {len(CASES)} goldens to {OUT_DIR.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
