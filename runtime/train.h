/* train.h: the training program behind ./train and dpt_train_main, in five files (their shared
 * types and the functions they call in each other; named for none of them):
 *   train_main.c    the command line, the config (typed once), mpirun or DataParallel, --expect
 *   trainer.c       one replica: open, the loop (train_step, after_step), close
 *   train_report.c  what a run prints and logs: header, progress, windows, evaluations
 *   train_support.c device choice, the memory check, checkpoints, signals, the timeline
 *   show_batch.c    --show-batch: a batch as the model sees it, written as images
 * Internal to the library; the public entry points are dpt_train_main and dpt_register_model. */
#ifndef DPT_TRAIN_H
#define DPT_TRAIN_H

#include <limits.h>

#include "dpt.h"
#include "trace.h"
#include "../data/data.h"
#include "comm.h"
#include "expect.h"
#include "log.h"

enum { MAX_SETS = 64, MAX_EXPECT = 32 };

typedef struct cli {
    const char *config_path;
    const char *sets[MAX_SETS];
    int nsets;
    const char *expects[MAX_EXPECT]; /* --expect 'METRIC OP VALUE' */
    int nexpects;
    const char *junit;   /* --junit PATH, or NULL */
    const char *inspect; /* --inspect CKPT, or NULL */
    bool dry_run, summary, env;
    const char *resume; /* checkpoint path, "latest", or NULL */
    const char *sample; /* --sample CKPT: generate from it instead of training (resume is CKPT too; for
                         * llmc:PATH, llm.c's file, [model] init = it instead and no resume) */
    const char *eval;   /* --eval CKPT: evaluate it on the test set instead of training (resume is CKPT too) */
    bool profile;       /* --profile: per-op forward and backward times, a table at the end */
    const char *export_format, *export_out; /* --export FORMAT CKPT OUT (a model's format: resume is CKPT) */
    const char *prompt; /* --prompt TEXT */
    int64_t sample_tokens;
    float temperature;
    int top_k;
    float top_p; /* --top-p (1: every token) */
    uint64_t sample_seed;
    bool sample_no_cache; /* --no-kv-cache */
    const char *tokenizer; /* --tokenizer PATH: GPT-2's tokenizer, --sample reads and prints text with it */
    bool tokenizer_found; /* tokenizer is the folder beside --sample hf:DIR's weights, not --tokenizer's */
    const char *sample_flag; /* the first of --sample's own flags given (--prompt, --seed, ...), or NULL */
    bool top_k_given, out_given;
    const char *predict;     /* --predict CKPT: the test set's predictions as CSV (resume is CKPT too) */
    const char *predict_out; /* --out FILE */
    const char *predict_input; /* --input PATH: images without labels instead of the test set */
    bool ema;                /* --ema: --eval, --predict, --sample with the checkpoint's weight averages */
    bool per_class;          /* --per-class: --eval's precision, recall and F1 of each class */
    const char *show_batch;  /* --show-batch FILE.png: the first training batch as training sees it */
    int argc;           /* the command line as given, for the command that resumes this run */
    char **argv;
} cli;

/* --sample, --eval, --predict, --export: a checkpoint's weights are read, nothing is trained
 * (no optimizer, no training loader, no random initialisation, no training memory). */
/* The command that reads a checkpoint's weights only (--sample, --eval, --predict, --export),
 * or NULL: names the flag in its messages. */
static inline const char *cli_weights_flag(const cli *a)
{
    return a->sample ? "--sample" : a->eval ? "--eval" : a->predict ? "--predict" : a->export_format ? "--export" : NULL;
}

static inline bool cli_weights_only(const cli *a)
{
    return cli_weights_flag(a) != NULL;
}

typedef enum fault_kind { FAULT_NONE, FAULT_EXIT, FAULT_HANG, FAULT_NAN } fault_kind;

/* The run's settings, read from the INI once and typed (the loop never looks a key up). */
typedef struct run_config {
    const dpt_config *ini; /* for what takes the config whole: data, model, optimizer, checkpoint */
    const char *config_path;
    uint64_t hash;
    /* [train] */
    int epochs;
    int64_t max_steps, eval_batch, eval_every;
    int64_t batch;        /* per rank and micro-batch: [train] batch, or global_batch / (ranks x accum) */
    int64_t global_batch; /* per optimizer step, all ranks */
    int world_size;       /* ranks or replicas */
    /* [train] deterministic: shards of det_shard samples, det_shards per step, det_per_rank
     * of them on each rank (then batch = det_shard and accum = det_per_rank) */
    bool deterministic;
    int zero; /* [distributed] zero: 1 = optimizer state sharded over the ranks, 2 = gradients reduce-scattered too */
    int zero_overlap; /* [distributed] zero_overlap: 0 auto, 1 the all-gather overlapped with the next forward, 2 not */
    int64_t det_shard, det_shards;
    int det_per_rank;
    const char *device;
    dpt_ctx_options ctx; /* device filled per replica */
    bool memory_check;
    bool adapt_threads; /* [train] adapt_threads (CPU) */
    bool skip_nonfinite;
    bool loss_scale;         /* [train] loss_scale = dynamic */
    double loss_scale_init;
    int64_t loss_scale_growth;
    /* [data] */
    dpt_loader_options train_data, test_data; /* rank and world size filled per replica */
    dpt_mix_options mix;     /* [data] mixup, cutmix: training batches mixed (data/data.h) */
    dpt_erase_options erase; /* [data] random_erase: boxes of training images set to 0 */
    const char *data_dir;
    /* [optim] */
    double clip_norm;
    const char *lr_scaling, *schedule;
    /* [distributed] */
    int accum;
    const char *devices; /* DataParallel device list, or "" */
    dpt_ddp_options ddp; /* dataset_len filled per replica */
    double bench_comm_ms_per_mb;
    struct {
        fault_kind kind;
        int rank;
        int64_t step;
    } fault;
    /* [checkpoint] */
    const char *ckpt_dir;
    int64_t ckpt_every_steps;
    int ckpt_every_epochs, keep_last;
    bool ckpt_archive;
    bool ckpt_final; /* [checkpoint] final, resolved: a checkpoint of the last step at the end */
    bool ckpt_best;  /* [checkpoint] best, resolved: dir/best.dpt kept */
    bool ckpt_sharded; /* [checkpoint] sharded: under zero, each rank writes its part of the optimizer state */
    /* [train] early_stop: the metric (0 off, 1 test loss, 2 test accuracy), the epochs without
     * an improvement of more than stop_delta that end the run */
    int stop_metric, stop_patience;
    double stop_delta;
    double ema_decay; /* [train] ema_decay: weight averages kept and evaluated (0: none) */
    bool ema_warmup;  /* [train] ema_warmup: the decay min(ema_decay, (1 + k) / (10 + k)) at step k */
    /* [log] */
    int64_t interval;
    bool all_ranks, gpu_stats;
    const char *progress, *timeline, *metrics;
    /* [expect] and --expect */
    dpt_expectation expect[MAX_EXPECT];
    int nexpect;
} run_config;

/* One replica's view of the job: a process under mpirun, or a thread under DataParallel. */
typedef struct replica {
    const cli *args;
    const run_config *run;
    dpt_comm *comm; /* NULL when training alone */
    int rank, size;
    int local_rank; /* on this node (mpirun): the GPU it takes */
    int local_size; /* ranks on this node (they share its memory) */
    const dpt_world *world; /* its cores: [train] threads = 0 takes world->cores (shared by DataParallel's replicas) */
    bool data_parallel;
    bool print; /* this replica prints progress lines */
    int rc;
    dpt_run_result result; /* what the run measured (--expect) */
    /* rank 0's checkpoint folder: claimed (locked) at start, ready once another run's
     * checkpoints are out of the way */
    bool ckpt_dir_ready;
    int ckpt_lock_fd;
    char *ckpt_made;   /* the first folder level the claim made (removed again if nothing is written) */
    bool ckpt_written; /* this run wrote a checkpoint there */
    char last_ckpt[PATH_MAX]; /* the newest checkpoint this run wrote, or resumed from */
    int64_t last_ckpt_step; /* its step (-1: none) */
    char resumed[PATH_MAX];   /* the checkpoint this run resumed ("" for a new run) ... */
    int64_t resumed_step; /* ... and its step */
} replica;

/* Loss and accuracy sums over a window of steps (a log interval, or the whole epoch). The
 * sums live on the device (the meter) and are read into loss/correct only when shown, so a
 * GPU step waits for the host once (the gradient norm), not at every micro-batch. */
typedef struct window {
    double start, loss, comm_s, hidden_s, exposed_s, comm_bytes, bus_bytes;
    double data_s; /* waiting for the loader's next batch */
    double gather_s; /* [distributed] zero: the parameters' all-gather after the step (zero_overlap: the forwards' waits for it) */
    double gather_busy_s; /* zero_overlap: the all-gather's own time, on its thread */
    double grad_bytes; /* the most gradient storage held at once in a step (0: the whole model's) */
    int64_t correct, units, steps; /* units: what the loss averages over (images, samples, tokens) */
    int64_t syncs_at_start; /* the context's host reads when the window opened */
    double run_delay_s; /* the compute threads' run delay when it opened (-1: the kernel does not say) */
} window;
/* The device meter's slots: this step's sums, then the log window's, then the epoch's. */
enum { METER_STEP = 0, METER_WINDOW = 2, METER_EPOCH = 4, METER_SLOTS = 6 };

/* A progress bar with ETA on a terminal; plain lines otherwise. */
typedef struct progress {
    bool bar;
    double start, last_draw;
    int64_t first_step, total_steps;
} progress;

/* What a run will allocate from here on, in bytes, by part (the memory check before step 1). */
typedef struct memory_estimate {
    double params, activations, evaluation, loader, total;
} memory_estimate;

/* One replica's training: what open builds, the loop's state, what close frees. */
typedef struct trainer {
    replica *r;
    const run_config *run;
    dpt_ctx *ctx;
    dpt_comm *host_comm, *nccl; /* GPU buffers travel over NCCL, host-side collectives over host_comm */
    dpt_dataset *train_set, *test_set;
    dpt_model *model;
    dpt_task task;              /* what it trains for: the loss, metrics, unit, fields */
    const dpt_loss_impl *loss;  /* the task's loss ... */
    void *loss_settings;        /* ... and its settings from the config */
    dpt_optim *optim;
    dpt_metrics *metrics;
    dpt_loader *train_loader, *test_loader;
    int workers; /* image files: each loader's decoding threads */
    bool warned_cores; /* the one warning that another process takes the cores was printed */
    /* [train] adapt_threads: the count asked for; a trial of fewer (or all again) that started
     * from `from` threads at `before` units/s (from 0: none); windows to skip after a change
     * (its warm-up) and before the next try; windows since the last change */
    struct {
        int base, from, settle, hold, since, high; /* high: windows in a row that waited 20% or more */
        double before;
    } adapt;
    int *compute_tids, ncompute; /* the kernel ids of the thread that steps and its OpenMP team */
    char threads_why[128]; /* how [train] threads = 0 was resolved, when not simply this process's cores */
    struct dpt_reducer *reducer; /* DDP's or the deterministic tree's (reducer.h); NULL alone */
    dpt_timeline *timeline;
    dpt_tensor *meter;
    dpt_tensor *mix_labels; /* [data] mixup/cutmix: each sample's partner's label (batch, I32) */
    bool erase;             /* [data] random_erase on (checked against the data) */
    memory_estimate need;
    dpt_lr_schedule schedule;
    int64_t steps_per_epoch, total_steps;
    dpt_train_state state;
    /* the loop */
    window win;   /* the current log interval, across epoch ends */
    window whole; /* the epoch */
    double *win_bucket_s; /* each bucket's collectives summed over the window (win_nbuckets) */
    int win_nbuckets;
    progress bar;
    int64_t step_units;
    int micro; /* the micro-batch (deterministic: the shard of this rank) in progress */
    int64_t units_trained; /* this replica's, in steps that were not skipped */
    double grad_norm;
    bool nan_loss; /* tests: [distributed] fault = nan is due this step */
    double run_start, eval_s; /* evaluation time is not training throughput */
    double last_step_end;     /* when the last optimizer step ended (the automatic plans' clock) */
    /* one forward at batch 1 read back (runtime/trace.h): FLOPs and outputs the builders did
     * not note; zero where not traced (--sample, --export) */
    dpt_trace trace;
    /* [distributed] zero: the shard plan (runtime/zero.h); NULL unsharded */
    struct dpt_zero *zero;
    struct { /* zero_overlap = auto: the steps' periods with the all-gather overlapped and not */
        int calls, non, noff;
        double last, on[16], off[16];
        bool done;
    } ztune;
    /* --profile: from the second step (the first builds oneDNN primitives, cuDNN plans) */
    struct dpt_profile *profile;
    double profile_start, profile_eval_s;
    int64_t profile_steps;
    dpt_eval_result test;
    dpt_eval_result test_ema; /* the weight averages' evaluation beside it ([train] ema_decay) */
    bool evaluated; /* test holds an evaluation of this run (a resumed finished run has none) */
    int64_t carry_units; /* resumed mid-epoch: the epoch's units so far (state's sums go into the meter) */
    const dpt_model_impl *exporter; /* --export in a model's format: its writer, found before the checkpoint loads */
    int signal_seen;
    bool stop;
} trainer;

/* trainer.c */
void *train_replica(void *arg);

/* train_main.c */
/* world_size: the ranks under mpirun (1 alone; DataParallel's replicas are counted from
 * [distributed] devices) */
bool run_config_build(run_config *rc, const dpt_config *ini, const cli *args, int world_size, dpt_error *err);

/* train_report.c */
void report_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A new log window from now. */
window window_open(trainer *t);
/* Where report_line prints (NULL: stdout; --sample: stderr, so stdout holds only the text). */
void report_to(FILE *out);
const char *report_tail(void); /* the last lines printed, for the JUnit report */
void report_note(const char *fmt, ...) __attribute__((format(printf, 1, 2))); /* kept, not printed */
void print_header(const trainer *t);
void print_eval(const trainer *t);
void print_per_class(const trainer *t, const double *confusion, int classes);
void meter_read(dpt_tensor *meter, int slot, window *w);
progress progress_new(const replica *r, int64_t total_steps);
void progress_step(progress *p, const trainer *t, int64_t s);
void progress_end_epoch(progress *p);
void log_window(trainer *t, int64_t s);
void log_eval(trainer *t, const window *epoch_window);
void print_final(trainer *t);
void mib(char *buf, size_t cap, double bytes); /* "12 MiB", "1.5 GiB" */
void print_resume_command(const replica *r, const char *path);

/* train_support.c */
dpt_device pick_device(const replica *r);
memory_estimate estimate_memory(const trainer *t);
bool check_memory(const trainer *t, dpt_error *err);
void guard_memory(trainer *t, bool on);
bool prepare_checkpoint_dir(replica *r, bool at_start, dpt_error *err);
void release_checkpoint_dir(replica *r);
void save_checkpoint(trainer *t, const dpt_train_state *st);
void save_best_checkpoint(trainer *t, const dpt_train_state *st);
/* Whether name is one of list's comma-separated entries (a model's export_formats or
 * init_formats: "llmc,hf"). */
bool format_listed(const char *list, const char *name);
bool init_from_checkpoint(trainer *t, dpt_error *err);
/* What load_weights_by_name read: tensors loaded, left at the model's initialisation
 * (exclude), the file's skipped (exclude), and a safetensors file's integer tensors passed over. */
typedef struct weights_loaded {
    int loaded, kept, skipped;
    bool safetensors;
    dpt_safetensors_skips ints;
    char adapted[400]; /* the model's adapter's account ("" when it made nothing) */
} weights_loaded;
bool load_weights_by_name(trainer *t, const char *path, bool averages, const char *exclude, weights_loaded *got,
                          dpt_error *err);
const char *weights_loaded_ints(const weights_loaded *got, char *buf, size_t cap);
/* [distributed] zero (train_support.c): shard the optimizer state over the ranks; after a
 * step, every rank's ranges of the parameters gathered; a checkpoint's state gathered tensor by
 * tensor on rank 0 as it writes (zero_send_state: the other ranks' side). zero_clip: the gradient norm (unscaled, clipped) over what zero = 2 reduced. */
bool zero_shard(trainer *t, dpt_error *err);
void zero_sync_params(trainer *t);
/* zero_overlap = auto, before each step's zero_sync_params: times the steps, switches, decides. */
void zero_overlap_tune(trainer *t);
void zero_send_state(trainer *t);
double zero_clip(trainer *t, double inv_scale, double max_norm);
void install_signal_handlers(void);
/* A crash's report (train_support.c): installed once after MPI_Init; each thread that computes
 * names its context (NULL when it is freed), the loop its step. */
void install_crash_report(void);
void crash_report_context(dpt_ctx *ctx, int rank);
void crash_report_step(int64_t step);
/* --junit: where a crash leaves its report (rank 0, after start-up). */
void crash_report_junit(const char *path, const char *suite);
/* The training loop has begun: a stop signal now finishes the step and checkpoints (before,
 * it ends the process at once). */
void signals_training(void);
bool signal_agreed(const replica *r, int *signal_seen);
/* The augmentations of a whole training batch, in place: random erasing, then mixup or cutmix
 * (*mix says which; lambda 1 for none). Returns the partners' labels of a mixed batch, else
 * NULL (train_support.c). */
dpt_tensor *augment_batch(trainer *t, dpt_batch *b, dpt_tensor *target, dpt_mix *mix);
/* --show-batch PATH: the first training batch of the run's first epoch, augmented as training
 * takes it, as a PNG grid, its labels printed (show_batch.c). */
bool show_batch(trainer *t, const char *path, dpt_error *err);
dpt_timeline *open_timeline(const replica *r);
int fail(const replica *r, const dpt_error *err);

#endif
