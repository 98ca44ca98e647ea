#!/usr/bin/env python3
"""check_function_sizes.py — the core's size rule: no function in core/**/*.c
longer than 150 lines (from the first line of its signature to its closing
brace), and core/train/train.c under 1,000 lines.

Usage: check_function_sizes.py ROOT [--max-function N] [--max-train N]
Prints every offender as FILE:LINE: NAME is N lines (limit L) and exits 1 if
there is one; prints the longest function and exits 0 otherwise.

Function definitions are found as clang-format writes them (the repository's
.clang-format): a signature starting at column 0, its body's opening brace at
the end of the signature's last line, its closing brace alone at column 0.
"""
import os
import re
import sys

SIGNATURE = re.compile(r"^[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)\s*\(")


def functions(path):
    """Yields (name, first line, line count) of every function in path."""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines):
        m = SIGNATURE.match(lines[i])
        if not m or lines[i].startswith(("typedef", "struct", "enum", "union", "#")) \
                or re.match(r"^\w+\s*=", lines[i]):
            i += 1
            continue
        # The signature may span lines: up to the one ending with '{'.
        j = i
        while j < len(lines) and j < i + 12 and not lines[j].rstrip().endswith("{"):
            if lines[j].rstrip().endswith(";"):
                break
            j += 1
        if j >= len(lines) or not lines[j].rstrip().endswith("{") \
                or "=" in lines[i].split("(")[0]:
            i += 1
            continue
        k = j + 1
        while k < len(lines) and lines[k] != "}":
            k += 1
        yield m.group(1), i + 1, k - i + 1
        i = k + 1


def main(argv):
    root = argv[1] if len(argv) > 1 else "."
    max_fn, max_train = 150, 1000
    if "--max-function" in argv:
        max_fn = int(argv[argv.index("--max-function") + 1])
    if "--max-train" in argv:
        max_train = int(argv[argv.index("--max-train") + 1])
    bad, longest, found = [], ("", "", 0, 0), 0
    core = os.path.join(root, "core")
    for d, _, files in sorted(os.walk(core)):
        for name in sorted(files):
            if not name.endswith(".c"):
                continue
            path = os.path.join(d, name)
            rel = os.path.relpath(path, root)
            for fn, line, n in functions(path):
                found += 1
                if n > longest[3]:
                    longest = (rel, fn, line, n)
                if n > max_fn:
                    bad.append(f"{rel}:{line}: {fn} is {n} lines (limit {max_fn})")
    # A reader that finds (almost) nothing would pass everything.
    if found < 500:
        bad.append(f"found only {found} functions in core/: the reader no longer "
                   "recognises the code's definitions")
    train = os.path.join(root, "core", "train", "train.c")
    with open(train, encoding="utf-8") as f:
        count = f.read().count("\n")
    if count >= max_train:
        bad.append(f"core/train/train.c is {count} lines (limit: under {max_train})")
    for b in bad:
        print(b)
    if bad:
        return 1
    print(f"ok: {found} functions; the longest is {longest[1]} ({longest[0]}:{longest[2]}, "
          f"{longest[3]} lines); core/train/train.c is {count} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
