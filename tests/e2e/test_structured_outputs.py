"""Structured outputs through the official `openai` client on the embedded demo model.

The demo model's random weights make it an adversary: left alone it never writes JSON, so
every conforming output below is the grammar's doing. Schemas keep strings and arrays
bounded so that sampling ends well within max_tokens.
"""
import json
import re
import time

import jsonschema
import openai
import pytest

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 10},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "role": {"enum": ["admin", "user", "guest"]},
        "active": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "maxItems": 2},
        "address": {
            "type": "object",
            "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"},
                           "kind": {"anyOf": [{"const": "home"}, {"type": "integer", "maximum": 9}]}},
            "required": ["zip", "kind"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "age", "role", "active", "tags", "address"],
    "additionalProperties": False,
}

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather for a city",
        "parameters": {"type": "object",
                       "properties": {"city": {"type": "string", "maxLength": 12},
                                      "unit": {"enum": ["c", "f"]}},
                       "required": ["city", "unit"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "add", "description": "Adds two integers",
        "parameters": {"type": "object",
                       "properties": {"a": {"type": "integer", "maximum": 999}, "b": {"type": "integer", "maximum": 999}},
                       "required": ["a", "b"], "additionalProperties": False}}},
]


def model_id(client):
    return client.models.list().data[0].id


def person_format():
    return {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}


def test_json_schema_outputs_validate_whole_and_streamed(client):
    m = model_id(client)
    messages = [{"role": "user", "content": "Describe a person as JSON."}]
    for seed in (1, 2):
        r = client.chat.completions.create(model=m, messages=messages, response_format=person_format(),
                                           max_tokens=400, temperature=1.0, seed=seed, n=2)
        for choice in r.choices:
            assert choice.finish_reason == "stop", choice
            jsonschema.validate(json.loads(choice.message.content), PERSON)
        stream = client.chat.completions.create(model=m, messages=messages, response_format=person_format(),
                                                max_tokens=400, temperature=1.0, seed=seed, n=2, stream=True)
        text, finish = ["", ""], [None, None]
        for chunk in stream:
            for c in chunk.choices:
                text[c.index] += c.delta.content or ""
                finish[c.index] = c.finish_reason or finish[c.index]
        assert finish == ["stop", "stop"]
        # Streaming changes nothing: same seeds, same tokens.
        assert text == [c.message.content for c in r.choices]
        for t in text:
            jsonschema.validate(json.loads(t), PERSON)


def test_json_object_and_the_vllm_and_sglang_spellings(client):
    m = model_id(client)
    messages = [{"role": "user", "content": "Anything."}]
    r = client.chat.completions.create(model=m, messages=messages, response_format={"type": "json_object"},
                                       max_tokens=300, temperature=0.7, seed=3)
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(r.choices[0].message.content), dict)
    else:
        assert r.choices[0].finish_reason == "length"
        assert r.choices[0].message.content.lstrip().startswith("{")

    r = client.chat.completions.create(model=m, messages=messages, max_tokens=20, temperature=1.0, seed=4,
                                       extra_body={"structured_outputs": {"regex": "[a-z]{3,8}@[a-z]{2,6}\\.(com|org)"}})
    assert r.choices[0].finish_reason == "stop"
    assert re.fullmatch(r"[a-z]{3,8}@[a-z]{2,6}\.(com|org)", r.choices[0].message.content)

    for body in ({"structured_outputs": {"choice": ["alpha", "beta", "gamma delta"]}},
                 {"guided_choice": ["alpha", "beta", "gamma delta"]}):
        r = client.chat.completions.create(model=m, messages=messages, max_tokens=10, temperature=1.0, seed=5,
                                           extra_body=body)
        assert r.choices[0].message.content in ("alpha", "beta", "gamma delta")

    r = client.completions.create(model=m, prompt="Number: ", max_tokens=12, temperature=1.0, seed=6,
                                  extra_body={"guided_regex": "-?[1-9][0-9]{0,4}"})
    assert re.fullmatch(r"-?[1-9][0-9]{0,4}", r.choices[0].text)
    r = client.completions.create(model=m, prompt="JSON: ", max_tokens=400, temperature=1.0, seed=7,
                                  extra_body={"guided_json": PERSON})
    jsonschema.validate(json.loads(r.choices[0].text), PERSON)
    r = client.completions.create(model=m, prompt="Yes or no: ", max_tokens=5, temperature=1.0, seed=8,
                                  extra_body={"ebnf": 'root ::= "yes" | "no"'})
    assert r.choices[0].text in ("yes", "no")


def test_thinking_stays_free_and_the_answer_follows_the_schema(client):
    m = model_id(client)
    r = client.chat.completions.create(model=m, messages=[{"role": "user", "content": "Think, then answer."}],
                                       response_format=person_format(), max_tokens=600, temperature=1.0, seed=11,
                                       extra_body={"chat_template_kwargs": {"thinking": True}})
    choice = r.choices[0]
    # The random model may think until max_tokens; once it closes its reasoning, the answer conforms.
    if choice.finish_reason == "stop" and choice.message.content:
        jsonschema.validate(json.loads(choice.message.content), PERSON)
    else:
        assert choice.finish_reason in ("stop", "length")


def validate_calls(calls, allowed):
    by_name = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    for call in calls:
        assert call.type == "function"
        assert call.function.name in allowed
        jsonschema.validate(json.loads(call.function.arguments), by_name[call.function.name])
        assert call.id


def test_forced_tool_calls_follow_the_tools_schemas(client):
    m = model_id(client)
    messages = [{"role": "user", "content": "Weather in Paris, and 2+3?"}]
    for seed in (21, 22, 23):
        r = client.chat.completions.create(model=m, messages=messages, tools=TOOLS, tool_choice="required",
                                           max_tokens=300, temperature=1.0, seed=seed)
        choice = r.choices[0]
        assert choice.finish_reason == "tool_calls", choice
        assert choice.message.tool_calls
        validate_calls(choice.message.tool_calls, {"get_weather", "add"})

        r = client.chat.completions.create(model=m, messages=messages, tools=TOOLS, max_tokens=300,
                                           temperature=1.0, seed=seed, parallel_tool_calls=False,
                                           tool_choice={"type": "function", "function": {"name": "add"}})
        calls = r.choices[0].message.tool_calls
        assert r.choices[0].finish_reason == "tool_calls"
        assert len(calls) == 1
        validate_calls(calls, {"add"})

    # Streamed: the deltas join to the same calls.
    stream = client.chat.completions.create(model=m, messages=messages, tools=TOOLS, tool_choice="required",
                                            max_tokens=300, temperature=1.0, seed=21, stream=True)
    names, args, finish = {}, {}, None
    for chunk in stream:
        for c in chunk.choices:
            for d in c.delta.tool_calls or []:
                if d.function.name:
                    names[d.index] = d.function.name
                args[d.index] = args.get(d.index, "") + (d.function.arguments or "")
            finish = c.finish_reason or finish
    assert finish == "tool_calls"
    whole = client.chat.completions.create(model=m, messages=messages, tools=TOOLS, tool_choice="required",
                                           max_tokens=300, temperature=1.0, seed=21)
    assert [names[i] for i in sorted(names)] == [c.function.name for c in whole.choices[0].message.tool_calls]
    assert [json.loads(args[i]) for i in sorted(args)] == [json.loads(c.function.arguments)
                                                           for c in whole.choices[0].message.tool_calls]


def test_bad_constraints_are_fast_400s_and_the_server_stays_up(client):
    m = model_id(client)
    messages = [{"role": "user", "content": "x"}]
    bad = [
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}}},
        {"response_format": {"type": "yaml"}},
        {"extra_body": {"guided_regex": "(a|b"}},
        {"extra_body": {"structured_outputs": {"grammar": "root ::= missing"}}},
        {"extra_body": {"structured_outputs": {"regex": "a", "json": {"type": "object"}}}},
        {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
        {"tool_choice": "required"},
        # Catastrophic for backtracking engines; an automaton compiles it at once.
        {"extra_body": {"guided_regex": "(a+)+$"}, "max_tokens": 4},
    ]
    for kwargs in bad[:-1]:
        t0 = time.monotonic()
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model=m, messages=messages, max_tokens=8, **kwargs)
        assert time.monotonic() - t0 < 10
        assert isinstance(e.value.code, str), kwargs
    r = client.chat.completions.create(model=m, messages=messages, **bad[-1])
    assert re.fullmatch("a*", r.choices[0].message.content)
    assert client.completions.create(model=m, prompt="alive?", max_tokens=2, temperature=0).choices


def test_many_unique_schemas_compile_and_the_server_stays_bounded(client, server):
    m = model_id(client)
    before = server.rss_kb()
    for i in range(300):
        schema = {"type": "object", "properties": {f"field_{i}_{k}": {"type": "integer", "maximum": i + k}
                                                   for k in range(3)},
                  "required": [f"field_{i}_0"], "additionalProperties": False}
        r = client.completions.create(model=m, prompt="{", max_tokens=1, extra_body={"guided_json": schema})
        assert r.choices[0].finish_reason in ("stop", "length")
    # Compiled grammars live in a byte-bounded cache (structured/grammar_engine.h); 300
    # schemas must not grow the server by more than a few hundred MB.
    assert server.rss_kb() - before < 400 * 1024
