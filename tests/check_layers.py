#!/usr/bin/env python3
"""check_layers.py — the layering rule of core/ (docs/layers.md), checked on
the source tree: a file of core/ includes only headers of its own layer or
of a lower one, SDK headers (include/tessera/), the kernels' headers
(kernels/) and system headers.

The layers and their order are read from docs/layers.md itself (the table
under "## The layers"), and so are the arrows up still tolerated (the table
under "## Known arrows up", each with the reason it exists), so the document
and the test cannot drift apart.

Every `#include "..."` of core/**/*.c and core/**/*.h is resolved as the
compiler resolves it: the including file's own folder first, then the
include path of the build (include/, kernels/cpu, kernels/cuda, and every
folder of core/, which CMakeLists.txt puts on the path of every core file).

Fails (exit 1), one line each, on
  - an arrow up:   core/FILE:LINE: FROM -> TO (HEADER names core/...)
  - a header found in no folder, or in two core folders (ambiguous);
  - a header outside core/, include/tessera/ and kernels/ (a plugin's);
  - a folder of core/ the table does not name, or a row naming none;
  - a known arrow that no longer exists (remove its row).

usage: check_layers.py SOURCE_DIR
       check_layers.py --self-test SOURCE_DIR   (the check refuses an arrow
                                                 up planted in a copy)
       check_layers.py --calls SOURCE_DIR BUILD_DIR   (lists the calls up
                   through SDK headers, which the rule does not see; nm)
"""
import os
import re
import shutil
import sys
import tempfile

INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
# A row of the layer table: | N | `core/NAME/` | what it holds |
LAYER_ROW_RE = re.compile(r"^\|\s*(\d+)\s*\|\s*`core/([a-z_]+)/`\s*\|")
# A row of the known-arrows table: | `core/DIR/FILE` | `HEADER` | why |
KNOWN_ROW_RE = re.compile(r"^\|\s*`(core/[^`]+)`\s*\|\s*`([^`]+)`\s*\|\s*(.*?)\s*\|\s*$")


def fail_usage(msg):
    print("check_layers.py: " + msg, file=sys.stderr)
    sys.exit(2)


def read_doc(root):
    """Returns ({folder: rank}, [(file, header)]) from docs/layers.md."""
    path = os.path.join(root, "docs", "layers.md")
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        fail_usage("cannot read %s: %s" % (path, e.strerror))
    layers, known, section = {}, [], None
    for n, line in enumerate(lines, 1):
        if line.startswith("## "):
            section = line[3:].strip().lower()
            continue
        if section is None:
            continue
        if section.startswith("the layers"):
            m = LAYER_ROW_RE.match(line)
            if m:
                rank, name = int(m.group(1)), m.group(2)
                if name in layers:
                    fail_usage("docs/layers.md:%d: core/%s/ named twice" % (n, name))
                if rank in layers.values():
                    fail_usage("docs/layers.md:%d: layer %d given twice" % (n, rank))
                layers[name] = rank
        elif section.startswith("known arrows up"):
            m = KNOWN_ROW_RE.match(line)
            if m:
                if not m.group(3):
                    fail_usage("docs/layers.md:%d: a known arrow without its reason" % n)
                known.append((m.group(1), m.group(2)))
    if len(layers) < 2:
        fail_usage("docs/layers.md: no table of layers under '## The layers' "
                   "(rows '| N | `core/NAME/` | ... |')")
    return layers, known


def sources(root):
    core = os.path.join(root, "core")
    out = []
    for dirpath, dirnames, filenames in os.walk(core):
        dirnames.sort()
        for fn in sorted(filenames):
            if fn.endswith((".c", ".h")):
                out.append(os.path.relpath(os.path.join(dirpath, fn), root))
    return out


def layer_of(rel):
    """core/NAME/... -> NAME; None outside a core folder."""
    parts = rel.split(os.sep)
    return parts[1] if len(parts) >= 3 and parts[0] == "core" else None


def check(root):
    layers, known = read_doc(root)
    problems = []
    core = os.path.join(root, "core")
    folders = sorted(d for d in os.listdir(core) if os.path.isdir(os.path.join(core, d)))
    for d in folders:
        if d not in layers:
            problems.append("core/%s/: a folder docs/layers.md does not place in a layer" % d)
    for d in sorted(layers):
        if d not in folders:
            problems.append("docs/layers.md: core/%s/ names no folder of core/" % d)

    files = sources(root)
    core_dirs = sorted({os.path.dirname(f) for f in files})
    outside = ["include", os.path.join("kernels", "cpu"), os.path.join("kernels", "cuda")]
    arrows, seen_known = [], set()
    for rel in files:
        src_layer = layer_of(rel)
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                m = INCLUDE_RE.match(line)
                if not m:
                    continue
                name = m.group(1)
                own = os.path.normpath(os.path.join(os.path.dirname(rel), name))
                if os.path.isfile(os.path.join(root, own)):
                    target = own
                else:
                    hits = [os.path.normpath(os.path.join(d, name)) for d in outside + core_dirs]
                    hits = [h for h in hits if os.path.isfile(os.path.join(root, h))]
                    in_core = [h for h in hits if layer_of(h)]
                    if len(in_core) > 1:
                        problems.append("%s:%d: \"%s\" is ambiguous: %s" %
                                        (rel, n, name, ", ".join(in_core)))
                        continue
                    if not hits:
                        problems.append("%s:%d: \"%s\" names no header of the tree" %
                                        (rel, n, name))
                        continue
                    target = hits[0]  # the include path's order, as the compiler
                to_layer = layer_of(target)
                if to_layer is None:
                    top = target.split(os.sep)[0]
                    if target.startswith(os.path.join("include", "tessera") + os.sep) or \
                            top == "kernels":
                        continue
                    problems.append("%s:%d: \"%s\" is %s, outside core/, include/tessera/ "
                                    "and kernels/" % (rel, n, name, target))
                    continue
                if to_layer not in layers or src_layer not in layers:
                    continue  # reported above as an unplaced folder
                if layers[to_layer] > layers[src_layer]:
                    if (rel, name) in known:
                        seen_known.add((rel, name))
                        print("known arrow up (docs/layers.md): %s:%d: %s -> %s (%s)" %
                              (rel, n, src_layer, to_layer, target))
                        continue
                    arrows.append("%s:%d: %s -> %s (\"%s\" is %s)" %
                                  (rel, n, src_layer, to_layer, name, target))
    for k in known:
        if k not in seen_known:
            problems.append("docs/layers.md: the known arrow %s -> %s no longer exists: "
                            "remove its row" % k)
    order = " < ".join(sorted(layers, key=layers.get))
    if arrows:
        print("core/ includes a higher layer (%s), docs/layers.md:" % order)
        for a in arrows:
            print("  " + a)
    for p in problems:
        print("  " + p)
    if arrows or problems:
        print("check_layers.py: FAIL: %d arrow(s) up, %d other problem(s)" %
              (len(arrows), len(problems)))
        return 1
    print("check_layers.py: PASS: %d files of core/, layers %s, no arrow up" % (len(files), order))
    return 0


def self_test(root):
    """Plants one include from the lowest layer into the highest in a copy of
    core/ and docs/layers.md, and expects check() to name exactly it."""
    layers, _ = read_doc(root)
    low = min(layers, key=layers.get)
    high = max(layers, key=layers.get)
    tmp = tempfile.mkdtemp(prefix="check_layers.")
    try:
        shutil.copytree(os.path.join(root, "core"), os.path.join(tmp, "core"))
        os.makedirs(os.path.join(tmp, "docs"))
        shutil.copy(os.path.join(root, "docs", "layers.md"), os.path.join(tmp, "docs"))
        shutil.copytree(os.path.join(root, "include"), os.path.join(tmp, "include"))
        shutil.copytree(os.path.join(root, "kernels"), os.path.join(tmp, "kernels"))
        if check(tmp) != 0:
            print("self-test: FAIL: the unmodified copy does not pass")
            return 1
        victim = next(f for f in sources(tmp) if layer_of(f) == low and f.endswith(".c"))
        header = next(os.path.basename(f) for f in sources(tmp)
                      if layer_of(f) == high and f.endswith(".h"))
        with open(os.path.join(tmp, victim), encoding="utf-8") as f:
            n = sum(1 for _ in f) + 1
        with open(os.path.join(tmp, victim), "a", encoding="utf-8") as f:
            f.write('#include "%s"\n' % header)
        import io
        import contextlib
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = check(tmp)
        print(out.getvalue(), end="")
        want = "%s:%d: %s -> %s" % (victim, n, low, high)
        if rc != 1 or want not in out.getvalue():
            print("self-test: FAIL: the planted include was not refused as: " + want)
            return 1
        print("self-test: PASS: the planted include was refused as: " + want)
        return 0
    finally:
        shutil.rmtree(tmp)


def calls(root, build):
    """Lists the calls from a layer into a higher one that the include rule
    does not see (through SDK headers): each object file of libtessera's
    core/ against the object that defines each symbol it needs (nm).
    Informational: exits 0 (1 when nothing could be read)."""
    import subprocess
    layers, _ = read_doc(root)
    objdir = os.path.join(build, "CMakeFiles", "tessera.dir", "core")
    defs, needs = {}, {}
    for dirpath, _, filenames in os.walk(objdir):
        for fn in sorted(filenames):
            if not fn.endswith(".c.o"):
                continue
            obj = os.path.join(dirpath, fn)
            src = os.path.join("core", os.path.relpath(obj, objdir))[:-2]
            if not os.path.isfile(os.path.join(root, src)):
                continue  # a stale object of a moved file
            try:
                out = subprocess.run(["nm", obj], capture_output=True, text=True,
                                     check=True).stdout
            except (OSError, subprocess.CalledProcessError) as e:
                print("check_layers.py: nm %s: %s" % (obj, e), file=sys.stderr)
                return 1
            for line in out.splitlines():
                f = line.split()
                if len(f) == 3 and f[1] in "TDBR":
                    defs[f[2]] = src
                elif len(f) == 2 and f[0] == "U":
                    needs.setdefault(src, set()).add(f[1])
    if not needs:
        print("check_layers.py: no object files of core/ under %s" % objdir, file=sys.stderr)
        return 1
    n = 0
    for src in sorted(needs):
        up = {}
        for sym in needs[src]:
            to = defs.get(sym)
            if to and layers.get(layer_of(to), 0) > layers.get(layer_of(src), 0):
                up.setdefault(to, []).append(sym)
        for to in sorted(up):
            n += 1
            print("%s: %s -> %s (%s): %s" % (src, layer_of(src), layer_of(to), to,
                                              ", ".join(sorted(up[to]))))
    print("check_layers.py: %d call(s) up through the API" % n)
    return 0


def main(argv):
    if len(argv) == 3 and argv[1] == "--self-test":
        return self_test(argv[2])
    if len(argv) == 4 and argv[1] == "--calls":
        return calls(argv[2], argv[3])
    if len(argv) != 2:
        fail_usage("usage: check_layers.py [--self-test | --calls BUILD_DIR ...] SOURCE_DIR")
    return check(argv[1])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
