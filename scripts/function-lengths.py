#!/usr/bin/env python3
"""Functions of services/ longer than a bound, longest first.

    python3 scripts/function-lengths.py [--over 80] [DIR]

A function is a definition that starts at column 0 of a .cc file (a free
function, a member defined outside its class, a main), or a member defined
in the body of a class or struct at column 0, counted from its first line
to its closing brace. A lambda counts as part of what holds it. docs/architecture.md#measures
records the figure; this is how it is measured, not a rule the build
enforces.
"""
import argparse
import os
import re
import sys

NOT_A_FUNCTION = re.compile(r"(\}|#|//|namespace\b|using\b|static_assert\b|template\b|struct\b|class\b|enum\b|union\b)")


CLASS = re.compile(r"(struct|class)\b[^;]*\{\s*$")
STATEMENT = re.compile(r"\s*(if|for|while|switch|return|else|do|case|catch|try)\b")


def definition(lines, i, end, member):
    """The function whose head starts at lines[i], as (lines, first line,
    name) and the index of its closing brace; None when lines[i] starts no
    definition (a declaration, an initialiser)."""
    j, head = i, ""
    while j < end:  # the head runs to the first brace or semicolon
        head += lines[j] + "\n"
        if "{" in lines[j] or lines[j].rstrip().endswith(";"):
            break
        j += 1
    before_brace = head.split("{")[0]
    if j >= end or "{" not in lines[j] or "(" not in before_brace or before_brace.rstrip().endswith("=") or \
            (member and ")" not in before_brace):
        return None
    depth, k = 0, j
    while k < end:
        depth += lines[k].count("{") - lines[k].count("}")
        if depth <= 0:
            break
        k += 1
    name = re.search(r"([\w:~]+)\s*\(", head)
    return (k - i + 1, i + 1, name.group(1) if name else "?"), k


def member_functions(lines, begin, end):
    """Members defined in the class body lines[begin:end] (indented two spaces)."""
    i = begin
    while i < end:
        line = lines[i]
        if line.startswith("  ") and not line.startswith("   ") and "(" in line and not STATEMENT.match(line) \
                and not line.strip().startswith(("//", "#")):
            found = definition(lines, i, end, member=True)
            if found:
                yield found[0]
                i = found[1]
        i += 1


def functions(path):
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if line and not line[0].isspace() and CLASS.match(line):
            k = i + 1
            while k < len(lines) and not lines[k].startswith("}"):
                k += 1
            owner = re.match(r"(?:struct|class)\s+([\w:]+)", line)
            for n, at, fn in member_functions(lines, i + 1, k):
                yield n, at, (owner.group(1) + "::" if owner else "") + fn
            i = k
        elif line and not line[0].isspace() and not NOT_A_FUNCTION.match(line):
            found = definition(lines, i, len(lines), member=False)
            if found:
                yield found[0]
                i = found[1]
        i += 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", nargs="?", default=os.path.join(os.path.dirname(__file__), "..", "services"))
    parser.add_argument("--over", type=int, default=80, help="list functions longer than this many lines")
    args = parser.parse_args()
    found = []
    for root, _, files in os.walk(args.dir):
        for name in files:
            if name.endswith(".cc"):
                path = os.path.join(root, name)
                found += [(n, os.path.relpath(path, args.dir), line, fn) for n, line, fn in functions(path)]
    long = sorted((f for f in found if f[0] > args.over), reverse=True)
    for n, path, line, fn in long:
        print(f"{n:5d}  {path}:{line}  {fn}")
    print(f"{len(long)} function(s) over {args.over} lines, of {len(found)}", file=sys.stderr)


if __name__ == "__main__":
    main()
