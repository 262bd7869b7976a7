#!/usr/bin/env python3
"""Small Jinja semantics cases for tests/test_jinja.c, rendered by jinja2 in the environment
transformers builds for chat templates (ImmutableSandboxedEnvironment, trim_blocks,
lstrip_blocks, loopcontrols, its tojson, raise_exception, strftime_now at a fixed time,
namespace, dict). Each case: a template, variables, and jinja2's output or the fact that it
raised (with the exception type). Writes tests/fixtures/templates/jinja_cases.json.

    /work/venv-hf/bin/python tools/gen_jinja_cases.py
"""
import datetime
import json
import os

import jinja2
import transformers
from transformers.utils import chat_template_utils as ctu

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(os.path.dirname(HERE), "tests", "fixtures", "templates", "jinja_cases.json")
NOW = datetime.datetime(2026, 3, 14, 9, 26, 53)


class FixedDatetime(datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return NOW


ctu.datetime = FixedDatetime

V = {
    "msgs": [{"role": "system", "content": "S"}, {"role": "user", "content": " hi \n"},
             {"role": "assistant", "content": "yo", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]}],
    "d": {"b": 2, "a": 1, "items": 5, "nested": {"x": [1, 2, {"y": None}]}},
    "s": "Héllo, Wörld ✓",
    "n": None, "t": True, "f": False, "i": 7, "x": 2.5, "neg": -3, "big": 9007199254740993,
    "l": [3, 1, 2], "words": ["b", "A", "c"], "empty": [], "es": "",
    "people": [{"name": "Ann", "age": 31}, {"name": "bob", "age": 25}, {"name": "Cy", "age": 31}],
}

CASES = [
    # whitespace control, trim_blocks, lstrip_blocks
    "a\n  {% if true %}\n  b\n  {% endif %}\nc",
    "a  {%- if true %} b {% endif -%}  c",
    "a {{- ' x ' -}} b",
    "  {{ 'v' }}  \n  {# c #}\n  x",
    "{% if true +%}\nkeep{%+ endif %}",
    "line\n    {#- comment -#}\n  next",
    "{% raw %}{{ not evaluated }}{% endraw %}\n{%- raw -%}  x  {%- endraw %}",
    "{{ 'a' }}\n{{ 'b' }}\n",
    "x\r\ny\rz{% if true %}\r\nw{% endif %}",
    "\t {% for i in l %}\n\t {{ i }}\n\t {% endfor %}\n",
    "{%- for i in l -%}\n  {{ i }},\n{%- endfor %}",
    "{{ '{{' }}{{ \"%}\" }}{{ {'a': {'b': 1}} }}",
    # expressions
    "{{ 1 + 2 * 3 - 4 / 2 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ 7 % -3 }}|{{ 2 ** 3 ** 2 }}|{{ 2 ** -2 }}",
    "{{ 1.0 }}|{{ 0.1 + 0.2 }}|{{ 1e-5 }}|{{ 1e16 }}|{{ 123456789012345678.0 }}|{{ -0.0 }}|{{ 3 / 3 }}|{{ x * 2 }}",
    "{{ 'a' ~ 1 ~ none ~ true ~ [1] }}|{{ 'ab' * 3 }}|{{ [1] * 2 }}|{{ [1, 2] + [3] }}",
    "{{ 1 < 2 < 3 }}{{ 3 > 2 > 2 }}{{ 1 == 1.0 }}{{ 'a' != 'b' }}{{ [1, 2] == [1, 2] }}{{ (1, 2) == [1, 2] }}",
    "{{ 'b' in 'abc' }}{{ 2 in l }}{{ 'a' in d }}{{ 'z' not in d }}{{ 'x' in msgs[0] }}",
    "{{ not none }}{{ none or 'dflt' }}{{ 0 and 1 }}{{ 'x' and 'y' }}{{ [] or {} }}",
    "{{ 'yes' if t else 'no' }}|{{ 'yes' if f }}|{{ 'a' if f else 'b' if t else 'c' }}",
    "{{ s[1] }}|{{ s[-1] }}|{{ s[1:5] }}|{{ s[::-1] }}|{{ s[::3] }}|{{ l[1:] }}|{{ l[:-1] }}|{{ l[::-1] }}|{{ l[5:9] }}",
    "{{ d.b }}{{ d['a'] }}{{ d.nested.x[2].y }}{{ d.nested['x'][0] }}|{{ d.missing }}|{{ l.9 }}|{{ msgs.0.role }}",
    "{{ (1, 2) }}{{ (1,) }}{{ () }}{{ [] }}{{ {} }}{{ {'a': 'q\\'s', \"b\": \"d\\\"q\"} }}{{ ['it\\'s', \"x\"] }}",
    "{{ 'esc: \\n\\t\\\\ \\x41\\u00e9\\U0001F600 \\q' }}",
    "{{ 0x1F }}{{ 0o17 }}{{ 0b101 }}{{ 1_000 }}{{ 1_0.5 }}",
    "{{ none }}|{{ true }}|{{ n }}|{{ undefined_var }}|{{ d }}|{{ msgs[2].tool_calls }}",
    "{{ big }}|{{ big + 1 }}|{{ i / 2 }}|{{ neg % 4 }}|{{ -neg }}|{{ +x }}",
    # statements and scoping
    "{% set x = 1 %}{% for i in range(3) %}{{ x }}{% set x = x + 1 %}{{ x }},{% endfor %}{{ x }}",
    "{% for i in range(3) %}{% if i == 0 %}{% set y = 5 %}{% endif %}{{ y }},{% endfor %}[{{ y }}]",
    "{% set ns = namespace(c=0, items=[]) %}{% for m in msgs %}{% set ns.c = ns.c + 1 %}{% set ns.items = ns.items + [m.role] %}{% endfor %}{{ ns.c }}{{ ns.items }}",
    "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set (c, e) = [3, 4] %}{{ c }}{{ e }}",
    "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
    "{% for k in d %}{{ k }},{% endfor %}|{% for ch in 'añb' %}[{{ ch }}]{% endfor %}",
    "{% for m in msgs if m.role != 'system' %}{{ loop.index }}/{{ loop.length }}:{{ m.role }}{% if not loop.last %}, {% endif %}{% endfor %}",
    "{% for i in l %}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.previtem }}{{ loop.nextitem }}{{ loop.cycle('a', 'b') }}|{% endfor %}",
    "{% for i in empty %}x{% else %}empty{% endfor %}{% for i in undefined_var %}x{% else %}u{% endfor %}",
    "{% for i in range(10) %}{% if i is odd %}{% continue %}{% endif %}{% if i > 6 %}{% break %}{% endif %}{{ i }}{% endfor %}",
    "{% for a in range(2) %}{% for b in range(2) %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{{ loop.index }}|{% endfor %}",
    "{% for i in [1, 1, 2] %}{{ loop.changed(i) }}{% endfor %}",
    "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('a') }} {{ greet('b', '?') }} {{ greet(punct='.', name='c') }}",
    "{% macro rec(n) %}{% if n > 0 %}{{ n }}{{ rec(n - 1) }}{% endif %}{% endmacro %}{{ rec(4) }}",
    "{% macro m() %}{{ later }}{% endmacro %}{% set later = 'L' %}{{ m() }}",
    "{% set block %}  inner {{ 1 + 1 }}  {% endset %}[{{ block }}]{% set b2 | upper | trim %} x {% endset %}[{{ b2 }}]",
    "{% filter upper %}abc {{ 'd' }}{% endfilter %}",
    "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]",
    "{% if false %}a{% elif none %}b{% elif 0 %}c{% else %}d{% endif %}",
    "{% generation %}gen {{ 1 }}{% endgeneration %}",
    "{% set messages = msgs[1:] %}{{ messages|length }}{{ messages[0].role }}",
    "{% if msgs[0]['role'] == 'system' %}{% set sys = msgs[0]['content']|trim %}{% endif %}{{ sys }}",
    # filters
    "{{ '  a b  '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ n|trim }}|{{ 'a'|upper }}{{ 'ÀB'|lower }}|{{ 'hello world'|title }}|{{ 'hELLO'|capitalize }}",
    "{{ l|length }}{{ s|length }}{{ d|length }}{{ undefined_var|length }}{{ l|count }}|{{ l|first }}{{ l|last }}{{ l|min }}{{ l|max }}{{ l|sum }}",
    "{{ l|sort }}{{ l|sort(reverse=true) }}{{ words|sort }}{{ words|sort(case_sensitive=true) }}{{ people|sort(attribute='age')|map(attribute='name')|join(',') }}",
    "{{ l|join('-') }}|{{ people|join(', ', attribute='name') }}|{{ words|map('upper')|list }}|{{ l|reverse|list }}|{{ 'abc'|reverse }}",
    "{{ people|selectattr('age', 'equalto', 31)|map(attribute='name')|list }}{{ people|rejectattr('age', '>', 30)|list|length }}{{ l|select('odd')|list }}{{ l|reject('odd')|list }}",
    "{{ msgs|selectattr('role', 'equalto', 'user')|list|length }}{{ msgs|map(attribute='tool_calls')|select('defined')|list|length }}",
    "{{ d|dictsort }}{{ d|dictsort(reverse=true)|first }}{{ d|items|list|length }}",
    "{{ undefined_var|default('dflt') }}{{ none|default('dflt') }}{{ none|default('dflt', true) }}{{ ''|d('e', true) }}",
    "{{ [1, 2, 1, 3]|unique|list }}{{ 'aXb'|replace('X', '--') }}{{ 'aaa'|replace('a', 'b', 2) }}{{ 3.7|int }}{{ '42'|int + 1 }}{{ 'x'|int }}{{ 2|float }}{{ 2.567|round(1) }}{{ 2.5|round }}{{ -3|abs }}",
    "{{ 'one two  three'|wordcount }}{{ 'abc'|center(7) }}|{{ 'long text here'|truncate(9) }}|{{ 'a\nb'|indent(2) }}|{{ 'a\nb'|indent(2, true) }}|{{ l|string }}{{ 5|string }}",
    "{{ '<a&b>'|e }}{{ '%s-%d'|format('a', 3) }}{{ 'x'|safe }}{{ [1, 2, 3, 4, 5]|batch(2)|list }}{{ [1, 2, 3]|slice(2)|list }}",
    "{{ people|groupby('age')|map(attribute='grouper')|list }}{{ people|map(attribute='missing', default='?')|join }}",
    "{{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ msgs[2]|tojson(sort_keys=true) }}|{{ s|tojson }}|{{ s|tojson(ensure_ascii=true) }}",
    "{{ [1.5, 1e-7, 1e22, none, true, 'q\"\\\\\\n\\u2028'] | tojson }}|{{ {'a': []}|tojson(indent=4) }}|{{ {'a': 1, 'b': [1, {}]}|tojson(separators=(',', ':')) }}",
    "{{ range(5)|list }}{{ range(1, 10, 3)|list }}{{ range(5, 0, -2)|list }}{{ range(0)|list }}",
    # tests
    "{{ n is none }}{{ undefined_var is defined }}{{ d is mapping }}{{ l is iterable }}{{ s is iterable }}{{ s is string }}{{ l is sequence }}{{ d is sequence }}",
    "{{ i is number }}{{ x is number }}{{ t is number }}{{ i is integer }}{{ t is integer }}{{ x is float }}{{ t is boolean }}{{ i is boolean }}",
    "{{ 4 is even }}{{ 4 is odd }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(4) }}{{ t is true }}{{ 1 is true }}{{ f is false }}{{ n is not none }}",
    "{{ 'ab' is lower }}{{ 'AB' is upper }}{{ 2 is in l }}{{ 1 is eq 1 }}{{ 1 is ne 2 }}{{ 3 is gt 2 }}{{ 3 is ge 3 }}{{ 2 is lt 1 }}{{ d is callable }}{{ range is callable }}",
    "{{ msgs[2].tool_calls is defined }}{{ msgs[1].tool_calls is defined }}{{ msgs[1].tool_calls is undefined }}{{ ns is defined }}",
    # methods
    "{{ '  x  '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ '\\n\\nA\\n'.lstrip('\\n') }}|{{ 'ab  '.rstrip() }}|{{ s.upper() }}|{{ s.lower() }}",
    "{{ 'a,b,,c'.split(',') }}{{ ' a  b '.split() }}{{ 'a b c'.split(' ', 1) }}{{ 'a,b,c'.rsplit(',', 1) }}{{ 'l1\\nl2\\r\\nl3'.splitlines() }}",
    "{{ s.startswith('Hé') }}{{ s.endswith(('x', '✓')) }}{{ s.find('W') }}{{ s.replace('l', 'L') }}{{ '-'.join(['a', 'b']) }}{{ 'abc'.count('b') }}",
    "{{ '<think>r</think>\\n\\nans'.split('</think>')[-1].lstrip('\\n') }}|{{ '<think>\\nr\\n</think>x'.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}",
    "{{ d.get('a') }}{{ d.get('zz') }}{{ d.get('zz', 'dv') }}{{ d.keys()|list }}{{ d.values()|list|length }}",
    "{{ '{} and {}'.format('a', 'b') }}{{ '{0}{name}'.format(1, name='n') }}{{ 'abc'.title() }}{{ 'AbC'.swapcase() }}{{ '42'.isdigit() }}{{ 'ab'.isalpha() }}{{ 'x'.center(5, '*') }}",
    # globals
    "{{ strftime_now('%Y-%m-%d %H:%M:%S') }}|{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%A %B %j') }}",
    "{% set nd = dict(a=1, b='x') %}{{ nd }}{{ nd.a }}{% set ns = namespace({'k': 1}, j=2) %}{{ ns.k }}{{ ns.j }}",
    # errors jinja2 raises
    "{{ raise_exception('custom message: ' ~ msgs|length) }}",
    "{{ undefined_var.attr }}",
    "{{ undefined_var + 1 }}",
    "{{ 'a' + 1 }}",
    "{{ 1 + 'a' }}",
    "{{ l.append(4) }}",
    "{{ range(200000)|length }}",
    "{% for i in n %}{% endfor %}",
    "{% for i in i %}{% endfor %}",
    "{{ 1 / 0 }}",
    "{{ d|tojson|tojson }}{{ ns|tojson }}",
    "{% set ns = namespace() %}{{ ns|tojson }}",
    "{% set d.x = 1 %}",
    "{{ 'x' in undefined_var }}",
    "{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}",
    "{% if %}",
    "{% for x in l %}",
    "{% endif %}",
    "{{ 1 +* 2 }}",
    "{{ 'unterminated }}",
    "{% unknowntag %}",
    "{{ l|nosuchfilter }}",
    "{{ l is nosuchtest }}",
    "{{ (1, 2)|tojson }}{{ {1: 'a', true: 'b', none: 'c'}|tojson }}",
]


def main():
    env = ctu._cached_compile_jinja_template("{{ 1 }}").environment
    out = {"generator": f"tools/gen_jinja_cases.py (transformers {transformers.__version__}, jinja2 {jinja2.__version__})",
           "date": NOW.isoformat(), "vars": V, "cases": []}
    for src in CASES:
        case = {"template": src}
        try:
            tmpl = env.from_string(src)
            case["output"] = tmpl.render(**V)
        except jinja2.exceptions.TemplateSyntaxError as e:
            case["error_type"] = "TemplateSyntaxError"
            case["error"] = str(e)
        except Exception as e:  # noqa: BLE001 - the type is the expectation
            case["error_type"] = type(e).__name__
            case["error"] = str(e)
        out["cases"].append(case)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    ok = sum("output" in c for c in out["cases"])
    print(f"{OUT}: {len(CASES)} cases, {ok} render, {len(CASES) - ok} raise")


if __name__ == "__main__":
    main()
