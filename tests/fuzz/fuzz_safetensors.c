/* fuzz_safetensors.c: the safetensors reader ([model] init, --eval, --predict, --inspect and
 * --export of another program's weights). Input: the file. Every input must either be read
 * whole, each tensor handed on with a shape whose product is its element count and finite
 * values, or be refused with an error naming the file; --inspect's reader (which dispatches
 * on the header) runs on the same bytes. */
#include "tests/fuzz/fuzz_common.h"
#include "dpt.h"

#include <math.h>

static bool each(void *user, const char *name, bool buffer, int ndim, const int64_t *dims, const float *data,
                 int64_t numel, dpt_error *err)
{
    (void)user, (void)buffer, (void)err;
    if (!name || ndim < 0 || ndim > 8) abort();
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) {
        if (dims[d] < 0) abort();
        n *= dims[d];
    }
    if (n != numel) abort();
    for (int64_t i = 0; i < numel; i++)
        if (!isfinite(data[i])) abort();
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    int fd = fuzz_file(data, size, path, sizeof path);
    dpt_error err;
    dpt_safetensors_skips skips;
    if (!dpt_safetensors_tensors(path, each, NULL, &skips, &err) && !strstr(err.msg, path)) abort();
    FILE *sink = fopen("/dev/null", "w");
    if (!sink) abort();
    if (dpt_safetensors_is(path) && !dpt_checkpoint_inspect(path, sink, &err) && !strstr(err.msg, path)) abort();
    fclose(sink);
    close(fd);
    return 0;
}
