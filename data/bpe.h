/* bpe.h: GPT-2's byte-level byte-pair encoding, text -> token ids, apart from any file format
 * (tokenizer.c fills it from llm.c's or Hugging Face's files).
 *
 * Text is first cut into pieces by GPT-2's pattern (OpenAI's encoder.py and tiktoken's r50k):
 *     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * with the classes of data/unicode_classes.h; bytes that are not UTF-8 are each a character of
 * none of the classes (so they go with punctuation) rather than an error. Each piece starts as
 * its bytes' tokens and is merged pair by pair, the pair of lowest rank first (the leftmost of
 * equal ranks), until no pair of it has a rank: encoder.py's loop, in O(n log n) with a heap
 * so that a hostile piece (a megabyte without a space) costs no more than ordinary text; a
 * piece longer than 256 MiB is merged in parts of that many bytes. */
#ifndef DPT_BPE_H
#define DPT_BPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct dpt_bpe dpt_bpe;

/* byte_id[b]: the token of the single byte b (every byte must have one). */
dpt_bpe *dpt_bpe_new(const int32_t byte_id[256]);
void dpt_bpe_free(dpt_bpe *b);
/* The merge of the adjacent tokens (left, right) into `merged`, of rank `rank` (lower merges
 * first). False when the pair has a merge already (the first one stays). */
bool dpt_bpe_add(dpt_bpe *b, int32_t left, int32_t right, int32_t rank, int32_t merged);
int64_t dpt_bpe_merges(const dpt_bpe *b);
/* The tokens of text[0, len): a new array of *n ids (never NULL). */
int32_t *dpt_bpe_encode(const dpt_bpe *b, const unsigned char *text, size_t len, size_t *n);
/* The same for text that goes on after len (final false: a stream read in parts): only the
 * pieces whose end cannot depend on what follows (4 bytes of it: a UTF-8 character, a
 * contraction's letters) are encoded, *used bytes of them; the caller passes the rest again with
 * the next part. final true: all of it (dpt_bpe_encode). The ids are those of the whole text. */
int32_t *dpt_bpe_encode_some(const dpt_bpe *b, const unsigned char *text, size_t len, bool final, size_t *used,
                             size_t *n);
/* dpt_bpe_encode_some on up to `threads` threads: the text is cut only where every piece ends
 * whatever surrounds it ("X\nY", X and Y printable ASCII), into segments of at least
 * min_segment bytes, each encoded on its own and the ids put together: the same ids as one
 * thread's. dpt_bpe_encode_some uses OpenMP's threads and 1 MiB. */
int32_t *dpt_bpe_encode_segments(const dpt_bpe *b, const unsigned char *text, size_t len, bool final, size_t *used,
                                 size_t *n, size_t min_segment, int threads);
/* The end of the piece that starts at text[at] (at < len): GPT-2's pattern's next match. */
size_t dpt_bpe_piece_end(const unsigned char *text, size_t len, size_t at);

#endif
