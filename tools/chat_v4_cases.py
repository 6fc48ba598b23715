"""Conversations for the DeepSeek-V4 encoder goldens (see chat_v4_goldens.py). Each case names the
encoder branch it exercises; options mirror peregrine::chat::V4EncodeOptions."""

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}

SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web; returns snippets (日本語も可).",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}, "top_k": {"type": "integer", "default": 3}},
            "required": ["query"],
        },
    },
}


def call(call_id, name, arguments):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


WEATHER_TURNS = [
    {"role": "user", "content": "What's the weather in Paris and Rome?"},
    {
        "role": "assistant",
        "content": "",
        "reasoning_content": "I need both cities.",
        "tool_calls": [
            call("call_1", "get_weather", '{"city": "Paris"}'),
            call("call_2", "get_weather", '{"city": "Rome", "unit": "celsius"}'),
        ],
    },
    {"role": "tool", "tool_call_id": "call_2", "content": "Rome: 24C, sunny"},
    {"role": "tool", "tool_call_id": "call_1", "content": "Paris: 18C, cloudy"},
    {"role": "assistant", "content": "Paris is 18C and cloudy; Rome is 24C and sunny.",
     "reasoning_content": "Summarize both."},
    {"role": "user", "content": "Thanks! And Berlin?"},
]

MULTI_TURN = [
    {"role": "system", "content": "You are a concise assistant."},
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "4", "reasoning_content": "Simple addition."},
    {"role": "user", "content": "And times 3?"},
    {"role": "assistant", "content": "12", "reasoning_content": "4*3=12."},
    {"role": "user", "content": "Divide by 5."},
]

CASES = [
    {"name": "chat_single_user", "description": "no system message, chat mode",
     "messages": [{"role": "user", "content": "Hello!"}], "options": {"thinking": False}},
    {"name": "chat_system_user", "description": "system text directly after BOS",
     "messages": [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "Hi"}],
     "options": {"thinking": False}},
    {"name": "thinking_system_user", "description": "thinking mode opens <think>",
     "messages": [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "Hi"}],
     "options": {"thinking": True}},
    {"name": "thinking_multi_turn_drop", "description": "drop_thinking removes older reasoning",
     "messages": MULTI_TURN, "options": {"thinking": True}},
    {"name": "thinking_multi_turn_keep", "description": "drop_thinking false keeps every reasoning",
     "messages": MULTI_TURN, "options": {"thinking": True, "drop_thinking": False}},
    {"name": "chat_multi_turn", "description": "chat mode never renders reasoning",
     "messages": MULTI_TURN, "options": {"thinking": False}},
    {"name": "thinking_ends_with_assistant", "description": "assistant after the last user keeps reasoning",
     "messages": MULTI_TURN[:4] + [{"role": "assistant", "content": "12", "reasoning_content": "4*3."}],
     "options": {"thinking": True}},
    {"name": "tools_thinking_system", "description": "tools block, DSML calls, sorted results; nothing dropped",
     "messages": [{"role": "system", "content": "You are a weather bot."}] + WEATHER_TURNS,
     "tools": [WEATHER_TOOL], "options": {"thinking": True}},
    {"name": "tools_chat_no_system", "description": "tools attach to a new empty system message",
     "messages": WEATHER_TURNS, "tools": [WEATHER_TOOL, SEARCH_TOOL], "options": {"thinking": False}},
    {"name": "tools_thinking_pending_results", "description": "conversation ends with tool results",
     "messages": WEATHER_TURNS[:4], "tools": [WEATHER_TOOL], "options": {"thinking": True}},
    {"name": "tool_results_unknown_ids", "description": "results whose ids match no call sort first",
     "messages": [
         {"role": "user", "content": "Look up three things."},
         {"role": "assistant", "content": None, "tool_calls": [
             call("a", "search", '{"query": "one"}'), call("b", "search", '{"query": "two"}'),
             call("c", "search", '{"query": "three"}')]},
         {"role": "tool", "tool_call_id": "c", "content": "third"},
         {"role": "tool", "tool_call_id": "zzz", "content": "stray"},
         {"role": "tool", "tool_call_id": "b", "content": "second"},
         {"role": "tool", "tool_call_id": "a", "content": "first"},
     ], "tools": [SEARCH_TOOL], "options": {"thinking": False}},
    {"name": "tool_call_argument_types", "description": "string=true for strings, JSON otherwise",
     "messages": [
         {"role": "user", "content": "Call it."},
         {"role": "assistant", "content": "Calling.", "tool_calls": [call(
             "t1", "configure",
             '{"name": "caf\\u00e9 \\"quoted\\"", "count": 3, "ratio": 0.25, "big": 1e+20, "on": true,'
             ' "none": null, "list": [1, "two", {"x": 3}], "obj": {"k": "v\\n", "e": "😀"}, "empty": ""}')]},
         {"role": "tool", "tool_call_id": "t1", "content": "ok"},
     ], "tools": [{"type": "function", "function": {"name": "configure", "parameters": {}}}],
     "options": {"thinking": False}},
    {"name": "tool_call_arguments_as_object", "description": "arguments given as a JSON object, and empty",
     "messages": [
         {"role": "user", "content": "Two calls."},
         {"role": "assistant", "content": "", "tool_calls": [
             call("x1", "search", {"query": "objects", "top_k": 5}), call("x2", "ping", "")]},
         {"role": "tool", "tool_call_id": "x1", "content": "r1"},
         {"role": "tool", "tool_call_id": "x2", "content": "pong"},
     ], "tools": [SEARCH_TOOL], "options": {"thinking": True}},
    {"name": "tool_calls_without_tools_drop", "description": "no tools declared: drop_thinking still applies",
     "messages": [
         {"role": "user", "content": "Search for cats."},
         {"role": "assistant", "content": "", "reasoning_content": "use search",
          "tool_calls": [call("s1", "search", '{"query": "cats"}')]},
         {"role": "tool", "tool_call_id": "s1", "content": "cats are mammals"},
         {"role": "assistant", "content": "Cats are mammals.", "reasoning_content": "done"},
         {"role": "user", "content": "And dogs?"},
     ], "options": {"thinking": True}},
    {"name": "effort_max_thinking", "description": "max prepends the effort paragraph",
     "messages": [{"role": "system", "content": "Be rigorous."}, {"role": "user", "content": "Prove it."}],
     "options": {"thinking": True, "reasoning_effort": "max"}},
    {"name": "effort_max_chat", "description": "max adds nothing in chat mode",
     "messages": [{"role": "user", "content": "Prove it."}],
     "options": {"thinking": False, "reasoning_effort": "max"}},
    {"name": "effort_high_thinking", "description": "high adds nothing in this release",
     "messages": [{"role": "user", "content": "Prove it."}],
     "options": {"thinking": True, "reasoning_effort": "high"}},
    {"name": "effort_max_with_tools", "description": "paragraph precedes the system text and tools",
     "messages": [{"role": "user", "content": "Weather in Oslo?"}], "tools": [WEATHER_TOOL],
     "options": {"thinking": True, "reasoning_effort": "max"}},
    {"name": "latest_reminder_before_user", "description": "reminder role token",
     "messages": [{"role": "system", "content": "S"},
                  {"role": "latest_reminder", "content": "Today is Monday."},
                  {"role": "user", "content": "What day is it?"}],
     "options": {"thinking": True}},
    {"name": "latest_reminder_after_user", "description": "header precedes a trailing reminder",
     "messages": [{"role": "user", "content": "What day is it?"},
                  {"role": "latest_reminder", "content": "Today is Monday."}],
     "options": {"thinking": False}},
    {"name": "developer_role", "description": "developer renders as a user turn with its own tools",
     "messages": [{"role": "system", "content": "S"},
                  {"role": "developer", "content": "Search pipeline instructions.", "tools": [SEARCH_TOOL]},
                  {"role": "assistant", "content": "ok", "reasoning_content": "kept: tools present"},
                  {"role": "user", "content": "go"}],
     "options": {"thinking": True}},
    {"name": "developer_dropped_before_last_user", "description": "thinking+drop removes old developer turns",
     "messages": [{"role": "developer", "content": "Old instructions."},
                  {"role": "assistant", "content": "A1", "reasoning_content": "R1"},
                  {"role": "user", "content": "New question"}],
     "options": {"thinking": True}},
    {"name": "developer_last_chat", "description": "developer as the final turn gets the header",
     "messages": [{"role": "developer", "content": "Classify this."}], "options": {"thinking": False}},
    {"name": "system_response_format", "description": "response format block after the system text",
     "messages": [{"role": "system", "content": "Answer in JSON.", "response_format": {
         "type": "json_schema", "json_schema": {"name": "answer", "schema": {
             "type": "object", "properties": {"answer": {"type": "string"}}}}}},
         {"role": "user", "content": "Capital of France?"}],
     "options": {"thinking": False}},
    {"name": "system_tools_and_response_format", "description": "tools block then response format",
     "messages": [{"role": "system", "content": "S", "response_format": {"type": "json_object"}},
                  {"role": "user", "content": "Q"}],
     "tools": [WEATHER_TOOL], "options": {"thinking": True}},
    {"name": "consecutive_users_merge", "description": "adjacent user messages share one turn",
     "messages": [{"role": "user", "content": "First part."}, {"role": "user", "content": "Second part."}],
     "options": {"thinking": True}},
    {"name": "tool_results_then_user_text", "description": "user text merges after tool results",
     "messages": WEATHER_TURNS[:4] + [{"role": "user", "content": "Also compare them."}],
     "tools": [WEATHER_TOOL], "options": {"thinking": False}},
    {"name": "no_generation_prompt", "description": "add_generation_prompt false",
     "messages": MULTI_TURN, "options": {"thinking": True, "add_generation_prompt": False}},
    {"name": "content_parts_and_nulls", "description": "text parts joined with newlines; null content",
     "messages": [{"role": "system", "content": [{"type": "text", "text": "Part A"},
                                                 {"type": "text", "text": "Part B"}]},
                  {"role": "user", "content": [{"type": "text", "text": "Hello"}]},
                  {"role": "assistant", "content": None},
                  {"role": "user", "content": "again"}],
     "options": {"thinking": False}},
    {"name": "second_system_mid_conversation", "description": "a later system message renders bare",
     "messages": [{"role": "system", "content": "S1"}, {"role": "user", "content": "u1"},
                  {"role": "assistant", "content": "a1"}, {"role": "system", "content": "S2"},
                  {"role": "user", "content": "u2"}],
     "options": {"thinking": True, "drop_thinking": False}},
    {"name": "unicode_text", "description": "non-ASCII text and schemas stay unescaped",
     "messages": [{"role": "system", "content": "Réponds en français. 你好"},
                  {"role": "user", "content": "Ça va? 😀\n\tTabs and \"quotes\" \\ backslash"}],
     "tools": [SEARCH_TOOL], "options": {"thinking": False}},
]
