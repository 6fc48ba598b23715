#!/usr/bin/env python3
"""Regenerates tests/unit/chat/golden/jinja/*.json: what Python jinja2 renders for the Jinja
feature snippets and chat conversations of chat_jinja_cases.py.

jinja2 is configured the way transformers' apply_chat_template configures it: an immutable
sandboxed environment with trim_blocks and lstrip_blocks, the loop-controls extension, a
{% generation %} block, raise_exception and strftime_now globals, and a tojson filter that is
json.dumps (ensure_ascii=False by default) instead of jinja2's HTML-safe one. When transformers
is importable, the chat cases are also rendered through transformers itself and must agree.

Run with the project's test environment: .venv/bin/python tools/chat_jinja_goldens.py
"""

import datetime
import json
import pathlib

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from chat_jinja_cases import CONVERSATIONS, FEATURES, TYPICAL

ROOT = pathlib.Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "unit" / "chat" / "golden"
TEMPLATE_FILES = ["deepseek_v3", "deepseek_v3_1", "deepseek_v3_2_exp"]


class GenerationBlock(jinja2.ext.Extension):
    """{% generation %}...{% endgeneration %} renders its body unchanged."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_environment():
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationBlock, jinja2.ext.loopcontrols]
    )

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    return env


def render(env, source, context):
    try:
        return {"expected": env.from_string(source).render(**context)}
    except Exception as exc:  # the C++ renderer must fail too; the message is not compared
        return {"error": type(exc).__name__}


def special_tokens(config):
    def content(token):
        return token["content"] if isinstance(token, dict) else token

    return {"bos_token": content(config.get("bos_token")), "eos_token": content(config.get("eos_token"))}


def chat_context(case, tokens):
    context = {
        "messages": case["messages"],
        "tools": case.get("tools"),
        "documents": None,
        "add_generation_prompt": case["add_generation_prompt"],
    }
    context.update(tokens)
    context.update(case.get("extra", {}))
    return context


def cross_check_with_transformers(source, case, tokens, golden):
    try:
        from transformers.utils.chat_template_utils import render_jinja_template
    except ImportError:
        return
    kwargs = dict(tokens)
    kwargs.update(case.get("extra", {}))
    try:
        rendered, _ = render_jinja_template(
            conversations=[case["messages"]], tools=case.get("tools"), chat_template=source,
            add_generation_prompt=case["add_generation_prompt"], **kwargs)
        outcome = {"expected": rendered[0]}
    except Exception as exc:
        outcome = {"error": type(exc).__name__}
    if ("error" in outcome) != ("error" in golden) or outcome.get("expected") != golden.get("expected"):
        raise SystemExit(f"transformers disagrees with the mirrored environment on {case['name']}")


def write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


def main():
    env = make_environment()
    features = []
    for name, source, context in FEATURES:
        entry = {"name": name, "template": source, "context": context}
        entry.update(render(env, source, context))
        features.append(entry)
    write(GOLDEN / "jinja" / "features.json", features)

    templates = {}
    for name in TEMPLATE_FILES:
        config = json.loads((GOLDEN / "templates" / f"{name}.tokenizer_config.json").read_text(encoding="utf-8"))
        templates[name] = (config["chat_template"], special_tokens(config), f"templates/{name}.tokenizer_config.json")
    default_tokens = {"bos_token": "<s>", "eos_token": "</s>"}
    for name, source in TYPICAL.items():
        templates[name] = (source, default_tokens, None)

    for name, (source, tokens, template_file) in templates.items():
        cases = []
        for case in CONVERSATIONS:
            golden = render(env, source, chat_context(case, tokens))
            cross_check_with_transformers(source, case, tokens, golden)
            entry = dict(case)
            entry.update(golden)
            cases.append(entry)
        data = {"template_name": name, "special_tokens": tokens, "cases": cases}
        if template_file:
            data["template_file"] = template_file
        else:
            data["template"] = source
        write(GOLDEN / "jinja" / f"chat_{name}.json", data)
    print(f"wrote {len(FEATURES)} feature goldens and {len(templates)} chat template goldens")


if __name__ == "__main__":
    main()
