"""A small parser for the Go expressions Kueue's unit tests build their fixtures with.

It reads test *data* (builder chains such as ``MakeWorkload("low", "").Priority(-1)``,
composite literals, string/number literals) into a plain tree; ``extract.py`` turns that
tree into the YAML cases of tests/admission/conformance/. No Go code is reproduced: only
the facts (queues, quotas, workloads, expected outcome) end up in the data files.

Tree nodes (tuples): ("id", name) ("lit", value) ("sel", x, name) ("call", f, [args])
("comp", type_text, [(key, value)]) ("unary", op, x) ("bin", op, a, b) ("opaque", text).
"""
from __future__ import annotations

import re

TOKEN = re.compile(r"""
    (?P<ws>\s+|//[^\n]*|/\*.*?\*/)
  | (?P<str>"(?:\\.|[^"\\])*"|`[^`]*`)
  | (?P<num>\d[\d_]*(?:\.\d+)?(?:[eE][-+]?\d+)?)
  | (?P<id>[A-Za-z_][A-Za-z_0-9]*)
  | (?P<op>:=|\.\.\.|&&|\|\||==|!=|<=|>=|<-|[{}()\[\].,:;&*+\-!<>=/|%^])
""", re.S | re.X)


def tokenize(src: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(src):
        m = TOKEN.match(src, pos)
        if not m:
            raise SyntaxError(f"bad char {src[pos]!r} at {pos}")
        pos = m.end()
        kind = m.lastgroup
        if kind == "ws":
            continue
        out.append((kind, m.group()))
    out.append(("eof", ""))
    return out


class Parser:
    def __init__(self, toks: list[tuple[str, str]], i: int = 0):
        self.t, self.i = toks, i

    def peek(self, k: int = 0) -> tuple[str, str]:
        return self.t[self.i + k]

    def take(self, val: str | None = None) -> tuple[str, str]:
        tok = self.t[self.i]
        if val is not None and tok[1] != val:
            raise SyntaxError(f"expected {val!r}, got {tok[1]!r} at token {self.i}")
        self.i += 1
        return tok

    def skip_balanced(self) -> str:
        """Skip from an opening bracket to its match; returns the skipped text."""
        pairs = {"{": "}", "(": ")", "[": "]"}
        stack, parts = [], []
        while True:
            k, v = self.take()
            parts.append(v)
            if v in pairs:
                stack.append(pairs[v])
            elif stack and v == stack[-1]:
                stack.pop()
                if not stack:
                    return " ".join(parts)

    # types -----------------------------------------------------------------
    def type_(self) -> str:
        k, v = self.peek()
        if v == "[":
            self.take("[")
            if self.peek()[1] != "]":
                self.expr()
            self.take("]")
            return "[]" + self.type_()
        if v == "*":
            self.take()
            return "*" + self.type_()
        if v == "map":
            self.take()
            self.take("[")
            kt = self.type_()
            self.take("]")
            return f"map[{kt}]{self.type_()}"
        if v == "struct":
            self.take()
            return "struct" + self.skip_balanced()
        if v == "func":
            self.take()
            sig = self.skip_balanced()
            if self.peek()[1] not in ("{", ")", ",", "}"):
                sig += self.type_() if self.peek()[1] != "(" else self.skip_balanced()
            return "func" + sig
        name = self.take()[1]
        while self.peek()[1] == ".":
            self.take()
            name += "." + self.take()[1]
        if self.peek()[1] == "[":  # generic instantiation
            name += self.skip_balanced()
        return name

    # expressions -------------------------------------------------------------
    def expr(self):
        left = self.unary()
        while self.peek()[1] in ("+", "-", "*", "/", "==", "!=", "<", ">", "&&", "||", "|"):
            op = self.take()[1]
            left = ("bin", op, left, self.unary())
        return left

    def unary(self):
        v = self.peek()[1]
        if v in ("&", "*", "-", "!"):
            self.take()
            return ("unary", v, self.unary())
        return self.postfix(self.primary())

    def primary(self):
        k, v = self.peek()
        if k == "str":
            self.take()
            return ("lit", v[1:-1] if v[0] == "`" else bytes(v[1:-1], "utf-8").decode("unicode_escape"))
        if k == "num":
            self.take()
            v = v.replace("_", "")
            return ("lit", float(v) if "." in v or "e" in v.lower() else int(v))
        if v == "(":
            self.take()
            e = self.expr()
            self.take(")")
            return e
        if v == "func":
            self.take()
            text = "func" + self.skip_balanced()
            while self.peek()[1] != "{":
                text += self.take()[1]
            text += self.skip_balanced()
            return ("opaque", text)
        if v in ("[", "map", "struct"):
            t = self.type_()
            return self.complit(t)
        if k == "id":
            self.take()
            if v in ("true", "false"):
                return ("lit", v == "true")
            if v == "nil":
                return ("lit", None)
            return ("id", v)
        raise SyntaxError(f"unexpected {v!r} at token {self.i}")

    def postfix(self, x):
        while True:
            v = self.peek()[1]
            if v == ".":
                self.take()
                if self.peek()[1] == "(":  # type assertion
                    self.skip_balanced()
                    continue
                x = ("sel", x, self.take()[1])
            elif v == "(":
                self.take()
                args = []
                while self.peek()[1] != ")":
                    if self.peek()[1] in ("[", "map", "struct") or (self.peek()[1] == "*" and False):
                        args.append(self.expr())
                    else:
                        args.append(self.expr())
                    if self.peek()[1] == "...":
                        self.take()
                        args[-1] = ("spread", args[-1])
                    if self.peek()[1] == ",":
                        self.take()
                x = ("call", x, args)
                self.take(")")
            elif v == "{" and x[0] in ("id", "sel"):
                x = self.complit(_text(x))
            elif v == "[":
                self.take()
                if self.peek()[1] == "]":  # generic type args inside a call: not used in data
                    self.take()
                    continue
                idx = self.expr()
                while self.peek()[1] == ",":
                    self.take()
                    idx = ("tuple", idx, self.expr())
                self.take("]")
                x = ("index", x, idx)
            else:
                return x

    def complit(self, type_text: str):
        self.take("{")
        elems = []
        while self.peek()[1] != "}":
            if self.peek()[1] == "{":
                val = self.complit("")
            else:
                val = self.expr()
            key = None
            if self.peek()[1] == ":":
                self.take()
                key = val
                val = self.complit("") if self.peek()[1] == "{" else self.expr()
            elems.append((key, val))
            if self.peek()[1] == ",":
                self.take()
        self.take("}")
        return ("comp", type_text, elems)


def _text(x) -> str:
    if x[0] == "id":
        return x[1]
    if x[0] == "sel":
        return _text(x[1]) + "." + x[2]
    return "?"


def parse_assignments(func_src: str) -> dict[str, object]:
    """``name := expr`` statements at the first indentation level of a test function."""
    out: dict[str, object] = {}
    for m in re.finditer(r"\n\t([A-Za-z_][A-Za-z_0-9]*) := ", func_src):
        toks = tokenize(func_src[m.end():])
        p = Parser(toks)
        try:
            if toks[0][1] in ("map", "[") or toks[0][1] == "struct":
                t = p.type_()
                out[m.group(1)] = p.complit(t)
            else:
                out[m.group(1)] = p.expr()
        except SyntaxError:
            continue
    return out
