#!/usr/bin/env python3
"""GPT-2's tokenizer in Python, the reference tests/bpe.sh checks dptrain's (data/bpe.c) against.

Written from the description of OpenAI's encoder.py: the text cut by GPT-2's pattern (with the
`regex` module, Debian's python3-regex), each piece's UTF-8 bytes written in GPT-2's alphabet,
then merged pair by pair, lowest rank first, every occurrence of the pair left to right
("pairs": the ranks of merges.txt); or as tiktoken merges ("ids": a pair's rank is the id of the
token its bytes make, the rule llm.c's tokenizer file is encoded with). Text is read as UTF-8
with surrogateescape: a byte that is not UTF-8 is a character of no class, as in bpe.c.

    bpe_reference.py encode {pairs|ids} VOCAB.json MERGES.txt TEXTFILE   -> ids, one line
    bpe_reference.py train VOCAB.json MERGES.txt LLMC.bin N TEXTFILE...  -> a byte-level BPE of N merges
"""
import json
import struct
import sys

import regex

PATTERN = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")


def alphabet():
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


CHARS = alphabet()


def pieces(text):
    for piece in PATTERN.findall(text):
        yield "".join(CHARS[b] for b in piece.encode("utf-8", "surrogateescape"))


def merge_all(word, pair):
    """Every occurrence of pair in word merged, left to right (encoder.py's step)."""
    out, i = [], 0
    while i < len(word):
        if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
            out.append(word[i] + word[i + 1])
            i += 2
        else:
            out.append(word[i])
            i += 1
    return out


def merge_pairs(word, ranks):
    word = list(word)
    while len(word) > 1:
        pairs = {(word[i], word[i + 1]) for i in range(len(word) - 1)}
        best = min(pairs, key=lambda p: ranks.get(p, float("inf")))
        if best not in ranks:
            break
        word = merge_all(word, best)
    return word


def merge_ids(word, vocab):
    parts = list(word)
    while len(parts) > 1:
        best, at = None, -1
        for i in range(len(parts) - 1):
            r = vocab.get(parts[i] + parts[i + 1])
            if r is not None and (best is None or r < best):
                best, at = r, i
        if best is None:
            break
        parts[at:at + 2] = [parts[at] + parts[at + 1]]
    return parts


def read_text(path):
    with open(path, "rb") as f:
        return f.read().decode("utf-8", "surrogateescape")


def load(vocab_path, merges_path):
    with open(vocab_path, encoding="utf-8") as f:
        vocab = json.load(f)
    with open(merges_path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    merges = [tuple(line.split(" ")) for line in lines if line and not line.startswith("#version")]
    return vocab, {m: i for i, m in enumerate(merges)}


def encode(mode, vocab_path, merges_path, text_path):
    vocab, ranks = load(vocab_path, merges_path)
    ordinary = {k: v for k, v in vocab.items() if k != "<|endoftext|>"}
    ids = []
    for piece in pieces(read_text(text_path)):
        parts = merge_pairs(piece, ranks) if mode == "pairs" else merge_ids(piece, ordinary)
        ids.extend(vocab[p] for p in parts)
    print(" ".join(map(str, ids)))


def train(vocab_path, merges_path, llmc_path, n_merges, paths):
    words = {}
    for path in paths:
        for piece in pieces(read_text(path)):
            words[piece] = words.get(piece, 0) + 1
    words = {tuple(w): c for w, c in words.items()}
    tokens = [CHARS[b] for b in range(256)]
    known = set(tokens)
    merges = []
    while len(merges) < n_merges:
        counts = {}
        for w, c in words.items():
            for i in range(len(w) - 1):
                counts[w[i], w[i + 1]] = counts.get((w[i], w[i + 1]), 0) + c
        # the most frequent pair whose token is new (ties: the first in sorted order)
        best = None
        for pair, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
            if pair[0] + pair[1] not in known:
                best = pair
                break
        if best is None:
            break
        merges.append(best)
        tokens.append(best[0] + best[1])
        known.add(best[0] + best[1])
        joined = {}
        for w, c in words.items():
            out = tuple(merge_all(w, best))
            joined[out] = joined.get(out, 0) + c
        words = joined
    tokens.append("<|endoftext|>")
    with open(vocab_path, "w", encoding="utf-8") as f:
        json.dump({t: i for i, t in enumerate(tokens)}, f, ensure_ascii=False)
    with open(merges_path, "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
    byte_of = {c: b for b, c in CHARS.items()}
    with open(llmc_path, "wb") as f:
        f.write(struct.pack("<256I", *([20240328, 2, len(tokens), len(tokens) - 1] + [0] * 252)))
        for t in tokens:
            raw = t.encode("ascii") if t == "<|endoftext|>" else bytes(byte_of[c] for c in t)
            f.write(bytes([len(raw)]) + raw)


def main():
    if sys.argv[1] == "encode":
        encode(*sys.argv[2:6])
    else:
        train(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6:])


if __name__ == "__main__":
    main()
