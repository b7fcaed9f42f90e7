/* fuzz_llmc.c: [model] init = llmc:PATH, llm.c's GPT-2 checkpoint file (a 256 x int32 header,
 * then the fp32 tensors). Input: the file. The config takes the shape the header declares when it
 * is a small one (so that the tensors' reading and checking are reached, not only the header's
 * refusal), else a fixed small GPT. Every input must build the model with finite weights or give
 * an error naming the file. */
#include "tests/fuzz/fuzz_common.h"
#include "dpt.h"

#include <math.h>

static dpt_ctx *ctx;

static int32_t header_int(const uint8_t *data, size_t size, int i)
{
    int32_t v = 0;
    if ((size_t)(i + 1) * 4 <= size) memcpy(&v, data + 4 * i, 4);
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!ctx) {
        dpt_error err;
        dpt_ctx_options o = {.device = {DPT_DEVICE_CPU, 0}, .threads = 1, .seed = 1};
        ctx = dpt_ctx_new(&o, &err);
        if (!ctx) abort();
    }
    /* max_seq_len, vocab, layers, heads, channels, padded vocab: the header's when small */
    int32_t T = header_int(data, size, 2), V = header_int(data, size, 3), L = header_int(data, size, 4);
    int32_t H = header_int(data, size, 5), C = header_int(data, size, 6), VP = header_int(data, size, 7);
    bool small = T >= 1 && T <= 8 && V >= 2 && V <= 32 && L >= 1 && L <= 2 && H >= 1 && H <= 2 && C >= 1 && C <= 8 &&
                 C % H == 0 && VP >= V && VP <= 64;
    if (!small) T = 4, V = 16, L = 1, H = 2, C = 8, VP = 16;
    char path[64], sets[7][128];
    int fd = fuzz_file(data, size, path, sizeof path);
    snprintf(sets[0], sizeof sets[0], "model.init=llmc:%s", path);
    snprintf(sets[1], sizeof sets[1], "model.n_layer=%d", L);
    snprintf(sets[2], sizeof sets[2], "model.n_head=%d", H);
    snprintf(sets[3], sizeof sets[3], "model.n_embd=%d", C);
    snprintf(sets[4], sizeof sets[4], "model.block_size=%d", T);
    snprintf(sets[5], sizeof sets[5], "model.padded_vocab_size=%d", VP);
    snprintf(sets[6], sizeof sets[6], "model.name=gpt");
    dpt_config *cfg = dpt_config_defaults();
    dpt_error err;
    for (int i = 0; i < 7; i++)
        if (!dpt_config_set(cfg, sets[i], &err)) abort();
    dpt_dataset ds = {.n = 1, .num_classes = V, .name = "tokens (fuzz)", .nfields = 2};
    ds.fields[0] = (dpt_field){.name = "tokens", .dtype = DPT_I32, .ndim = 1, .shape = {T}};
    ds.fields[1] = (dpt_field){.name = "targets", .dtype = DPT_I32, .ndim = 1, .shape = {T}, .target = true};
    ds.task = (dpt_task){.loss = "cross_entropy", .metrics = DPT_METRIC_PERPLEXITY, .unit = "tok"};
    dpt_model *m = dpt_model_build_for(ctx, cfg, &ds, &err);
    if (m) {
        for (int i = 0; i < dpt_model_num_params(m); i++) { /* every weight it took is finite */
            dpt_tensor *p = dpt_model_param_at(m, i);
            const float *d = dpt_tensor_data(p);
            for (int64_t k = 0; k < dpt_tensor_numel(p); k++)
                if (!isfinite(d[k])) abort();
        }
        dpt_model_free(m);
    } else if (!err.msg[0] || !strstr(err.msg, path)) {
        abort(); /* refused, naming the file */
    }
    dpt_tape_clear(ctx);
    dpt_config_free(cfg);
    close(fd);
    return 0;
}
