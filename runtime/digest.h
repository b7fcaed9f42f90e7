/* digest.h: SHA-256 of a model's weights (OpenSSL's libcrypto), the same bytes whether read
 * from the model in memory or from a checkpoint's records: for each parameter, then each
 * buffer, in model order: its name, a NUL, u32 ndim, i64 dims[ndim], the float32 values
 * (little-endian). Two runs whose hashes agree hold bit-identical weights. */
#ifndef DPT_DIGEST_H
#define DPT_DIGEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dpt.h"

typedef struct dpt_digest dpt_digest;

/* NULL when this build has no libcrypto (the message says so in why). */
dpt_digest *dpt_digest_new(const char **why);
void dpt_digest_tensor(dpt_digest *d, const char *name, int ndim, const int64_t *dims, const float *data,
                       int64_t numel);
/* hex: 65 bytes; frees d. */
void dpt_digest_finish(dpt_digest *d, char *hex);

/* The model's weights hash (parameters and buffers) into hex; false with why when there is no
 * SHA-256 in this build. */
bool dpt_model_weights_sha256(const dpt_model *model, char *hex, const char **why);

#endif
