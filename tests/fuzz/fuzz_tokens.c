/* fuzz_tokens.c: [data] source = tokens (llm.c's token shards) and --predict --input over the
 * same reader. Input: one byte choosing seq_len (1-32) and the vocabulary (256, or 2-64 so that
 * tokens are refused), then the shard's bytes (header and tokens). Every input must give a
 * dataset whose every sample reads tokens below the vocabulary, or an error naming the file;
 * --input must take whatever the training reader took, and a byte-level model any file. */
#include "tests/fuzz/fuzz_common.h"
#include "dpt.h"
#include "data/data.h"

static void read_all(const dpt_dataset *ds, int64_t seq_len, int64_t vocab)
{
    int32_t x[32], y[32];
    for (int64_t j = 0; j < ds->n; j++) {
        ds->get(ds, j, (void *[]){x, y});
        for (int64_t i = 0; i < seq_len; i++)
            if (x[i] < 0 || x[i] >= vocab || y[i] < 0 || y[i] >= vocab) abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    int64_t seq_len = 1 + data[0] % 32, vocab = data[0] & 0x80 ? 256 : 2 + (data[0] >> 2) % 63;
    char path[64], set[3][128];
    int fd = fuzz_file(data + 1, size - 1, path, sizeof path);
    snprintf(set[0], sizeof set[0], "data.train=%s", path);
    snprintf(set[1], sizeof set[1], "data.seq_len=%lld", (long long)seq_len);
    snprintf(set[2], sizeof set[2], "data.vocab_size=%lld", (long long)vocab);
    dpt_config *cfg = dpt_config_defaults();
    dpt_error err;
    if (!dpt_config_set(cfg, "data.source=tokens", &err) || !dpt_config_set(cfg, set[0], &err) ||
        !dpt_config_set(cfg, set[1], &err) || !dpt_config_set(cfg, set[2], &err))
        abort();
    snprintf(set[0], sizeof set[0], "data.val=%s", path);
    if (!dpt_config_set(cfg, set[0], &err)) abort();
    dpt_dataset *train = NULL, *val = NULL, *input = NULL;
    if (dpt_data_open(cfg, &train, &val, &err)) {
        if (train->n < 1 || val->n != train->n) abort();
        read_all(train, seq_len, vocab);
        /* the same file as --predict --input: taken too, every row readable */
        if (!dpt_tokens_open_input(path, train, &input, &err)) abort();
        read_all(input, seq_len, vocab);
        dpt_dataset_free(input);
        dpt_dataset_free(train), dpt_dataset_free(val);
    } else {
        if (!err.msg[0] || !strstr(err.msg, path)) abort(); /* refused, naming the file */
    }
    dpt_config_free(cfg);
    if (vocab == 256) { /* a byte-level model's --input: any file, as bytes or as a shard */
        int32_t good[256 + 17] = {20240520, 1, 33};
        char like_path[64], like_set[128];
        int like_fd = fuzz_file((const uint8_t *)good, sizeof good - 2, like_path, sizeof like_path);
        cfg = dpt_config_defaults();
        snprintf(like_set, sizeof like_set, "data.train=%s", like_path);
        if (!dpt_config_set(cfg, "data.source=tokens", &err) || !dpt_config_set(cfg, like_set, &err) ||
            !dpt_config_set(cfg, set[1], &err) || !dpt_config_set(cfg, set[2], &err))
            abort();
        snprintf(like_set, sizeof like_set, "data.val=%s", like_path);
        if (!dpt_config_set(cfg, like_set, &err)) abort();
        if (!dpt_data_open(cfg, &train, &val, &err)) abort();
        if (dpt_tokens_open_input(path, train, &input, &err)) {
            read_all(input, seq_len, vocab);
            dpt_dataset_free(input);
        } else if (!err.msg[0] || !strstr(err.msg, path)) {
            abort();
        }
        dpt_dataset_free(train), dpt_dataset_free(val);
        dpt_config_free(cfg);
        close(like_fd);
    }
    close(fd);
    return 0;
}
