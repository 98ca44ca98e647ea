#!/usr/bin/env python3
"""cu2cc.py IN.cu OUT.cc — rewrites a CUDA source for the host emulator
(tests/cuda_emu/cuda_emu.h): what C++ cannot express is turned into calls
the emulator provides, and nothing else is touched.

  kernel<<<grid, block[, smem[, stream]]>>>(args);
      -> emu_launch(grid, block, smem, (const void *)&kernel, [&]() { kernel(args); });
  extern __shared__ [__align__(N)] T name[];
      -> T *name = (T *)emu_dynamic_smem();
  __shared__ (block-shared arrays)  -> static  (one block runs at a time)

A #line directive keeps compiler messages pointing at the .cu file."""
import re
import sys


def split_top(s):
    """Splits s at commas outside parentheses, brackets and braces."""
    parts, depth, cur = [], 0, ""
    for ch in s:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    parts.append(cur.strip())
    return parts


LAUNCH = re.compile(r"([A-Za-z_]\w*(?:<[^<>;]*>)?)\s*<<<(.*?)>>>\s*\((.*?)\)\s*;", re.S)
DYN = re.compile(r"extern\s+__shared__\s+(?:__align__\(\s*\d+\s*\)\s+)?([A-Za-z_][\w\s]*?)\s+(\w+)\s*\[\s*\]\s*;")


def launch(m):
    name, cfg, args = m.group(1), split_top(m.group(2)), m.group(3)
    if len(cfg) < 2 or len(cfg) > 4:
        sys.exit("cu2cc: cannot read the launch configuration of %s: <<<%s>>>" % (name, m.group(2)))
    smem = cfg[2] if len(cfg) > 2 else "0"
    # as many lines as the launch had, so that #line stays true below it
    stream = " (void)(%s);" % cfg[3] if len(cfg) > 3 else ""  # streams are not emulated
    return "emu_launch(%s, %s, %s, (const void *)&%s, [&]() { %s(%s); });%s%s" % (
        cfg[0], cfg[1], smem, name, name, args, stream, "\n" * m.group(0).count("\n"))


def main():
    src, dst = sys.argv[1], sys.argv[2]
    text = open(src).read()
    text = LAUNCH.sub(launch, text)
    text = DYN.sub(lambda m: "%s *%s = (%s *)emu_dynamic_smem();" % (m.group(1), m.group(2), m.group(1)), text)
    text = re.sub(r"\b__shared__\b", "static", text)
    if "<<<" in text:
        sys.exit("cu2cc: %s: a launch was not rewritten" % src)
    with open(dst, "w") as f:
        f.write('#include "cuda_emu.h"\n#line 1 "%s"\n%s' % (src, text))


main()
