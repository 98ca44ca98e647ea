#!/usr/bin/env python3
"""check_core_axis_names.py — core/ names no mesh axis: no TS_AXIS_* constant
and no string literal that is an axis name or a token of them ("tp", "dp-cp",
"etp-ep-pp") in the code of core/ (comments aside). The standard axes are the
SDK's table (include/tessera/mesh.h, TS_MESH_STANDARD_AXES); the plugins
claim them. Fails listing FILE:LINE: TEXT for each.

usage: check_core_axis_names.py SOURCE_DIR
"""
import pathlib
import re
import sys

AXES = {"tp", "cp", "dp", "pp", "ep", "etp", "edp"}
STRING = re.compile(r'"((?:[^"\\\n]|\\.)*)"')


def code_lines(text):
    """The text with comments blanked out (strings kept), line by line."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text[i] == '"':
            m = STRING.match(text, i)
            j = m.end() if m else i + 1
            out.append(text[i:j])
            i = j
        elif text[i] == "'":
            j = i + 1
            while j < n and text[j] != "'":
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out).split("\n")


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = pathlib.Path(sys.argv[1])
    bad, files = [], 0
    for path in sorted((root / "core").rglob("*.[ch]")):
        files += 1
        for no, line in enumerate(code_lines(path.read_text(errors="replace")), 1):
            if re.search(r"\bTS_AXIS_[A-Z]+", line):
                bad.append(f"{path.relative_to(root)}:{no}: {line.strip()}")
                continue
            for m in STRING.finditer(line):
                parts = m.group(1).lower().split("-")
                if parts and all(p in AXES for p in parts):
                    bad.append(f"{path.relative_to(root)}:{no}: {line.strip()}")
                    break
    for b in bad:
        print(b)
    if bad:
        print(f"FAIL: {len(bad)} line(s) of core/ name a mesh axis")
        return 1
    print(f"PASS: {files} files of core/ name no mesh axis")
    return 0


if __name__ == "__main__":
    sys.exit(main())
