/* dpt.h: the public C API of dptrain. A model is written against this header only.
 *
 * Ownership in one paragraph: tensors made with dpt_tensor_new() are persistent and are
 * freed by the caller with dpt_tensor_free(). Tensors returned by ops (dpt_linear,
 * dpt_relu, ...) are temporaries owned by the context's tape; they live until
 * dpt_tape_clear(), which a training loop calls once per step. Parameters belong to
 * their model and are freed with it.
 *
 * Gradient convention: every backward function ADDS into .grad (+=). Gradients of
 * parameters therefore accumulate across backward calls until dpt_model_zero_grad().
 */
#ifndef DPT_H
#define DPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DPT_VERSION "0.1.0"
#define DPT_MAX_DIMS 6

/* ---------------------------------------------------------------- errors */

/* A user-facing error: what went wrong (naming the file/line/key/value) and a HINT line. */
typedef struct dpt_error {
    char msg[1536];
} dpt_error;

/* Fill err (may be NULL) with a printf-style message; always returns false. */
bool dpt_errorf(dpt_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Put a printf-style prefix before the message err already holds (where it happened: a key, a
 * file, a command-line option); always returns false. */
bool dpt_error_prefix(dpt_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---------------------------------------------------------------- config */

/* An INI file's settings, checked against the schema: every key some registration (below)
 * declared, with its type, default, range and help. */
typedef struct dpt_config dpt_config;

typedef enum dpt_key_type {
    DPT_KEY_INT,
    DPT_KEY_FLOAT,
    DPT_KEY_BOOL,
    DPT_KEY_STRING,
    DPT_KEY_ENUM,       /* one of choices, "a|b|c", or "@kind": the names registered for that kind
                           ("@optimizer"); read with dpt_config_str, dpt_config_enum, dpt_config_choice */
    DPT_KEY_INT_LIST,   /* "256,256"; read with dpt_config_int_list */
    DPT_KEY_FLOAT_LIST, /* "0.485,0.456,0.406"; read with dpt_config_float_list */
    DPT_KEY_COMPARISON, /* "OP VALUE" ([expect]: ">= 85%"); read with dpt_config_str */
    DPT_KEY_TYPE_COUNT
} dpt_key_type;

/* flags of a key */
enum {
    DPT_KEY_NOT_HASHED = 1 /* cannot change the numbers a run computes (logging, where files go, timeouts):
                              left out of the config hash, so changing it keeps a resume exact */
};

/* A config key a registration declares: validated, suggested on a typo, hashed and listed by
 * --config-reference, read with dpt_config_int and friends. */
typedef struct dpt_config_key {
    const char *section; /* NULL: the section of the registration's kind ([model], [optim], [data], [train]) */
    const char *key;
    dpt_key_type type;
    const char *def;     /* the default, as written in an INI file */
    double min, max;     /* numbers and list elements; no range when min > max (or both 0) */
    const char *choices; /* DPT_KEY_ENUM; DPT_KEY_FLOAT: words also taken ("auto"), read as NAN */
    const char *help;
    unsigned flags;      /* DPT_KEY_NOT_HASHED */
} dpt_config_key;

/* Parse an INI file against the schema; NULL with err naming the file, line and key. */
dpt_config *dpt_config_load(const char *path, dpt_error *err);
/* The same from text in memory; errors name `name` as the file. */
dpt_config *dpt_config_parse(const char *text, size_t len, const char *name, dpt_error *err);
/* A config with every key at its default (no file). */
dpt_config *dpt_config_defaults(void);
/* Apply "section.key=value" (the --set flag); false with err on an unknown key or bad value. */
bool dpt_config_set(dpt_config *cfg, const char *assignment, dpt_error *err);
void dpt_config_free(dpt_config *cfg);
int64_t dpt_config_int(const dpt_config *cfg, const char *section, const char *key);
double dpt_config_float(const dpt_config *cfg, const char *section, const char *key);
bool dpt_config_bool(const dpt_config *cfg, const char *section, const char *key);
const char *dpt_config_str(const dpt_config *cfg, const char *section, const char *key);
/* An enum key's value as its position among the declared choices ("fp32|bf16|fp16": bf16 is
 * 1), so code switches on it instead of comparing strings. */
int dpt_config_enum(const dpt_config *cfg, const char *section, const char *key);
/* A list value ("256,256", "0.485,0.456,0.406"): returns the count, fills up to max values. */
int dpt_config_int_list(const dpt_config *cfg, const char *section, const char *key, int64_t *values,
                        int max);
int dpt_config_float_list(const dpt_config *cfg, const char *section, const char *key, double *values,
                          int max);
/* Where a key's value came from: "file:line", "--set ..." or "default" (for error messages). */
const char *dpt_config_where(const dpt_config *cfg, const char *section, const char *key);
/* Refuse a key set (in the file or with --set) that only registrations the config does not
 * select read: [model] depth with [model] name = mlp. */
bool dpt_config_check_owners(const dpt_config *cfg, dpt_error *err);
/* Print the resolved config (defaults filled in) as INI. */
void dpt_config_print(const dpt_config *cfg, FILE *out);
/* FNV-1a hash of the resolved config (keys at their default and DPT_KEY_NOT_HASHED ones left
 * out, keys taken in name order, so a new key or a new registration does not change it); ranks
 * and checkpoints compare it. */
uint64_t dpt_config_hash(const dpt_config *cfg);
/* The config's keys by index (the schema's order, the same in every process of one build):
 * section, key, whether the hash counts it, and the value as written. */
int dpt_config_num_keys(const dpt_config *cfg);
const char *dpt_config_key_value(const dpt_config *cfg, int k, const char **section, const char **key, bool *hashed);
/* Print the reference of every section and key as Markdown (docs/config.md). */
void dpt_config_print_reference(FILE *out);

/* ---------------------------------------------------------------- the registry
 * Every extension point is one mechanism: a registration {kind, name, keys, impl}. Models,
 * optimizers, learning-rate schedules, data sources, losses and backends each register from
 * their own file (the built-in ones are found when the library is built: a new file is picked
 * up with no list to edit); a program adds its own with dpt_register before it calls
 * dpt_train_main. The key that selects among a kind ([model] name, [optim] name, [optim]
 * schedule, [data] source, ...) takes its choices from the registry, and a registration's keys
 * are validated, suggested and listed by --config-reference like every other. */
typedef enum dpt_kind {
    DPT_KIND_MODEL = 0, /* impl: const dpt_model_impl *     ([model] name) */
    DPT_KIND_OPTIMIZER, /* impl: const dpt_optim_impl *     ([optim] name) */
    DPT_KIND_SCHEDULE,  /* impl: const dpt_schedule_impl *  ([optim] schedule) */
    DPT_KIND_DATA,      /* impl: const dpt_data_impl *      ([data] source) */
    DPT_KIND_LOSS,      /* impl: const dpt_loss_impl *      (a model's task names one) */
    DPT_KIND_BACKEND,   /* impl: the library's own backend tables (runtime/backend.h) */
    DPT_KIND_SETTINGS,  /* a subsystem's keys and nothing else (impl NULL) */
    DPT_KIND_COUNT
} dpt_kind;

typedef struct dpt_registration {
    dpt_kind kind;
    const char *name; /* lower-case letters, digits and _, at most 48; unique within its kind */
    const char *help; /* one line: what it is (--config-reference, hints) */
    const dpt_config_key *keys; /* the keys it reads; a key another registration declared identically
                                   (type, default, range, choices) is shared */
    int nkeys;
    const void *impl;
} dpt_registration;

/* Add a registration (its strings and keys are copied). Before any config is made, so before
 * dpt_train_main; false, with a message on stderr, for a bad or taken name, a bad key or
 * default, or a clash with another declaration of a key. */
bool dpt_register(const dpt_registration *reg);
/* The registration of that kind and name, or NULL. */
const dpt_registration *dpt_registry_find(dpt_kind kind, const char *name);
/* The registrations of a kind, in registration order (the built-in ones by name first). */
int dpt_registry_count(dpt_kind kind);
const dpt_registration *dpt_registry_at(dpt_kind kind, int i);
/* "model", "optimizer", "schedule", "data source", "loss", "backend", "settings" */
const char *dpt_kind_name(dpt_kind kind);
/* The registration an "@kind" enum key names ([optim] name = adamw: adamw's). */
const dpt_registration *dpt_config_choice(const dpt_config *cfg, const char *section, const char *key);

/* ---------------------------------------------------------------- context */

typedef enum dpt_device_kind {
    DPT_DEVICE_CPU = 0,
    DPT_DEVICE_CUDA = 1,
    DPT_DEVICE_KIND_COUNT
} dpt_device_kind;

typedef struct dpt_device {
    dpt_device_kind kind;
    int index;
} dpt_device;

/* The one object that carries a rank's state: device, allocator, tape, RNG, threads. */
typedef struct dpt_ctx dpt_ctx;
typedef struct dpt_comm dpt_comm; /* a communicator: allreduce, broadcast, allgather, barrier */

/* CPU kernels for convolutions: oneDNN's (the default when the build has oneDNN) or the
 * native im2col + OpenBLAS ones, which stay as the reference. */
typedef enum dpt_cpu_kernels {
    DPT_CPU_KERNELS_DEFAULT = 0,
    DPT_CPU_KERNELS_ONEDNN,
    DPT_CPU_KERNELS_NATIVE
} dpt_cpu_kernels;

/* The convolutions' and GEMMs' arithmetic (torch.autocast's idea): bf16 inputs and weights,
 * fp32 accumulation (oneDNN on the CPU, cuDNN and cuBLAS on CUDA); batch norm's statistics, the loss,
 * weights, gradients and the optimizer stay fp32. The activations between convolutions, batch norm, relu, residual adds and pooling are
 * kept in bf16 (half the memory) unless fp32_activations is set. */
typedef enum dpt_precision { DPT_PRECISION_FP32 = 0, DPT_PRECISION_BF16, DPT_PRECISION_FP16 } dpt_precision;

typedef struct dpt_ctx_options {
    dpt_device device;
    dpt_cpu_kernels cpu_kernels;
    int threads;          /* CPU threads for BLAS and kernels; 0 = all cores */
    uint64_t seed;        /* seeds parameter init and dropout */
    bool tf32;            /* CUDA: TF32 tensor-core math in cuBLAS GEMMs and cuDNN convolutions */
    bool cudnn_benchmark; /* CUDA: time cuDNN's convolution algorithms once per shape (cudnnFind) */
    size_t memory_limit;  /* bytes the device's caching allocator may reserve (0 = no limit) */
    dpt_precision precision; /* BF16: oneDNN on the CPU (fp32 where the CPU lacks AVX512-BF16) */
    bool fp32_activations;   /* BF16: keep activations in fp32 (only the convolutions' inputs are bf16) */
    bool deterministic;      /* CUDA: only cuDNN algorithms that give the same bits on every run */
    bool channels_last;      /* [train] memory_format = nhwc: activations (N, H, W, C) in memory between the
                                layers that take them (convolutions, batch norm, pooling, relu, adds) */
} dpt_ctx_options;

/* Create a context; NULL with err filled if the device cannot be used. */
dpt_ctx *dpt_ctx_new(const dpt_ctx_options *options, dpt_error *err);
void dpt_ctx_free(dpt_ctx *ctx);
/* Devices of a kind this process can use (CUDA: 0 without a GPU or in a build without CUDA). */
int dpt_device_count(dpt_device_kind kind);
/* Print the CUDA driver/runtime, cuDNN and NCCL versions and each GPU (or that there is none). */
void dpt_print_env(FILE *out);
/* ---------------------------------------------------------------- GPU monitoring
 * What nvidia-smi shows, read through NVML (loaded at run time; without the driver's
 * libnvidia-ml.so.1 there are no stats, and no error). */
typedef struct dpt_gpu_stats {
    bool valid;
    char name[96];
    int util_pct; /* GPU busy, percent of the last sample period */
    double mem_used_mb, mem_total_mb;
    int temp_c;     /* -1: not reported */
    double power_w; /* -1: not reported */
} dpt_gpu_stats;
/* GPUs NVML sees (0 without NVML). */
int dpt_gpu_stats_count(void);
/* The stats of the GPU with this PCI bus id (a CUDA device's: dpt_cuda_pci_bus_id), or of
 * NVML's device nvml_index when pci_bus_id is NULL or empty; false without NVML. */
bool dpt_gpu_stats_read(int nvml_index, const char *pci_bus_id, dpt_gpu_stats *out);
/* "87% 31.2/80.0 GiB 64C 312W" */
const char *dpt_gpu_stats_str(const dpt_gpu_stats *s, char *buf, size_t cap);
/* The PCI bus id of CUDA device `index` ("" in a build without CUDA or with no such device). */
void dpt_cuda_pci_bus_id(int index, char *buf, size_t cap);

/* The kernels a context runs: "cpu" (native), "cpu-onednn", "cuda". */
const char *dpt_ctx_backend_name(const dpt_ctx *ctx);
/* The oneDNN version of this build (or that it has none). */
void dpt_onednn_version(char *buf, size_t cap);
/* Threads actually used by this context's kernels. */
int dpt_ctx_threads(const dpt_ctx *ctx);
/* Change that count (>= 1) between steps: the kernels split their work anew, so the last bits
 * of later results may differ from the old count's ([train] adapt_threads). */
void dpt_ctx_set_threads(dpt_ctx *ctx, int threads);
/* The precision the convolutions run in, and why it differs from the one asked for ("" if not). */
dpt_precision dpt_ctx_precision(const dpt_ctx *ctx, const char **note);
/* Under bf16, on a backend that can tell (oneDNN): a bf16 matrix product's speed over fp32's
 * on this context's threads, measured now (about 20 ms; conversions included); 0 otherwise.
 * Below 1 bf16 saves memory on this CPU but not time. */
double dpt_ctx_bf16_speedup(dpt_ctx *ctx);
/* Whether activations are kept channels-last (NHWC) between the ops that take them. */
bool dpt_ctx_channels_last(const dpt_ctx *ctx);
/* Whether activations are kept in bf16 between the ops that take them. */
bool dpt_ctx_bf16_activations(const dpt_ctx *ctx);
dpt_device dpt_ctx_device(const dpt_ctx *ctx);
/* "cpu" or "cuda:N", written into buf (returned). */
const char *dpt_device_str(dpt_device device, char *buf, size_t cap);
/* Wait until the device has finished everything enqueued so far (CUDA kernels run
 * asynchronously; the CPU backend has nothing to wait for). For timing. */
void dpt_ctx_synchronize(dpt_ctx *ctx);

/* Caching-allocator statistics of the context's device, in bytes. */
typedef struct dpt_mem_stats {
    size_t allocated;       /* handed out and not yet returned */
    size_t reserved;        /* allocated + cached in free lists */
    size_t peak_allocated;  /* high-water mark of allocated */
    size_t limit;           /* cap on reserved (0 = none) */
    uint64_t system_allocs; /* calls to the system allocator (steady state: constant) */
} dpt_mem_stats;
/* What an out-of-memory report tells the user to change while this phase runs (NULL: the
 * training batch); returns the previous hint. Evaluation sets "[train] eval_batch". */
const char *dpt_ctx_set_oom_hint(dpt_ctx *ctx, const char *hint);
#define DPT_EVAL_OOM_HINT                                                                                    \
    "this happened for evaluation: use a smaller [train] eval_batch (it does not change training)"
/* The device's free and total memory as its driver reports them (0 and 0 on the CPU). */
void dpt_ctx_device_memory(const dpt_ctx *ctx, size_t *free_bytes, size_t *total_bytes);
dpt_mem_stats dpt_ctx_mem_stats(const dpt_ctx *ctx);

/* ---------------------------------------------------------------- tensors */

typedef struct dpt_tensor dpt_tensor;

/* The numbers a tensor holds. F32 everywhere a gradient flows; I32 for indices (labels, token
 * ids); BF16 for 16-bit activations under [train] precision = bf16 (the library makes those). */
typedef enum dpt_dtype { DPT_F32 = 0, DPT_BF16 = 1, DPT_I32 = 2, DPT_DTYPE_COUNT } dpt_dtype;

/* A persistent zero-filled f32 tensor of the given shape; free with dpt_tensor_free(). */
dpt_tensor *dpt_tensor_new(dpt_ctx *ctx, int ndim, const int64_t *shape);
/* The same of another dtype (DPT_F32 or DPT_I32). */
dpt_tensor *dpt_tensor_new_dtype(dpt_ctx *ctx, dpt_dtype dtype, int ndim, const int64_t *shape);
dpt_dtype dpt_tensor_dtype(const dpt_tensor *t);
void dpt_tensor_free(dpt_tensor *t);
int dpt_tensor_ndim(const dpt_tensor *t);
int64_t dpt_tensor_dim(const dpt_tensor *t, int axis); /* negative axis counts from the end */
int64_t dpt_tensor_numel(const dpt_tensor *t);
const char *dpt_tensor_name(const dpt_tensor *t);
/* Pointer to the first element (host memory for CPU tensors). */
float *dpt_tensor_data(dpt_tensor *t);
/* The gradient tensor, or NULL when none has been accumulated. */
dpt_tensor *dpt_tensor_grad(dpt_tensor *t);
/* Copy n = numel floats between host memory and the tensor (any device), in index order (a
 * view's copy to the host reads it as its shape says; a copy into one is refused). */
void dpt_tensor_copy_from_host(dpt_tensor *t, const float *src);
void dpt_tensor_copy_to_host(const dpt_tensor *t, float *dst);
/* The same for an I32 tensor's n = numel int32 values. */
void dpt_tensor_copy_from_host_i32(dpt_tensor *t, const int32_t *src);
void dpt_tensor_copy_to_host_i32(const dpt_tensor *t, int32_t *dst);
/* The value of a one-element tensor. */
float dpt_tensor_item(const dpt_tensor *t);

/* ---------------------------------------------------------------- autograd */

/* Turn recording off (evaluation) or on; returns the previous setting. */
bool dpt_set_grad_enabled(dpt_ctx *ctx, bool enabled);
bool dpt_grad_enabled(const dpt_ctx *ctx);
/* Run backward from a one-element loss: d(loss)/d(loss) = 1, walk the tape in reverse. */
void dpt_backward(dpt_ctx *ctx, dpt_tensor *loss);
/* Drop the tape and every temporary tensor; call once per step after the optimizer. */
void dpt_tape_clear(dpt_ctx *ctx);
/* A point on the tape, and the temporaries made since it handed back early: when nothing was
 * recorded since the mark (evaluation, or no gradient wanted), every temporary made since is
 * freed except `keep` (returned), so a model's block can give back its intermediates at once
 * instead of holding a whole forward pass until dpt_tape_clear (PyTorch frees them by
 * reference count under no_grad). While recording, it does nothing: backward needs them. */
typedef struct dpt_tape_mark {
    int temps, nodes;
} dpt_tape_mark;
dpt_tape_mark dpt_tape_mark_here(dpt_ctx *ctx);
dpt_tensor *dpt_tape_release(dpt_ctx *ctx, dpt_tape_mark mark, dpt_tensor *keep);

/* Activation checkpointing (PyTorch's torch.utils.checkpoint, llm.c's recompute): fn(ctx, x,
 * user) computed with nothing it makes inside kept for backward (its intermediates are freed as
 * soon as it returns), only x and the output; backward runs fn again, recording, with the
 * random generator as it was the first time (the same dropout masks), and backpropagates
 * through that. The gradients are the ones without checkpointing bit for bit (the same ops in
 * the same order); the cost is a second forward of fn. fn reads x and parameters (through
 * user, which must stay valid until backward); it must not modify x. It runs twice per step:
 * state that moves once a step must move in the first run only: a batch norm in it updates
 * its running statistics once (PyTorch's checkpoint updates them twice); a layer of yours
 * with such state asks dpt_recomputing. Not recording (evaluation), or nested in another
 * checkpoint: fn(ctx, x, user) as it is. */
typedef dpt_tensor *(*dpt_checkpoint_fn)(dpt_ctx *ctx, dpt_tensor *x, void *user);
dpt_tensor *dpt_checkpoint(dpt_ctx *ctx, dpt_checkpoint_fn fn, dpt_tensor *x, void *user);
/* True while backward runs a checkpointed function again (its forward then is a repeat). */
bool dpt_recomputing(const dpt_ctx *ctx);

/* Fires once per parameter per backward, as soon as its gradient is final (the last use
 * of the parameter in forward order has run its backward). The DDP reducer listens here. */
typedef void (*dpt_grad_ready_hook)(dpt_tensor *param, int param_index, void *user);
void dpt_set_grad_ready_hook(dpt_ctx *ctx, dpt_grad_ready_hook hook, void *user);

/* With a hook set, training-mode batch norm normalises with its batch's own statistics and,
 * instead of moving its running statistics, hands the hook the batch's mean and unbiased
 * variance (channels each); the hook's owner applies them later with
 * dpt_batchnorm_apply_stats (the deterministic mode's ghost batch norm: each shard alone, the
 * statistics averaged through the gradients' tree). NULL: batch norm as usual. */
typedef struct dpt_batchnorm dpt_batchnorm;
typedef void (*dpt_bn_stats_hook)(dpt_batchnorm *layer, const double *mean, const double *var, int64_t channels,
                                  void *user);
void dpt_set_bn_stats_hook(dpt_ctx *ctx, dpt_bn_stats_hook hook, void *user);

/* ---------------------------------------------------------------- ops (return temporaries) */

/* Elementwise functions of one tensor (dpt_unary, dpt_foreach_unary); values are append-only. */
typedef enum dpt_unary_op {
    DPT_UNARY_NEG = 0,
    DPT_UNARY_ABS,
    DPT_UNARY_SIGN, /* -1, 0, 1 (gradient 0) */
    DPT_UNARY_SQRT,
    DPT_UNARY_RSQRT, /* 1 / sqrt(x) */
    DPT_UNARY_EXP,
    DPT_UNARY_LOG,
    DPT_UNARY_SQUARE,
    DPT_UNARY_RECIPROCAL,
    DPT_UNARY_TANH,
    DPT_UNARY_SIGMOID,
    DPT_UNARY_SILU,     /* x * sigmoid(x) */
    DPT_UNARY_GELU_ERF, /* 0.5 x (1 + erf(x / sqrt(2))), the exact GELU */
    DPT_UNARY_COUNT
} dpt_unary_op;
/* Broadcasting binary ops (dpt_add, dpt_sub, dpt_mul, dpt_div); values are append-only. */
typedef enum dpt_binary_op { DPT_BINARY_ADD = 0, DPT_BINARY_SUB, DPT_BINARY_MUL, DPT_BINARY_DIV, DPT_BINARY_COUNT } dpt_binary_op;

/* Elementwise, broadcasting as NumPy does (shapes aligned at the last axis, a dim of 1 stretches
 * to the other's): (B, T, C) + (C), (B, H, T, T) * (1, 1, T, T), ... */
dpt_tensor *dpt_add(dpt_ctx *ctx, dpt_tensor *a, dpt_tensor *b);
dpt_tensor *dpt_sub(dpt_ctx *ctx, dpt_tensor *a, dpt_tensor *b);
dpt_tensor *dpt_mul(dpt_ctx *ctx, dpt_tensor *a, dpt_tensor *b);
dpt_tensor *dpt_div(dpt_ctx *ctx, dpt_tensor *a, dpt_tensor *b);
/* x stretched to shape as broadcasting stretches it (an axis of 1 repeated, new axes in front;
 * -1 keeps an axis), e.g. a (1, 1, C) class token to (B, 1, C) for a concat; a dense copy (not
 * torch.expand's view), its gradient summed back over the stretched axes. */
dpt_tensor *dpt_expand(dpt_ctx *ctx, dpt_tensor *x, int ndim, const int64_t *shape);
dpt_tensor *dpt_broadcast_binary(dpt_ctx *ctx, dpt_binary_op op, dpt_tensor *a, dpt_tensor *b);
dpt_tensor *dpt_scale(dpt_ctx *ctx, dpt_tensor *x, float alpha);
dpt_tensor *dpt_add_scalar(dpt_ctx *ctx, dpt_tensor *x, float c); /* x + c (an RMSNorm's eps) */
dpt_tensor *dpt_sum(dpt_ctx *ctx, dpt_tensor *x);  /* -> (1) */
dpt_tensor *dpt_mean(dpt_ctx *ctx, dpt_tensor *x); /* -> (1) */
/* (M, K) x (K, N) -> (M, N); a or b may be dpt_transpose() views (no copy). */
dpt_tensor *dpt_matmul(dpt_ctx *ctx, dpt_tensor *a, dpt_tensor *b);
dpt_tensor *dpt_transpose(dpt_ctx *ctx, dpt_tensor *x); /* 2-D view */
/* Batched matmul (..., M, K) x (..., K, N) -> (..., M, N) over equal batch axes, or with b a
 * (K, N) matrix shared by every batch element; operands may be dpt_transpose_axes views of
 * their last two axes (read with a transpose flag, no copy). */
dpt_tensor *dpt_bmm(dpt_ctx *ctx, dpt_tensor *a, dpt_tensor *b);
/* Views (no copy; their gradients flow back to the viewed tensor): axes permuted (y's axis i is
 * x's axes[i]), two axes swapped, a slice [start, end) by step of one axis (negative start and
 * end count from the end), length elements from start. */
dpt_tensor *dpt_permute(dpt_ctx *ctx, dpt_tensor *x, const int *axes);
dpt_tensor *dpt_transpose_axes(dpt_ctx *ctx, dpt_tensor *x, int a, int b);
dpt_tensor *dpt_slice(dpt_ctx *ctx, dpt_tensor *x, int axis, int64_t start, int64_t end, int64_t step);
dpt_tensor *dpt_narrow(dpt_ctx *ctx, dpt_tensor *x, int axis, int64_t start, int64_t length);
/* x itself when its data is dense, else a dense copy (recorded). */
dpt_tensor *dpt_contiguous(dpt_ctx *ctx, dpt_tensor *x);
/* Tensors joined along an axis (equal elsewhere); and x cut along one into views of sizes. */
dpt_tensor *dpt_concat(dpt_ctx *ctx, int n, dpt_tensor *const *xs, int axis);
void dpt_split(dpt_ctx *ctx, dpt_tensor *x, int axis, int n, const int64_t *sizes, dpt_tensor **out);
/* Over the last dim: (..., D) -> (..., 1) with keepdim, else (...). max's gradient goes to the
 * first largest element. */
dpt_tensor *dpt_sum_last(dpt_ctx *ctx, dpt_tensor *x, bool keepdim);
dpt_tensor *dpt_mean_last(dpt_ctx *ctx, dpt_tensor *x, bool keepdim);
dpt_tensor *dpt_max_last(dpt_ctx *ctx, dpt_tensor *x, bool keepdim);
/* Nearest-neighbour upsampling of (N, C, H, W) by whole factors (torch.nn.Upsample(scale_factor=
 * (sh, sw), mode="nearest")): (N, C, H sh, W sw), each value repeated over an sh x sw block; its
 * gradient sums each block. An expand between two reshapes: every backend runs it. */
dpt_tensor *dpt_upsample_nearest2d(dpt_ctx *ctx, dpt_tensor *x, int64_t scale_h, int64_t scale_w);
/* An elementwise function (dpt_unary_op), recorded with its derivative. */
dpt_tensor *dpt_unary(dpt_ctx *ctx, dpt_unary_op op, dpt_tensor *x);
dpt_tensor *dpt_silu(dpt_ctx *ctx, dpt_tensor *x);     /* x * sigmoid(x) */
dpt_tensor *dpt_gelu_erf(dpt_ctx *ctx, dpt_tensor *x); /* the exact GELU; dpt_gelu is the tanh form */
/* Rows of weight (vocab, dim) picked by int32 ids (...) -> (..., dim); the gradient adds into
 * the picked rows in a fixed order (the same bits on every run). */
dpt_tensor *dpt_embedding(dpt_ctx *ctx, dpt_tensor *weight, dpt_tensor *ids);
/* Layer normalization over the last dim: (x - mean) / sqrt(var + eps) * weight + bias (var
 * biased, as torch.nn.LayerNorm; weight and bias of the last dim's size, or NULL). */
dpt_tensor *dpt_layer_norm(dpt_ctx *ctx, dpt_tensor *x, dpt_tensor *weight, dpt_tensor *bias, float eps);
/* RMS normalization over the last dimension (LLaMA's RMSNorm): x / sqrt(mean(x^2) + eps) * weight
 * (weight (last dim) or NULL). */
dpt_tensor *dpt_rms_norm(dpt_ctx *ctx, dpt_tensor *x, dpt_tensor *weight, float eps);
/* Rotary position embeddings (RoPE, transformers' rotate_half form) of x (B, T, heads hs) at
 * positions [pos, pos + T): in each head, elements i and i + hs/2 turned by the angle of
 * position t and pair i, whose cos and sin are the tables' row t (cos, sin: (positions, hs / 2),
 * e.g. t theta^(-2i/hs)). */
dpt_tensor *dpt_rotary(dpt_ctx *ctx, dpt_tensor *x, int heads, dpt_tensor *cos, dpt_tensor *sin, int64_t pos);
/* Multi-head scaled-dot-product self-attention of fused projections qkv (B, T, 3C): the rows
 * hold q, k and v side by side, head h the slice [h hs, (h + 1) hs) of each (hs = C / heads);
 * returns (B, T, C), head h's output in its slice: softmax(q k^T / sqrt(hs)) v, with a causal
 * mask (position t sees 0..t) when causal. Computed a query row at a time with its softmax
 * statistics kept (B, heads, T) and the scores recomputed in backward (FlashAttention's
 * scheme): memory grows with T, not T^2 per head. */
dpt_tensor *dpt_attention(dpt_ctx *ctx, dpt_tensor *qkv, int heads, bool causal);
/* Incremental decoding (generation with a KV cache, outside autograd: gradients off). A cache
 * holds every attention layer's keys and values for up to `positions` positions of one sequence
 * (2 x layers x positions x heads x head_size floats, persistent, on the context's device). */
typedef struct dpt_kv_cache dpt_kv_cache;
dpt_kv_cache *dpt_kv_cache_new(dpt_ctx *ctx, int layers, int heads, int64_t head_size, int64_t positions);
void dpt_kv_cache_free(dpt_kv_cache *cache);
int64_t dpt_kv_cache_positions(const dpt_kv_cache *cache);
/* dpt_attention (causal) of qkv (1, t, 3C) holding positions [pos, pos + t) of a sequence whose
 * earlier positions went through this layer of the cache before: their keys and values are
 * written into the cache and each new query attends to positions 0..its own. t > 1 only at
 * pos 0 (a prompt in one call); then one position a call. Returns (1, t, C). */
dpt_tensor *dpt_attention_cached(dpt_ctx *ctx, dpt_tensor *qkv, int heads, dpt_kv_cache *cache, int layer,
                                 int64_t pos);
/* y = x W^T + b over the last dim of x (..., in) with W (out, in) and b (out) or NULL
 * (torch.nn.functional.linear): one GEMM over all rows, the bias added in place. */
dpt_tensor *dpt_affine(dpt_ctx *ctx, dpt_tensor *x, dpt_tensor *weight, dpt_tensor *bias);
/* Optimizer building blocks: over lists of n dense float tensors of matching sizes, in place,
 * outside autograd, one pass (one launch on a GPU): y = alpha * x + beta * y (beta 0: y is
 * only written), and y = op(x) (y may be x). */
void dpt_foreach_axpby(dpt_ctx *ctx, int n, dpt_tensor *const *y, float alpha, dpt_tensor *const *x, float beta);
void dpt_foreach_unary(dpt_ctx *ctx, int n, dpt_tensor *const *y, dpt_unary_op op, dpt_tensor *const *x);
/* x with a new shape of the same numel (one dim may be -1): a view of a dense x, a view of a
 * recorded dense copy of a strided one (torch.reshape). Every op takes views (permute, narrow,
 * slice, transpose) as inputs: those whose kernels read dense memory copy them first. */
dpt_tensor *dpt_reshape(dpt_ctx *ctx, dpt_tensor *x, int ndim, const int64_t *shape);
dpt_tensor *dpt_flatten(dpt_ctx *ctx, dpt_tensor *x); /* (B, ...) -> (B, prod) */
dpt_tensor *dpt_relu(dpt_ctx *ctx, dpt_tensor *x);
/* relu in x's own memory (torch's inplace=True: one activation less kept for backward) when
 * that is safe for autograd (x is a temporary whose producer's backward does not read it,
 * e.g. a convolution's, batch norm's, a linear layer's or an add's output, and no recorded op
 * has read it yet); otherwise dpt_relu. x must not be used afterwards: use the result. */
dpt_tensor *dpt_relu_(dpt_ctx *ctx, dpt_tensor *x);
dpt_tensor *dpt_gelu(dpt_ctx *ctx, dpt_tensor *x);    /* tanh approximation */
dpt_tensor *dpt_softmax(dpt_ctx *ctx, dpt_tensor *x);     /* over the last dim */
dpt_tensor *dpt_log_softmax(dpt_ctx *ctx, dpt_tensor *x); /* over the last dim */
/* Mean softmax cross-entropy of logits (B, C) against labels[B] in [0, C); numerically
 * stable (log-sum-exp). label_smoothing in [0, 1) as in torch.nn.CrossEntropyLoss. */
dpt_tensor *dpt_cross_entropy(dpt_ctx *ctx, dpt_tensor *logits, const int32_t *labels, float label_smoothing);
/* Cross-entropy of logits (..., C) against int32 targets (...) of the same leading shape, on the
 * device (a batch's token or label tensor): the mean over the rows whose target is not
 * ignore_index (PyTorch's ignore_index; DPT_IGNORE_INDEX is its default, -100). */
#define DPT_IGNORE_INDEX (-100)
dpt_tensor *dpt_cross_entropy_targets(dpt_ctx *ctx, dpt_tensor *logits, dpt_tensor *targets, float label_smoothing,
                                      int32_t ignore_index);
/* Mean squared error: the mean over every value of (output - target)^2 (the same number of
 * values; torch.nn.MSELoss). */
dpt_tensor *dpt_mse_loss(dpt_ctx *ctx, dpt_tensor *output, dpt_tensor *target);
/* Binary cross-entropy of logits against float targets in [0, 1] (the same number of values;
 * torch.nn.BCEWithLogitsLoss, mean): -(t log sigmoid(x) + (1 - t) log sigmoid(-x)) averaged;
 * stable for any logit, gradient (sigmoid(x) - t) / count. Multi-label heads, images in [0, 1]. */
dpt_tensor *dpt_bce_with_logits(dpt_ctx *ctx, dpt_tensor *logits, dpt_tensor *target);
/* Number of rows whose arg-max equals the label (no gradient); dpt_count_topk: whose label is
 * among the k largest logits (fewer than k above it; an equal logit of a lower class counts
 * above it; k = 1 is the first arg-max, as torch.argmax). */
int64_t dpt_count_correct(dpt_ctx *ctx, dpt_tensor *logits, const int32_t *labels);
int64_t dpt_count_topk(dpt_ctx *ctx, dpt_tensor *logits, const int32_t *labels, int k);
/* The same two with labels already in device memory (a loader batch's device_labels): nothing
 * is copied in or read back, so a GPU step need not wait. The count is added into
 * counter[index], a float on the device (read it when it is time to log). */
dpt_tensor *dpt_cross_entropy_dev(dpt_ctx *ctx, dpt_tensor *logits, const int32_t *device_labels,
                                  float label_smoothing);
void dpt_count_correct_into(dpt_ctx *ctx, dpt_tensor *logits, const int32_t *device_labels,
                            dpt_tensor *counter, int64_t index);
void dpt_count_topk_into(dpt_ctx *ctx, dpt_tensor *logits, const int32_t *device_labels, int k,
                         dpt_tensor *counter, int64_t index);
/* dst[dst_at .. dst_at + n) += alpha * src[src_at ..] and t[at .. at + n) = value, on the device
 * and outside autograd: for metrics kept on the device between reads. */
void dpt_tensor_add_slice(dpt_ctx *ctx, dpt_tensor *dst, int64_t dst_at, const dpt_tensor *src,
                          int64_t src_at, int64_t n, float alpha);
void dpt_tensor_fill_slice(dpt_ctx *ctx, dpt_tensor *t, int64_t at, int64_t n, float value);
/* Host reads of device results this context has made (a GPU step waits at each): copies to
 * the host, item(), host-side reductions, synchronize. */
int64_t dpt_ctx_host_syncs(const dpt_ctx *ctx);

/* ---------------------------------------------------------------- models and layers */

typedef struct dpt_model dpt_model;
typedef struct dpt_batch dpt_batch;     /* data, below */
typedef struct dpt_dataset dpt_dataset; /* data, below */
typedef struct dpt_task dpt_task;       /* data, below */
/* A model's forward: input batch -> logits, recorded on ctx's tape. */
typedef dpt_tensor *(*dpt_forward_fn)(dpt_model *model, dpt_ctx *ctx, dpt_tensor *x);

dpt_model *dpt_model_new(dpt_ctx *ctx, const char *name, dpt_forward_fn forward);
void dpt_model_free(dpt_model *model);
const char *dpt_model_name(const dpt_model *model);
/* Zeroed memory that lives as long as the model (for layer structs, model state). */
void *dpt_model_alloc(dpt_model *model, size_t bytes);
/* Called once by dpt_model_free before the model's parameters, buffers and dpt_model_alloc
 * memory go: for what the model made itself (tensors cached in its state, e.g. with
 * dpt_tensor_new, files, handles), which would otherwise leak (a context reports tensors never
 * freed when it is freed). */
void dpt_model_set_destructor(dpt_model *model, void (*destroy)(dpt_model *model, void *state));
/* Another program's names for this model's tensors (a safetensors file of another library's
 * layout, read by [model] init, --eval, --predict): rename writes the model's name for the
 * file's `name` into out (cap bytes) and returns true, or returns false for a name it does not
 * know. Asked only for names the model does not have itself; the shapes must still agree. vit
 * maps timm's names (blocks.0.attn.qkv.weight) onto torchvision's. */
typedef bool (*dpt_rename_fn)(const char *name, char *out, size_t cap);
void dpt_model_set_renamer(dpt_model *model, dpt_rename_fn rename);
dpt_rename_fn dpt_model_renamer(const dpt_model *model);
/* A loaded tensor of another shape than the model's `into` (same name): adapt writes into's
 * values made from the file's (data, ndim, dims) into out (dpt_tensor_numel(into) floats) and a
 * short account into how (cap bytes), returning true; false leaves the shapes' mismatch an
 * error. vit resamples its position embeddings to another image size (torchvision's
 * interpolate_embeddings: bicubic over the patch grid, the class token's row kept). */
typedef bool (*dpt_adapt_fn)(const dpt_model *model, const dpt_tensor *into, int ndim, const int64_t *dims,
                             const float *data, float *out, char *how, size_t cap);
void dpt_model_set_adapter(dpt_model *model, dpt_adapt_fn adapt);
dpt_adapt_fn dpt_model_adapter(const dpt_model *model);
/* The model's own state pointer (set once by the builder). */
void dpt_model_set_state(dpt_model *model, void *state);
void *dpt_model_state(const dpt_model *model);
/* Register a trainable parameter (zero-filled, gradient allocated); order is creation order.
 * Names (parameters' and buffers') are unique in a model and at most DPT_NAME_MAX characters
 * (longer is refused, never cut: checkpoints and the optimizer state find tensors by name). */
#define DPT_NAME_MAX 127
dpt_tensor *dpt_model_param(dpt_model *model, const char *name, int ndim, const int64_t *shape);
/* Register a non-trainable buffer (e.g. running statistics), saved in checkpoints. */
dpt_tensor *dpt_model_buffer(dpt_model *model, const char *name, int ndim, const int64_t *shape);
int dpt_model_num_params(const dpt_model *model);
dpt_tensor *dpt_model_param_at(const dpt_model *model, int index);
int dpt_model_num_buffers(const dpt_model *model);
dpt_tensor *dpt_model_buffer_at(const dpt_model *model, int index);
int64_t dpt_model_param_count(const dpt_model *model); /* total scalars */
dpt_tensor *dpt_model_forward(dpt_model *model, dpt_ctx *ctx, dpt_tensor *x);
/* A forward that takes the whole batch (several inputs), used instead of the tensor form. */
typedef dpt_tensor *(*dpt_batch_forward_fn)(dpt_model *model, dpt_ctx *ctx, const dpt_batch *batch);
void dpt_model_set_batch_forward(dpt_model *model, dpt_batch_forward_fn forward);
/* The model's output for a batch: its batch forward, or its forward on the task's input field. */
dpt_tensor *dpt_model_forward_batch(dpt_model *model, dpt_ctx *ctx, const dpt_batch *batch, const dpt_task *task);
/* A language model's incremental forward (./train --sample): the logits (1, V) of the last of
 * ids (1, t), which hold positions [pos, pos + t) of a sequence whose positions before pos went
 * through this cache (pos 0 starts a new one), the model's attention layers reading and writing
 * it by dpt_attention_cached. `positions` is the most the model can attend to (its block size);
 * the sampler makes the cache. */
typedef dpt_tensor *(*dpt_decode_fn)(dpt_model *model, dpt_ctx *ctx, const dpt_tensor *ids, int64_t pos,
                                     dpt_kv_cache *cache);
typedef struct dpt_decoder {
    dpt_decode_fn decode;
    int layers, heads;
    int64_t head_size, positions;
} dpt_decoder;
void dpt_model_set_decoder(dpt_model *model, const dpt_decoder *decoder);
const dpt_decoder *dpt_model_decoder(const dpt_model *model); /* NULL: the model has none */
/* GPT-2's tokenizer (data/tokenizer.c, data/bpe.c): from a folder of Hugging Face's vocab.json
 * and merges.txt (or OpenAI's encoder.json and vocab.bpe, or a tokenizer.json of GPT-2's kind),
 * one of those JSON files, or llm.c's gpt2_tokenizer.bin. NULL with err naming the file (and the line, token or byte) when it is not
 * one. Encoding is GPT-2's byte-level BPE with its pre-tokenizing pattern (tiktoken's "gpt2"
 * gives the same ids); text that spells <|endoftext|> is encoded as ordinary text. */
typedef struct dpt_tokenizer dpt_tokenizer;
dpt_tokenizer *dpt_tokenizer_load(const char *path, dpt_error *err);
/* Whether the folder holds files dpt_tokenizer_load reads as a folder's. */
bool dpt_tokenizer_in(const char *dir);
void dpt_tokenizer_free(dpt_tokenizer *t);
int32_t dpt_tokenizer_vocab(const dpt_tokenizer *t);
int32_t dpt_tokenizer_eot(const dpt_tokenizer *t); /* <|endoftext|>: llm.c starts its samples with it */
/* The bytes of token id (len of them; NULL and 0 outside the vocabulary). */
const unsigned char *dpt_tokenizer_bytes(const dpt_tokenizer *t, int32_t id, size_t *len);
/* Whether it can encode: every byte has a token of its own (GPT-2's files: always). */
bool dpt_tokenizer_can_encode(const dpt_tokenizer *t);
/* The ids of text[0, len): a new array of *n (free it); NULL when it cannot encode. */
int32_t *dpt_tokenizer_encode(const dpt_tokenizer *t, const char *text, size_t len, size_t *n);
/* A text read in parts (a corpus larger than memory): with final false only the leading *used
 * bytes are encoded, those whose tokens cannot depend on what follows; pass the rest again with
 * the next part, and the last part with final true. The ids are dpt_tokenizer_encode's of the
 * whole text. */
int32_t *dpt_tokenizer_encode_some(const dpt_tokenizer *t, const char *text, size_t len, bool final, size_t *used,
                                   size_t *n);
/* What the model trains for (loss, metrics, unit, fields); what it leaves 0 or NULL comes from
 * the data set (dpt_task_resolve). */
void dpt_model_set_task(dpt_model *model, const dpt_task *task);
/* The task of a model on a data set: the model's, then the data's, then the defaults; every
 * field filled. false with err when a name it states is not registered or not in the data. */
bool dpt_task_resolve(const dpt_model *model, const dpt_dataset *data, dpt_task *out, dpt_error *err);
void dpt_model_zero_grad(dpt_model *model);
void dpt_model_set_training(dpt_model *model, bool training);
bool dpt_model_training(const dpt_model *model);
/* Weight averages ([train] ema_decay): an exponential moving average of the model's parameters
 * and buffers, avg = decay * avg + (1 - decay) * value after each optimizer step (timm's
 * ModelEmaV2; torch.optim.swa_utils.AveragedModel with get_ema_multi_avg_fn and
 * use_buffers=True). dpt_ema_new starts them at the model's current values; the model owns them
 * (freed with it). Checkpoints save them as "ema/" records and a resume restores them. */
typedef struct dpt_ema dpt_ema;
dpt_ema *dpt_ema_new(dpt_ctx *ctx, dpt_model *model, double decay);
dpt_ema *dpt_model_ema(const dpt_model *model); /* NULL: none */
double dpt_ema_decay(const dpt_ema *ema);
/* avg = decay * avg + (1 - decay) * value with this update's decay (dpt_ema_decay's, or less
 * in a warm-up: [train] ema_warmup). */
void dpt_ema_update(dpt_ctx *ctx, dpt_ema *ema, double decay);
void dpt_ema_reset(dpt_ctx *ctx, dpt_ema *ema); /* the averages := the model's values */
/* The model's values and the averages exchanged (bit for bit; again: back as they were), e.g.
 * to evaluate the averages; the model keeps its tensors, only their numbers move. */
void dpt_ema_swap(dpt_ctx *ctx, dpt_ema *ema);
/* The averages: the parameters' in their order, then the buffers'; named as the model's. */
int dpt_ema_count(const dpt_ema *ema);
dpt_tensor *dpt_ema_at(const dpt_ema *ema, int index);
/* A one-line description, e.g. "784-256-256-10 relu", set by the builder. */
void dpt_model_set_summary(dpt_model *model, const char *summary);
const char *dpt_model_summary(const dpt_model *model);

/* Fill a tensor from U(-bound, bound) with the context's RNG (PyTorch's default Linear init
 * uses bound = 1/sqrt(fan_in)). */
void dpt_init_uniform(dpt_ctx *ctx, dpt_tensor *t, float bound);
/* Fill from N(0, std^2) (Kaiming normal: std = sqrt(2 / fan)). */
void dpt_init_normal(dpt_ctx *ctx, dpt_tensor *t, float std);
void dpt_init_constant(dpt_tensor *t, float value);
/* While on, dpt_init_uniform and dpt_init_normal leave tensors as they are (zero-filled), and
 * draw nothing from the RNG: for a model built only to load a checkpoint's weights over
 * (./train --sample, --eval, --predict, --export: 86 M values drawn and thrown away took 1.8 s). */
void dpt_ctx_skip_init(dpt_ctx *ctx, bool skip);

/* Fully connected layer: y = x W^T + b, W (out, in), b (out). */
typedef struct dpt_linear dpt_linear;
dpt_linear *dpt_linear_new(dpt_model *model, const char *name, int64_t in_features, int64_t out_features,
                           bool bias);
dpt_tensor *dpt_linear_forward(dpt_ctx *ctx, dpt_linear *layer, dpt_tensor *x); /* (..., in) -> (..., out) */

/* Builders track the shape of the activation as they add layers; a layer whose settings do
 * not fit the incoming shape records an error on the model (the first one is kept), which
 * dpt_model_build returns, naming the layer and the shapes. */
typedef struct dpt_shape3 {
    int64_t c, h, w; /* one sample: channels, height, width */
} dpt_shape3;
bool dpt_model_errorf(dpt_model *model, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Layer constructors note themselves for the model summary: kind, name, output shape of one
 * sample, parameters and FLOPs per sample (multiply-add = 2). A model may note a group of
 * layers whole with kind "block" (out: the floats its layers keep for backward, per sample)
 * when its forward releases the group's intermediates at the group's end in evaluation
 * (dpt_tape_release): the memory estimate then counts one block at a time for evaluation. */
void dpt_model_note(dpt_model *model, const char *kind, const char *name, const dpt_shape3 *out,
                    int64_t params, double flops);
/* Floats per sample of the layer outputs the builders noted (dpt_model_note), summed, and the
 * largest one: the base of the memory estimate a run makes before it starts. */
double dpt_model_activation_floats(const dpt_model *m, double *largest_output);
/* The same over the notes of one kind (0 when none). */
double dpt_model_noted_floats(const dpt_model *m, const char *kind, double *largest);
double dpt_model_flops(const dpt_model *model); /* forward FLOPs per sample */
void dpt_model_print_summary(const dpt_model *model, FILE *out);
const char *dpt_model_error(const dpt_model *model); /* NULL when none */

/* 2-D convolution over NCHW, square kernel; weight (out, in/groups, k, k), bias (out).
 * `shape` is the input shape on entry and the output shape on return. Kaiming-normal
 * initialisation (fan_out, ReLU gain) as torchvision's ResNet. */
typedef struct dpt_conv2d dpt_conv2d;
dpt_conv2d *dpt_conv2d_new(dpt_model *model, const char *name, dpt_shape3 *shape, int64_t out_channels,
                           int64_t kernel, int64_t stride, int64_t padding, int64_t dilation, int64_t groups,
                           bool bias);
dpt_tensor *dpt_conv2d_forward(dpt_ctx *ctx, dpt_conv2d *layer, dpt_tensor *x); /* (N,C,H,W) */

/* 2-D transposed convolution (torch.nn.ConvTranspose2d): weight (in, out / groups, k, k), bias
 * (out); an (N, in, H, W) input gives (N, out, (H - 1) stride - 2 padding + dilation (k - 1) +
 * output_padding + 1, likewise W), e.g. k 4, stride 2, padding 1 (dilation 1) doubles H and W;
 * output_padding below the stride or the dilation. `shape` is the input shape on entry and the
 * output shape on return. PyTorch's initialisation (U(-b, b), b = 1 / sqrt(out / groups k k), the
 * bias too). Runs on the backend's convolution kernels (it is the data gradient of the
 * convolution that maps its output to its input); output in NCHW. */
typedef struct dpt_conv_transpose2d dpt_conv_transpose2d;
dpt_conv_transpose2d *dpt_conv_transpose2d_new(dpt_model *model, const char *name, dpt_shape3 *shape,
                                               int64_t out_channels, int64_t kernel, int64_t stride, int64_t padding,
                                               int64_t output_padding, int64_t dilation, int64_t groups, bool bias);
dpt_tensor *dpt_conv_transpose2d_forward(dpt_ctx *ctx, dpt_conv_transpose2d *layer, dpt_tensor *x);

/* LayerNorm over the last dim (torch.nn.LayerNorm(dim, eps, elementwise_affine)): x (..., dim);
 * weight starts at 1 and bias at 0. */
typedef struct dpt_layernorm dpt_layernorm;
dpt_layernorm *dpt_layernorm_new(dpt_model *model, const char *name, int64_t dim, float eps, bool affine);
dpt_tensor *dpt_layernorm_forward(dpt_ctx *ctx, dpt_layernorm *layer, dpt_tensor *x);

/* GroupNorm (torch.nn.GroupNorm(groups, channels, eps, affine)) of (N, C, H, W): each sample's
 * channels in `groups` groups, each normalised over its channels and positions (biased
 * variance), then weight (1) and bias (0) per channel; no batch statistics (diffusion models,
 * U-Nets, small batches). The layer norm of the (N, groups, C/groups x H x W) view. */
typedef struct dpt_groupnorm dpt_groupnorm;
dpt_groupnorm *dpt_groupnorm_new(dpt_model *model, const char *name, int64_t groups, const dpt_shape3 *shape,
                                 float eps, bool affine);
dpt_tensor *dpt_groupnorm_forward(dpt_ctx *ctx, dpt_groupnorm *layer, dpt_tensor *x);

/* Batch norm over (N, H, W) per channel: batch statistics in training mode (running mean and
 * unbiased running variance updated with `momentum`), running statistics in eval mode.
 * sync = true: statistics and their gradients are summed over the ranks of the context's
 * communicator (SyncBatchNorm), so N ranks behave as one batch of N times the size. */
dpt_batchnorm *dpt_batchnorm_new(dpt_model *model, const char *name, const dpt_shape3 *shape, float momentum,
                                 float eps, bool affine, bool sync);
dpt_tensor *dpt_batchnorm_forward(dpt_ctx *ctx, dpt_batchnorm *layer, dpt_tensor *x, bool training);
/* relu(batchnorm(x)): the same values and gradients as dpt_relu_ of dpt_batchnorm_forward, in one
 * pass over the activations each way where the backend fuses them (oneDNN's fuse_norm_relu in
 * training), else the two ops. */
dpt_tensor *dpt_batchnorm_relu_forward(dpt_ctx *ctx, dpt_batchnorm *layer, dpt_tensor *x, bool training);
/* Set gamma to zero (zero-init of the last BN of a residual block). */
void dpt_batchnorm_zero_gamma(dpt_batchnorm *layer);
/* Statistics a dpt_bn_stats_hook received (averaged, say) into the running ones, with the
 * layer's momentum, as a training step would have moved them. */
void dpt_batchnorm_apply_stats(dpt_batchnorm *layer, const float *mean, const float *var);
int64_t dpt_batchnorm_channels(const dpt_batchnorm *layer);

/* Pooling over NCHW windows (kernel, stride, padding); `shape` updated as for conv2d when
 * not NULL. Average pooling counts padding (count_include_pad, PyTorch's default). */
bool dpt_pool_shape_update(dpt_model *model, const char *name, dpt_shape3 *shape, int64_t kernel,
                           int64_t stride, int64_t padding);
dpt_tensor *dpt_maxpool2d(dpt_ctx *ctx, dpt_tensor *x, int64_t kernel, int64_t stride, int64_t padding);
dpt_tensor *dpt_avgpool2d(dpt_ctx *ctx, dpt_tensor *x, int64_t kernel, int64_t stride, int64_t padding);
dpt_tensor *dpt_global_avgpool(dpt_ctx *ctx, dpt_tensor *x); /* (N,C,H,W) -> (N,C) */
/* Inverted dropout: zero with probability p and scale by 1/(1-p) in training; identity else. */
dpt_tensor *dpt_dropout(dpt_ctx *ctx, dpt_tensor *x, float p, bool training);
/* Which communicator SyncBatchNorm layers of this context use (NULL: none). */
void dpt_ctx_set_comm(dpt_ctx *ctx, dpt_comm *comm);

/* ---------------------------------------------------------------- optimizers */

typedef struct dpt_optim dpt_optim;
/* torch.optim.SGD semantics: weight decay added to the gradient, momentum buffer started
 * from the first gradient, Nesterov optional. */
dpt_optim *dpt_sgd_new(dpt_model *model, float lr, float momentum, float dampening, float weight_decay,
                       bool nesterov);
/* torch.optim.AdamW semantics: decoupled weight decay p -= lr*wd*p, bias-corrected moments. */
dpt_optim *dpt_adamw_new(dpt_model *model, float lr, float beta1, float beta2, float eps, float weight_decay);
void dpt_optim_step(dpt_ctx *ctx, dpt_optim *optim);
/* false: no weight decay on parameters of one dimension (biases, batch-norm scales and
 * shifts), the usual ResNet/ImageNet recipe; true (the default, as torch.optim): every one. */
void dpt_optim_set_decay_1d(dpt_optim *optim, bool decay);
void dpt_optim_set_lr(dpt_optim *optim, float lr);
float dpt_optim_lr(const dpt_optim *optim);
const char *dpt_optim_name(const dpt_optim *optim);
void dpt_optim_free(dpt_optim *optim);

/* Writing an optimizer: a registration of kind DPT_KIND_OPTIMIZER whose impl says how many
 * state tensors it keeps per parameter (zero-filled at the start, saved in checkpoints), how
 * to read its hyper-parameters (a struct of its own, hp_size bytes) from its [optim] keys, and
 * how to update one group of parameters. The update is written with device-neutral calls (the
 * dpt_foreach_* ops below), so it runs on every backend. */
#define DPT_OPTIM_MAX_STATE 4
typedef struct dpt_optim_group {
    int count;                                    /* parameters in the group */
    dpt_tensor *const *params;                    /* count */
    dpt_tensor *const *grads;                     /* count, the parameters' gradients */
    dpt_tensor *const *state[DPT_OPTIM_MAX_STATE]; /* state[s][i]: params[i]'s s-th state tensor */
    float weight_decay; /* [optim] weight_decay, or 0 (1-D parameters without decay_norm_and_bias) */
    const void *fused;  /* the library's: the group as one list for its fused kernels */
} dpt_optim_group;
typedef struct dpt_optim_impl {
    int nstate;     /* state tensors per parameter, at most DPT_OPTIM_MAX_STATE */
    size_t hp_size; /* its hyper-parameter struct */
    /* Fill hp from its [optim] keys; false with err naming the key when they do not fit. */
    bool (*configure)(void *hp, const dpt_config *cfg, dpt_error *err);
    /* One step over a group at learning rate lr; t counts steps from 1 (Adam's bias correction). */
    void (*step)(dpt_ctx *ctx, const dpt_optim_group *group, const void *hp, float lr, int64_t t);
    /* Its update of an element reads other elements of the tensor (a norm: LAMB, LARS): ZeRO,
     * which steps ranges of elements, refuses it. false: elementwise (SGD, AdamW, Lion). */
    bool whole_tensors;
} dpt_optim_impl;
/* ZeRO: this rank steps only elements [lo[i], hi[i]) of parameter i (lo == hi: none) and keeps
 * only their state (dpt_optim_state_at: 1-D tensors of hi - lo elements, NULL where empty).
 * A registered optimizer whose update of a tensor reads the whole tensor (LAMB's norms) sets
 * whole_tensors and cannot be sharded. */
void dpt_optim_shard(dpt_optim *optim, const int64_t *lo, const int64_t *hi);
/* A sharded optimizer's gradients elsewhere than the parameters' .grad: element lo[i] of
 * parameter i's at at[i] (the caller's array, read at each step; NULL: back to .grad). ZeRO 2
 * keeps only this rank's ranges of the gradients (dpt_ddp_grad_shards). */
void dpt_optim_set_grad_slices(dpt_optim *optim, float *const *at);
/* A sharded optimizer's state tensor i whole, for a checkpoint: gather(param, whole, mine,
 * user) collects parameter param's slices from every rank into whole (on the rank that writes)
 * or sends this rank's (mine, NULL where empty; whole NULL): a collective, so every rank asks
 * for the same i in the same order. dpt_optim_state_whole(optim, i, receive): with receive, a
 * tensor of the whole shape the optimizer keeps until the next call (an unsharded optimizer's
 * own state tensor); without, only this rank's part sent (NULL). */
void dpt_optim_set_gather(dpt_optim *optim, void (*gather)(int param, float *whole, const float *mine, void *user),
                          void *user);
dpt_tensor *dpt_optim_state_whole(dpt_optim *optim, int i, bool receive);
/* Its parameter groups in words ("group 0: lr 0.001 (x1) weight_decay 0.01, 6 tensors (...) |
 * frozen: ..."), for the header and --summary; the number of groups. */
int dpt_optim_describe(const dpt_optim *optim, char *buf, size_t cap);
/* An optimizer of a registered kind with hyper-parameters hp (copied; hp_size bytes). */
dpt_optim *dpt_optim_new(dpt_model *model, const char *name, const void *hp, float lr, float weight_decay);
/* Its hyper-parameters (the struct its impl reads). */
const void *dpt_optim_hp(const dpt_optim *optim);
/* Whether its registration reads whole tensors (dpt_optim_impl.whole_tensors). */
bool dpt_optim_whole_tensors(const dpt_optim *optim);

/* Learning rate per optimizer step: a linear warm-up from start_lr to target_lr over
 * warmup_steps, then the registered schedule [optim] schedule names (constant, step,
 * multistep, cosine, or a program's own). */
typedef struct dpt_schedule_impl {
    size_t state_size; /* at most 256 bytes (dpt_lr_schedule's state) */
    /* Read its keys into state; false with err naming the key. */
    bool (*configure)(void *state, const dpt_config *cfg, dpt_error *err);
    /* The learning rate after warm-up, from target_lr: at `epoch` (fractional: step / steps per
     * epoch) and `progress` (0 to 1 over the steps after warm-up). */
    double (*lr)(const void *state, double target_lr, double epoch, double progress);
} dpt_schedule_impl;
typedef struct dpt_lr_schedule {
    const dpt_schedule_impl *impl;
    double start_lr, target_lr;
    int64_t warmup_steps, total_steps, steps_per_epoch;
    union {
        unsigned char bytes[256]; /* the impl's own state */
        double align_;
    } state;
} dpt_lr_schedule;
double dpt_lr_at(const dpt_lr_schedule *schedule, int64_t step);

/* Scale all gradients so that their global L2 norm is at most max_norm (max_norm <= 0: only
 * measure). Returns the norm before clipping (NaN/Inf when a gradient is not finite). */
double dpt_clip_grad_norm(dpt_ctx *ctx, dpt_model *model, double max_norm);
/* The same for gradients of a loss multiplied by 1 / inv_scale (loss scaling): unscales them
 * (one pass, with the clipping) and returns the norm of the unscaled gradients; when that is
 * not finite the gradients are left as they are. */
double dpt_unscale_clip_grad_norm(dpt_ctx *ctx, dpt_model *model, double inv_scale, double max_norm);

/* ---------------------------------------------------------------- data */

/* What each sample of a data set holds: named fields of a dtype and a shape per sample. */
enum { DPT_MAX_FIELDS = 4, DPT_FIELD_MAX_DIMS = 4 };
typedef struct dpt_field {
    const char *name; /* "image", "label", "x", "y", "tokens", "targets" */
    dpt_dtype dtype;  /* DPT_F32 or DPT_I32 */
    int ndim;         /* per sample (0: a scalar, e.g. a label) */
    int64_t shape[DPT_FIELD_MAX_DIMS];
    bool target; /* what the loss compares the model's output with (labels, next tokens, regression targets) */
} dpt_field;

/* What a model reports beside its loss. */
enum { DPT_METRIC_ACCURACY = 1, DPT_METRIC_PERPLEXITY = 2, DPT_METRIC_TOP5 = 4 /* evaluation only */ };

/* What training on a data set means: the loss, the metrics printed beside it, the unit of
 * throughput, and which fields go where. A data set states its defaults; a model may state its
 * own (dpt_model_set_task); what neither states is the default below. */
typedef struct dpt_task {
    const char *loss;   /* a registered loss: "cross_entropy" (default), "mse" */
    unsigned metrics;   /* DPT_METRIC_*, as far as the loss can measure them */
    const char *unit;   /* throughput unit in the logs ("img" -> img/s; "samples", "tok") */
    const char *input;  /* the field forward takes (default: the first field that is not a target) */
    const char *target; /* the field the loss compares with (default: the first target field) */
} dpt_task;

/* A data set: images in memory ((n, c, h, w) bytes and int32 labels), image files decoded and
 * augmented per sample by the loader's workers ([data] source = folder; c x h x w the samples'
 * shape), or samples of any fields that a data source makes one at a time (`get`). */
typedef struct dpt_dataset {
    int64_t n, c, h, w;
    /* Where the source read only the first n samples of the n_file its files hold ([data]
     * train_limit / test_limit: the IDX source), n_file; labels then holds all n_file labels
     * (the classes are the whole set's). 0: the source holds n. */
    int64_t n_file;
    uint8_t *images; /* n*c*h*w bytes; NULL for files */
    int32_t *labels; /* n */
    int num_classes; /* classification: labels (or token ids) in [0, num_classes); 0 otherwise */
    char name[64];
    struct dpt_image_files *files; /* data/folder.h; NULL for images in memory */
    void (*free_files)(struct dpt_image_files *files); /* set with files: dpt_dataset_free calls it */
    /* What the samples are read from (a folder's file list and labels): a resume on another one
     * warns. 0: not tracked. `origin` names it in messages (a folder's path; NULL: nothing). */
    uint64_t content_hash;
    const char *origin;
    /* Samples of declared fields (images and files leave nfields 0: their fields are "image"
     * (c, h, w) F32 and "label" () I32). get writes sample `index`'s fields into dst[f] (host
     * memory of field f's size); it is called from the loader's thread while the step runs. */
    int nfields;
    dpt_field fields[DPT_MAX_FIELDS];
    void (*get)(const dpt_dataset *ds, int64_t index, void *const *dst);
    void *source;                      /* the source's own state, given to free_source */
    void (*free_source)(void *source);
    dpt_task task; /* the data's defaults (images: cross_entropy, accuracy, "img") */
    bool unlabelled; /* samples without labels (--predict --input): every label is 0 */
    const char *const *class_names; /* num_classes names a source gives its labels (a CSV's), or NULL */
    const int64_t *class_counts;    /* num_classes: the samples of each class, where the source counts them */
    /* A target field of several real values (a CSV's regression or multi-label columns): each
     * value's name, or NULL; a multi-label set's samples with each label 1, or NULL. */
    const char *const *target_names;
    const int64_t *label_positives;
} dpt_dataset;

/* The fields of a data set (its own, or an image set's "image" and "label"); returns the count. */
int dpt_dataset_fields(const dpt_dataset *ds, dpt_field *out);
/* The first of n fields that is (or is not) a target, or NULL: what a model takes and what its
 * loss compares with, where the task names neither. */
const dpt_field *dpt_field_first(const dpt_field *fields, int n, bool target);
/* The field of that name among n, or NULL (a task's input or target). */
const dpt_field *dpt_field_named(const dpt_field *fields, int n, const char *name);
/* A sample's name where the data has one (a folder's relative path, "class/x.jpg"), and a
 * class's (the folder's name); NULL otherwise. */
const char *dpt_dataset_sample_name(const dpt_dataset *ds, int64_t index);
const char *dpt_dataset_class_name(const dpt_dataset *ds, int label);
/* "3 classes: 0 alpha (150), 1 beta (150), 2 gamma (150)" (names where the data has them, counts
 * where it counts; the first 10 and the last of many), or a multi-label set's "2 labels (samples
 * with each): 0 comedy (40), 1 drama (25)"; "" when it has neither. */
void dpt_dataset_describe_classes(const dpt_dataset *ds, char *buf, size_t size);

/* A data source's impl (DPT_KIND_DATA, selected by [data] source): opens the train and test
 * sets its [data] keys describe; false with err naming the file or key and a HINT. */
typedef struct dpt_data_impl {
    bool (*open)(const dpt_config *cfg, dpt_dataset **train, dpt_dataset **test, dpt_error *err);
    /* Optional, for the commands that train nothing (--sample, --export, --eval, --predict), so
     * that they neither need nor read a large training corpus:
     * describe: a set with the fields, task and classes open's sets have but no samples (n = 0,
     *   no get), from the config alone; NULL where the source cannot say without its files.
     * open_test: the test set alone (what open gives as *test). */
    dpt_dataset *(*describe)(const dpt_config *cfg, dpt_error *err);
    bool (*open_test)(const dpt_config *cfg, dpt_dataset **test, dpt_error *err);
} dpt_data_impl;

/* Read an IDX image file and its label file (gzip or raw; decided by content, not name).
 * Validates magic numbers, dimensions, sizes and that the counts agree. */
dpt_dataset *dpt_idx_load(const char *images_path, const char *labels_path, dpt_error *err);
/* Only the first `first` images (0: all; the labels are read whole): n = first, n_file = the
 * file's count. */
dpt_dataset *dpt_idx_load_first(const char *images_path, const char *labels_path, int64_t first, dpt_error *err);
void dpt_dataset_free(dpt_dataset *ds);
/* CIFAR-10 binary files: records of 1 label byte + 3072 image bytes (3x32x32). */
dpt_dataset *dpt_cifar_load(const char *const *paths, int npaths, dpt_error *err);
/* Random images of any shape (benchmarks): bytes and labels from the seed. */
dpt_dataset *dpt_synthetic_new(int64_t n, int64_t c, int64_t h, int64_t w, int num_classes, uint64_t seed);

typedef struct dpt_loader_options {
    int64_t batch;  /* per rank */
    bool shuffle;   /* a new permutation each epoch, from seed and epoch */
    bool drop_last; /* drop the last partial batch */
    uint64_t seed;
    int rank, world_size; /* this rank takes every world_size-th sample of the permutation */
    float mean, std;      /* x = (byte / 255 - mean) / std */
    int norm_channels;    /* 2-4: per channel instead, channel_mean[ch] and channel_std[ch] */
    float channel_mean[4], channel_std[4];
    int64_t limit;        /* use only the first `limit` samples (0 = all) */
    bool exact_shards;    /* evaluation: every sample exactly once over all ranks, shards may
                           * differ by one sample (no dropping, no padding) */
    int crop_pad;         /* augmentation: random crop after zero-padding by this many pixels */
    bool hflip;           /* augmentation: horizontal flip with probability 1/2 */
    int auto_augment;     /* augmentation of RGB images after the crop and flip: 0 none, 1
                           * TrivialAugmentWide, 2 RandAugment (aa_ops operations at bin aa_magnitude) */
    int aa_ops, aa_magnitude;
    int repeats;          /* repeated augmentation (> 1): each sample of the epoch's order R times in
                           * a row before the ranks take their turns, each copy its own draws */
    int prefetch;         /* batches a background thread prepares ahead (decoding, and on a GPU
                           * the copy from pinned memory on the copy stream); 0: each batch is
                           * made on the calling thread inside dpt_loader_next */
    int shards_per_rank;  /* > 0: the deterministic mode's block sampler. A global step of
                           * world_size x shards_per_rank batches reads the next contiguous run
                           * of the permutation, and rank r's m-th batch of it is shard
                           * r x shards_per_rank + m of that run, whatever the world size
                           * (drop_last; batch = the shard's samples) */
    int workers;          /* image files: threads decoding and augmenting (0: the producer's own) */
    bool skip_bad_files;  /* image files: an unreadable one is replaced by the next file of the list
                           * and counted (dpt_loader_bad_files); otherwise the job stops naming it */
} dpt_loader_options;

typedef struct dpt_loader dpt_loader;
typedef struct dpt_batch {
    dpt_tensor *x;                /* the first field: images (B, C, H, W); owned by the loader, valid until the next call */
    const int32_t *labels;        /* image sets: B labels, host memory, valid until the next call */
    const int32_t *device_labels; /* the same in the context's device memory (= labels on the CPU) */
    int64_t size;                 /* B (the last batch may be smaller when drop_last = false) */
    int nfields;
    dpt_field fields[DPT_MAX_FIELDS];
    dpt_tensor *tensors[DPT_MAX_FIELDS]; /* each field's (B, ...) batch on the device */
    /* This batch's name for its random draws (mixup): a hash of the seed, the epoch and the
     * batch's place in the epoch's global order (rank r's b-th of W ranks: b W + r; in the
     * deterministic mode its shard's number, the same at any world size). */
    uint64_t key;
} dpt_batch;
/* The batch of the field of that name, or NULL. */
dpt_tensor *dpt_batch_get(const dpt_batch *batch, const char *name);

dpt_loader *dpt_loader_new(dpt_ctx *ctx, const dpt_dataset *ds, const dpt_loader_options *opt);
void dpt_loader_free(dpt_loader *loader);
void dpt_loader_start_epoch(dpt_loader *loader, int epoch);
/* Fill the next batch of this epoch; false when the epoch is over. */
bool dpt_loader_next(dpt_loader *loader, dpt_batch *batch);
int64_t dpt_loader_num_batches(const dpt_loader *loader);
/* The batches (and *samples, this rank's share) a loader with these options would make,
 * without making it: checked before buffers sized by the batch are allocated. */
int64_t dpt_loader_plan_batches(const dpt_dataset *ds, const dpt_loader_options *opt, int64_t *samples);
int64_t dpt_loader_num_samples(const dpt_loader *loader); /* this rank's samples per epoch */
/* The next batch, starting the following epoch when this one is over (benchmarks, fixed-step
 * loops). */
void dpt_loader_next_cycle(dpt_loader *loader, dpt_batch *batch);
/* Skip the next n batches of this epoch without reading them (resuming mid-epoch). */
void dpt_loader_skip(dpt_loader *loader, int64_t n);
/* Image files skipped as unreadable so far (skip_bad_files). */
int64_t dpt_loader_bad_files(const dpt_loader *loader);

/* The data set a loader reads. */
const dpt_dataset *dpt_loader_dataset(const dpt_loader *loader);

/* A loss registration's impl (DPT_KIND_LOSS, named by a task). */
typedef struct dpt_loss_impl {
    size_t settings_size; /* its settings struct, filled by configure (NULL settings: its defaults) */
    bool (*configure)(void *settings, const dpt_config *cfg, dpt_error *err);
    /* Whether it can compare with this target field (its dtype); false with err saying why. */
    bool (*accepts)(const dpt_field *target, dpt_error *err);
    /* The mean loss over the batch's terms (e.g. rows of logits, or samples), recorded on the
     * tape; output and target as the model and the data give them. */
    dpt_tensor *(*forward)(dpt_ctx *ctx, dpt_tensor *output, dpt_tensor *target, const void *settings);
    /* The terms that mean is over, from the shapes (no device read). */
    int64_t (*terms)(const dpt_tensor *output, const dpt_tensor *target);
    unsigned metrics; /* DPT_METRIC_* it can measure (perplexity: exp of a cross-entropy) */
    /* DPT_METRIC_ACCURACY: sums[at] += the correct predictions, on the device (no read). */
    void (*count_correct)(dpt_ctx *ctx, dpt_tensor *output, dpt_tensor *target, dpt_tensor *sums, int64_t at);
    /* DPT_METRIC_TOP5: sums[at] += the predictions whose target is among the 5 largest outputs. */
    void (*count_top5)(dpt_ctx *ctx, dpt_tensor *output, dpt_tensor *target, dpt_tensor *sums, int64_t at);
} dpt_loss_impl;

/* Loss and metrics of a model over every batch of a loader, without recording a tape, as the
 * model's task (on the loader's data) declares them. */
typedef struct dpt_eval_result {
    double loss;       /* mean loss per term */
    double accuracy;   /* fraction correct (NaN when the task does not measure it) */
    double top5;       /* fraction with the target among the 5 largest outputs (NaN: not measured) */
    double perplexity; /* exp(loss) for a cross-entropy (NaN otherwise) */
    int64_t samples;
    int64_t terms;     /* what the loss averaged over (tokens, samples) */
} dpt_eval_result;
dpt_eval_result dpt_evaluate(dpt_ctx *ctx, dpt_model *model, dpt_loader *loader);
/* dpt_evaluate's result and, from the same pass, a classifier's confusion matrix:
 * confusion[label * classes + predicted] counts (the first arg-max, as the accuracy's); false
 * with err for a task that is not one label a sample among `classes`. */
bool dpt_evaluate_confusion(dpt_ctx *ctx, dpt_model *model, dpt_loader *loader, double *confusion, int classes,
                            dpt_eval_result *result, dpt_error *err);

/* ---------------------------------------------------------------- distributed */

/* Who this process is. Under mpirun (or any PMI launcher) MPI is initialised with thread
 * support; run alone, the world is a singleton and MPI is not touched. */
typedef struct dpt_world {
    int rank, size;             /* in the job */
    int local_rank, local_size; /* on this node (MPI's shared-memory split) */
    bool mpi;                   /* launched by an MPI launcher */
    char host[64];
    /* the cores this rank may use ([train] threads = 0): its own affinity mask when the
     * launcher bound the node's ranks to disjoint sets, else the node's cores (the union of
     * its ranks' masks) divided by its ranks, at least 1; node_cores that union; cores_why
     * how (for the header) */
    int cores, node_cores;
    char cores_why[96];
    /* how MPI's non-blocking AllReduce sums (world.c's choice for Open MPI; for --env) */
    char allreduce_how[128];
} dpt_world;

bool dpt_world_init(dpt_world *world, int *argc, char ***argv, dpt_error *err);
void dpt_world_finalize(dpt_world *world);
/* The job-wide communicator, NULL for a singleton. */
dpt_comm *dpt_world_comm(const dpt_world *world);
/* The MPI library's version line (callable before MPI is initialised). */
void dpt_mpi_version(char *buf, size_t cap);
int dpt_comm_rank(const dpt_comm *comm);
int dpt_comm_size(const dpt_comm *comm);
void dpt_comm_barrier(dpt_comm *comm);
/* Benchmarks: model a slow network: each gradient AllReduce sleeps ms_per_mb per MiB first. */
void dpt_comm_set_delay(dpt_comm *comm, double ms_per_mb);
/* Every host collective (gradients, evaluation, SyncBN, start-up checks, signal agreement)
 * not done within timeout_s ends the job with a report naming it (0 = wait forever). */
void dpt_comm_set_timeout(dpt_comm *comm, double timeout_s);

/* DistributedDataParallel: parameters broadcast from rank 0 at start, the plan checked on all
 * ranks, gradients bucketed in reverse creation order and AllReduced (averaged) by a
 * communication thread as soon as a bucket is complete, while backward goes on. */
/* [distributed] grad_compression: buckets AllReduced as bfloat16 or IEEE half, rounded to
 * nearest even after each addition, the fp32 gradients restored before the optimizer. The
 * average's error per element is at most about world_size x 2^-8 (bf16) or 2^-11 (fp16) of
 * the mean of the ranks' magnitudes |g_r|; fp16 overflows to infinity past 65504 (the step is
 * then non-finite: [train] nonfinite decides). */
typedef enum dpt_grad_compression {
    DPT_GRAD_COMPRESSION_NONE = 0,
    DPT_GRAD_COMPRESSION_BF16,
    DPT_GRAD_COMPRESSION_FP16
} dpt_grad_compression;

typedef struct dpt_ddp_options {
    double bucket_mb;     /* bucket capacity; tiny = one parameter per bucket */
    bool bucket_auto;     /* [distributed] bucket_mb = auto: the reducer measures sizes over the first steps */
    bool compression_auto; /* [distributed] grad_compression = auto: then decides on bf16 by measuring */
    bool overlap;         /* false: all AllReduces after backward (for comparison) */
    bool find_unused;     /* treat a parameter without gradient as zero instead of an error */
    double timeout_s;     /* a bucket not reduced in this time ends the job with a report */
    int64_t dataset_len;  /* checked equal on all ranks */
    uint64_t dataset_hash; /* the data's identity (a folder: its file list and labels; 0: not
                            * known); checked equal on all ranks */
    uint64_t config_hash; /* checked equal on all ranks */
    const dpt_config *config; /* optional: when the hashes differ, the first key that differs is named */
    dpt_grad_compression compression; /* gradients on the wire in 16 bits (host communicators) */
    int64_t steps_before; /* training steps done before the first reduction (a resumed run's): reports
                           * number steps from steps_before + 1, as the progress lines do */
    bool reduce_scatter;  /* [distributed] zero = 2 (host communicators, fp32): each bucket is
                           * reduce-scattered, not AllReduced: after finish() a rank's gradients
                           * hold the average only in its ranges (runtime/zero.h's split of the
                           * bucket), the rest is undefined */
    int shard_grads;      /* 0: off; 1 (auto): where it pays; 2: always. With reduce_scatter ([distributed] zero = 2): a rank keeps only its ranges
                           * of the gradients between steps. A bucket gets its buffer when backward
                           * first needs one of its gradients and gives it back once reduce-scattered
                           * (this rank's range copied out first): a parameter's .grad has no storage
                           * (data NULL) outside backward, and after finish() its averaged elements
                           * are at dpt_ddp_grad_shards(). Auto: only where that lowers the peak (the
                           * ranges plus the largest bucket and 3 of the next largest, less than
                           * all the buckets): not for 2 buckets, or one tensor dwarfing the rest */
} dpt_ddp_options;

typedef struct dpt_ddp dpt_ddp;

/* Per-step measurements of the last dpt_ddp_finish(). */
typedef struct dpt_ddp_stats {
    double comm_s;   /* time the communication thread spent in AllReduce */
    double hidden_s; /* of which before backward ended (overlapped) */
    double wait_s;   /* time finish() waited after backward */
    int buckets;
    int64_t step;
    int64_t bytes; /* gradient bytes this rank AllReduced (16 or 32 bits per value) */
    int64_t grad_bytes; /* the most gradient storage this rank held at once in the step (buckets,
                         * and shard_grads' ranges) */
} dpt_ddp_stats;

dpt_ddp *dpt_ddp_new(dpt_ctx *ctx, dpt_model *model, dpt_comm *comm, const dpt_ddp_options *opt,
                     dpt_error *err);
void dpt_ddp_free(dpt_ddp *ddp);
/* false: the next backward only accumulates locally (gradient accumulation, like no_sync). */
void dpt_ddp_set_sync(dpt_ddp *ddp, bool sync);
/* After backward: wait until every bucket is reduced; gradients then hold the average. */
void dpt_ddp_finish(dpt_ddp *ddp);
dpt_ddp_stats dpt_ddp_last_stats(const dpt_ddp *ddp);
/* Each bucket's AllReduce in the last step, seconds (dpt_ddp_num_buckets of them), or NULL
 * where the host cannot see them (a device stream's collectives). */
const double *dpt_ddp_bucket_times(const dpt_ddp *ddp);
int dpt_ddp_num_buckets(const dpt_ddp *ddp);
/* Where parameter p's gradient lives: its bucket and first element there; a bucket's length
 * (the gaps that align each view included). */
void dpt_ddp_param_place(const dpt_ddp *ddp, int p, int *bucket, int64_t *offset);
int64_t dpt_ddp_bucket_numel(const dpt_ddp *ddp, int b);
/* reduce_scatter: where parameter p lives in the segments whose ranges each rank keeps (the
 * first plan's buckets; a later plan cuts its buckets inside them): the segment, its first
 * element there, the segment's length (gaps included). Without reduce_scatter: its bucket. */
void dpt_ddp_param_segment(const dpt_ddp *ddp, int p, int *segment, int64_t *offset, int64_t *segment_numel);
/* shard_grads: per parameter, where this rank's first averaged gradient element lives after
 * finish() (element lo of runtime/zero.h's range; NULL where the rank has none); NULL without
 * shard_grads. */
float *const *dpt_ddp_grad_shards(const dpt_ddp *ddp);
/* The bucket capacity in use (MiB), and how many buckets another capacity would make (and a
 * signature of where they start: two capacities with one signature make the same plan). */
double dpt_ddp_bucket_mb(const dpt_ddp *ddp);
int dpt_ddp_plan_count(dpt_ddp *ddp, double bucket_mb, uint64_t *signature);
/* Lay the buckets out again for another capacity, between steps; every rank at the same step
 * with the same size ([distributed] bucket_mb = auto). Under reduce_scatter the buckets are cut
 * inside the first plan's (its segments): a rank's ranges stay where they were. */
void dpt_ddp_replan(dpt_ddp *ddp, double bucket_mb);
/* Gradients on the wire in 16 bits or not from the next step (host communicators). */
void dpt_ddp_set_compression(dpt_ddp *ddp, dpt_grad_compression c);
/* Parameter indices of a bucket, in the order they fill it (exposed for tests). */
int dpt_ddp_bucket_params(const dpt_ddp *ddp, int bucket, int *params, int max);
/* How many times each parameter's gradient was reduced so far (exposed for tests). */
int64_t dpt_ddp_reduce_count(const dpt_ddp *ddp, int param);
/* Sum a local evaluation over ranks (each rank evaluated a disjoint shard). */
dpt_eval_result dpt_eval_allreduce(dpt_comm *comm, dpt_eval_result local);

/* DataParallel: run fn on n replica threads, rank i with its own communicator over shared
 * memory (usable for DDP and SyncBatchNorm like an MPI one); returns when all are done. */
typedef void (*dpt_replica_fn)(int rank, dpt_comm *comm, void *user);
void dpt_run_replicas(int n, dpt_replica_fn fn, void *user);

/* A Chrome-trace timeline (open in Perfetto or chrome://tracing). */
typedef struct dpt_timeline dpt_timeline;
dpt_timeline *dpt_timeline_open(const char *path, int rank, dpt_error *err);
/* A span [t0_s, t1_s] in dpt clock seconds on lane tid (0 = compute, 1 = communication). */
void dpt_timeline_span(dpt_timeline *tl, const char *name, int tid, double t0_s, double t1_s);
void dpt_timeline_close(dpt_timeline *tl);
void dpt_ddp_set_timeline(dpt_ddp *ddp, dpt_timeline *tl);

/* ---------------------------------------------------------------- checkpoints */

/* Where a run is: enough, with model, optimizer and RNG, to continue it exactly. */
typedef struct dpt_train_state {
    int epoch;            /* epoch in progress, 1-based */
    int64_t batches_done; /* loader batches consumed in that epoch (per rank) */
    int64_t samples_done; /* the same over all ranks: global samples of the epoch consumed (-1:
                           * unknown, an old checkpoint), so a run resumes on another world size */
    int64_t step;         /* optimizer steps done */
    int64_t skipped;      /* steps skipped for a non-finite loss or gradient */
    double best_acc;  /* the best epoch's test accuracy (tasks that measure it) */
    double best_loss; /* ... or its test loss (tasks without accuracy: the lowest) */
    int best_epoch;
    /* [train] loss_scale = dynamic: the scale, the clean steps since it last changed, the steps
     * skipped for an overflow (loss_scale 0: none saved, an old checkpoint or no scaling) */
    double loss_scale;
    int64_t scale_good_steps, scale_skips;
    /* the training set's identity when it was written (a folder's file list and labels hash;
     * 0: unknown), so a resume can say that the data changed since */
    uint64_t data_hash;
    /* mid-epoch: the epoch's training sums so far over every rank (loss, correct, units: what
     * the loss averages over), so a resumed run's epoch line is an uninterrupted one's (0: none,
     * an epoch start or an old checkpoint). No wall time: checkpoints stay byte-identical. */
    double epoch_loss;
    int64_t epoch_correct, epoch_units;
    /* [train] early_stop: the best value of its metric so far and the epoch it came (0: none) */
    double stop_best;
    int stop_best_epoch;
    /* [distributed] bucket_mb = auto: the size it chose (0: none yet), and grad_compression =
     * auto's choice (1 none, 2 bf16; 0: none yet), so a resume does not measure again */
    double bucket_mb;
    int grad_compression;
} dpt_train_state;

/* Write model parameters and buffers, optimizer state, the context's RNG, the train state,
 * the resolved config and the world size: zlib-compressed records with a CRC32 each, to
 * path.tmp, fsync'ed, then renamed over path (a crash never leaves a half-written path). */
bool dpt_checkpoint_save(const char *path, const dpt_model *model, dpt_optim *optim, const dpt_ctx *ctx,
                         const dpt_config *cfg, const dpt_train_state *state, int world_size, dpt_error *err);
/* [distributed] zero with [checkpoint] sharded: each rank q of parts writes its own elements of
 * the optimizer state to dpt_checkpoint_part_path(path, nonce, q, parts) (the same nonce on every
 * rank, new for each checkpoint); then, once all are written, one rank writes path with
 * dpt_checkpoint_save_sharded (the weights and everything else, the optimizer state's names and
 * shapes, and the nonce), which removes parts of an earlier checkpoint of the same name. Readers
 * (load, --inspect, --export) assemble the whole state from the parts; a missing or foreign part
 * is an error naming it. */
bool dpt_checkpoint_save_part(const char *path, const dpt_optim *optim, int part, int parts, uint64_t nonce,
                              dpt_error *err);
bool dpt_checkpoint_save_sharded(const char *path, const dpt_model *model, dpt_optim *optim, const dpt_ctx *ctx,
                                 const dpt_config *cfg, const dpt_train_state *state, int world_size, int parts,
                                 uint64_t nonce, dpt_error *err);
char *dpt_checkpoint_part_path(const char *path, uint64_t nonce, int part, int parts); /* free() it */
/* Load into an already built model and optimizer. Every mismatch (truncated file, bad CRC,
 * other version, other model names/shapes, other optimizer) is an error naming what differs;
 * nothing is changed unless the whole checkpoint is valid. cfg: warn when the checkpoint was
 * written with another config (NULL: its weights are wanted, not a continuation). */
bool dpt_checkpoint_load(const char *path, dpt_model *model, dpt_optim *optim, dpt_ctx *ctx,
                         const dpt_config *cfg, dpt_train_state *state, int world_size, dpt_error *err);
/* Weights only (as dpt_checkpoint_load with cfg NULL), the run's weight averages ([train]
 * ema_decay, "ema/" records) in place of its weights: --eval, --predict, --sample, --export with
 * --ema. An error saying so when the checkpoint holds none. */
bool dpt_checkpoint_load_averages(const char *path, dpt_model *model, dpt_ctx *ctx, dpt_train_state *state,
                                  dpt_error *err);
/* The newest complete checkpoint (ckpt-step*.dpt, highest step) in dir. */
bool dpt_checkpoint_latest(const char *dir, char *path, size_t size, dpt_error *err);
/* The steps of dir's checkpoints (ckpt-step*.dpt), ascending, however many (free the
 * array); NULL with *count -1 when dir cannot be read. */
int64_t *dpt_checkpoint_steps(const char *dir, int64_t *count);
/* How a run meets its checkpoint folder at start-up. */
typedef struct dpt_ckpt_dir_options {
    bool create;          /* the run writes checkpoints periodically: create dir now */
    bool resumed_here;    /* the run resumes a checkpoint in this dir ... */
    int64_t resumed_step; /* ... of this step; checkpoints newer than it are not this run's */
    bool archive;         /* move checkpoints that are not this run's to dir/previous-<time>/ (else: error) */
    bool claim;           /* only claim it (a run that writes only if a signal stops it): make dir if missing and
                           * take the lock, no look inside (dpt_checkpoint_archive_foreign at the first write) */
    char **created;       /* with claim: receives the first level made now (NULL if none; free it) */
} dpt_ckpt_dir_options;
/* Check (and with create or claim, make) the folder: a folder, writable, not locked by another
 * run, holding no checkpoint that is not this run's (error, or archived). *lock_fd holds the
 * folder's lock for the life of the process. */
bool dpt_checkpoint_prepare_dir(const char *dir, const dpt_ckpt_dir_options *opt, int *lock_fd,
                                dpt_error *err);
/* Whether every file dptrain writes in dir has a name the system accepts (length, and each
 * folder name's); an error naming dir otherwise. */
bool dpt_checkpoint_path_ok(const char *dir, dpt_error *err);
/* A claimed folder's first write: move the checkpoints that are not this run's aside. */
bool dpt_checkpoint_archive_foreign(const char *dir, bool resumed_here, int64_t resumed_step, dpt_error *err);
/* A claimed folder left unused: let the lock go and remove the levels made (made: from
 * opt.created; NULL keeps the folder), each only if empty. */
void dpt_checkpoint_unclaim(const char *dir, const char *made, int lock_fd);
/* Delete all but the newest keep_last checkpoints in dir, never the one of keep_step. */
void dpt_checkpoint_prune(const char *dir, int keep_last, int64_t keep_step);
/* The file --resume ARG (and --inspect ARG) means: a file; a folder (its newest checkpoint);
 * "latest", a step number or a name without the zero padding (ckpt-step500.dpt), each in the
 * folder ARG names (FOLDER/latest) or else in dir ("." when NULL or empty); an error listing
 * that folder's checkpoints otherwise. */
bool dpt_checkpoint_resolve(const char *arg, const char *dir, char *path, size_t size, dpt_error *err);

/* Print what a checkpoint holds: step, epoch, world size, config hash, model, each tensor's
 * name and shape, and "weights sha256 <64 hex digits>" over its parameters and buffers (the
 * same hash a run's final weights get: two runs agree in it when their weights are
 * bit-identical). false with err for an unreadable or damaged file. */
bool dpt_checkpoint_inspect(const char *path, FILE *out, dpt_error *err);
/* Each parameter, then each buffer, of a checkpoint in the model's order, named without the
 * file's "param/" / "buffer/" prefix (h.0.attn.c_attn.weight), after every record's CRC and
 * each tensor's size were checked; fn returning false stops with its err. */
typedef bool (*dpt_ckpt_tensor_fn)(void *user, const char *name, bool buffer, int ndim, const int64_t *dims,
                                   const float *data, int64_t numel, dpt_error *err);
bool dpt_checkpoint_tensors(const char *path, dpt_ckpt_tensor_fn fn, void *user, dpt_error *err);
/* The same over the weight averages ([train] ema_decay) when averages is true, named as the
 * weights they average; an error when the checkpoint holds none. */
bool dpt_checkpoint_tensors_of(const char *path, bool averages, dpt_ckpt_tensor_fn fn, void *user, dpt_error *err);

/* Weights of other programs: a safetensors file (PyTorch's state_dict through
 * safetensors.torch.save_file, timm's and the Hugging Face hub's model.safetensors,
 * --export safetensors). dpt_safetensors_is: the name ends in .safetensors, or the file's
 * first bytes are a safetensors header's.
 * dpt_safetensors_tensors: every F64/F32/F16/BF16 tensor as float32, in the order of their
 * bytes, with buffer false (the format does not say), after the whole header was checked and
 * each tensor's values (finite); integer and boolean tensors (num_batches_tracked) are passed
 * over, counted in skips when it is not NULL. dpt_checkpoint_tensors reads these files too. */
typedef struct dpt_safetensors_skips {
    int count;
    char names[400]; /* the first two, comma separated, then " ..." */
} dpt_safetensors_skips;
bool dpt_safetensors_is(const char *path);
bool dpt_safetensors_tensors(const char *path, dpt_ckpt_tensor_fn fn, void *user, dpt_safetensors_skips *skips,
                             dpt_error *err);
/* Writing one: the 8-byte length and the JSON header of n F32 tensors (names, shapes; their
 * float32 values to follow in this order, row-major), padded with spaces to 8 bytes;
 * __metadata__ holds format "pt", the producer (dptrain's version) and source when not NULL.
 * false on a write error, err naming path. */
typedef struct dpt_safetensors_entry {
    const char *name;
    int ndim;
    const int64_t *dims;
} dpt_safetensors_entry;
bool dpt_safetensors_write_header(FILE *f, const char *path, const dpt_safetensors_entry *e, int n,
                                  const char *source, dpt_error *err);

/* ---------------------------------------------------------------- the trainer, with your own models */

/* Builds a model for inputs (c, h, w) and num_classes, reading its settings from cfg; NULL
 * with err set (naming the key) when they do not fit. */
typedef dpt_model *(*dpt_model_builder)(dpt_ctx *ctx, const dpt_config *cfg, int64_t c, int64_t h, int64_t w,
                                        int num_classes, dpt_error *err);
/* A model registration's impl (DPT_KIND_MODEL): how [model] name = NAME is built. */
typedef struct dpt_model_impl {
    /* Build for this data set (its samples' shape and classes), reading its [model] keys; NULL
     * with err set (naming the key) when they do not fit. */
    dpt_model *(*build)(dpt_ctx *ctx, const dpt_config *cfg, const dpt_dataset *data, dpt_error *err);
    /* or, when build is NULL, the image-classifier form: (c, h, w) images and num_classes */
    dpt_model_builder build_image;
    /* Optional: the weights in another program's format (./train CONFIG --export FORMAT CKPT
     * OUT, the checkpoint loaded as --resume loads it): export_formats names them, comma
     * separated ("llmc"); export_weights writes one to path (dpt_atomic_file_open and
     * dpt_atomic_file_close below make the file safely). */
    const char *export_formats;
    bool (*export_weights)(dpt_model *model, const char *format, const char *path, dpt_error *err);
    /* Optional: the prefixes of [model] init = PREFIX:PATH that build reads itself (another
     * program's files, comma separated: "llmc,hf"); the runtime loads every other init. */
    const char *init_formats;
} dpt_model_impl;
/* A file written beside OUT under an unpredictable name (mkstemp: never through a planted
 * link), put in OUT's place only when whole (flushed, fsync'ed, renamed, the folder fsync'ed);
 * write to a.f between the two calls; dpt_atomic_file_close with ok false (or a write error
 * on a.f) removes it. Any path length the system accepts. Refused, naming OUT: a link, a
 * folder, a device or another user's file at OUT, or a file this run reads (its config, a
 * checkpoint it loaded). */
typedef struct dpt_atomic_file {
    FILE *f;
    char *tmp, *out; /* the temporary's path, the destination's (for messages) */
    int dir;         /* the folder, opened once: creation, rename and fsync all relative to it */
    char *tmp_name;  /* the temporary's name in that folder */
    bool replaces_checkpoints; /* a checkpoint of the run: it may replace one the run loaded */
} dpt_atomic_file;
bool dpt_atomic_file_open(dpt_atomic_file *a, const char *out, dpt_error *err);
bool dpt_atomic_file_close(dpt_atomic_file *a, bool ok, dpt_error *err);
/* A file written as it goes (metrics, timelines), created or truncated safely: a symbolic
 * link, a FIFO, a device, a hard link, another user's file or a file this run reads at path
 * is refused (err names what, the path and the config key to change); never blocks. */
FILE *dpt_stream_file_open(const char *path, const char *what, const char *key, dpt_error *err);
/* The reading side: n bytes of fd from offset `at` (pread, interrupted calls retried) into buf,
 * *got of them; fewer only at the end of the file (true) or on an error (false, errno set). */
bool dpt_read_at(int fd, void *buf, size_t n, uint64_t at, size_t *got);
/* Make an image classifier trainable as [model] name = NAME by dpt_train_main (and ./train's
 * code path): mpirun, DataParallel, checkpoints, schedules, logs, --expect. The short form of
 * dpt_register with a dpt_model_impl {.build_image = build}; call before dpt_train_main; false
 * (with a message on stderr) for a bad or taken name. Built-in: cnn, mlp, resnet. */
bool dpt_register_model(const char *name, dpt_model_builder build);

/* Declare n keys for owner (a model's name): keys of settings registered under that name,
 * listed with it. Before any config is made (so before dpt_train_main); a key another model
 * declared identically is shared. false, with a message on stderr, for a bad name, a bad
 * default, a clash with another declaration. */
bool dpt_register_config_keys(const char *owner, const dpt_config_key *keys, int n);

/* Everything ./train does, for a program with its own models: argv as ./train's (CONFIG,
 * --set, --resume, --expect, --junit, ...), mpirun or DataParallel, signals, checkpoints,
 * logs. Returns the exit code: 0, 1 = error, 2 = usage, 3 = an expectation failed. */
int dpt_train_main(int argc, char **argv);

/* Build the model named by [model] name for a data set (its fields, shapes and classes). */
dpt_model *dpt_model_build_for(dpt_ctx *ctx, const dpt_config *cfg, const dpt_dataset *data, dpt_error *err);
/* The same for images (c, h, w) and num_classes. */
dpt_model *dpt_model_build(dpt_ctx *ctx, const dpt_config *cfg, int64_t c, int64_t h, int64_t w,
                           int num_classes, dpt_error *err);
/* The schedule [optim] describes for a run of world_size x accum_steps, steps_per_epoch and
 * total_steps optimizer steps; false with err when the schedule's keys do not fit. */
bool dpt_lr_schedule_build(const dpt_config *cfg, int world_size, int64_t steps_per_epoch, int64_t total_steps,
                           dpt_lr_schedule *out, dpt_error *err);
/* An optimizer's state for checkpoints: its state tensors (momentum, moments) in a fixed
 * order, parameter-major, and the count of completed steps. */
int dpt_optim_num_state(const dpt_optim *optim);
dpt_tensor *dpt_optim_state_at(const dpt_optim *optim, int i);
int64_t dpt_optim_steps(const dpt_optim *optim);
/* State tensor i's name in a checkpoint (into name, cap bytes) and the parameter it belongs to
 * (its whole shape is the parameter's), without its data: what a sharded optimizer's
 * checkpoint records name before the ranks' parts fill it. */
int dpt_optim_state_param(const dpt_optim *optim, int i, char *name, size_t cap);
/* A sharded optimizer's own elements of state tensor i ([distributed] zero): *count floats at
 * the returned pointer, the first being element *lo of the whole tensor (NULL, 0: none here). */
const float *dpt_optim_state_mine(const dpt_optim *optim, int i, int64_t *lo, int64_t *count);
/* The optimizer state this rank holds, in bytes (under [distributed] zero: its share). */
int64_t dpt_optim_state_bytes(const dpt_optim *optim);
void dpt_optim_set_steps(dpt_optim *optim, int64_t steps);
/* Build the optimizer named by [optim] name. */
dpt_optim *dpt_optim_build(dpt_model *model, const dpt_config *cfg, dpt_error *err);

#ifdef __cplusplus
}
#endif
#endif /* DPT_H */
