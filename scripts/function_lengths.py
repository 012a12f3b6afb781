#!/usr/bin/python3
"""The length of every function in C++ files: scripts/function_lengths.py [--over N] FILE...

Prints `lines file:line name` for each function (outermost bodies only: a lambda or a local
class counts toward the function that holds it), longest first; with --over N only those longer
than N lines, and exits 1 when there is one. A function is a `{ ... }` whose head (the text since
the previous `;`, `{` or `}`) ends in a parameter list, possibly followed by const, override,
noexcept, a trailing return type or a constructor's initializer list; if/for/while/switch/catch
bodies are not functions. Comments, strings and preprocessor lines are blanked first, so braces in
them do not count.
"""
import re
import sys

CONTROL = {"if", "for", "while", "switch", "catch", "do", "else", "try"}


def blank(text):
    """Comments, string and char literals and preprocessor lines as spaces, newlines kept."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i) or (c == "#" and (i == 0 or text[i - 1] == "\n" or text[:i].rstrip(" \t").endswith("\n"))):
            j = text.find("\n", i)
            while c == "#" and j > 0 and text[j - 1] == "\\":   # a continued macro
                j = text.find("\n", j + 1)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum() and i + 1 < n and text[i + 1].isalnum():
                out.append(" ")
                i = i + 1   # a digit separator: 1'000
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (min(j + 1, n) - i))
            i = min(j + 1, n)
        else:
            out.append(c)
            i = i + 1
    return "".join(out)


def is_function_head(head):
    head = head.strip()
    if not head:
        return None
    # a constructor's initializer list: drop it (": a_(x), b_{y}" after the parameters)
    m = re.match(r"^(.*?\))\s*:\s*[A-Za-z_][\w:]*\s*[({].*$", head, re.S)
    if m and not re.search(r"\?\s*$", m.group(1)):
        head = m.group(1)
    head = re.sub(r"\s*(->\s*[\w:<>,\s*&]+)$", "", head)   # trailing return type
    head = re.sub(r"(\s+(const|override|final|noexcept|mutable|volatile|&|&&))+\s*$", "", head)
    if not head.endswith(")"):
        return None
    depth, k = 0, len(head) - 1   # the parameter list's opening parenthesis
    while k >= 0:
        depth += {")": 1, "(": -1}.get(head[k], 0)
        if depth == 0:
            break
        k -= 1
    before = head[:k].rstrip()
    m = re.search(r"([~\w:<>]+|operator\s*\S+)$", before)
    if not m:
        return None   # a lambda `[&](...)` or a cast
    name = m.group(1)
    if name.split("::")[-1] in CONTROL or name in CONTROL or before.endswith("]"):
        return None
    if re.search(r"(=|return|,|\()\s*[\w:<>]*$", before[: m.start()] + " ") and "operator" not in name:
        return None   # a call or a temporary in an expression
    return name


def functions(path):
    text = open(path, encoding="utf-8").read()
    code = blank(text)
    found, depth, head_start, inside = [], 0, 0, None   # inside: (name, line, depth) of a function
    keeps_head = []   # per open brace: a member's brace-initializer in a constructor's list
    for i, c in enumerate(code):
        if c == "{":
            head = code[head_start:i]
            init = inside is None and re.search(r"\)\s*:\s*(.|\n)*[\w>]\s*$", head) is not None
            if inside is None and not init:
                name = is_function_head(head)
                if name:
                    start = head_start + len(head) - len(head.lstrip())
                    inside = (name, code.count("\n", 0, start) + 1, depth)
            depth += 1
            keeps_head.append(init)
            if not init:
                head_start = i + 1
        elif c == "}":
            depth -= 1
            if keeps_head.pop() if keeps_head else False:
                continue
            head_start = i + 1
            if inside and depth == inside[2]:
                found.append((code.count("\n", 0, i) + 1 - inside[1] + 1, path, inside[1], inside[0]))
                inside = None
        elif c == ";":
            head_start = i + 1
    return found


SELFTEST = r"""
namespace a {
struct S {
    S(int x) : x_(x), y_{x} {
        if (x) { y_ = 2; }
    }
    int get() const override { return x_; }
    int x_, y_;
};
auto f(int n) -> int {
    auto g = [&](int k) { return k + n; };
    const char* s = "}}}";   // a brace }
    /* { */
    return g(n) + '}';
}
}  // namespace a
int main() {
    for (int i = 0; i < 3; i++) {
        int v[2] = {1, 2};
    }
    return 0;
}
"""


def selftest():
    import os, tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".cpp", delete=False) as t:
        t.write(SELFTEST)
    try:
        got = sorted((name, line, lines) for lines, _, line, name in functions(t.name))
    finally:
        os.unlink(t.name)
    want = sorted([("S", 4, 3), ("get", 7, 1), ("f", 10, 6), ("main", 17, 6)])
    if got != want:
        print(f"function_lengths selftest: got {got}, expected {want}", file=sys.stderr)
        return 1
    print("function_lengths selftest: 4 of 4 functions found with their lengths")
    return 0


def main(argv):
    if argv == ["--selftest"]:
        return selftest()
    over = None
    if argv[:1] == ["--over"]:
        over, argv = int(argv[1]), argv[2:]
    rows = sorted((f for p in argv for f in functions(p)), key=lambda r: (-r[0], r[1], r[2]))
    if over is not None:
        rows = [r for r in rows if r[0] > over]
    for lines, path, line, name in rows:
        print(f"{lines:5d} {path}:{line} {name}")
    return 1 if over is not None and rows else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
