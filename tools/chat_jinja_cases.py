"""Inputs for the Jinja parity goldens (see chat_jinja_goldens.py).

FEATURES: (name, template, context) snippets, one language feature each; the golden records what
Python jinja2 renders, or that it raises. CONVERSATIONS: chat requests rendered through every
chat template under tests/unit/chat/golden/templates/ and the TYPICAL templates below.
"""

FEATURES = [
    # --- whitespace control (trim_blocks, lstrip_blocks, -/+ modifiers) ---
    ("trim_blocks", "{% if true %}\nyes\n{% endif %}\nafter", {}),
    ("lstrip_blocks", "a\n    {% if true %}\n    x\n    {% endif %}\nb", {}),
    ("lstrip_not_for_variables", "a\n    {{ 1 }}\nb", {}),
    ("minus_modifiers", "a  \n  {%- if true -%}  \n  b  {{- ' c ' -}}  d {%- endif %}", {}),
    ("plus_modifiers", "a\n    {%+ if true +%}\nb{% endif %}", {}),
    ("comment_trim", "a\n  {# note #}\nb {#- x -#}   c", {}),
    ("trailing_newline_dropped", "line\n", {}),
    ("crlf_normalized", "a\r\nb\rc{% if true %}\r\nd{% endif %}", {}),
    ("raw_block", "{% raw %}{{ not parsed }}{% endraw %}", {}),
    ("raw_with_strip", "x  {%- raw -%}  {{ y }}  {%- endraw -%}  z", {}),
    ("text_only_with_braces", "{ not a tag } and }} too", {}),
    ("block_end_inside_braces", "{{ {'a': '%}'}['a'] }}", {}),
    # --- literals and printing ---
    ("print_types", "{{ 1 }} {{ 1.5 }} {{ true }} {{ none }} {{ 'x' }} {{ [1, 'a', none, 2.0] }} {{ {'k': [1]} }}", {}),
    ("print_tuple", "{{ (1, 'a') }} {{ (1,) }} {{ () }}", {}),
    ("print_undefined", "[{{ missing }}]", {}),
    ("string_escapes", r"""{{ 'tab\there' }}|{{ "quote\"s" }}|{{ 'u\u00e9\x41' }}|{{ 'new\nline' }}|{{ 'keep\q' }}""", {}),
    ("string_repr_quotes", "{{ [\"it's\", 'say \"hi\"', 'both \\' \"'] }}", {}),
    ("adjacent_strings", "{{ 'a' 'b' \"c\" }}", {}),
    ("float_repr", "{{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e-5 }} {{ 2.0 * 3 }} {{ 1/3 }} {{ 10 / 2 }}", {}),
    ("number_literals", "{{ 1_000 }} {{ 0x1F }} {{ 0b101 }} {{ 0o17 }} {{ 1.5e3 }}", {}),
    # --- arithmetic ---
    ("arithmetic", "{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ -2 ** 2 }}", {}),
    ("float_arithmetic", "{{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 3 - 0.5 }} {{ true + 1 }}", {}),
    ("string_ops", "{{ 'ab' + 'cd' }} {{ 'ab' * 3 }} {{ 2 * 'x' }} {{ 'a' ~ 1 ~ none ~ missing ~ [1] }}", {}),
    ("list_ops", "{{ [1, 2] + [3] }} {{ [0] * 3 }}", {}),
    ("division_by_zero", "{{ 1 / 0 }}", {}),
    ("add_undefined_error", "{{ missing + 'x' }}", {}),
    ("add_mixed_error", "{{ 'a' + 1 }}", {}),
    # --- comparisons and logic ---
    ("comparisons", "{{ 1 < 2 }} {{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }}", {}),
    ("equality_types", "{{ 1 == '1' }} {{ none == none }} {{ [1] == [1] }} {{ {'a': 1} == {'a': 1} }} {{ true == 1 }}", {}),
    ("in_operator", "{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }} {{ 'x' in missing }}", {}),
    ("and_or_values", "{{ 0 or 'x' }} {{ 1 and 'y' }} {{ '' and 'z' }} {{ none or none }} {{ not 0 }} {{ not not 'a' }}", {}),
    ("cond_expr", "{{ 'yes' if 1 else 'no' }} [{{ 'only' if false }}] {{ 'a' if false else 'b' if true else 'c' }}", {}),
    ("order_mixed_error", "{{ 1 < 'a' }}", {}),
    # --- variables, attributes, items, slices ---
    ("attribute_and_item", "{{ m.role }} {{ m['content'] }} {{ m.missing is defined }} {{ m['tool_calls'] is defined }}",
     {"m": {"role": "user", "content": "hi"}}),
    ("nested_access", "{{ t.function.name }} {{ t['function']['arguments'] }} {{ items[1] }} {{ items[-1] }} [{{ items[9] }}]",
     {"t": {"function": {"name": "f", "arguments": "{}"}}, "items": [10, 20, 30]}),
    ("attribute_of_undefined_error", "{{ missing.attr }}", {}),
    ("slices", "{{ s[1:] }} {{ s[:-1] }} {{ s[::-1] }} {{ s[1:4:2] }} {{ l[1:] }} {{ l[::-1] }} {{ l[-2:] }} {{ l[5:] }}",
     {"s": "héllo", "l": [1, 2, 3]}),
    ("string_index", "{{ s[0] }}{{ s[-1] }}[{{ s[10] }}]", {"s": "añb"}),
    ("dict_methods", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %} {{ d.keys()|list }} {{ d.values()|list }} {{ d.get('a') }} {{ d.get('z', 'dflt') }} {{ d.get('z') }}",
     {"d": {"b": 1, "a": [2]}}),
    ("dict_key_shadows_method", "{{ d['items'] }}|{{ d.keys is defined }}|{{ d.items is defined }}", {"d": {"items": "data"}}),
    # --- string methods ---
    ("str_methods", "{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ s.upper() }}|{{ s.lower() }}|{{ 'x-y'.strip('x') }}",
     {"s": "  Hello World \n"}),
    ("str_split", "{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a b c'.rsplit(' ', 1) }} {{ 'x</think>y</think>z'.split('</think>', 1)[1] }}", {}),
    ("str_affixes", "{{ 'hello'.startswith('he') }} {{ 'hello'.endswith('lo') }} {{ 'hello'.startswith(('x', 'h')) }} {{ 'a'.endswith('abc') }}", {}),
    ("str_misc_methods", "{{ 'a-b-c'.replace('-', '+') }} {{ 'a-b-c'.replace('-', '', 1) }} {{ 'hello'.find('l') }} {{ 'hello'.count('l') }} {{ ', '.join(['x', 'y']) }} {{ 'abc'.title() }} {{ 'aBC'.capitalize() }}", {}),
    ("str_predicates", "{{ '123'.isdigit() }} {{ 'ab'.isalpha() }} {{ ' '.isspace() }} {{ 'ab'.islower() }} {{ 'AB'.isupper() }} {{ ''.isdigit() }}", {}),
    # --- loops ---
    ("for_loop_vars", "{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}",
     {"xs": ["a", "b", "c"]}),
    ("for_else", "{% for x in [] %}{{ x }}{% else %}empty{% endfor %}", {}),
    ("for_filter", "{% for x in range(10) if x is odd %}{{ x }}{{ '' if loop.last else ',' }}{% endfor %}", {}),
    ("for_unpack", "{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }} {% endfor %}{% for (k, v) in {'x': 1}.items() %}{{ k }}{{ v }}{% endfor %}", {}),
    ("for_string_and_dict", "{% for c in 'añ' %}[{{ c }}]{% endfor %}{% for k in {'b': 1, 'a': 2} %}{{ k }}{% endfor %}", {}),
    ("for_prev_next_cycle", "{% for x in [1, 2, 3] %}{{ loop.previtem }}/{{ loop.nextitem }}/{{ loop.cycle('o', 'e') }} {% endfor %}", {}),
    ("loop_scoping", "{% set x = 0 %}{% for i in range(3) %}{{ x }}{% set x = x + 1 %}{{ x }}|{% endfor %}{{ x }}", {}),
    ("nested_loops", "{% for i in range(2) %}{% for j in range(2) %}{{ i }}{{ j }}{{ loop.index }} {% endfor %}{{ loop.index }};{% endfor %}", {}),
    ("break_continue", "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}", {}),
    ("range_forms", "{{ range(3)|list }} {{ range(1, 4)|list }} {{ range(10, 0, -3)|list }} {{ range(0)|list }} {{ range(3)|length }}", {}),
    ("iterate_none_error", "{% for x in none %}{{ x }}{% endfor %}", {}),
    ("iterate_undefined", "{% for x in missing %}{{ x }}{% else %}none{% endfor %}", {}),
    # --- set, namespace, macros ---
    ("set_forms", "{% set a = 1 %}{% set b, c = [2, 3] %}{% set t = 4, 5 %}{{ a }}{{ b }}{{ c }}{{ t }}", {}),
    ("set_block", "{% set block %}x{{ 1 + 1 }}y{% endset %}[{{ block }}]", {}),
    ("namespace", "{% set ns = namespace(n=0, s='') %}{% for i in range(3) %}{% set ns.n = ns.n + i %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }} {{ ns.s }}", {}),
    ("namespace_attr_missing", "{% set ns = namespace() %}[{{ ns.nothing }}] {{ ns.nothing is defined }}", {}),
    ("set_attr_on_dict_error", "{% set d = {} %}{% set d.x = 1 %}", {}),
    ("macro", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }} {{ greet(name='C') }}", {}),
    ("macro_sees_globals", "{% set g = 'G' %}{% macro m() %}{{ g }}{{ top }}{% endmacro %}{{ m() }}", {"top": "T"}),
    ("macro_recursion", "{% macro count(n) %}{{ n }}{% if n > 0 %}{{ count(n - 1) }}{% endif %}{% endmacro %}{{ count(5) }}", {}),
    ("generation_block", "a{% generation %}b{{ 1 }}{% endgeneration %}c", {}),
    ("if_elif_else", "{% for v in [1, 2, 3] %}{% if v == 1 %}one{% elif v == 2 %}two{% else %}many{% endif %} {% endfor %}", {}),
    # --- tests ---
    ("tests_types", "{{ 'a' is string }}{{ 1 is number }}{{ 1.0 is float }}{{ 1 is integer }}{{ true is boolean }}{{ {} is mapping }}{{ [] is sequence }}{{ 'a' is iterable }}{{ none is none }}{{ 1 is iterable }}",
     {}),
    ("tests_values", "{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(4) }}{{ 'ab' is lower }}{{ 1 is eq 1 }}{{ 1 is equalto 2 }}{{ 2 is gt 1 }}{{ 'a' is in 'abc' }}{{ none is sameas none }}{{ x is not defined }}",
     {}),
    ("tests_truthy_values", "{{ 1 is true }}{{ true is true }}{{ false is false }}{{ 0 is false }}{{ missing is undefined }}", {}),
    # --- filters ---
    ("filter_length", "{{ 'héllo'|length }} {{ [1, 2]|length }} {{ {'a': 1}|count }} {{ missing|length }}", {}),
    ("filter_trim_case", "[{{ '  x  '|trim }}] [{{ 'xxaxx'|trim('x') }}] {{ 'Ab'|lower }} {{ 'Ab'|upper }} {{ 'hello world'|title }} {{ 'hELLO'|capitalize }}", {}),
    ("filter_default", "{{ missing|default('d') }} {{ none|default('d') }} {{ ''|default('d', true) }} {{ 'v'|d('x') }} [{{ missing|default }}]", {}),
    ("filter_join_first_last", "{{ [1, 2, 3]|join(', ') }} {{ [1, 2]|join }} {{ [1, 2]|first }} {{ [1, 2]|last }} {{ 'abc'|first }} {{ users|join(', ', attribute='name') }}",
     {"users": [{"name": "a"}, {"name": "b"}]}),
    ("filter_replace", "{{ 'aaa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ 'abc'|replace('', '-') }}", {}),
    ("filter_tojson", "{{ d|tojson }} {{ d|tojson(indent=2) }} {{ 'é<>&'|tojson }} {{ [1.0, none, true]|tojson }} {{ d|tojson(separators=(',', ':')) }} {{ d|tojson(sort_keys=true) }}",
     {"d": {"b": 1, "a": {"x": [1, "é"]}}}),
    ("filter_tojson_ascii", "{{ 'é😀'|tojson(ensure_ascii=true) }}", {}),
    ("filter_items_list", "{{ {'a': 1, 'b': 2}|items|list }} {{ 'ab'|list }} {{ missing|items|list }}", {}),
    ("filter_select", "{{ [1, 2, 3, 4]|select('odd')|list }} {{ [0, 1, '', 'a']|select|list }} {{ [1, 2, 3]|reject('even')|list }}", {}),
    ("filter_selectattr", "{{ ms|selectattr('role', 'equalto', 'user')|map(attribute='content')|list }} {{ ms|rejectattr('role', 'eq', 'user')|list|length }} {{ ms|selectattr('hidden')|list }} {{ ms|selectattr('hidden', 'undefined')|list|length }}",
     {"ms": [{"role": "user", "content": "u1"}, {"role": "assistant", "content": "a1", "hidden": True},
             {"role": "user", "content": "u2"}]}),
    ("filter_map", "{{ ['a', 'b']|map('upper')|list }} {{ xs|map(attribute='n', default=0)|list }} {{ xs|map(attribute='n')|sum }}",
     {"xs": [{"n": 1}, {"n": 2}]}),
    ("filter_sort_unique", "{{ [3, 1, 2]|sort }} {{ ['b', 'A', 'c']|sort }} {{ [3, 1]|sort(reverse=true) }} {{ ['a', 'A', 'b']|unique|list }} {{ xs|sort(attribute='k')|map(attribute='k')|list }}",
     {"xs": [{"k": 2}, {"k": 1}]}),
    ("filter_numbers", "{{ '42'|int }} {{ '4.7'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ '2.5'|float }} {{ -3|abs }} {{ 2.5|round }} {{ 3.14159|round(2) }} {{ 2.1|round(0, 'ceil') }} {{ [1, 2.5]|sum }}", {}),
    ("filter_min_max_reverse", "{{ [3, 1, 2]|min }} {{ [3, 1, 2]|max }} {{ 'abc'|reverse }} {{ [1, 2]|reverse|list }}", {}),
    ("filter_string_safe", "{{ 12|string + 'x' }} {{ none|string }} {{ '<b>'|safe }} {{ '<b>&\"'|e }} {{ 'a b  c'|wordcount }}", {}),
    ("filter_indent", "{{ 'a\nb\n\nc'|indent(2) }}|{{ 'a\nb'|indent(2, true) }}|{{ 'a\n\nb'|indent(width='> ', blank=true) }}", {}),
    ("unknown_filter_error", "{% if false %}{{ x|nosuchfilter }}{% endif %}ok", {}),
    ("unknown_test_error", "{{ x is nosuchtest }}", {}),
    ("generator_results", "{{ not ([]|select) }} {{ [1, 2]|map('string')|join('-') }} {{ ms|selectattr('role')|first }} {{ ([3]|select('odd')|list)[0] }}",
     {"ms": [{"role": "user"}]}),
    ("generator_length_error", "{{ [1]|map('string')|length }}", {}),
    ("generator_tojson_error", "{{ [1]|select|tojson }}", {}),
    ("python_title_and_case_tests", "{{ 'a,b c-d'.title() }} {{ '' is lower }} {{ 12 is lower }} {{ 'A1' is upper }} {{ 2|round }} {{ 2|round(1) }} {{ 2|round(0, 'floor') }}", {}),
    ("int_of_undefined_error", "{{ missing|int }}", {}),
    ("indent_needs_string_error", "{{ 5|indent(2) }}", {}),
    # --- errors and the sandbox ---
    ("raise_exception", "{% if true %}{{ raise_exception('Roles must alternate') }}{% endif %}", {}),
    ("syntax_error_unclosed", "{% if true %}open", {}),
    ("syntax_error_bad_expr", "{{ 1 + }}", {}),
    ("syntax_error_unknown_tag", "{% include 'x' %}", {}),
    ("sandbox_dunder_chain", "{{ ''.__class__.__mro__ }}", {}),
    ("sandbox_globals_chain", "{{ cycler.__init__.__globals__ }}", {}),
    ("sandbox_list_append", "{% set l = [] %}{{ l.append(1) }}", {}),
    ("call_non_callable", "{{ 'x'() }}", {}),
    ("mapping_in_context", "{{ user.name }} {{ user.tags|join('/') }} {{ user.age + 1 }}",
     {"user": {"name": "Zoë", "tags": ["a", "b"], "age": 41}}),
]

TYPICAL = {
    # ChatML-style template with tool definitions and tool calls, in the shape Qwen-style templates use.
    "chatml_tools": """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\\n\\n' }}
    {%- endif %}
    {{- "# Tools\\n\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools><|im_end|>\\n" }}
{%- elif messages[0].role == 'system' %}
    {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- set ns = namespace(last_user=-1) %}
{%- for message in messages %}
    {%- if message.role == 'user' %}{% set ns.last_user = loop.index0 %}{% endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
    {%- elif message.role == 'assistant' %}
        {%- set content = message.content if message.content is string else '' %}
        {%- if loop.index0 > ns.last_user and message.reasoning_content is defined %}
            {{- '<|im_start|>assistant\\n<think>\\n' + message.reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}
        {%- else %}
            {{- '<|im_start|>assistant\\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}{{- '\\n' }}{%- endif %}
                {%- set call = tool_call.function if tool_call.function else tool_call %}
                {{- '<tool_call>\\n{"name": "' }}{{- call.name }}{{- '", "arguments": ' }}
                {%- if call.arguments is string %}{{- call.arguments }}{%- else %}{{- call.arguments | tojson }}{%- endif %}
                {{- '}\\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == 'tool' %}
        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
        {{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}
{%- endif %}
""",
    # Strict alternation with raise_exception and a macro, in the shape Mistral/Llama-style templates use.
    "alternating_strict": """{{- bos_token }}
{%- macro render_header(role) -%}[{{ role | upper }}]{%- endmacro -%}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] | trim %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set system_message = '' %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- for message in loop_messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {%- if message['role'] == 'user' %}
        {%- if loop.first and system_message != '' %}
{{ render_header('system') }} {{ system_message }}
        {%- endif %}
{{ render_header('user') }} {{ message['content'] | trim }}
    {%- elif message['role'] == 'assistant' %}
{{ render_header('assistant') }} {{ message['content'] | trim }}{{ eos_token }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
{{ render_header('assistant') }}
{%- endif %}
""",
}

WEATHER_TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def tool_call(call_id, name, arguments):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


CONVERSATIONS = [
    {"name": "single_user", "messages": [{"role": "user", "content": "Hello"}], "add_generation_prompt": True},
    {"name": "system_user", "messages": [{"role": "system", "content": "Be brief."},
                                         {"role": "user", "content": "Hi"}], "add_generation_prompt": True},
    {"name": "two_systems", "messages": [{"role": "system", "content": "S1"}, {"role": "system", "content": "S2"},
                                         {"role": "user", "content": "Hi"}], "add_generation_prompt": True},
    {"name": "multi_turn", "messages": [
        {"role": "system", "content": "You are helpful."}, {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"}, {"role": "user", "content": "times 3?"},
        {"role": "assistant", "content": "<think>4*3</think>12"}, {"role": "user", "content": "thanks"}],
     "add_generation_prompt": True},
    {"name": "no_generation_prompt", "messages": [
        {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}], "add_generation_prompt": False},
    {"name": "thinking_on", "messages": [{"role": "user", "content": "Solve it"}], "add_generation_prompt": True,
     "extra": {"thinking": True, "enable_thinking": True}},
    {"name": "thinking_off", "messages": [{"role": "user", "content": "Solve it"}], "add_generation_prompt": True,
     "extra": {"thinking": False, "enable_thinking": False}},
    {"name": "tool_round_trip", "messages": [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": None, "tool_calls": [
            tool_call("c1", "get_weather", '{"city": "Paris"}'), tool_call("c2", "get_weather", '{"city": "Rome"}')]},
        {"role": "tool", "tool_call_id": "c1", "content": "18C"},
        {"role": "tool", "tool_call_id": "c2", "content": "24C"},
        {"role": "assistant", "content": "Paris 18C, Rome 24C."},
        {"role": "user", "content": "Thanks"}],
     "tools": [WEATHER_TOOL], "add_generation_prompt": True},
    {"name": "tool_call_with_content", "messages": [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "Checking.", "tool_calls": [tool_call("c1", "get_weather", '{"city": "Oslo"}')]},
        {"role": "tool", "tool_call_id": "c1", "content": "-3C"}],
     "tools": [WEATHER_TOOL], "add_generation_prompt": True},
    {"name": "prefix_assistant", "messages": [
        {"role": "user", "content": "Write a haiku"}, {"role": "assistant", "content": "Autumn", "prefix": True}],
     "add_generation_prompt": True, "extra": {"thinking": True}},
    {"name": "unicode_content", "messages": [
        {"role": "system", "content": "Réponds en français 🇫🇷"}, {"role": "user", "content": "Ça va? 你好 \"q\" \\ \n\tend"}],
     "add_generation_prompt": True},
    {"name": "alternation_violation", "messages": [
        {"role": "user", "content": "a"}, {"role": "user", "content": "b"}], "add_generation_prompt": True},
    {"name": "reasoning_content_field", "messages": [
        {"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1", "reasoning_content": "r1"},
        {"role": "user", "content": "q2"}, {"role": "assistant", "content": "\na2", "reasoning_content": "\nr2\n"}],
     "add_generation_prompt": False},
]
