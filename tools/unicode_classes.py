#!/usr/bin/env python3
"""Writes data/unicode_classes.h: the code point ranges of \\p{L} (letters), \\p{N} (numbers)
and \\s (white space) as the Python `regex` module matches them, the module OpenAI's GPT-2
encoder.py runs its pre-tokenizing pattern with (Debian: python3-regex). data/bpe.c splits text
with these classes as that pattern does.

    python3 tools/unicode_classes.py > data/unicode_classes.h
"""
import sys

import regex


def ranges(pattern):
    pat = regex.compile(pattern)
    out, start = [], None
    for cp in range(0x110000):
        hit = bool(pat.match(chr(cp)))
        if hit and start is None:
            start = cp
        if not hit and start is not None:
            out.append((start, cp - 1))
            start = None
    if start is not None:
        out.append((start, 0x10FFFF))
    return out


def table(name, rs):
    lines = [f"static const uint32_t {name}[][2] = {{ /* {len(rs)} ranges */"]
    row = []
    for a, b in rs:
        row.append(f"{{0x{a:x}, 0x{b:x}}}")
        if len(row) == 6:
            lines.append("    " + ", ".join(row) + ",")
            row = []
    if row:
        lines.append("    " + ", ".join(row) + ",")
    lines.append("};")
    return "\n".join(lines)


def main():
    print("/* unicode_classes.h: written by tools/unicode_classes.py from the regex module of Debian's")
    print(" * python3-regex (2022.10.31, Unicode 15.0); do not edit.")
    print(" * Inclusive code point ranges, ascending, of \\p{L}, \\p{N} and \\s as that module matches")
    print(" * them: the classes of GPT-2's pre-tokenizing pattern (data/bpe.c). */")
    print("#ifndef DPT_UNICODE_CLASSES_H\n#define DPT_UNICODE_CLASSES_H\n\n#include <stdint.h>\n")
    print(table("uc_letter", ranges(r"\p{L}")) + "\n")
    print(table("uc_number", ranges(r"\p{N}")) + "\n")
    print(table("uc_space", ranges(r"\s")) + "\n")
    print("#endif")


if __name__ == "__main__":
    sys.exit(main())
