/* digest.c: the weights hash (see digest.h), on OpenSSL's EVP SHA-256. */
#include "digest.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "tensor.h"

#if DPT_OPENSSL
#include <openssl/evp.h>

struct dpt_digest {
    EVP_MD_CTX *md;
};

dpt_digest *dpt_digest_new(const char **why)
{
    dpt_digest *d = calloc(1, sizeof *d);
    if (!d) dpt_fatal("out of host memory");
    d->md = EVP_MD_CTX_new();
    if (!d->md || EVP_DigestInit_ex(d->md, EVP_sha256(), NULL) != 1) {
        if (why) *why = "OpenSSL's SHA-256 could not start";
        EVP_MD_CTX_free(d->md);
        free(d);
        return NULL;
    }
    return d;
}

static void feed(dpt_digest *d, const void *p, size_t n)
{
    if (EVP_DigestUpdate(d->md, p, n) != 1) dpt_fatal("SHA-256 update failed");
}

void dpt_digest_tensor(dpt_digest *d, const char *name, int ndim, const int64_t *dims, const float *data,
                       int64_t numel)
{
    uint32_t nd = (uint32_t)ndim;
    feed(d, name, strlen(name) + 1);
    feed(d, &nd, sizeof nd);
    feed(d, dims, (size_t)ndim * sizeof *dims);
    feed(d, data, (size_t)numel * sizeof *data); /* x86-64 and aarch64 Linux: little-endian */
}

void dpt_digest_finish(dpt_digest *d, char *hex)
{
    unsigned char sum[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    if (EVP_DigestFinal_ex(d->md, sum, &n) != 1 || n != 32) dpt_fatal("SHA-256 final failed");
    for (unsigned i = 0; i < n; i++)
        snprintf(hex + 2 * i, 3, "%02x", sum[i]);
    EVP_MD_CTX_free(d->md);
    free(d);
}
#else
struct dpt_digest {
    int unused;
};
dpt_digest *dpt_digest_new(const char **why)
{
    if (why) *why = "this build has no SHA-256 (OpenSSL's libcrypto: apt-get install libssl-dev, rebuild)";
    return NULL;
}
void dpt_digest_tensor(dpt_digest *d, const char *name, int ndim, const int64_t *dims, const float *data,
                       int64_t numel)
{
    (void)d, (void)name, (void)ndim, (void)dims, (void)data, (void)numel;
}
void dpt_digest_finish(dpt_digest *d, char *hex)
{
    (void)d;
    hex[0] = '\0';
}
#endif

static void digest_of(dpt_digest *d, const dpt_tensor *t)
{
    float *host = malloc((size_t)t->numel * sizeof(float) + 1);
    if (!host) dpt_fatal("out of host memory hashing %s", t->name);
    dpt_tensor_copy_to_host(t, host);
    dpt_digest_tensor(d, t->name, t->ndim, t->shape, host, t->numel);
    free(host);
}

bool dpt_model_weights_sha256(const dpt_model *model, char *hex, const char **why)
{
    dpt_digest *d = dpt_digest_new(why);
    if (!d) return false;
    for (int i = 0; i < dpt_model_num_params(model); i++)
        digest_of(d, dpt_model_param_at(model, i));
    for (int i = 0; i < dpt_model_num_buffers(model); i++)
        digest_of(d, dpt_model_buffer_at(model, i));
    dpt_digest_finish(d, hex);
    return true;
}
