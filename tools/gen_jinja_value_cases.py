#!/usr/bin/env python3
"""Writes tests/jinja_value_cases.h: builtin filter/test/method/global calls of the Jinja
interpreter with the output jinja2 (as transformers configures it) gives for each, so that
tests/test_jinja_value.c checks the C builtins against Python's actual behaviour.

Each case is (kind, name, self, args, kwargs): kind f filter, t test, m method, g global;
self is JSON-able (U = undefined). The expected text is str() of the result as a template
prints it, or an error. Run: python tools/gen_jinja_value_cases.py > tests/jinja_value_cases.h
(needs jinja2 >= 3.1)."""
import json
import sys

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

U = object()


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # transformers' override of the tojson filter (chat_template_utils.py)
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = tojson
    return env


msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "yo"}, {"role": "user", "content": "again"}]
people = [{"name": "bob", "age": 30}, {"name": "Al", "age": 25}, {"name": "cy", "age": 30}]
nested = {"a": [1, 2.5, None, True, "x\u00e9\"\\\n"], "b": {"c": [], "d": {}}, "e": "\U0001F600"}

CASES = [
    # filters
    ("f", "trim", "  a b \n", [], {}), ("f", "trim", "xxaxyx", ["xy"], {}), ("f", "trim", None, [], {}),
    ("f", "trim", U, [], {}), ("f", "trim", "\u3000\u00a0a\u2003", [], {}),
    ("f", "join", [1, 2, 3], ["-"], {}), ("f", "join", ["a", None, 1.5, True], [], {}),
    ("f", "join", people, [", "], {"attribute": "name"}), ("f", "join", "abc", ["|"], {}),
    ("f", "join", U, [","], {}),
    ("f", "map", ["a", "B"], ["upper"], {}), ("f", "map", people, [], {"attribute": "name"}),
    ("f", "map", people, [], {"attribute": "x", "default": "d"}), ("f", "map", ["1", "2.5", "x"], ["int"], {}),
    ("f", "map", [[1, 2], [3]], ["join", "+"], {}), ("f", "map", [], ["upper"], {}),
    ("f", "map", msgs, [], {"attribute": "role"}),
    ("f", "select", [1, 2, 3, 4, 5, 6], ["odd"], {}), ("f", "select", [1, 2, 3, 4, 5, 6], ["divisibleby", 3], {}),
    ("f", "select", [0, 1, "", None, "a", [], [0]], [], {}), ("f", "reject", [1, None, 2], ["none"], {}),
    ("f", "select", [1, 5, 9], [">", 4], {}), ("f", "select", ["a", "b"], ["in", ["b", "c"]], {}),
    ("f", "selectattr", msgs, ["role", "equalto", "user"], {}), ("f", "rejectattr", msgs, ["role", "eq", "user"], {}),
    ("f", "selectattr", [{"a": {"b": 1}}, {"a": {}}], ["a.b", "defined"], {}),
    ("f", "selectattr", [{"x": 0}, {"x": 2}], ["x"], {}),
    ("f", "sort", [3, 1, 2], [], {}), ("f", "sort", [3, 1, 2], [], {"reverse": True}),
    ("f", "sort", ["b", "A", "c", "a"], [], {}), ("f", "sort", ["b", "A", "c", "a"], [], {"case_sensitive": True}),
    ("f", "sort", people, [], {"attribute": "age"}), ("f", "sort", people, [], {"attribute": "age,name"}),
    ("f", "sort", people, [True], {"attribute": "age"}), ("f", "sort", [[2, "b"], [1, "z"], [2, "a"]], [], {}),
    ("f", "sort", [1, "a"], [], {}), ("f", "sort", [[1, 2], [0, 5]], [], {"attribute": "1"}),
    ("f", "dictsort", {"b": 1, "A": 2, "c": 0}, [], {}), ("f", "dictsort", {"b": 1, "A": 2, "c": 0}, [], {"by": "value"}),
    ("f", "dictsort", {"b": 1, "A": 2, "c": 0}, [True], {}), ("f", "dictsort", {"b": 1, "a": 2}, [], {"reverse": True}),
    ("f", "dictsort", {"a": 1}, [], {"by": "x"}),
    ("f", "default", U, ["x"], {}), ("f", "default", "", ["x"], {}), ("f", "default", "", ["x", True], {}),
    ("f", "default", None, ["x"], {}), ("f", "default", 0, ["x"], {"boolean": True}), ("f", "d", U, [], {}),
    ("f", "length", "h\u00e9llo", [], {}), ("f", "length", [1, 2], [], {}), ("f", "length", {"a": 1}, [], {}),
    ("f", "length", U, [], {}), ("f", "count", "abc", [], {}), ("f", "length", 5, [], {}),
    ("f", "list", "ab\u00e9", [], {}), ("f", "list", {"a": 1, "b": 2}, [], {}), ("f", "list", U, [], {}),
    ("f", "list", 3, [], {}),
    ("f", "first", [1, 2, 3], [], {}), ("f", "first", "h\u00e9", [], {}), ("f", "first", [], [], {}),
    ("f", "last", [1, 2, 3], [], {}), ("f", "last", "h\u00e9", [], {}), ("f", "last", {"a": 1, "b": 2}, [], {}),
    ("f", "unique", ["a", "A", "b", "a"], [], {}), ("f", "unique", ["a", "A", "b", "a"], [True], {}),
    ("f", "unique", [1, 1.0, True, 2], [], {}), ("f", "unique", people, [], {"attribute": "age"}),
    ("f", "min", [3, 1, 2], [], {}), ("f", "max", ["b", "A", "c"], [], {}), ("f", "max", ["b", "A", "c"], [True], {}),
    ("f", "max", people, [], {"attribute": "age"}), ("f", "min", [], [], {}),
    ("f", "sum", [1, 2, 3.5], [], {}), ("f", "sum", people, [], {"attribute": "age"}), ("f", "sum", [1, 2], [], {"start": 10}),
    ("f", "sum", [[1], [2]], [], {"start": []}), ("f", "sum", ["a"], [], {}),
    ("f", "int", "42", [], {}), ("f", "int", "42.9", [], {}), ("f", "int", 42.9, [], {}), ("f", "int", -3.7, [], {}),
    ("f", "int", " 0x1A ", [], {"base": 16}), ("f", "int", "1_000", [], {}), ("f", "int", "abc", [], {}),
    ("f", "int", "abc", [7], {}), ("f", "int", None, [], {}), ("f", "int", True, [], {}), ("f", "int", "0b101", [0, 0], {}),
    ("f", "float", "1.5", [], {}), ("f", "float", " -inf ", [], {}), ("f", "float", "abc", [], {}), ("f", "float", 3, [], {}),
    ("f", "float", "1e3", [], {}), ("f", "float", "nan", [], {}), ("f", "float", None, [1.5], {}),
    ("f", "round", 2.5, [], {}), ("f", "round", 3.14159, [2], {}), ("f", "round", 2.675, [2], {}),
    ("f", "round", 1234.5, [-2], {}), ("f", "round", 7, [], {"method": "ceil"}), ("f", "round", 2.1, [], {"method": "ceil"}),
    ("f", "round", -2.5, [], {}), ("f", "round", 0.5, [], {}), ("f", "round", 3, [], {}), ("f", "round", 2.77, [1], {"method": "floor"}),
    ("f", "round", 1.5, [], {"method": "up"}), ("f", "round", 1250, [-2], {}), ("f", "round", 1350, [-2], {}),
    ("f", "abs", -3, [], {}), ("f", "abs", -2.5, [], {}), ("f", "abs", True, [], {}), ("f", "abs", "x", [], {}),
    ("f", "capitalize", "hELLO wORLD", [], {}), ("f", "title", "hello-world (foo) bar's x\tyO", [], {}),
    ("f", "title", "\u00e9cole \u00c9T\u00c9", [], {}), ("f", "upper", "stra\u00dfe \u00e9", [], {}),
    ("f", "lower", "\u00c0\u00c9\u00ce ABC", [], {}), ("f", "upper", None, [], {}), ("f", "lower", U, [], {}),
    ("f", "center", "ab", [7], {}), ("f", "center", "abc", [8], {}), ("f", "center", "abcdef", [3], {}),
    ("f", "indent", "a\nb\n\nc", [], {}), ("f", "indent", "a\nb\n\nc\n", [2], {"first": True}),
    ("f", "indent", "a\n\nb", [], {"blank": True}), ("f", "indent", "a\nb", ["> "], {}),
    ("f", "replace", "aaa", ["a", "b", 2], {}), ("f", "replace", "abc", ["", "-"], {}), ("f", "replace", 1.5, [".", ","], {}),
    ("f", "reverse", "h\u00e9llo", [], {}), ("f", "reverse", [1, 2, 3], [], {}), ("f", "reverse", U, [], {}),
    ("f", "batch", [1, 2, 3, 4, 5], [2], {}), ("f", "batch", [1, 2, 3, 4, 5], [2, 0], {}),
    ("f", "slice", [1, 2, 3, 4, 5, 6, 7], [3], {}), ("f", "slice", [1, 2, 3, 4, 5, 6, 7], [3, "x"], {}),
    ("f", "groupby", [{"t": "a", "v": 1}, {"t": "b", "v": 2}, {"t": "A", "v": 3}], ["t"], {}),
    ("f", "groupby", [{"t": "a", "v": 1}, {"t": "b", "v": 2}, {"t": "A", "v": 3}], ["t"], {"case_sensitive": True}),
    ("f", "groupby", [{"t": "a"}, {"u": 1}], ["t"], {"default": "zz"}),
    ("f", "escape", "<a href='x'>&\"</a>", [], {}), ("f", "e", None, [], {}),
    ("f", "format", "%s-%d-%.2f", ["a", 3, 1.5], {}), ("f", "format", "%5s|%-5s|%05d|%x|%o|%e|%g|%r|%%", ["a", "b", 42, 255, 8, 12345.678, 0.0001, "q"], {}),
    ("f", "format", "%(a)s and %(b)05.1f", [], {"a": "x", "b": 2.25}), ("f", "format", "%d", ["x"], {}),
    ("f", "format", "%s %s", ["x"], {}), ("f", "format", "%s", ["x", "y"], {}), ("f", "format", "%+d % d %X %#x %c", [5, 5, 255, 255, 65], {}),
    ("f", "format", "%s", [[1, "a"]], {}), ("f", "format", "%.3s|%10.4f|%-8.2e|", ["abcdef", 3.14159265, 1234.5], {}),
    ("f", "truncate", "hello world", [9], {}), ("f", "truncate", "hello world foo", [11], {"leeway": 0}),
    ("f", "truncate", "hello world foo", [11, True], {"leeway": 0}), ("f", "truncate", "hello world foo", [11, False, "!"], {"leeway": 0}),
    ("f", "wordcount", "hello, world! foo_bar 42 \u00e9t\u00e9", [], {}),
    ("f", "tojson", nested, [], {}), ("f", "tojson", nested, [], {"indent": 4}), ("f", "tojson", nested, [], {"ensure_ascii": True}),
    ("f", "tojson", {"b": 1, "a": [1, {"d": 1, "c": 2}]}, [], {"sort_keys": True}),
    ("f", "tojson", {"b": 1, "a": [1, 2]}, [], {"separators": [",", ":"]}),
    ("f", "tojson", {"a": [1, 2]}, [], {"indent": 2, "separators": [", ", ": "]}),
    ("f", "tojson", [[], {}, [[]]], [], {"indent": 2}), ("f", "tojson", [1.0, 1e16, 1e-05, 0.1, 123456789012345678], [], {}),
    ("f", "tojson", "\u0001\u001f\u007f\u2028\b\f\t", [], {}), ("f", "tojson", "\u0001\u007f\u2028", [], {"ensure_ascii": True}),
    ("f", "tojson", U, [], {}), ("f", "tojson", {"a": 1}, [], {"indent": 0}),
    ("f", "items", {"a": 1, "b": [2]}, [], {}), ("f", "items", U, [], {}), ("f", "items", [1], [], {}),
    ("f", "string", [1, "a", None, 2.0], [], {}), ("f", "string", {"k": "it's"}, [], {}),
    ("f", "urlencode", "a b&c/d\u00e9", [], {}), ("f", "urlencode", {"a": "x y", "b": 1}, [], {}),
    ("f", "attr", {"a": 1}, ["a"], {}), ("f", "safe", 3, [], {}),
    # tests
    ("t", "odd", 3, [], {}), ("t", "odd", 2.0, [], {}), ("t", "even", True, [], {}), ("t", "even", -4, [], {}),
    ("t", "divisibleby", 9, [3], {}), ("t", "divisibleby", 9, [0], {}), ("t", "odd", "x", [], {}),
    ("t", "defined", U, [], {}), ("t", "undefined", U, [], {}), ("t", "defined", None, [], {}),
    ("t", "none", None, [], {}), ("t", "none", U, [], {}), ("t", "boolean", True, [], {}), ("t", "boolean", 1, [], {}),
    ("t", "integer", 1, [], {}), ("t", "integer", True, [], {}), ("t", "integer", 1.0, [], {}), ("t", "float", 1.0, [], {}),
    ("t", "number", True, [], {}), ("t", "number", "1", [], {}), ("t", "string", "", [], {}), ("t", "string", U, [], {}),
    ("t", "mapping", {}, [], {}), ("t", "mapping", [], [], {}), ("t", "sequence", "ab", [], {}), ("t", "sequence", {}, [], {}),
    ("t", "sequence", 1, [], {}), ("t", "sequence", U, [], {}), ("t", "iterable", "a", [], {}), ("t", "iterable", 1, [], {}),
    ("t", "iterable", U, [], {}), ("t", "callable", "a", [], {}), ("t", "callable", U, [], {}),
    ("t", "lower", "abc", [], {}), ("t", "lower", "aBc", [], {}), ("t", "lower", "123", [], {}), ("t", "upper", "AB1", [], {}),
    ("t", "upper", None, [], {}), ("t", "true", True, [], {}), ("t", "true", 1, [], {}), ("t", "false", False, [], {}),
    ("t", "in", "a", ["cat"], {}), ("t", "in", 2, [[1, 2]], {}), ("t", "in", "k", [{"k": 1}], {}), ("t", "in", 2.0, [[1, 2]], {}),
    ("t", "in", 1, ["abc"], {}), ("t", "in", "", ["abc"], {}),
    ("t", "eq", 1, [1.0], {}), ("t", "==", "a", ["a"], {}), ("t", "ne", 1, [True], {}), ("t", "gt", 2, [1.5], {}),
    ("t", "ge", 2, [2], {}), ("t", "lt", "a", ["b"], {}), ("t", "le", [1, 2], [[1, 3]], {}), ("t", "<", 1, ["a"], {}),
    ("t", "equalto", [1, [2]], [[1, [2.0]]], {}), ("t", "eq", {"a": 1, "b": 2}, [{"b": 2, "a": 1}], {}),
    ("t", "sameas", None, [None], {}), ("t", "sameas", False, [False], {}), ("t", "sameas", 0, [False], {}),
    ("t", "test", "odd", [], {}), ("t", "test", "nope", [], {}), ("t", "filter", "upper", [], {}), ("t", "filter", "odd", [], {}),
    ("t", "escaped", "a", [], {}),
    # str methods
    ("m", "split", " a  b c ", [], {}), ("m", "split", "a,b,,c", [","], {}), ("m", "split", "a,b,c", [",", 1], {}),
    ("m", "split", "  a b  c  ", [None, 1], {}), ("m", "rsplit", "  a b  c  ", [None, 1], {}), ("m", "rsplit", "a,b,c", [",", 1], {}),
    ("m", "split", "a\u3000b\u00a0c\u200bd", [], {}), ("m", "split", "", [], {}), ("m", "split", "", [","], {}),
    ("m", "split", "abc", [""], {}), ("m", "split", "a<sep>b", [], {"sep": "<sep>"}),
    ("m", "strip", "\u00a0\u3000 x \n", [], {}), ("m", "lstrip", "xxyhix", ["xy"], {}), ("m", "rstrip", "hi!!?", ["!?"], {}),
    ("m", "strip", " x ", [None], {}), ("m", "strip", "\u00e9a\u00e9", ["\u00e9"], {}),
    ("m", "startswith", "hello", ["he"], {}), ("m", "startswith", "hello", ["lo", 3], {}), ("m", "endswith", "hello", ["ll", 0, 4], {}),
    ("m", "startswith", "abc", ["", 4], {}), ("m", "endswith", "h\u00e9llo", ["\u00e9llo"], {}),
    ("m", "find", "h\u00e9llo w\u00f6rld", ["\u00f6"], {}), ("m", "rfind", "abcabc", ["b"], {}), ("m", "find", "abc", ["z"], {}),
    ("m", "find", "abcabc", ["b", 2], {}), ("m", "find", "abc", ["", 5], {}), ("m", "find", "abc", ["", 3], {}),
    ("m", "index", "abc", ["z"], {}), ("m", "rindex", "h\u00e9h\u00e9", ["\u00e9"], {}), ("m", "find", "abcabc", ["c", -2], {}),
    ("m", "count", "aaaa", ["aa"], {}), ("m", "count", "h\u00e9llo", [""], {}), ("m", "count", "abcabc", ["b", 2, -1], {}),
    ("m", "replace", "a-b-c", ["-", "+"], {}), ("m", "replace", "a-b-c", ["-", "", 1], {}), ("m", "replace", "\u00e9\u00e9", ["", "."], {}),
    ("m", "title", "hello wORLD o'neil 3rd", [], {}), ("m", "capitalize", "\u00e9COLE x", [], {}), ("m", "swapcase", "aBc\u00e9", [], {}),
    ("m", "upper", "stra\u00dfe", [], {}), ("m", "lower", "\u0130", [], {}),
    ("m", "splitlines", "a\nb\r\nc\n", [], {}), ("m", "splitlines", "a\nb\r\n\nc", [True], {}), ("m", "splitlines", "a\u2028b\x0cc", [], {}),
    ("m", "join", "-", [["a", "b", "c"]], {}), ("m", "join", ", ", ["abc"], {}), ("m", "join", "-", [["a", 1]], {}),
    ("m", "format", "{}-{}", ["a", 1], {}), ("m", "format", "{0}-{1}-{0}", ["a", 2.5], {}), ("m", "format", "{name}!", [], {"name": "Bo"}),
    ("m", "format", "{{x}} {}", [True], {}), ("m", "format", "{!r}|{:>5}|{:<5}|{:^5}|", ["a", "b", "c", "d"], {}),
    ("m", "format", "{:.2f}|{:05d}|{:+d}|{:x}|{:e}|{:.3}|{:%}", [3.14159, 42, 5, 255, 1234.5, "abcdef", 0.25], {}),
    ("m", "format", "{:*^9}|{:>6.2f}|{}|{:g}", ["hi", 2.5, 1e16, 1e-7], {}), ("m", "format", "{} {1}", ["a", "b"], {}),
    ("m", "format", "{}", [], {}),
    ("m", "isdigit", "123", [], {}), ("m", "isdigit", "12a", [], {}), ("m", "isdigit", "\u00b2", [], {}), ("m", "isdigit", "", [], {}),
    ("m", "isalpha", "h\u00e9llo", [], {}), ("m", "isalnum", "ab12", [], {}), ("m", "isspace", " \t\u00a0", [], {}),
    ("m", "isupper", "AB1", [], {}), ("m", "islower", "ab\u00e9", [], {}), ("m", "istitle", "Hello World", [], {}),
    ("m", "center", "ab", [7, "*"], {}), ("m", "ljust", "ab", [5, "."], {}), ("m", "rjust", "\u00e9", [3], {}),
    ("m", "zfill", "-42", [6], {}), ("m", "zfill", "42", [1], {}),
    ("m", "partition", "a=b=c", ["="], {}), ("m", "rpartition", "a=b=c", ["="], {}), ("m", "partition", "abc", ["="], {}),
    ("m", "rpartition", "abc", ["="], {}), ("m", "removeprefix", "<think>x", ["<think>"], {}), ("m", "removesuffix", "x</s>", ["</s>"], {}),
    # dict and list methods
    ("m", "items", {"a": 1, "b": [2]}, [], {}), ("m", "keys", {"a": 1, "b": 2}, [], {}), ("m", "values", {"a": 1, "b": 2}, [], {}),
    ("m", "get", {"a": 1}, ["a"], {}), ("m", "get", {"a": 1}, ["z"], {}), ("m", "get", {"a": 1}, ["z", 5], {}),
    ("m", "index", [1, 2, 3], [2], {}), ("m", "count", [1, 2, 1.0, True], [1], {}), ("m", "index", [1], [5], {}),
    ("m", "append", [1], [2], {}), ("m", "update", {"a": 1}, [{"b": 2}], {}), ("m", "pop", [1], [], {}),
    # globals
    ("g", "range", None, [5], {}), ("g", "range", None, [2, 10, 3], {}), ("g", "range", None, [10, 0, -3], {}),
    ("g", "range", None, [0], {}), ("g", "range", None, [100001], {}), ("g", "range", None, [1, 2, 0], {}),
    ("g", "range", None, ["3"], {}), ("g", "range", None, [99998, 100000], {}),
    ("g", "namespace", None, [], {"a": 1, "b": "x"}), ("g", "namespace", None, [{"a": [1]}], {"c": None}),
    ("g", "namespace", None, [], {"_x": 1}), ("g", "dict", None, [], {"a": 1}), ("g", "dict", None, [[["k", "v"]]], {"a": 1}),
]

GENERATORS = {"map", "select", "reject", "selectattr", "rejectattr", "batch", "slice", "unique", "reverse", "items"}


def run(kind, name, self, args, kwargs):
    env = make_env()
    env.globals["strftime_now"] = lambda f: ""
    call = "(*a, **kw)"
    if kind == "f":
        tail = "|list" if name in GENERATORS and not isinstance(self, str) else ""
        src = "{{ x|%s%s%s }}" % (name, call, tail)
    elif kind == "t":
        # the symbolic test names are only reachable through select(); the alphabetic alias is
        # the same function in jinja2's TESTS table
        src = "{{ x is %s%s }}" % ({"==": "eq", "<": "lt"}.get(name, name), call)
    elif kind == "m":
        # dict views print as dict_items([...]); the C side returns plain lists, which is what
        # templates iterate over
        tail = "|list" if name in ("items", "keys", "values") else ""
        src = "{{ x.%s%s%s }}" % (name, call, tail)
    else:
        src = "{{ %s%s%s }}" % (name, call, "|list" if name == "range" else "")
    if kind == "g" and name == "namespace":
        # transformers' TemplateNamespace refuses names starting with "_"
        if any(k.startswith("_") for k in kwargs):
            return None, "SecurityError: underscore-prefixed"
    if kind == "g" and name == "dict":
        env.globals["dict"] = lambda *a, **k: dict(*a, **k)
    vars_ = {"a": args, "kw": kwargs}
    if self is not U:
        vars_["x"] = self
    try:
        return env.from_string(src).render(**vars_), None
    except Exception as e:  # noqa: BLE001
        return None, "%s: %s" % (type(e).__name__, e)


def c_lit(s):
    out = []
    for b in s.encode("utf-8"):
        ch = chr(b)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 32 <= b < 127 and ch != "?":
            out.append(ch)
        else:
            out.append("\\%03o" % b)
    return '"' + "".join(out) + '"'


def main():
    print("/* Generated by tools/gen_jinja_value_cases.py with jinja2 %s (Python %s): the outputs are" % (
        jinja2.__version__, sys.version.split()[0]))
    print(" * Python's own. kind, name, self (JSON; NULL = undefined), args (JSON array), kwargs (JSON")
    print(" * object), expected str() of the result, or NULL expected and the Python error in err. */")
    print("static const struct jcase {\n    char kind;\n    const char *name, *self, *args, *kwargs, *want, *err;\n} k_cases[] = {")
    for kind, name, self, args, kwargs in CASES:
        want, err = run(kind, name, self, args, kwargs)
        sj = "NULL" if self is U else c_lit(json.dumps(self))
        print("    {'%s', %s, %s, %s, %s, %s, %s}," % (
            kind, c_lit(name), sj, c_lit(json.dumps(args)), c_lit(json.dumps(kwargs)),
            "NULL" if want is None else c_lit(want), "NULL" if err is None else c_lit(err[:200])))
    print("};")


if __name__ == "__main__":
    main()
