/* config.c: the INI parser and the schema of every section and key dptrain knows. The same
 * table validates files, answers the typed getters, fills defaults and prints docs/config.md. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dpt.h"
#include "error.h"
#include "expect.h"
#include "rng.h"
#include "../models/registry.h"

/* The first seven are dpt_key_type's, in its order; T_EXPECT is an [expect] comparison. */
typedef enum key_type { T_INT, T_FLOAT, T_BOOL, T_STRING, T_ENUM, T_INT_LIST, T_FLOAT_LIST, T_EXPECT, T_TYPE_COUNT } key_type;
_Static_assert((int)T_INT == (int)DPT_KEY_INT && (int)T_INT_LIST == (int)DPT_KEY_INT_LIST &&
                   (int)T_FLOAT_LIST == (int)DPT_KEY_FLOAT_LIST,
               "key types");

static const char *const type_names[] = {"int", "float", "bool", "string", "enum", "int list", "float list", "comparison"};
_Static_assert(sizeof type_names / sizeof type_names[0] == T_TYPE_COUNT, "type_names");

typedef struct schema_key {
    const char *section, *key;
    key_type type;
    const char *def;
    double min, max;     /* numbers and list elements; ignored when min > max */
    const char *choices; /* T_ENUM: "a|b|c" */
    const char *help;
} schema_key;

#define NO_RANGE 1, 0

/* The runtime's own keys. A model's keys are declared by the model (dpt_register_config_keys:
 * models/ for the built-in ones, a program's own models likewise) and appended to this table
 * when registered, so the runtime knows no model's settings. */
static const schema_key builtin_keys[] = {
    {"model", "name", T_STRING, "mlp", NO_RANGE, NULL,
     "model to build: a registered model (built in: mlp, cnn, resnet; a program adds its own with "
     "dpt_register_model)"},

    {"data", "source", T_ENUM, "idx", NO_RANGE, "idx|cifar|synthetic|folder",
     "idx: MNIST / Fashion-MNIST files (.gz or raw); cifar: CIFAR-10 binary batches in dir; synthetic: "
     "random images; folder: JPEG/PNG files in dir/train/<class>/ and dir/val/<class>/ (torchvision's "
     "ImageFolder layout, classes numbered in sorted name order), decoded and augmented by [data] workers"},
    {"data", "dir", T_STRING, "/usr/share/datasets/fashion-mnist", NO_RANGE, NULL,
     "folder holding the data files (Debian package dataset-fashion-mnist)"},
    {"data", "train_images", T_STRING, "train-images-idx3-ubyte.gz", NO_RANGE, NULL,
     "training images, relative to dir"},
    {"data", "train_labels", T_STRING, "train-labels-idx1-ubyte.gz", NO_RANGE, NULL,
     "training labels, relative to dir"},
    {"data", "test_images", T_STRING, "t10k-images-idx3-ubyte.gz", NO_RANGE, NULL,
     "test images, relative to dir"},
    {"data", "test_labels", T_STRING, "t10k-labels-idx1-ubyte.gz", NO_RANGE, NULL,
     "test labels, relative to dir"},
    {"data", "classes", T_INT, "0", 0, 1e6, NULL,
     "number of classes; a label >= classes is an error (0 = the largest label + 1, at least 10, and every "
     "class above 9 must occur)"},
    {"data", "mean", T_FLOAT_LIST, "0.2860", -1e3, 1e3, NULL,
     "normalisation: x = (pixel/255 - mean) / std; one value, or one per channel (e.g. 0.485,0.456,0.406)"},
    {"data", "std", T_FLOAT_LIST, "0.3530", 1e-6, 1e3, NULL,
     "normalisation standard deviation; one value, or one per channel (e.g. 0.229,0.224,0.225)"},
    {"data", "shuffle", T_BOOL, "true", NO_RANGE, NULL,
     "new permutation of the training set each epoch (from seed and epoch)"},
    {"data", "drop_last", T_BOOL, "true", NO_RANGE, NULL, "drop the last partial training batch of an epoch"},
    {"data", "random_crop_pad", T_INT, "0", 0, 64, NULL,
     "training augmentation: random crop of the image zero-padded by N pixels (0 = off)"},
    {"data", "hflip", T_BOOL, "false", NO_RANGE, NULL,
     "training augmentation: horizontal flip with probability 1/2"},
    {"data", "image_size", T_INT, "224", 8, 4096, NULL,
     "folder: side of the square samples (training: RandomResizedCrop to it; evaluation: CenterCrop)"},
    {"data", "resize_size", T_INT, "256", 8, 8192, NULL,
     "folder, evaluation: the shorter side is resized to this before the center crop of image_size"},
    {"data", "scale", T_FLOAT_LIST, "0.08,1", 1e-6, 1, NULL,
     "folder, training: RandomResizedCrop's range of crop area, as fractions of the image's (min,max)"},
    {"data", "ratio", T_FLOAT_LIST, "0.75,1.3333333333", 1e-3, 1e3, NULL,
     "folder, training: RandomResizedCrop's range of crop aspect ratio, width/height (min,max)"},
    {"data", "workers", T_INT, "-1", -1, 256, NULL,
     "folder: threads decoding and augmenting images, per rank (-1: cores per rank minus one, at least 1; "
     "0: on the loader's own thread). Batches are the same for any number"},
    {"data", "bad_files", T_ENUM, "stop", NO_RANGE, "stop|skip",
     "folder: an unreadable or corrupt image stops the job naming the file and the decoder's message, or "
     "is skipped (replaced by the next file of the list) and counted in the log and the metrics"},
    {"data", "max_image_pixels", T_INT, "89478485", 1, 1e12, NULL,
     "folder: largest image decoded, in pixels after JPEG DCT scaling (PIL's decompression-bomb limit); "
     "a larger one is a bad file"},
    {"data", "jpeg_dct_scaling", T_BOOL, "true", NO_RANGE, NULL,
     "folder: decode a JPEG at 1/2, 1/4 or 1/8 size when the crop still has image_size pixels a side "
     "(far less decoding for large images; pixels differ slightly from a full decode and resize)"},
    {"data", "synthetic_shape", T_INT_LIST, "3,224,224", 1, 4096, NULL,
     "synthetic: channels, height, width of each image"},
    {"data", "synthetic_samples", T_INT, "1024", 1, 1e8, NULL,
     "synthetic: training samples (the test set has a quarter)"},
    {"data", "synthetic_classes", T_INT, "1000", 2, 1e6, NULL, "synthetic: number of classes"},
    {"data", "prefetch", T_INT, "2", 0, 64, NULL,
     "batches a background thread prepares ahead (on a GPU: pinned memory, copy stream); 0 = none"},
    {"data", "train_limit", T_INT, "0", 0, 1e12, NULL, "use only the first N training samples (0 = all)"},
    {"data", "test_limit", T_INT, "0", 0, 1e12, NULL, "use only the first N test samples (0 = all)"},

    {"train", "epochs", T_INT, "5", 1, 1e6, NULL, "passes over the training set"},
    {"train", "max_steps", T_INT, "0", 0, 1e12, NULL, "stop after this many optimizer steps (0 = no limit)"},
    {"train", "batch", T_INT, "64", 1, 1 << 20, NULL, "samples per step (per rank); see global_batch"},
    {"train", "global_batch", T_INT, "0", 0, 1 << 30, NULL,
     "samples per optimizer step over all ranks and accumulation steps (0 = batch x ranks x accum_steps). "
     "When set, each rank's batch is global_batch / (ranks x accum_steps) and [train] batch is not used: the "
     "same config runs on any world size that divides it, and resumes mid-epoch on another"},
    {"train", "eval_batch", T_INT, "1000", 1, 1 << 20, NULL, "samples per evaluation forward pass"},
    {"train", "deterministic", T_BOOL, "false", NO_RANGE, NULL,
     "bit-identical weights for any power-of-two world size (1, 2, 4, ...), DataParallel included: each step is "
     "cut into shards of deterministic_shard samples, each shard's gradient computed alone and the shards "
     "summed in one fixed binary tree; dropout drawn per shard, batch norm normalised per shard (ghost batch "
     "norm, running statistics averaged through the same tree). Needs the same [train] threads on every rank, "
     "accum_steps = 1, drop_last, a power-of-two number of shards; on GPUs cudnn_benchmark = false (deterministic "
     "cuDNN algorithms; unverified on a GPU)"},
    {"train", "deterministic_shard", T_INT, "16", 1, 1 << 20, NULL,
     "deterministic: samples per shard (the global batch / this must be a power of two)"},
    {"train", "seed", T_INT, "42", 0, 9.2e18, NULL,
     "seeds initialisation and shuffling: the same seed gives the same run"},
    {"train", "device", T_ENUM, "auto", NO_RANGE, "auto|cpu|cuda",
     "auto: cuda:<local rank> when a GPU is visible, else cpu"},
    {"train", "threads", T_INT, "0", 0, 1024, NULL, "CPU threads for BLAS and kernels (0 = all cores)"},
    {"train", "cpu_kernels", T_ENUM, "onednn", NO_RANGE, "onednn|native",
     "cpu: convolutions, batch norm, pooling and GEMMs (linear layers) on oneDNN (blocked layouts, JIT "
     "kernels) or the native im2col + OpenBLAS reference"},
    {"train", "precision", T_ENUM, "fp32", NO_RANGE, "fp32|bf16|fp16",
     "bf16: convolutions read bf16 inputs and weights and accumulate in fp32 (torch.autocast's idea); the "
     "activations between convolutions, batch norm, relu, residual adds and pooling are kept in bf16 (about "
     "half the activation memory; see bf16_activations); linear layers' GEMMs take bf16 inputs; batch-norm statistics, the loss, gradients, the weights and the "
     "optimizer stay fp32. CPU: oneDNN kernels; fp32 where the CPU lacks AVX512-BF16 (said in the header). "
     "CUDA: cuDNN's bf16 convolutions (tensor cores; weight gradients come out in bf16) and cuBLAS's bf16 GEMMs, "
     "activations fp32. "
     "fp16: the same on CUDA in IEEE half, with loss_scale = dynamic (required); not on the CPU"},
    {"train", "bf16_activations", T_BOOL, "true", NO_RANGE, NULL,
     "precision = bf16 on the CPU: keep the activations between convolutions, batch norm, relu, residual adds "
     "and pooling in bf16 (false: in fp32, only the convolutions' inputs rounded to bf16; more memory). CUDA "
     "keeps them in fp32 either way"},
    {"train", "memory_format", T_ENUM, "nchw", NO_RANGE, "nchw|nhwc",
     "how activations lie in memory between the layers that take them. nchw: CPU: oneDNN's blocked nChw16c "
     "where the channels are a multiple of 16 (its fastest), else NCHW; CUDA: NCHW. nhwc: channels last "
     "(PyTorch's channels_last): convolutions, batch norm, pooling, relu and residual adds keep (N, H, W, C), "
     "and CUDA's filters are handed to cuDNN as (K, R, S, C), where cuDNN's tensor-core kernels are fastest; "
     "the rest (linear layers, the loss, reshapes) reads NCHW, converted once where it begins. The same "
     "model and numbers either way; not with cpu_kernels = native"},
    {"train", "loss_scale", T_ENUM, "none", NO_RANGE, "none|dynamic",
     "dynamic: multiply the loss by a scale before backward and the gradients by its inverse after the "
     "AllReduce (torch.cuda.amp.GradScaler's rule: a step whose gradients are inf or nan on any rank is "
     "skipped by every rank and the scale halved; after loss_scale_growth clean steps it doubles); keeps small "
     "gradients above fp16's smallest value, e.g. with [distributed] grad_compression = fp16"},
    {"train", "loss_scale_init", T_FLOAT, "65536", 1, 1e38, NULL, "dynamic loss scaling: the first scale"},
    {"train", "loss_scale_growth", T_INT, "2000", 1, 1e12, NULL,
     "dynamic loss scaling: clean steps after which the scale doubles"},
    {"train", "tf32", T_BOOL, "false", NO_RANGE, NULL,
     "cuda: TF32 tensor cores for float32 GEMMs and convolutions (faster; ~1e-3 relative error)"},
    {"train", "cudnn_benchmark", T_BOOL, "false", NO_RANGE, NULL,
     "cuda: time cuDNN's convolution algorithms once per shape and take the fastest (PyTorch's benchmark "
     "mode; "
     "false: cuDNN's heuristics, the same choice every run)"},
    {"train", "memory_limit_mb", T_FLOAT, "0", 0, 1e9, NULL,
     "cap on the memory the device's caching allocator may reserve, per rank (0 = none)"},
    {"train", "memory_check", T_BOOL, "true", NO_RANGE, NULL,
     "before step 1, estimate the memory the run needs and stop if this machine (or GPU) cannot hold it"},
    {"train", "label_smoothing", T_FLOAT, "0", 0, 0.999, NULL, "cross-entropy label smoothing"},
    {"train", "eval_every_steps", T_INT, "0", 0, 1e12, NULL,
     "also evaluate every N optimizer steps (0 = only at the end of each epoch)"},
    {"train", "nonfinite", T_ENUM, "stop", NO_RANGE, "stop|skip",
     "a NaN/Inf loss or gradient: stop the job naming the step, or skip that step and count it"},

    {"optim", "name", T_ENUM, "adamw", NO_RANGE, "sgd|adamw", "optimizer"},
    {"optim", "lr", T_FLOAT, "0.001", 0, 100, NULL, "learning rate"},
    {"optim", "weight_decay", T_FLOAT, "0", 0, 10, NULL, "sgd: added to the gradient; adamw: decoupled"},
    {"optim", "decay_norm_and_bias", T_BOOL, "true", NO_RANGE, NULL,
     "weight decay also on the parameters of one dimension: biases and batch-norm scales and shifts (true, as "
     "torch.optim; false: the usual ResNet/ImageNet recipe, decay on weights only)"},
    {"optim", "momentum", T_FLOAT, "0.9", 0, 0.9999, NULL, "sgd: momentum (0 = plain SGD)"},
    {"optim", "dampening", T_FLOAT, "0", 0, 1, NULL, "sgd: momentum dampening"},
    {"optim", "nesterov", T_BOOL, "false", NO_RANGE, NULL, "sgd: Nesterov momentum (needs dampening = 0)"},
    {"optim", "beta1", T_FLOAT, "0.9", 0, 0.9999999, NULL, "adamw: first-moment decay"},
    {"optim", "beta2", T_FLOAT, "0.999", 0, 0.9999999, NULL, "adamw: second-moment decay"},
    {"optim", "eps", T_FLOAT, "1e-8", 0, 1, NULL, "adamw: denominator epsilon"},

    {"optim", "schedule", T_ENUM, "constant", NO_RANGE, "constant|step|multistep|cosine",
     "lr schedule after warm-up: step (x gamma every step_epochs), multistep (x gamma at each milestone), "
     "cosine (to min_lr)"},
    {"optim", "step_epochs", T_INT, "30", 1, 1e6, NULL, "step schedule: epochs between decays"},
    {"optim", "milestones", T_INT_LIST, "30,60,90", 1, 1e6, NULL,
     "multistep schedule: epochs at which the lr is multiplied by gamma"},
    {"optim", "gamma", T_FLOAT, "0.1", 0, 1, NULL, "step/multistep decay factor"},
    {"optim", "min_lr", T_FLOAT, "0", 0, 100, NULL, "cosine schedule: final learning rate"},
    {"optim", "clip_norm", T_FLOAT, "0", 0, 1e9, NULL,
     "clip gradients to this global L2 norm, after the AllReduce (0 = off)"},
    {"optim", "lr_scaling", T_ENUM, "none", NO_RANGE, "none|linear",
     "linear: lr x (world size x accum_steps), the linear scaling rule of Goyal et al."},
    {"optim", "warmup_epochs", T_FLOAT, "0", 0, 1e4, NULL,
     "linear warm-up length; ramps from lr (linear scaling) or from 0 (none) to the target lr"},

    {"distributed", "bucket_mb", T_FLOAT, "25", 1e-9, 1e5, NULL,
     "gradient bucket capacity in MiB (buckets fill in reverse parameter order)"},
    {"distributed", "overlap", T_BOOL, "true", NO_RANGE, NULL,
     "AllReduce each bucket as soon as it is complete, during backward (false: after backward)"},
    {"distributed", "accum_steps", T_INT, "1", 1, 1e6, NULL,
     "micro-batches per optimizer step; only the last one communicates (no_sync)"},
    {"distributed", "grad_compression", T_ENUM, "none", NO_RANGE, "none|bf16|fp16",
     "gradient buckets AllReduced in 16 bits (half the bytes on the wire), rounded to nearest even after each "
     "addition, fp32 again before the optimizer; error per value about ranks x 2^-8 (bf16) or 2^-11 (fp16) of the "
     "mean magnitude; MPI and DataParallel threads on the CPU, NCCL's bf16/fp16 AllReduce on GPUs (unverified)"},
    {"distributed", "find_unused", T_BOOL, "false", NO_RANGE, NULL,
     "treat a parameter that got no gradient as zero instead of stopping with an error"},
    {"distributed", "comm_timeout_s", T_FLOAT, "300", 0.01, 1e7, NULL,
     "a collective not done in this time ends the job with a report naming it"},
    {"distributed", "devices", T_STRING, "", NO_RANGE, NULL,
     "DataParallel in one process: a device list such as cpu:0,cpu:1 (empty = one device per process)"},
    {"distributed", "bench_comm_ms_per_mb", T_FLOAT, "0", 0, 1e5, NULL,
     "benchmarks: a slow network: each gradient AllReduce first sleeps this long per MiB"},
    {"distributed", "fault", T_ENUM, "none", NO_RANGE, "none|exit|hang|nan",
     "tests: make fault_rank exit, hang, or compute a NaN loss at fault_step (exit and hang: once; not again in "
     "scripts/dptrun's restarts)"},
    {"distributed", "fault_rank", T_INT, "0", 0, 1e6, NULL, "tests: the rank that fails"},
    {"distributed", "fault_step", T_INT, "0", 0, 1e12, NULL, "tests: the step at which it fails"},

    {"checkpoint", "dir", T_STRING, "checkpoints", NO_RANGE, NULL,
     "folder for ckpt-step*.dpt files (written by rank 0)"},
    {"checkpoint", "every_steps", T_INT, "0", 0, 1e12, NULL,
     "write a checkpoint every N optimizer steps (0 = off)"},
    {"checkpoint", "every_epochs", T_INT, "0", 0, 1e6, NULL,
     "write a checkpoint every N epochs, after evaluation (0 = off)"},
    {"checkpoint", "keep_last", T_INT, "3", 0, 1e6, NULL,
     "keep only the newest N checkpoints of this run (0 = keep all); another run's files are never deleted"},
    {"checkpoint", "existing", T_ENUM, "stop", NO_RANGE, "stop|archive",
     "the folder holds another run's checkpoints (or, on resume, newer ones than the one resumed): stop "
     "with an error, or move them into dir/previous-<time>/ and go on"},

    {"log", "interval", T_INT, "100", 1, 1e9, NULL, "steps between progress lines"},
    {"log", "all_ranks", T_BOOL, "false", NO_RANGE, NULL,
     "every rank prints its progress lines (prefixed by its rank), not only rank 0"},
    {"log", "progress", T_ENUM, "auto", NO_RANGE, "auto|bar|lines",
     "auto: a progress bar with ETA on a terminal, plain lines otherwise (CI logs)"},
    {"log", "timeline", T_STRING, "", NO_RANGE, NULL,
     "Chrome-trace JSON per rank ({rank} in the path is replaced; else .rankN is appended when ranks > 1)"},
    {"log", "gpu_stats", T_ENUM, "auto", NO_RANGE, "auto|off",
     "auto: the GPU's utilisation, memory, temperature and power in the progress line and the metrics (NVML, "
     "when the driver provides it)"},
    {"log", "metrics", T_STRING, "", NO_RANGE, NULL,
     "JSONL metrics file, one line per interval and per evaluation (empty = none)"},

    /* CI smoke tests: checked after the run (exit code 3 when one fails); see --expect */
    {"expect", "final_test_acc", T_EXPECT, "", NO_RANGE, NULL,
     "after the run: 'OP VALUE' with OP one of >= <= == != and VALUE a fraction or a percentage, e.g. >= 85%"},
    {"expect", "best_test_acc", T_EXPECT, "", NO_RANGE, NULL, "after the run: the best epoch's test accuracy"},
    {"expect", "final_test_loss", T_EXPECT, "", NO_RANGE, NULL, "after the run: the last evaluation's test loss"},
    {"expect", "final_train_loss", T_EXPECT, "", NO_RANGE, NULL,
     "after the run: the last epoch's training loss (average over all ranks)"},
    {"expect", "img_s", T_EXPECT, "", NO_RANGE, NULL,
     "after the run: training images per second over the whole run, all ranks (evaluation time excluded)"},
    {"expect", "weights_sha256", T_EXPECT, "", NO_RANGE, NULL,
     "after the run: == or != the 64 hex digits of the final weights' SHA-256 (./train --inspect CKPT prints "
     "a checkpoint's; the run prints its own)"},
};
enum { NBUILTIN = sizeof builtin_keys / sizeof builtin_keys[0], MAX_LIST = 32, MAX_KEYS = 512 };

/* The schema: the built-in keys, then the registered ones in registration order. Indices
 * never change, so a config made earlier stays valid; registration happens before configs
 * are made (a program registers its models first, then calls dpt_train_main). */
static schema_key schema[MAX_KEYS];
static char schema_owners[MAX_KEYS][128]; /* the models that declared a key ("cnn, resnet") */
static int NKEYS;
static pthread_mutex_t schema_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t schema_once = PTHREAD_ONCE_INIT;
static int configs_made; /* registration after a config exists would leave it without the key */

static void schema_init(void)
{
    for (int k = 0; k < NBUILTIN; k++)
        schema[k] = builtin_keys[k];
    NKEYS = NBUILTIN;
    dpt_register_builtin_models(); /* models/registry.c: their keys, through dpt_register_config_keys */
}

static void schema_ready(void)
{
    pthread_once(&schema_once, schema_init);
}

/* Keys that cannot change the numbers a run computes (logging, checkpoint placement, timeouts,
 * prefetch depth, a memory cap): left out of the config hash, so changing one neither warns on
 * resume nor makes ranks disagree. A test checks each names a key of the schema. */
static const char *const outside_hash[] = {
    "data.prefetch",
    "train.memory_limit_mb",
    "distributed.comm_timeout_s",
    "train.memory_check",
    "distributed.bench_comm_ms_per_mb",
    "checkpoint.dir",
    "checkpoint.every_steps",
    "checkpoint.every_epochs",
    "checkpoint.keep_last",
    "checkpoint.existing",
    "log.interval",
    "log.all_ranks",
    "log.progress",
    "log.timeline",
    "log.metrics",
    "log.gpu_stats",
    "expect.final_test_acc",
    "expect.final_test_loss",
    "expect.best_test_acc",
    "expect.final_train_loss",
    "expect.img_s",
    "expect.weights_sha256",
};

static bool is_outside_hash(int k)
{
    size_t slen = strlen(schema[k].section);
    for (size_t i = 0; i < sizeof outside_hash / sizeof outside_hash[0]; i++)
        if (!strncmp(outside_hash[i], schema[k].section, slen) && outside_hash[i][slen] == '.' &&
            !strcmp(outside_hash[i] + slen + 1, schema[k].key))
            return true;
    return false;
}

typedef struct cfg_value {
    char *raw;
    char where[320]; /* "file:line", "--set" or "default" */
    int64_t i;
    double f;
    bool b;
    int64_t list[MAX_LIST]; /* T_INT_LIST */
    double flist[MAX_LIST]; /* T_FLOAT_LIST */
    int nlist;
} cfg_value;

struct dpt_config {
    int nkeys; /* the schema's size when it was made */
    cfg_value *values;
};

/* ---------------------------------------------------------------- schema look-up */

static int find_key(const char *section, const char *key)
{
    schema_ready();
    for (int k = 0; k < NKEYS; k++)
        if (strcmp(schema[k].section, section) == 0 && strcmp(schema[k].key, key) == 0) return k;
    return -1;
}

static bool section_exists(const char *section)
{
    schema_ready();
    for (int k = 0; k < NKEYS; k++)
        if (strcmp(schema[k].section, section) == 0) return true;
    return false;
}

static int edit_distance(const char *a, const char *b)
{
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > 63 || lb > 63) return 99;
    int d[64][64];
    for (int i = 0; i <= la; i++)
        d[i][0] = i;
    for (int j = 0; j <= lb; j++)
        d[0][j] = j;
    for (int i = 1; i <= la; i++)
        for (int j = 1; j <= lb; j++) {
            int sub =
                d[i - 1][j - 1] + (tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]));
            int del = d[i - 1][j] + 1, ins = d[i][j - 1] + 1;
            d[i][j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
    return d[la][lb];
}

/* The nearest known section (key == NULL) or key of a section, or NULL if none is close. */
static const char *nearest(const char *section, const char *name)
{
    const char *best = NULL;
    int best_d = 4;
    for (int k = 0; k < NKEYS; k++) {
        const char *cand = section ? schema[k].key : schema[k].section;
        if (section && strcmp(schema[k].section, section) != 0) continue;
        /* lengths further apart than the best distance so far cannot beat it */
        int gap = (int)strlen(name) - (int)strlen(cand);
        if (gap >= best_d || -gap >= best_d) continue;
        int d = edit_distance(name, cand);
        if (d < best_d) best_d = d, best = cand;
    }
    return best;
}

static void list_keys(const char *section, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int k = 0; k < NKEYS && used < size; k++) {
        if (section && strcmp(schema[k].section, section) != 0) continue;
        const char *name = section ? schema[k].key : schema[k].section;
        if (!section && k > 0 && strcmp(schema[k - 1].section, name) == 0) continue;
        used += (size_t)snprintf(buf + used, size - used, "%s%s", used ? ", " : "", name);
    }
}

static bool unknown_name(dpt_error *err, const char *where, const char *section, const char *key)
{
    char known[512];
    const char *near;
    if (!section_exists(section)) {
        near = nearest(NULL, section);
        list_keys(NULL, known, sizeof known);
        return dpt_errorf(err, "%s: unknown section [%s]%s%s%s\nHINT: sections are %s", where, section,
                          near ? "; did you mean [" : "", near ? near : "", near ? "]?" : "", known);
    }
    near = nearest(section, key);
    list_keys(section, known, sizeof known);
    return dpt_errorf(err, "%s: unknown key '%s' in [%s]%s%s%s\nHINT: keys of [%s] are %s", where, key,
                      section, near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "", section,
                      known);
}

/* ---------------------------------------------------------------- values */

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *end = s + strlen(s);
    while (end > s && isspace((unsigned char)end[-1]))
        *--end = '\0';
    return s;
}

static bool parse_int(const char *s, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end) return false;
    *out = v;
    return true;
}

static bool parse_double(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v)) return false;
    *out = v;
    return true;
}

static bool check_range(dpt_error *err, const char *where, const schema_key *sk, const char *raw, double v)
{
    if (sk->min <= sk->max && (v < sk->min || v > sk->max))
        return dpt_errorf(err, "%s: [%s] %s = %s: out of range, must be between %g and %g\nHINT: %s", where,
                          sk->section, sk->key, raw, sk->min, sk->max, sk->help);
    return true;
}

static bool set_value(dpt_error *err, const char *where, int k, const char *raw, cfg_value *v)
{
    const schema_key *sk = &schema[k];
    cfg_value parsed = {0};
    /* Quotes only surround a whole value (and are removed before here): one inside could not
     * be written back (dpt_config_print, a checkpoint's config) as the same value. */
    if (strchr(raw, '"'))
        return dpt_errorf(
            err,
            "%s: [%s] %s = %s: a double quote inside a value\nHINT: quotes may only surround the "
            "whole value, e.g. dir = \"/data/my set\"",
            where, sk->section, sk->key, raw);
    switch (sk->type) {
    case T_INT:
        if (!parse_int(raw, &parsed.i))
            return dpt_errorf(err, "%s: [%s] %s = %s: expected an integer\nHINT: %s", where, sk->section,
                              sk->key, raw, sk->help);
        if (!check_range(err, where, sk, raw, (double)parsed.i)) return false;
        break;
    case T_FLOAT:
        if (!parse_double(raw, &parsed.f))
            return dpt_errorf(err, "%s: [%s] %s = %s: expected a number\nHINT: %s", where, sk->section,
                              sk->key, raw, sk->help);
        if (!check_range(err, where, sk, raw, parsed.f)) return false;
        break;
    case T_BOOL:
        if (!strcmp(raw, "true") || !strcmp(raw, "yes") || !strcmp(raw, "on") || !strcmp(raw, "1"))
            parsed.b = true;
        else if (!strcmp(raw, "false") || !strcmp(raw, "no") || !strcmp(raw, "off") || !strcmp(raw, "0"))
            parsed.b = false;
        else
            return dpt_errorf(err, "%s: [%s] %s = %s: expected true or false\nHINT: %s", where, sk->section,
                              sk->key, raw, sk->help);
        break;
    case T_ENUM: {
        bool ok = false;
        size_t len = strlen(raw);
        for (const char *c = sk->choices; c && *c;) {
            const char *bar = strchr(c, '|');
            size_t n = bar ? (size_t)(bar - c) : strlen(c);
            if (n == len && strncmp(c, raw, n) == 0) ok = true;
            c = bar ? bar + 1 : c + n;
        }
        if (!ok)
            return dpt_errorf(err, "%s: [%s] %s = %s: not one of %s\nHINT: %s", where, sk->section, sk->key,
                              raw, sk->choices, sk->help);
        break;
    }
    case T_INT_LIST:
    case T_FLOAT_LIST: {
        /* Split by hand: strtok would silently skip the empty element of "256,,256". */
        bool ints = sk->type == T_INT_LIST;
        const char *tok = raw;
        for (;;) {
            const char *comma = strchr(tok, ',');
            size_t len = comma ? (size_t)(comma - tok) : strlen(tok);
            char item[64];
            int64_t x = 0;
            double f = 0;
            bool ok = len < sizeof item;
            if (ok) {
                memcpy(item, tok, len);
                item[len] = '\0';
            }
            char *t = ok ? trim(item) : NULL;
            if (ok && !*t)
                return dpt_errorf(err, "%s: [%s] %s = %s: element %d is empty\nHINT: %s, e.g. %s", where,
                                  sk->section, sk->key, raw, parsed.nlist + 1, sk->help, sk->def);
            if (ok) ok = ints ? parse_int(t, &x) : parse_double(t, &f);
            if (!ok || parsed.nlist == MAX_LIST || !check_range(NULL, where, sk, t, ints ? (double)x : f))
                return dpt_errorf(err,
                                  "%s: [%s] %s = %s: expected up to %d comma-separated %s between %g "
                                  "and %g\nHINT: %s",
                                  where, sk->section, sk->key, raw, MAX_LIST, ints ? "integers" : "numbers",
                                  sk->min, sk->max, sk->help);
            parsed.list[parsed.nlist] = x;
            parsed.flist[parsed.nlist++] = f;
            if (!comma) break;
            tok = comma + 1;
        }
        break;
    }
    case T_EXPECT: {
        dpt_expectation e;
        char msg[200];
        if (*raw && !dpt_expectation_parse(sk->key, raw, &e, msg, sizeof msg))
            return dpt_errorf(err, "%s: [%s] %s = %s: %s\nHINT: write OP VALUE, e.g. %s = >= 85%%", where,
                              sk->section, sk->key, raw, msg, sk->key);
        break;
    }
    case T_STRING:
    case T_TYPE_COUNT:
        break;
    }
    parsed.raw = strdup(raw);
    if (!parsed.raw) dpt_fatal("out of host memory in the config parser");
    snprintf(parsed.where, sizeof parsed.where, "%s", where);
    free(v->raw);
    *v = parsed;
    return true;
}

/* ---------------------------------------------------------------- parsing */

dpt_config *dpt_config_defaults(void)
{
    schema_ready();
    pthread_mutex_lock(&schema_lock);
    configs_made++;
    int nkeys = NKEYS;
    pthread_mutex_unlock(&schema_lock);
    int found = 0;
    for (int k = 0; k < NKEYS; k++)
        found += is_outside_hash(k);
    DPT_ASSERT(found == (int)(sizeof outside_hash / sizeof outside_hash[0]),
               "an entry of outside_hash names no key of the schema");
    dpt_config *cfg = calloc(1, sizeof *cfg);
    if (cfg) cfg->values = calloc((size_t)nkeys, sizeof *cfg->values);
    if (!cfg || !cfg->values) dpt_fatal("out of host memory for a config");
    cfg->nkeys = nkeys;
    for (int k = 0; k < nkeys; k++) {
        dpt_error err;
        if (!set_value(&err, "default", k, schema[k].def, &cfg->values[k]))
            dpt_fatal("bad default in the config schema: %s", err.msg);
    }
    return cfg;
}

void dpt_config_free(dpt_config *cfg)
{
    if (!cfg) return;
    for (int k = 0; k < cfg->nkeys; k++)
        free(cfg->values[k].raw);
    free(cfg->values);
    free(cfg);
}

/* Cut a comment: '#' or ';' at the start, or after whitespace; not inside quotes. */
static void strip_comment(char *s)
{
    bool quoted = false;
    for (char *p = s; *p; p++) {
        if (*p == '"') quoted = !quoted;
        if (!quoted && (*p == '#' || *p == ';') && (p == s || isspace((unsigned char)p[-1]))) {
            *p = '\0';
            return;
        }
    }
}

static bool unquote(char **value)
{
    char *v = *value;
    size_t n = strlen(v);
    if (n == 0 || v[0] != '"') return true;
    if (n < 2 || v[n - 1] != '"') return false;
    v[n - 1] = '\0';
    *value = v + 1;
    return true;
}

static dpt_config *parse_stream(FILE *f, const char *path, dpt_error *err);

dpt_config *dpt_config_load(const char *path, dpt_error *err)
{
    /* O_NONBLOCK and the regular-file test: a FIFO or a device named as the config would
     * otherwise block the open or the read forever. */
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        if (fd >= 0)
            dpt_errorf(err,
                       "config file %s is not a regular file (a folder, FIFO or device)\nHINT: pass the path "
                       "of an INI file, e.g. configs/fmnist_mlp.ini",
                       path);
        else
            dpt_errorf(err,
                       "cannot open config file %s: %s\nHINT: pass the path of an INI file, e.g. "
                       "configs/fmnist_mlp.ini",
                       path, strerror(errno));
        if (fd >= 0) close(fd);
        return NULL;
    }
    FILE *f = fdopen(fd, "r");
    if (!f) dpt_fatal("fdopen of %s failed: %s", path, strerror(errno));
    dpt_config *cfg = parse_stream(f, path, err);
    fclose(f);
    return cfg;
}

dpt_config *dpt_config_parse(const char *text, size_t len, const char *name, dpt_error *err)
{
    FILE *f = fmemopen((void *)text, len, "r");
    if (!f) dpt_fatal("fmemopen failed: %s", strerror(errno));
    dpt_config *cfg = parse_stream(f, name, err);
    fclose(f);
    return cfg;
}

static dpt_config *parse_stream(FILE *f, const char *path, dpt_error *err)
{
    dpt_config *cfg = dpt_config_defaults();
    int *set_line = calloc((size_t)cfg->nkeys, sizeof *set_line);
    if (!set_line) dpt_fatal("out of host memory in the config parser");
    char section[64] = "";
    char where[320];
    char *line = NULL;
    size_t line_cap = 0;
    ssize_t len;
    int lineno = 0;
    bool ok = true;
    while (ok && (len = getline(&line, &line_cap, f)) >= 0) {
        lineno++;
        snprintf(where, sizeof where, "%s:%d", path, lineno);
        if (len > 65536) {
            ok = dpt_errorf(err, "%s: line longer than 65536 characters\nHINT: is this an INI file?", where);
            break;
        }
        const char *nul = memchr(line, '\0', (size_t)len);
        if (nul) {
            ok = dpt_errorf(err,
                            "%s: a NUL byte at column %d\nHINT: the file is binary or was saved in UTF-16; "
                            "save it as UTF-8 text",
                            where, (int)(nul - line) + 1);
            break;
        }
        /* A UTF-8 byte-order mark, as Windows editors write at the start of a file. */
        if (lineno == 1 && len >= 3 && !memcmp(line, "\xEF\xBB\xBF", 3))
            memmove(line, line + 3, (size_t)len - 2);
        strip_comment(line);
        char *s = trim(line);
        if (!*s) continue;
        if (*s == '[') {
            char *close = strchr(s, ']');
            if (!close || *trim(close + 1)) {
                ok = dpt_errorf(err, "%s: malformed section header '%s'\nHINT: write it as [name]", where, s);
                break;
            }
            *close = '\0';
            char *name = trim(s + 1);
            if (!section_exists(name)) {
                ok = unknown_name(err, where, name, NULL);
                break;
            }
            snprintf(section, sizeof section, "%s", name);
            continue;
        }
        char *eq = strchr(s, '=');
        if (!eq) {
            ok = dpt_errorf(err, "%s: expected 'key = value' or '[section]', got '%s'", where, s);
            break;
        }
        *eq = '\0';
        char *key = trim(s), *val = trim(eq + 1);
        if (!*key) {
            ok = dpt_errorf(err, "%s: missing key before '='", where);
            break;
        }
        if (!*section) {
            ok = dpt_errorf(err,
                            "%s: key '%s' before any [section]\nHINT: put it under its section, "
                            "e.g. [train]",
                            where, key);
            break;
        }
        int k = find_key(section, key);
        if (k < 0) {
            ok = unknown_name(err, where, section, key);
            break;
        }
        if (set_line[k]) {
            ok =
                dpt_errorf(err, "%s: [%s] %s set twice (first on line %d)", where, section, key, set_line[k]);
            break;
        }
        if (!unquote(&val)) {
            ok = dpt_errorf(err, "%s: [%s] %s: unterminated quote", where, section, key);
            break;
        }
        if (!set_value(err, where, k, val, &cfg->values[k])) {
            ok = false;
            break;
        }
        set_line[k] = lineno;
    }
    if (ok && ferror(f)) ok = dpt_errorf(err, "%s: read error: %s", path, strerror(errno));
    free(line);
    free(set_line);
    if (!ok) {
        dpt_config_free(cfg);
        return NULL;
    }
    return cfg;
}

bool dpt_config_set(dpt_config *cfg, const char *assignment, dpt_error *err)
{
    char where[320];
    snprintf(where, sizeof where, "--set %s", assignment);
    char *buf = strdup(assignment);
    if (!buf) dpt_fatal("out of host memory in the config parser");
    char *eq = strchr(buf, '='), *dot = strchr(buf, '.');
    bool ok;
    if (!eq || !dot || dot > eq) {
        ok = dpt_errorf(err, "%s: expected section.key=value\nHINT: e.g. --set train.batch=128", where);
    } else {
        *eq = '\0';
        *dot = '\0';
        char *section = trim(buf), *key = trim(dot + 1), *val = trim(eq + 1);
        int k = find_key(section, key);
        if (k < 0)
            ok = unknown_name(err, where, section, key);
        else if (!unquote(&val))
            ok = dpt_errorf(err, "%s: unterminated quote", where);
        else
            ok = set_value(err, where, k, val, &cfg->values[k]);
    }
    free(buf);
    return ok;
}

/* ---------------------------------------------------------------- getters */

static const cfg_value *get(const dpt_config *cfg, const char *section, const char *key, key_type want)
{
    int k = find_key(section, key);
    DPT_ASSERT(k >= 0, "config key [%s] %s is not in the schema (a model's keys: dpt_register_config_keys)",
               section, key);
    DPT_ASSERT(k < cfg->nkeys, "config key [%s] %s was registered after this config was made", section, key);
    DPT_ASSERT(schema[k].type == want || (want == T_STRING && (schema[k].type == T_ENUM || schema[k].type == T_EXPECT)),
               "[%s] %s is a %s, read as a %s", section, key, type_names[schema[k].type], type_names[want]);
    return &cfg->values[k];
}

int64_t dpt_config_int(const dpt_config *cfg, const char *s, const char *k)
{
    return get(cfg, s, k, T_INT)->i;
}
double dpt_config_float(const dpt_config *cfg, const char *s, const char *k)
{
    return get(cfg, s, k, T_FLOAT)->f;
}
bool dpt_config_bool(const dpt_config *cfg, const char *s, const char *k)
{
    return get(cfg, s, k, T_BOOL)->b;
}
const char *dpt_config_str(const dpt_config *cfg, const char *s, const char *k)
{
    return get(cfg, s, k, T_STRING)->raw;
}

int dpt_config_int_list(const dpt_config *cfg, const char *s, const char *k, int64_t *values, int max)
{
    const cfg_value *v = get(cfg, s, k, T_INT_LIST);
    for (int i = 0; i < v->nlist && i < max; i++)
        values[i] = v->list[i];
    return v->nlist;
}

int dpt_config_float_list(const dpt_config *cfg, const char *s, const char *k, double *values, int max)
{
    const cfg_value *v = get(cfg, s, k, T_FLOAT_LIST);
    for (int i = 0; i < v->nlist && i < max; i++)
        values[i] = v->flist[i];
    return v->nlist;
}

const char *dpt_config_where(const dpt_config *cfg, const char *section, const char *key)
{
    int k = find_key(section, key);
    DPT_ASSERT(k >= 0 && k < cfg->nkeys, "config key [%s] %s is not in this config's schema", section, key);
    return cfg->values[k].where;
}

/* Whether a value must be quoted to read back the same: surrounding whitespace, or a '#' or
 * ';' where the parser would take it for a comment. */
static bool needs_quotes(const char *v)
{
    size_t n = strlen(v);
    if (n && (isspace((unsigned char)v[0]) || isspace((unsigned char)v[n - 1]))) return true;
    for (size_t i = 0; i < n; i++)
        if ((v[i] == '#' || v[i] == ';') && (i == 0 || isspace((unsigned char)v[i - 1]))) return true;
    return false;
}

/* Whether key k is the first of its section in the table (sections print in that order, all
 * of a section's keys together, registered ones after the built-in ones). */
static bool first_of_section(int k)
{
    for (int j = 0; j < k; j++)
        if (!strcmp(schema[j].section, schema[k].section)) return false;
    return true;
}

void dpt_config_print(const dpt_config *cfg, FILE *out)
{
    bool first = true;
    for (int s = 0; s < cfg->nkeys; s++) {
        if (!first_of_section(s)) continue;
        fprintf(out, "%s[%s]\n", first ? "" : "\n", schema[s].section);
        first = false;
        for (int k = s; k < cfg->nkeys; k++) {
            if (strcmp(schema[k].section, schema[s].section)) continue;
            const char *v = cfg->values[k].raw;
            fprintf(out, needs_quotes(v) ? "%s = \"%s\"\n" : "%s = %s\n", schema[k].key, v);
        }
    }
}

uint64_t dpt_config_hash(const dpt_config *cfg)
{
    uint64_t h = DPT_HASH_SEED;
    for (int k = 0; k < cfg->nkeys; k++) {
        /* A key at its default is left out, so a release that adds a key (at a default that
         * keeps the old behaviour) does not change every config's hash and make resuming an
         * older checkpoint warn that the run is not an exact continuation. */
        if (is_outside_hash(k) || !strcmp(cfg->values[k].raw, schema[k].def)) continue;
        const char *parts[3] = {schema[k].section, schema[k].key, cfg->values[k].raw};
        for (int p = 0; p < 3; p++) {
            h = dpt_hash_bytes(h, parts[p], strlen(parts[p]));
            h = dpt_hash_bytes(h, "\xff", 1); /* separator so "ab"+"c" != "a"+"bc" */
        }
    }
    return h;
}

static void print_reference_row(FILE *out, int k);

void dpt_config_print_reference(FILE *out)
{
    fprintf(out, "# Config reference\n\n"
                 "Generated by `./train --config-reference` from the parser's own table "
                 "(runtime/config.c); a test fails if this file and the table drift apart.\n\n"
                 "Every key is optional; a key that is not listed here is an error, as is a value of "
                 "the wrong type or out of range. Any key can be overridden on the command line with "
                 "`--set section.key=value`.\n");
    schema_ready();
    for (int s = 0; s < NKEYS; s++) {
        if (!first_of_section(s)) continue;
        fprintf(out, "\n## [%s]\n\n| key | type | default | meaning |\n|---|---|---|---|\n", schema[s].section);
        for (int k = s; k < NKEYS; k++)
            if (!strcmp(schema[k].section, schema[s].section)) print_reference_row(out, k);
    }
}

static void print_reference_row(FILE *out, int k)
{
    {
        const schema_key *sk = &schema[k];
        char type[160];
        if (sk->type == T_ENUM)
            snprintf(type, sizeof type, "one of `%s`", sk->choices);
        else if (sk->min <= sk->max)
            snprintf(type, sizeof type, "%s in [%g, %g]", type_names[sk->type], sk->min, sk->max);
        else
            snprintf(type, sizeof type, "%s", type_names[sk->type]);
        fprintf(out, "| `%s` | %s | `%s` | %s%s%s%s |\n", sk->key, type, *sk->def ? sk->def : "\"\"",
                schema_owners[k], *schema_owners[k] ? ": " : "", sk->help,
                is_outside_hash(k) ? " (not in the config hash: changing it keeps a resume exact)" : "");
    }
}

/* ---------------------------------------------------------------- keys a model declares */

static bool valid_name(const char *s)
{
    if (!s || !*s || strlen(s) > 48) return false;
    for (const char *c = s; *c; c++)
        if (!islower((unsigned char)*c) && !isdigit((unsigned char)*c) && *c != '_') return false;
    return true;
}

/* Called with schema_lock held. A key both declared and already known is shared when the two
 * declarations agree in everything but the help (cnn and resnet both read bn_momentum). */
static bool declare_key(const char *owner, const dpt_config_key *dk, dpt_error *err)
{
    const char *section = dk->section ? dk->section : "model";
    if (!valid_name(section) || !valid_name(dk->key))
        return dpt_errorf(err, "[%s] %s: section and key names are lower-case letters, digits and _", section,
                          dk->key ? dk->key : "(null)");
    if ((unsigned)dk->type > (unsigned)DPT_KEY_FLOAT_LIST || !dk->help || !dk->def)
        return dpt_errorf(err, "[%s] %s: needs a type of dpt_key_type, a default and a help text", section,
                          dk->key);
    if (dk->type == DPT_KEY_ENUM && (!dk->choices || !*dk->choices))
        return dpt_errorf(err, "[%s] %s: an enum needs its choices (\"a|b|c\")", section, dk->key);
    schema_key sk = {section, dk->key, (key_type)dk->type, dk->def, dk->min, dk->max, dk->choices, dk->help};
    if (dk->type != DPT_KEY_INT && dk->type != DPT_KEY_FLOAT && dk->type != DPT_KEY_INT_LIST &&
        dk->type != DPT_KEY_FLOAT_LIST) sk.min = 1, sk.max = 0;
    int k = -1;
    for (int j = 0; j < NKEYS; j++)
        if (!strcmp(schema[j].section, section) && !strcmp(schema[j].key, dk->key)) k = j;
    if (k >= 0) {
        const schema_key *o = &schema[k];
        bool same = o->type == sk.type && !strcmp(o->def, sk.def) &&
                    ((o->min > o->max && sk.min > sk.max) || (o->min == sk.min && o->max == sk.max)) &&
                    !strcmp(o->choices ? o->choices : "", sk.choices ? sk.choices : "");
        if (!same || !*schema_owners[k])
            return dpt_errorf(err, "[%s] %s is already a key%s%s, with another type, default or range", section,
                              dk->key, *schema_owners[k] ? " of " : " of the runtime", schema_owners[k]);
        size_t used = strlen(schema_owners[k]);
        snprintf(schema_owners[k] + used, sizeof schema_owners[k] - used, ", %s", owner);
        return true;
    }
    if (NKEYS == MAX_KEYS) return dpt_errorf(err, "more than %d config keys", MAX_KEYS);
    /* the strings are the caller's (static tables); copies keep a stack-built table safe */
    char *copies[5] = {strdup(section), strdup(dk->key), strdup(dk->def), dk->choices ? strdup(dk->choices) : NULL,
                       strdup(dk->help)};
    if (!copies[0] || !copies[1] || !copies[2] || !copies[4] || (dk->choices && !copies[3]))
        dpt_fatal("out of host memory in the config schema");
    sk.section = copies[0], sk.key = copies[1], sk.def = copies[2], sk.choices = copies[3], sk.help = copies[4];
    schema[NKEYS] = sk;
    cfg_value v = {0};
    if (!set_value(err, "default", NKEYS, sk.def, &v)) return false; /* the message names key and value */
    free(v.raw);
    snprintf(schema_owners[NKEYS], sizeof schema_owners[NKEYS], "%s", owner);
    NKEYS++;
    return true;
}

/* schema_init's: the built-in models' tables (under the once, so without the lock) */
void dpt_config_declare_builtin(const char *owner, const dpt_config_key *keys, int n)
{
    dpt_error err;
    for (int i = 0; i < n; i++)
        if (!declare_key(owner, &keys[i], &err)) dpt_fatal("model %s's config keys: %s", owner, err.msg);
}

bool dpt_register_config_keys(const char *owner, const dpt_config_key *keys, int n)
{
    schema_ready();
    pthread_mutex_lock(&schema_lock);
    dpt_error err = {0};
    bool ok = true;
    if (configs_made)
        ok = dpt_errorf(&err, "called after a config was made\nHINT: register models and their keys first, "
                              "then call dpt_train_main");
    else if (!valid_name(owner))
        ok = dpt_errorf(&err, "owner '%s': lower-case letters, digits and _", owner ? owner : "(null)");
    for (int i = 0; ok && i < n; i++)
        ok = declare_key(owner, &keys[i], &err);
    pthread_mutex_unlock(&schema_lock);
    if (!ok) fprintf(stderr, "error: dpt_register_config_keys(%s): %s\n", owner ? owner : "(null)", err.msg);
    return ok;
}

bool dpt_config_registration_open(void)
{
    schema_ready();
    pthread_mutex_lock(&schema_lock);
    bool open = configs_made == 0;
    pthread_mutex_unlock(&schema_lock);
    return open;
}
