#!/usr/bin/env python3
"""check_plugin_headers.py — what a plugin includes declares no function of
libtessera (include/tessera/plugin.h, "What a plugin may include").

A plugin links nothing of tessera's: every service comes through the host
table. So the headers a plugin includes — plugin.h and the *_types.h headers
it brings — may hold types, macros, typedefs of function pointers and static
inline helpers that call nothing of the library, and nothing else.

Each header is preprocessed as a plugin would see it (`CC -E -I include`,
with line markers), and the text that comes from include/tessera/ is split
into its top-level declarations. Fails (exit 1), one line each, naming the
header, the file and line it comes from and the name, on
  - a function declared (a prototype that is no typedef and not static
    inline): "declares function ts_error";
  - a function defined that is not static inline;
  - an object of external linkage (extern, or a file-scope definition that
    is not static);
  - a static inline function that calls a ts_* function the checked text
    does not define as static inline (a libtessera function reached through
    a helper): "static inline ts_mesh_create calls ts_mesh_create_axes".

usage: check_plugin_headers.py SOURCE_DIR [CC]
       check_plugin_headers.py --self-test SOURCE_DIR [CC]   (the check must
           pass on a copy of include/ and refuse each of the kinds above
           planted in it)
Python 3 standard library only.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

HEADERS = ["plugin.h", "tessera_types.h", "comm_types.h", "mesh_types.h", "layout_types.h"]
KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "_Alignof", "_Alignas",
            "__typeof__", "typeof", "_Generic", "__attribute__", "__asm__", "defined"}


def preprocess(cc, include_dir, header):
    """The header's preprocessed text from include/tessera/ only, as a list
    of (origin "file:line", text) lines."""
    src = '#include "tessera/%s"\n' % header
    out = subprocess.run([cc, "-E", "-std=c11", "-I", include_dir, "-x", "c", "-"], input=src,
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("cannot preprocess %s: %s" % (header, out.stderr.strip()))
    lines, where, line = [], None, 0
    mine = os.path.join(include_dir, "tessera") + os.sep
    for text in out.stdout.split("\n"):
        m = re.match(r'#\s*(\d+)\s+"([^"]*)"', text)
        if m:
            line, where = int(m.group(1)), m.group(2)
            continue
        if where and os.path.abspath(where).startswith(os.path.abspath(mine)):
            lines.append(("%s:%d" % (os.path.relpath(where, include_dir), line), text))
        line += 1
    return lines


def strip_literals(text):
    return re.sub(r'"(\\.|[^"\\])*"|\'(\\.|[^\'\\])*\'', '""', text)


def strip_attributes(text):
    """Removes __attribute__((...)) and __asm__(...) with nested parentheses."""
    while True:
        m = re.search(r'\b(__attribute__|__asm__|__asm)\s*\(', text)
        if not m:
            return text
        depth, i = 0, m.end() - 1
        while i < len(text):
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            if depth == 0:
                break
            i += 1
        text = text[:m.start()] + " " + text[i + 1:]


def items(lines):
    """Top-level declarations: (origin, text, body) with body the text of a
    function definition's braces, else None; inner braces collapsed to {}."""
    out, buf, origin = [], "", None
    chars = []
    for where, text in lines:
        for ch in strip_literals(text) + "\n":
            chars.append((where, ch))
    i, paren = 0, 0
    while i < len(chars):
        where, ch = chars[i]
        if not buf.strip():
            origin = where
        if ch == "(":
            paren += 1
        elif ch == ")":
            paren -= 1
        if ch == "{" and paren == 0:
            depth, j, body = 0, i, ""
            while j < len(chars):
                c = chars[j][1]
                depth += {"{": 1, "}": -1}.get(c, 0)
                body += c
                if depth == 0:
                    break
                j += 1
            head = strip_attributes(buf).strip()
            is_function = (re.search(r"\)\s*$", head) and "=" not in head and
                           not re.match(r"(typedef|struct|union|enum)\b", head))
            if is_function:
                out.append((origin, head, body))
                buf = ""
            else:
                buf += "{}"
            i = j + 1
            continue
        if ch == ";" and paren == 0:
            out.append((origin, strip_attributes(buf).strip(), None))
            buf = ""
        else:
            buf += ch
        i += 1
    return out


def declarator_name(text):
    """The name of a function declared by `text` (its first `name (` at
    parenthesis depth 0), or None."""
    depth = 0
    for m in re.finditer(r"[()]|\b([A-Za-z_]\w*)\s*(?=\()", text):
        if m.group(0) == "(":
            depth += 1
        elif m.group(0) == ")":
            depth -= 1
        elif depth == 0 and m.group(1) not in KEYWORDS:
            return m.group(1)
    return None


def check(cc, include_dir):
    problems = []
    for header in HEADERS:
        decls = items(preprocess(cc, include_dir, header))
        inline = set()
        for origin, head, body in decls:
            if body is not None and re.search(r"\bstatic\b", head) and re.search(r"\binline\b", head):
                inline.add(declarator_name(head))
        for origin, head, body in decls:
            words = set(re.findall(r"[A-Za-z_]\w*", head))
            name = declarator_name(head)
            if not head or head.startswith(("typedef", "_Static_assert", "static_assert")):
                continue
            static_inline = "static" in words and "inline" in words
            if body is not None:
                if not static_inline:
                    problems.append("%s: %s: defines function %s, which is not static inline"
                                    % (header, origin, name))
                    continue
                for callee in re.findall(r"\b(ts_\w+)\s*\(", body):
                    if callee not in inline:
                        problems.append("%s: %s: static inline %s calls %s, a function of "
                                        "libtessera" % (header, origin, name, callee))
            elif name:
                if not static_inline:
                    problems.append("%s: %s: declares function %s" % (header, origin, name))
            elif re.match(r"(struct|union|enum)\s*\w*\s*(\{\})?$", head):
                continue  # a tag declared or defined
            elif "static" not in words:
                obj = re.findall(r"[A-Za-z_]\w*", head.split("=")[0])
                problems.append("%s: %s: declares object %s of external linkage"
                                % (header, origin, obj[-1] if obj else head))
    return sorted(set(problems))


def self_test(source_dir, cc):
    tmp = tempfile.mkdtemp(prefix="check_plugin_headers.")
    try:
        inc = os.path.join(tmp, "include")
        shutil.copytree(os.path.join(source_dir, "include"), inc)
        if check(cc, inc):
            print("self-test: the unchanged copy fails")
            return 1
        planted = {
            "plugin.h": ("int ts_planted_function(int x);\n"
                         "extern int ts_planted_object;\n"
                         "int ts_planted_definition(void) { return 0; }\n"),
            "layout_types.h": ("static inline int ts_planted_inline(void) {\n"
                               "    return ts_layout_validate(0);\n}\n"),
        }
        for header, text in planted.items():
            path = os.path.join(inc, "tessera", header)
            src = open(path).read()
            cut = src.rindex("#ifdef __cplusplus")
            open(path, "w").write(src[:cut] + text + src[cut:])
        found = check(cc, inc)
        want = ["declares function ts_planted_function",
                "declares object ts_planted_object of external linkage",
                "defines function ts_planted_definition, which is not static inline",
                "static inline ts_planted_inline calls ts_layout_validate"]
        missed = [w for w in want if not any(w in p for p in found)]
        for p in found:
            print("self-test found: " + p)
        if missed:
            print("self-test: the check missed: " + "; ".join(missed))
            return 1
        print("self-test: every planted declaration refused")
        return 0
    finally:
        shutil.rmtree(tmp)


def main(argv):
    if len(argv) >= 3 and argv[1] == "--self-test":
        return self_test(argv[2], argv[3] if len(argv) > 3 else "cc")
    if len(argv) < 2:
        sys.exit(__doc__)
    cc = argv[2] if len(argv) > 2 else "cc"
    problems = check(cc, os.path.join(argv[1], "include"))
    for p in problems:
        print(p)
    if problems:
        print("%d declaration(s) of libtessera in what a plugin includes "
              "(move them to tessera.h, comm.h, mesh.h or layout.h)" % len(problems))
        return 1
    print("%s: types, macros and static inline helpers only" % ", ".join(HEADERS))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
