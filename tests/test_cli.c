/* test_cli.c: ./train end to end on bad input: each case exits non-zero with a message that
 * names the file, line, key or value, never a crash. Runs from the repository root. */
#include <sys/stat.h>
#include <unistd.h>

#include "tests/testutil.h"

static char dir[256];
static char out[65536];

static int setup(void **state)
{
    (void)state;
    return test_mkdtemp(dir, sizeof dir, "dpt_test_cli");
}

static int teardown(void **state)
{
    (void)state;
    return test_rmrf(dir);
}

static const char *write_file(const char *name, const char *text)
{
    static char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    fputs(text, f);
    fclose(f);
    return p;
}

static void expect_fail(const char *args, int want_rc, const char *needle1, const char *needle2)
{
    int rc = run_capture(out, sizeof out, "./train %s", args);
    if (rc != want_rc) fail_msg("./train %s: exit %d, expected %d; output:\n%s", args, rc, want_rc, out);
    assert_contains(out, needle1);
    if (needle2) assert_contains(out, needle2);
    assert_true(strstr(out, "Segmentation") == NULL);
}

static void test_usage(void **state)
{
    (void)state;
    assert_int_equal(run_capture(out, sizeof out, "./train --help"), 0);
    assert_contains(out, "usage: ./train CONFIG");
    expect_fail("", 2, "no config file given", NULL);
    expect_fail("--bogus x.ini", 2, "unknown flag --bogus", NULL);
    expect_fail("configs/fmnist_mlp.ini --set", 2, "--set needs", NULL);
    /* a mistyped flag is answered with the nearest (a guess at a name, a letter missing) */
    expect_fail("configs/fmnist_mlp.ini --predict latest --output p.csv", 2, "unknown flag --output; did you mean --out?",
                NULL);
    expect_fail("configs/fmnist_mlp.ini --resum latest", 2, "unknown flag --resum; did you mean --resume?", NULL);
    /* every flag --help lists is one the suggestions know: FLAGx is answered with FLAG */
    static char help[16384];
    assert_int_equal(run_capture(help, sizeof help, "./train --help"), 0);
    int flags = 0;
    for (const char *at = strstr(help, "\n  --"); at; at = strstr(at + 1, "\n  --")) {
        char flag[40], args[120], want[120];
        if (sscanf(at + 3, "%38[a-z0-9-]", flag) != 1) continue;
        snprintf(args, sizeof args, "configs/fmnist_mlp.ini %sx", flag);
        snprintf(want, sizeof want, "unknown flag %sx; did you mean %s?", flag, flag);
        expect_fail(args, 2, want, NULL);
        flags++;
    }
    if (flags < 15) fail_msg("only %d flags found in --help:\n%s", flags, help);
}

static void test_config_errors(void **state)
{
    (void)state;
    expect_fail("/nonexistent/run.ini", 1, "cannot open config file /nonexistent/run.ini", "HINT");
    char args[600];
    snprintf(args, sizeof args, "%s", write_file("syntax.ini", "[train]\nepochs = 1\nbatch 64\n"));
    expect_fail(args, 1, "syntax.ini:3: expected 'key = value'", NULL);
    snprintf(args, sizeof args, "%s", write_file("key.ini", "[optim]\nlearning_rate = 0.1\n"));
    expect_fail(args, 1, "key.ini:2: unknown key 'learning_rate' in [optim]", "HINT: keys of [optim]");
    snprintf(args, sizeof args, "%s", write_file("type.ini", "[train]\nbatch = sixty\n"));
    expect_fail(args, 1, "type.ini:2: [train] batch = sixty: expected an integer", NULL);
    snprintf(args, sizeof args, "%s", write_file("range.ini", "[optim]\nmomentum = 1.5\n"));
    expect_fail(args, 1, "range.ini:2: [optim] momentum = 1.5: out of range", NULL);
    expect_fail("configs/fmnist_mlp.ini --set train.batch=0", 1, "--set train.batch=0", "out of range");
    expect_fail("configs/fmnist_mlp.ini --set model.name=transformer", 1, "not a registered model",
                "known models are cnn, gpt, llama, mlp, resnet");
    /* keys of another model than the one selected: read by no one, refused (issue 27 item 10) */
    expect_fail("configs/fmnist_mlp.ini --set model.depth=50", 1,
                "--set model.depth=50: [model] depth is a key of model resnet, not of mlp", "HINT: remove it");
    snprintf(args, sizeof args, "%s", write_file("cnn_hidden.ini", "[model]\nname = cnn\nhidden = 64\n"));
    expect_fail(args, 1, "cnn_hidden.ini:3: [model] hidden is a key of model mlp, not of cnn", NULL);
    /* the same for an optimizer's, a schedule's and a data source's keys */
    expect_fail("configs/fmnist_mlp.ini --set optim.momentum=0.5", 1,
                "--set optim.momentum=0.5: [optim] momentum is a key of optimizer sgd, not of adamw, the optimizer "
                "this config selects ([optim] name = adamw)",
                "HINT: remove it, or select sgd");
    snprintf(args, sizeof args, "%s", write_file("sgd_beta.ini", "[optim]\nname = sgd\nbeta1 = 0.8\n"));
    expect_fail(args, 1, "sgd_beta.ini:3: [optim] beta1 is a key of optimizer adamw, not of sgd", NULL);
    expect_fail("configs/fmnist_mlp.ini --set optim.min_lr=0.0001", 1,
                "[optim] min_lr is a key of schedule cosine, linear, wsd, not of constant", NULL);
    expect_fail("configs/fmnist_mlp.ini --set data.seq_len=128", 1,
                "[data] seq_len is a key of data source tokens, not of idx, the data source this config selects", NULL);
    /* a flag of a mode this command does not ask for would change nothing: a training run given
     * --seed is not another seed's run, --out writes no predictions */
    expect_fail("configs/fmnist_mlp.ini --seed 5", 2, "error: --seed goes with --sample", "--set train.seed=N");
    expect_fail("configs/fmnist_mlp.ini --prompt hi", 2, "error: --prompt goes with --sample", NULL);
    expect_fail("configs/fmnist_mlp.ini --no-kv-cache", 2, "error: --no-kv-cache goes with --sample", NULL);
    expect_fail("configs/fmnist_mlp.ini --top-k 3", 2, "error: --top-k goes with --sample", "or --predict");
    expect_fail("configs/fmnist_mlp.ini --top-p 0.9", 2, "error: --top-p goes with --sample", NULL);
    expect_fail("configs/fmnist_mlp.ini --out /tmp/dpt_p.csv", 2, "error: --out names the CSV --predict writes", NULL);
    expect_fail("configs/fmnist_mlp.ini --dry-run --profile", 2, "error: --profile times each op of the training steps; "
                "--dry-run trains none", "HINT: ./train CONFIG --profile");
    expect_fail("configs/fmnist_mlp.ini --profile --summary", 2, "--summary trains none", NULL);
    /* a loss's key where the model and data train with another loss; init_exclude without init */
    expect_fail("configs/regression_mlp.ini --set train.label_smoothing=0.1", 1,
                "[train] label_smoothing is a key of loss cross_entropy, not of mse", NULL);
    expect_fail("configs/fmnist_mlp.ini --set train.deterministic=true --set train.threads=1 --set "
                "data.repeated_augment=2 --dry-run",
                1, "[data] repeated_augment = 2 would lay them out by rank", "HINT: set repeated_augment = 1");
    /* mixup's loss is two cross-entropy terms of one label a sample */
    expect_fail("configs/regression_mlp.ini --set data.mixup=0.2", 1,
                "[data] mixup mixes the labels of two samples in a cross-entropy, and this run's model and data train "
                "with mse", NULL);
    expect_fail("configs/fmnist_mlp.ini --set model.init_exclude=fc*", 1,
                "[model] init_exclude = fc* names tensors left out of [model] init, and this run has no init", NULL);
    /* the printed config holds the keys this run reads: it reads back, and runs as the config it
     * came from (the same hash) */
    int prc = run_capture(out, sizeof out, "./train configs/resnet.ini --dry-run");
    if (prc != 0 || !strstr(out, "[model]")) fail_msg("--dry-run: exit %d\n%s", prc, out);
    char back[8192];
    snprintf(back, sizeof back, "./train %s --dry-run", write_file("printed.ini", strstr(out, "[model]")));
    char again[sizeof out];
    prc = run_capture(again, sizeof again, "%s", back);
    if (prc != 0) fail_msg("the printed config read back: exit %d\n%s", prc, again);
    assert_contains(again, "momentum = 0.9"); /* SGD's, selected */
    assert_true(strstr(again, "beta1 =") == NULL); /* AdamW's: not read */
    assert_true(strstr(out, "(hash ") && strstr(again, "(hash ") &&
                !strncmp(strstr(out, "(hash "), strstr(again, "(hash "), 23));
    /* --set switching the optimizer over a file written for another (its momentum, nesterov)
     * works, and what it prints is that run's config: without SGD's keys (a file holding them
     * with AdamW selected is refused), with the same hash */
    char cmds[2][1100];
    snprintf(cmds[0], sizeof cmds[0], "./train configs/resnet.ini --set optim.name=adamw --dry-run");
    /* a key read only with a setting --set turned off */
    snprintf(cmds[1], sizeof cmds[1], "./train %s --set train.loss_scale=none --dry-run",
             write_file("scaled.ini", "[model]\nname = mlp\n[train]\nloss_scale = dynamic\nloss_scale_init = 1024\n"));
    const char *unread[2] = {"nesterov =", "loss_scale_init ="};
    for (int i = 0; i < 2; i++) {
        const char *cmd = cmds[i];
        int src = run_capture(out, sizeof out, "%s", cmd);
        if (src != 0 || !strstr(out, "[model]")) fail_msg("%s: exit %d\n%s", cmd, src, out);
        if (strstr(out, unread[i])) fail_msg("%s printed %s, which it does not read\n%s", cmd, unread[i], out);
        snprintf(back, sizeof back, "./train %s --dry-run", write_file("printed2.ini", strstr(out, "[model]")));
        prc = run_capture(again, sizeof again, "%s", back);
        if (prc != 0) fail_msg("%s: the printed config read back: exit %d\n%s", cmd, prc, again);
        if (!strstr(out, "(hash ") || !strstr(again, "(hash ") ||
            strncmp(strstr(out, "(hash "), strstr(again, "(hash "), 23) != 0)
            fail_msg("%s: another hash read back\n%s\n%s", cmd, out, again);
    }
    /* --dry-run shows the selected model's keys, not every registered model's */
    int drc = run_capture(out, sizeof out, "./train configs/fmnist_mlp.ini --dry-run");
    if (drc != 0) fail_msg("--dry-run: exit %d\n%s", drc, out);
    assert_contains(out, "hidden = 256,256");
    assert_true(strstr(out, "depth =") == NULL && strstr(out, "n_layer =") == NULL && strstr(out, "channels =") == NULL);
    /* --set switching the model over a file written for another keeps working */
    int rc = run_capture(out, sizeof out, "./train configs/fmnist_mlp.ini --set model.name=cnn --dry-run");
    if (rc != 0) fail_msg("--set model.name=cnn over the MLP's file: exit %d\n%s", rc, out);
    /* a batch larger than the data: refused before batch-sized buffers (1M x 784 floats, 3 GB
     * each) are made, so within a 3 GB address space */
    rc = run_capture(out, sizeof out, "ulimit -v 3000000; ./train configs/fmnist_mlp.ini --set train.batch=1048576");
    if (rc != 1) fail_msg("batch 1048576: exit %d, expected 1\n%s", rc, out);
    assert_contains(out, "fewer than one step of 1048576");
}

static void test_data_errors(void **state)
{
    (void)state;
    char args[1200];
    /* a data folder that does not exist: the message names the package and the setting */
    snprintf(args, sizeof args, "configs/fmnist_mlp.ini --set data.dir=%s/nothing", dir);
    expect_fail(args, 1, "[data] dir", "dataset-fashion-mnist");
    /* a truncated .gz next to real files */
    char cmd[1400];
    snprintf(cmd, sizeof cmd,
             "cp " FMNIST_DIR "/t10k-* %s/ && head -c 3000000 " FMNIST_DIR "/train-images-idx3-ubyte.gz > "
             "%s/train-images-idx3-ubyte.gz && cp " FMNIST_DIR "/train-labels-idx1-ubyte.gz %s/",
             dir, dir, dir);
    assert_int_equal(system(cmd), 0);
    snprintf(args, sizeof args, "configs/fmnist_mlp.ini --set data.dir=%s", dir);
    expect_fail(args, 1, "train-images-idx3-ubyte.gz", "truncated");
    /* labels given as images: wrong magic */
    snprintf(args, sizeof args,
             "configs/fmnist_mlp.ini --set data.dir=%s --set data.train_images=t10k-labels-idx1-ubyte.gz",
             dir);
    expect_fail(args, 1, "wrong IDX magic", NULL);
    /* train images with test labels: count mismatch */
    snprintf(args, sizeof args,
             "configs/fmnist_mlp.ini --set data.dir=" FMNIST_DIR
             " --set data.train_labels=t10k-labels-idx1-ubyte.gz");
    expect_fail(args, 1, "holds 60000 images but", "10000 labels");
    /* a batch larger than the (limited) training set */
    expect_fail("configs/fmnist_mlp.ini --set data.train_limit=10 --set train.batch=64", 1,
                "fewer than one step of 64", "drop_last");
}

static void test_dry_run(void **state)
{
    (void)state;
    int rc = run_capture(out, sizeof out, "./train configs/fmnist_mlp.ini --dry-run --set train.batch=32");
    if (rc != 0) fail_msg("dry run failed:\n%s", out);
    assert_contains(out, "784-256-256-10 relu");
    assert_contains(out, "269322 parameters");
    assert_contains(out, "batch = 32");
    /* it looks and writes nothing: no metrics or timeline file, no checkpoint folder */
    unlink("/tmp/dpt_dry_m.jsonl"), unlink("/tmp/dpt_dry_t.json");
    rc = run_capture(out, sizeof out, "./train configs/fmnist_mlp.ini --dry-run --set log.metrics=/tmp/dpt_dry_m.jsonl "
                                      "--set log.timeline=/tmp/dpt_dry_t.json --set checkpoint.dir=/tmp/dpt_dry_ck");
    if (rc != 0) fail_msg("dry run failed:\n%s", out);
    assert_int_equal(access("/tmp/dpt_dry_m.jsonl", F_OK), -1);
    assert_int_equal(access("/tmp/dpt_dry_t.json", F_OK), -1);
    assert_int_equal(access("/tmp/dpt_dry_ck", F_OK), -1);
}

#define SMALL                                                                                                \
    "configs/fmnist_mlp.ini --set data.train_limit=1280 --set data.test_limit=500 --set train.threads=1 "

static void test_training_controls(void **state)
{
    (void)state;
    /* out of memory (the allocator capped as if the device were small): the request, what is
     * in use, the cap, and what to change */
    expect_fail(SMALL "--set train.batch=1024 --set train.memory_limit_mb=8 --set train.memory_check=false",
                1, "out of memory on cpu: asked for", "limit 8.0 MiB ([train] memory_limit_mb)");
    expect_fail(SMALL "--set train.batch=1024 --set train.memory_limit_mb=8", 1, /* or refused at start */
                "this run needs about", "has 8 MiB available");
    expect_fail(SMALL "--set train.batch=256 --set train.memory_limit_mb=4 --set train.memory_check=false", 1,
                "in use by tensors",
                "HINT: use a smaller per-rank batch ([train] batch) and keep the global batch with "
                "[distributed] accum_steps");
    /* DataParallel device lists: CPUs in order, or distinct visible GPUs */
    expect_fail(SMALL "--set distributed.devices=cpu:0,cpu:2", 1, "entry 1 is 'cpu:2'", "cuda:0,cuda:1");
    expect_fail(SMALL "--set distributed.devices=cuda:x", 1, "entry 0 is 'cuda:x'", NULL);
    expect_fail(SMALL "--set distributed.devices=cuda:0,cuda:0", 1, "cuda:0 is listed twice",
                "one replica per GPU");
    expect_fail(SMALL "--set distributed.devices=cuda:200", 1, "cuda:200 is not visible", "./train --env");
    /* precisions a backend cannot run: refused with the key to change; bf16 says what it keeps */
    expect_fail(SMALL "--set train.precision=bf16 --set train.cpu_kernels=native", 1,
                "[train] precision = bf16: the cpu backend has no bf16 path: bf16 runs the convolutions on oneDNN's "
                "CPU kernels or cuDNN",
                "HINT: set [train] cpu_kernels = onednn");
    expect_fail(SMALL "--set train.memory_format=nhwc --set train.cpu_kernels=native", 1,
                "[train] memory_format = nhwc keeps activations channels-last in oneDNN's or cuDNN's kernels; the "
                "cpu backend's convolutions read NCHW only",
                "HINT: set [train] cpu_kernels = onednn, or memory_format = nchw");
    expect_fail(SMALL "--set train.memory_format=nwhc", 1, "nwhc", "nchw|nhwc");
    expect_fail(SMALL "--set train.precision=fp16", 1, "[train] precision = fp16 needs [train] loss_scale = dynamic",
                "HINT: add --set train.loss_scale=dynamic, or use precision = bf16");
    expect_fail(SMALL "--set train.precision=fp16 --set train.loss_scale=dynamic --set train.device=cpu", 1,
                "[train] precision = fp16: the cpu-onednn backend has no fp16 kernels: fp16 runs the convolutions on "
                "cuDNN",
                "HINT: use precision = bf16");
    int rc = run_capture(out, sizeof out,
                         "./train " SMALL "--set train.precision=bf16 --set train.max_steps=3 --set "
                         "model.name=cnn --set model.channels=16,32 --set model.fc=32");
    if (rc != 0) fail_msg("bf16 run failed:\n%s", out);
    if (!strstr(out, "precision bf16: convolutions and GEMMs read bf16 and accumulate in fp32; activations kept in bf16"))
        assert_contains(out, "this CPU has no AVX512-BF16: the convolutions run in fp32");
    /* a NaN loss: stop naming the step (default), or skip the step and count it */
    expect_fail(SMALL "--set distributed.fault=nan --set distributed.fault_step=5", 1,
                "loss is nan or inf in step 6", "nonfinite = skip");
    /* llm.c's file is the gpt model's: another model would have started from its own initialisation */
    expect_fail(SMALL "--set model.init=llmc:/nonexistent/gpt2_124M.bin", 1,
                "does not read llm.c's files", "HINT: [model] name = gpt");
    /* in the first step no update has happened: the forward, not the learning rate, made it */
    expect_fail(SMALL "--set distributed.fault=nan --set distributed.fault_step=0", 1,
                "loss is nan or inf in the first step (epoch 1), before any update",
                "HINT: the model's forward makes it from these weights and this batch");
    rc = run_capture(out, sizeof out,
                     "./train " SMALL "--set distributed.fault=nan --set distributed.fault_step=5 "
                     "--set train.nonfinite=skip --set train.epochs=1");
    if (rc != 0) fail_msg("skip policy failed:\n%s", out);
    assert_contains(out, "step 6 skipped: non-finite loss (1 skipped so far)");
    assert_contains(out, "(some skipped)");
    /* evaluation every N steps, a progress bar when asked for, a schedule in the header */
    rc = run_capture(out, sizeof out,
                     "./train " SMALL "--set train.eval_every_steps=7 --set train.epochs=1 "
                     "--set log.progress=bar --set optim.schedule=cosine --set optim.clip_norm=1");
    if (rc != 0) fail_msg("run failed:\n%s", out);
    assert_contains(out, "eval at step 14 | test loss");
    assert_contains(out, "ETA 0:00:");
    assert_contains(out, "schedule cosine");
    /* resuming from nothing */
    char args[600];
    snprintf(args, sizeof args, SMALL "--resume %s/none.dpt", dir);
    expect_fail(args, 1, "none.dpt: no such checkpoint", "HINT: ");
    snprintf(args, sizeof args, SMALL "--resume --set checkpoint.dir=%s", dir);
    expect_fail(args, 1, "no checkpoint (ckpt-step*.dpt) in", NULL);
}

/* Every DataParallel replica failing at once (the same bad data folder): one message, exit 1,
 * every time (each replica thread used to call exit(): SIGSEGV or "double free" at exit). */
static void test_data_parallel_failure(void **state)
{
    (void)state;
    for (int i = 0; i < 10; i++) {
        expect_fail(SMALL "--set distributed.devices=cpu:0,cpu:1,cpu:2 --set data.dir=/nonexistent", 1,
                    "[data] dir = /nonexistent: no such folder", NULL);
        const char *first = strstr(out, "error:");
        assert_non_null(first);
        if (strstr(first + 1, "error:")) fail_msg("two error messages:\n%s", out);
        assert_true(strstr(out, "double free") == NULL && strstr(out, "Aborted") == NULL);
    }
}

/* A run that cannot fit is refused before step 1 with the estimate and the key to change
 * (the kernel's OOM killer used to end it with no message); the estimate tracks the
 * allocator's measured peak. */
static void test_memory(void **state)
{
    (void)state;
    /* A model that cannot fit is stopped while it is built (before the estimate can be made: the
     * parameters and optimizer state are what it counts) by the allocator, capped at what the
     * machine has available: here a data limit of ~3 GB stands for a small machine, and the
     * second 65536 x 65536 weight (16 GiB) is refused naming the cap, not met by the kernel's
     * OOM killer (before the cap: exit 137 and no message, the CNN with channels = 65536) */
    const char *big = "configs/fmnist_mlp.ini --set model.hidden=65536,65536 --set train.threads=1 "
                      "--set data.train_limit=1000 --set data.test_limit=100";
    int big_rc = run_capture(out, sizeof out, "ulimit -d 3000000 && ./train %s", big);
    if (big_rc != 1) fail_msg("ulimit -d 3000000 && ./train %s: exit %d, expected 1:\n%s", big, big_rc, out);
    assert_contains(out, "out of memory on cpu: asked for 16.00 GiB (parameter fc2.weight)");
    assert_contains(out, "(the memory available when the run started)");
    assert_contains(out, "HINT: the model's parameters, their gradients and the optimizer's state alone exceed");
    /* memory_check = false: the allocator as asked (here the system's malloc fails) */
    big_rc = run_capture(out, sizeof out, "ulimit -d 3000000 && ./train %s --set train.memory_check=false", big);
    if (big_rc != 1) fail_msg("./train %s --set train.memory_check=false: exit %d, expected 1:\n%s", big, big_rc, out);
    assert_contains(out, "out of memory on cpu: asked for 16.00 GiB");
    assert_null(strstr(out, "available when the run started"));

    expect_fail("configs/resnet50_synthetic.ini --set train.batch=1024 --set data.synthetic_samples=2048", 1,
                "this run needs about",
                "activations at [train] batch = 1024");
    assert_contains(out,
                    "HINT: lower [train] batch and keep the global batch with [distributed] accum_steps");
    /* the allocator's limit stands for a smaller machine (20000 samples to outgrow this one's
     * memory took 23 s to make) */
    expect_fail("configs/resnet50_synthetic.ini --set train.batch=2 --set data.synthetic_samples=200 "
                "--set train.eval_batch=500000 --set train.memory_limit_mb=1000",
                1, "evaluation at [train] eval_batch = 500000 1.7 GiB", "HINT: lower [train] eval_batch");
    assert_contains(out, "this machine has 1000 MiB available");
    expect_fail(
        "configs/resnet50_synthetic.ini --set data.synthetic_samples=100000000", 1,
        "--set data.synthetic_samples=100000000: [data] synthetic_samples = 100000000 of shape 3 x 224 x 224",
        "HINT: lower [data] synthetic_samples");
    /* out of memory while evaluating names the evaluation batch, not the training one */
    const char *eval =
        "configs/fmnist_mlp.ini --set data.train_limit=640 --set train.threads=1 --set "
        "model.hidden=64 --set data.prefetch=0 --set train.eval_batch=5000 --set data.test_limit=5000 "
        "--set train.memory_check=false";
    char eval_args[600];
    snprintf(eval_args, sizeof eval_args, "%s --set train.memory_limit_mb=17", eval); /* in the evaluation */
    expect_fail(eval_args, 1, "out of memory on cpu",
                "HINT: this happened for evaluation: use a smaller [train] eval_batch");
    snprintf(eval_args, sizeof eval_args, "%s --set train.memory_limit_mb=10",
             eval); /* its loader's buffers */
    expect_fail(eval_args, 1, "out of memory on cpu",
                "HINT: this happened for evaluation: use a smaller [train] eval_batch");
    /* CIFAR: a folder where a file should be */
    char args[1200];
    snprintf(args, sizeof args, "mkdir -p %s/cifar/data_batch_1.bin", dir);
    assert_int_equal(system(args), 0);
    snprintf(args, sizeof args, SMALL "--set data.source=cifar --set data.dir=%s/cifar", dir);
    expect_fail(args, 1, "data_batch_1.bin is not a regular file", NULL);
    /* the estimate against the allocator's peak, training and evaluation (two epochs, so the
     * last record's peak includes an evaluation): within [0.8, 1.6]; the GPT on token shards of
     * its own (its notes are whole blocks, released one at a time in evaluation: the second run
     * is an evaluation's peak) */
    snprintf(args, sizeof args,
             "for i in $(seq 1 3000); do printf 'the quick brown fox jumps over the lazy dog. '; done > %s/text.txt && "
             "build/tools/text_tokens --val-fraction 0.1 %s/tok %s/text.txt > /dev/null",
             dir, dir, dir);
    assert_int_equal(system(args), 0);
    char gpt_train[700], gpt_eval[700], gpt_vocab[800];
    snprintf(gpt_train, sizeof gpt_train,
             "configs/gpt_fortunes.ini --set data.train=%s/tok/train_*.bin --set data.val=%s/tok/val_*.bin "
             "--set train.batch=16 --set data.train_limit=64",
             dir, dir);
    snprintf(gpt_eval, sizeof gpt_eval,
             "configs/gpt_fortunes.ini --set data.train=%s/tok/train_*.bin --set data.val=%s/tok/val_*.bin "
             "--set train.batch=1 --set data.train_limit=4",
             dir, dir);
    char gpt_mix[800]; /* mixup's loss is a label a sample's: a language model's is refused */
    snprintf(gpt_mix, sizeof gpt_mix, "%s --set data.cutmix=1 --dry-run", gpt_train);
    expect_fail(gpt_mix, 1, "[data] cutmix mixes one label a sample, and this data's target (targets) holds several a sample",
                "a language model's tokens are not mixed");
    /* GPT-2's vocabulary in bf16 (with evaluations of 4: training's peak): the logits and their
     * gradient dominate, kept in fp32 (estimated 0.5x the peak when every activation counted
     * 16-bit and the logits' gradient not at all) */
    snprintf(gpt_vocab, sizeof gpt_vocab,
             "%s --set data.vocab_size=50257 --set train.precision=bf16 --set train.eval_batch=4", gpt_train);
    const char *runs[] = {"configs/fmnist_cnn.ini --set train.batch=128 --set data.train_limit=256",
                          "configs/resnet.ini --set train.batch=32 --set data.train_limit=64",
                          "configs/resnet.ini --set train.batch=4 --set data.train_limit=16",
                          "configs/resnet.ini --set train.batch=256 --set data.train_limit=512",
                          "configs/resnet.ini --set train.batch=256 --set data.train_limit=512 --set train.precision=bf16",
                          gpt_train,
                          gpt_eval,
                          gpt_vocab};
    for (int i = 0; i < 8; i++) {
        /* the shared settings first: a run's own come after them and win */
        snprintf(
            args, sizeof args,
            "./train --set train.epochs=2 --set log.interval=1 --set log.metrics=%s/m.jsonl "
            "--set data.test_limit=200 --set train.eval_batch=100 --set train.threads=1 "
            "--set checkpoint.every_epochs=0 --set checkpoint.dir=%s/mem %s && grep -o 'mem_peak_mb\":[0-9.]*' "
            "%s/m.jsonl | tail -1",
            dir, dir, runs[i], dir);
        int rc = run_capture(out, sizeof out, "%s", args);
        if (rc != 0) fail_msg("%s:\n%s", args, out);
        const char *est = strstr(out, "memory ~"), *peak = strstr(out, "mem_peak_mb\":");
        assert_non_null(est);
        assert_non_null(peak);
        double e = atof(est + 8), p = atof(peak + 13);
        if (strstr(est, " GiB per")) e *= 1024;
        print_message("%s: estimate %.0f MiB, measured peak %.1f MiB\n", runs[i], e, p);
        if (!(e >= 0.8 * p && e <= 1.6 * p)) fail_msg("estimate %.0f MiB vs peak %.1f MiB", e, p);
    }
}

/* The CUDA plugin (runtime/cuda_plugin.c): --env loads it and its libraries answer (every symbol
 * it needs is resolved at load); a run where no NVIDIA driver is loads neither it nor a CUDA
 * library; a plugin that cannot be loaded is named with the loader's reason by --env and by a
 * run that asks for a GPU. */
static void test_cuda_plugin(void **state)
{
    (void)state;
    assert_int_equal(run_capture(out, sizeof out, "./train --env"), 0);
    if (strstr(out, "cuda: this build has no CUDA")) {
        print_message("skipped: a build without CUDA has no plugin\n");
        skip();
    }
    assert_contains(out, "cuda: driver ");
    assert_contains(out, "| cudnn ");
    if (system("ldconfig -p | grep -q 'libcuda.so.1 '") != 0) { /* no driver: nothing CUDA is loaded */
        assert_int_equal(run_capture(out, sizeof out,
                                     "LD_DEBUG=files ./train " SMALL "--set train.max_steps=2 --set checkpoint.dir=%s/plug "
                                     "2>&1 | grep -c 'file=[^ ]*\\(cudart\\|cublas\\|cudnn\\|nccl\\|dpt_cuda\\)'",
                                     dir),
                         1); /* grep -c found none */
        assert_string_equal(out, "0\n");
    }
    assert_int_equal(run_capture(out, sizeof out, "DPT_CUDA_PLUGIN=%s/none.so ./train --env", dir), 0);
    assert_contains(out, "cuda: in this build, but its plugin could not be loaded: ");
    assert_contains(out, "none.so: cannot open shared object file");
    char args[1600];
    snprintf(args, sizeof args, "DPT_CUDA_PLUGIN=%s/none.so ./train " SMALL "--set train.device=cuda", dir);
    int rc = run_capture(out, sizeof out, "%s", args);
    if (rc != 1) fail_msg("%s: exit %d, expected 1:\n%s", args, rc, out);
    assert_contains(out, "the CUDA backend is not available: ");
    assert_contains(out, "none.so: cannot open shared object file");
    assert_contains(out, "HINT: rebuild with the CUDA toolkit installed");
    /* a machine with NVIDIA's driver (a stand-in libcuda.so.1) whose plugin cannot be loaded:
     * device = auto trains on the CPU, and says why once */
    snprintf(args, sizeof args,
             "mkdir -p %s/drv && cp build/tests/libfake_nvml.so %s/drv/libcuda.so.1 && LD_LIBRARY_PATH=%s/drv "
             "DPT_CUDA_PLUGIN=%s/none.so ./train " SMALL "--set train.max_steps=2 --set checkpoint.dir=%s/plug",
             dir, dir, dir, dir, dir);
    rc = run_capture(out, sizeof out, "%s", args);
    if (rc != 0) fail_msg("%s: exit %d:\n%s", args, rc, out);
    assert_contains(out, "warning: NVIDIA's driver is on this machine but the CUDA plugin could not be loaded, so no "
                         "GPU is used: ");
    const char *first = strstr(out, "so no GPU is used");
    assert_null(strstr(first + 1, "so no GPU is used")); /* once */
    assert_contains(out, "final test acc");
}

/* GPU stats through NVML, with the stand-in library (tests/fake_nvml.c): --env lists each
 * GPU, a CUDA device is matched to its NVML device by PCI bus id, and without the library
 * there are no stats and no error. */
static void test_gpu_stats(void **state)
{
    (void)state;
    assert_int_equal(
        run_capture(out, sizeof out, "DPT_NVML_LIBRARY=build/tests/libfake_nvml.so ./train --env"), 0);
    assert_contains(out, "nvml: gpu 0 Stand-in H200 (a) | 12% 0.5/140.4 GiB 33C 75W");
    assert_contains(out, "nvml: gpu 1 Stand-in H200 (b) | 87% 31.2/140.4 GiB 64C 312W");
    assert_int_equal(
        run_capture(out, sizeof out, "DPT_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1 ./train --env"), 0);
    assert_contains(out, "nvml: no GPU stats");
    setenv("DPT_NVML_LIBRARY", "build/tests/libfake_nvml.so", 1);
    dpt_gpu_stats s;
    assert_true(dpt_gpu_stats_read(0, "00000000:4A:00.0", &s)); /* by PCI bus: the second GPU */
    assert_int_equal(s.util_pct, 87);
    assert_int_equal(s.temp_c, 64);
    assert_true(fabs(s.power_w - 312.4) < 1e-9);
    assert_false(dpt_gpu_stats_read(0, "00000000:99:00.0", &s)); /* no such bus */
    assert_false(s.valid);
    assert_true(dpt_gpu_stats_read(0, NULL, &s)); /* by index */
    assert_string_equal(s.name, "Stand-in H200 (a)");
    char line[96];
    assert_string_equal(dpt_gpu_stats_str(&s, line, sizeof line), "12% 0.5/140.4 GiB 33C 75W");
}

/* A training step reads the device once (the gradient norm, which the NaN policy and
 * clipping need): the loss (a mean squared error's too), the correct counts and the labels stay
 * on the device between log lines. The count is the backend's own tally of device-to-host reads (on a GPU each is a
 * wait), written per log window to the metrics as host_syncs_per_step. */
static void test_host_syncs(void **state)
{
    (void)state;
    const char *runs[] = {
        "configs/fmnist_mlp.ini --set train.max_steps=40",
        "configs/fmnist_cnn.ini --set train.max_steps=40",
        "configs/fmnist_cnn.ini --set train.max_steps=40 --set distributed.accum_steps=3",
        "configs/fmnist_mlp.ini --set train.max_steps=40 --set distributed.devices=cpu:0,cpu:1",
        "configs/fmnist_mlp.ini --set train.max_steps=40 --set optim.clip_norm=0.5 --set optim.name=sgd",
        /* MSE: dpt_mean's value and its gradient stay on the device (3 reads a step before) */
        "configs/regression_mlp.ini --set train.max_steps=40 --set \"expect.final_test_loss=<= 1\"",
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd,
                 "./train %s --set train.threads=1 --set log.interval=10 --set data.test_limit=200 "
                 "--set log.metrics=%s/syncs.jsonl > /dev/null && grep -o 'host_syncs_per_step.:[0-9.]*' "
                 "%s/syncs.jsonl",
                 runs[i], dir, dir);
        int rc = run_capture(out, sizeof out, "%s", cmd);
        if (rc != 0) fail_msg("%s:\n%s", cmd, out);
        int windows = 0;
        for (const char *at = strstr(out, "host_syncs_per_step"); at;
             at = strstr(at + 1, "host_syncs_per_step")) {
            double v = atof(at + strlen("host_syncs_per_step") + 2);
            if (v > 1.0) fail_msg("%s: %.2f host reads per step (at most 1)\n%s", runs[i], v, out);
            windows++;
        }
        assert_true(windows >= 3);
    }
}

static bool exists(const char *fmt, const char *a, const char *b)
{
    char p[1024];
    snprintf(p, sizeof p, fmt, a, b);
    return access(p, F_OK) == 0;
}

/* Links planted in a shared checkpoint folder (issue 27 item 1): at the lock's name the run is
 * refused naming it; at the old predictable temporary name nothing follows it (the temporary
 * has an unpredictable name, created exclusively). The victim is never written. */
static void test_planted_links(void **state)
{
    (void)state;
    char ck[512], victim[600], link_path[700], args[1600];
    snprintf(ck, sizeof ck, "%s/shared", dir);
    snprintf(victim, sizeof victim, "%s", write_file("victim", "precious\n"));
    mkdir(ck, 0755);
    snprintf(link_path, sizeof link_path, "%s/.dptrain.lock", ck);
    assert_int_equal(symlink(victim, link_path), 0);
    snprintf(args, sizeof args, SMALL "--set train.max_steps=4 --set checkpoint.every_steps=2 --set checkpoint.dir=%s", ck);
    expect_fail(args, 1, "the lock file", "is a symbolic link, not dptrain's: refused");
    unlink(link_path);
    for (int step = 2; step <= 4; step += 2) { /* the names the old code wrote through */
        snprintf(link_path, sizeof link_path, "%s/ckpt-step%08d.dpt.tmp", ck, step);
        assert_int_equal(symlink(victim, link_path), 0);
    }
    int rc = run_capture(out, sizeof out, "./train %s", args);
    if (rc != 0) fail_msg("./train %s failed:\n%s", args, out);
    assert_true(exists("%s/ckpt-step%s.dpt", ck, "00000004"));
    assert_first_line(victim, "precious\n");
    /* the JUnit report's old temporary name, planted: not followed either */
    char report[600];
    snprintf(report, sizeof report, "%s/run.xml", dir);
    snprintf(link_path, sizeof link_path, "%s.tmp", report);
    assert_int_equal(symlink(victim, link_path), 0);
    rc = run_capture(out, sizeof out, "./train " SMALL "--set train.max_steps=2 --junit %s", report);
    if (rc != 0) fail_msg("--junit failed:\n%s", out);
    assert_true(exists("%s%s", report, ""));
    assert_first_line(victim, "precious\n");

    /* the files written as they go (issue 27 item 1): a link at the metrics path, a FIFO at the
     * timeline's (opening it for writing would wait forever for a reader) and a hard link to the
     * victim are each refused at start naming the file and the key; the victim is untouched */
    char metrics[700], fifo[700], hard[700];
    snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", dir);
    assert_int_equal(symlink(victim, metrics), 0);
    snprintf(args, sizeof args, SMALL "--set train.max_steps=2 --set log.metrics=%s", metrics);
    expect_fail(args, 1, "the metrics file", "is a symbolic link, and dptrain does not write through links");
    assert_contains(out, "[log] metrics");
    unlink(metrics);
    snprintf(fifo, sizeof fifo, "%s/trace.json", dir);
    assert_int_equal(mkfifo(fifo, 0644), 0);
    snprintf(args, sizeof args, SMALL "--set train.max_steps=2 --set log.timeline=%s", fifo);
    expect_fail(args, 1, "the timeline", "not a regular file");
    unlink(fifo);
    snprintf(hard, sizeof hard, "%s/hard.jsonl", dir);
    assert_int_equal(link(victim, hard), 0);
    snprintf(args, sizeof args, SMALL "--set train.max_steps=2 --set log.metrics=%s", hard);
    expect_fail(args, 1, "the metrics file", "another name (a hard link)");
    unlink(hard);
    assert_first_line(victim, "precious\n");
}

/* [checkpoint] final: a run that checkpoints every epoch but stops at max_steps mid-epoch
 * leaves its last step (and a resume continues from it); final = false does not; auto without
 * periodic checkpoints writes nothing; true writes the last step whatever the schedule. SMALL's
 * 1280 samples at batch 64 make 20 steps an epoch. */
static void test_final_checkpoint(void **state)
{
    (void)state;
    char args[1600], ck[512];
    const char *cases[][3] = {{"f1", "--set checkpoint.every_epochs=1", "00000007"},
                              {"f2", "--set checkpoint.every_epochs=1 --set checkpoint.final=false", NULL},
                              {"f3", "", NULL},
                              {"f4", "--set checkpoint.final=true", "00000007"}};
    for (int i = 0; i < 4; i++) {
        snprintf(ck, sizeof ck, "%s/%s", dir, cases[i][0]);
        snprintf(args, sizeof args,
                 SMALL "--set train.epochs=2 --set train.max_steps=7 --set log.interval=1000 --set checkpoint.dir=%s %s",
                 ck, cases[i][1]);
        int rc = run_capture(out, sizeof out, "./train %s", args);
        if (rc != 0) fail_msg("./train %s failed:\n%s", args, out);
        bool want = cases[i][2] != NULL;
        if (exists("%s/ckpt-step%s.dpt", ck, "00000007") != want)
            fail_msg("./train %s: the step-7 checkpoint %s\n%s", args, want ? "is missing" : "was written", out);
        if (want) assert_contains(out, "ckpt-step00000007.dpt (epoch 1, step 7)");
    }
    /* the mid-epoch final checkpoint resumes exactly: on to step 9 */
    snprintf(ck, sizeof ck, "%s/f1", dir);
    snprintf(args, sizeof args,
             SMALL "--set train.epochs=2 --set train.max_steps=9 --set log.interval=1000 --set checkpoint.dir=%s "
                   "--set checkpoint.every_epochs=1 --resume",
             ck);
    int rc = run_capture(out, sizeof out, "./train %s", args);
    if (rc != 0) fail_msg("resume from the final checkpoint failed:\n%s", out);
    assert_contains(out, "ckpt-step00000007.dpt: epoch 1, step 7");
    assert_true(exists("%s/ckpt-step%s.dpt", ck, "00000009"));
    /* a finished run resumed: nothing to train, its weights evaluated (the final accuracy was
     * printed as 0.00% and --expect saw none), the same number the run ended with */
    snprintf(ck, sizeof ck, "%s/f5", dir);
    snprintf(args, sizeof args, SMALL "--set train.epochs=1 --set checkpoint.every_epochs=1 --set checkpoint.dir=%s", ck);
    rc = run_capture(out, sizeof out, "./train %s", args);
    if (rc != 0) fail_msg("./train %s failed:\n%s", args, out);
    const char *acc = strstr(out, "final test acc ");
    assert_non_null(acc);
    char want[64];
    snprintf(want, sizeof want, "%.*s", (int)strcspn(acc, "|\n"), acc);
    rc = run_capture(out, sizeof out, "./train %s --resume --expect 'final_test_acc >= 50%%'", args);
    if (rc != 0) fail_msg("resuming a finished run failed:\n%s", out);
    assert_contains(out, "nothing left to train");
    assert_contains(out, want);
}

/* The checkpoint folder holds one run: another run's files are never deleted or mixed in,
 * a file this run reports stays, and a folder that cannot take checkpoints is an error
 * before the first step. */
static void test_checkpoint_folder(void **state)
{
    (void)state;
    char args[1600], ck[512];
    snprintf(ck, sizeof ck, "%s/ck", dir);
#define CK SMALL "--set train.epochs=1 --set log.interval=1000 --set checkpoint.dir=%s "
    /* run A: steps 5, 10, 15, 20 */
    snprintf(args, sizeof args, CK "--set checkpoint.every_steps=5", ck);
    int rc = run_capture(out, sizeof out, "./train %s", args);
    if (rc != 0) fail_msg("run A failed:\n%s", out);
    assert_true(exists("%s/ckpt-step%s.dpt", ck, "00000020"));
    /* run B in the same folder: refused, A's files untouched */
    snprintf(args, sizeof args, CK "--set checkpoint.every_steps=2 --set train.max_steps=4", ck);
    expect_fail(args, 1, "holds 3 checkpoints of an earlier run (the newest is ckpt-step00000020.dpt)",
                "--set checkpoint.existing=archive");
    assert_true(strstr(out, "epoch 1 |") == NULL); /* refused before training */
    assert_true(exists("%s/ckpt-step%s.dpt", ck, "00000010") && exists("%s/ckpt-step%s.dpt", ck, "00000020"));
    /* with archive: A's files moved aside whole; B's reported files survive keep_last = 1
     * (the old pruning kept A's higher steps and deleted each of B's right after writing it) */
    snprintf(args, sizeof args,
             CK "--set checkpoint.every_steps=2 --set train.max_steps=4 "
                "--set checkpoint.existing=archive --set checkpoint.keep_last=1",
             ck);
    rc = run_capture(out, sizeof out, "./train %s", args);
    if (rc != 0) fail_msg("run B failed:\n%s", out);
    assert_contains(out, "moved 3 checkpoints of an earlier run (steps 10 to 20)");
    assert_contains(out, "checkpoint ");
    assert_true(exists("%s/ckpt-step%s.dpt", ck, "00000004"));
    assert_false(exists("%s/ckpt-step%s.dpt", ck, "00000002"));
    assert_false(exists("%s/ckpt-step%s.dpt", ck, "00000020"));
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "ls %s/previous-*/ckpt-step00000020.dpt %s/previous-*/ckpt-step00000010.dpt",
             ck, ck);
    assert_int_equal(run_capture(out, sizeof out, "%s", cmd), 0);
    /* --resume latest is B's step 4; a step number and an unpadded name find their file */
    snprintf(args, sizeof args, CK "--set checkpoint.every_steps=2 --set train.max_steps=6 --resume", ck);
    rc = run_capture(out, sizeof out, "./train %s", args);
    if (rc != 0) fail_msg("resume failed:\n%s", out);
    assert_contains(out, "ckpt-step00000004.dpt: epoch 1, step 4");
    snprintf(args, sizeof args, CK "--set train.max_steps=7 --resume 6", ck);
    rc = run_capture(out, sizeof out, "./train %s", args);
    if (rc != 0) fail_msg("resume 6 failed:\n%s", out);
    assert_contains(out, "ckpt-step00000006.dpt: epoch 1, step 6");
    snprintf(args, sizeof args, CK "--set train.max_steps=7 --resume %s/ckpt-step6.dpt", ck, ck);
    rc = run_capture(out, sizeof out, "./train %s", args);
    if (rc != 0) fail_msg("resume ckpt-step6.dpt failed:\n%s", out);
    snprintf(args, sizeof args, CK "--resume 3", ck);
    expect_fail(args, 1, "--resume 3: no such checkpoint", "holds checkpoints of steps 4, 6;");
    /* --inspect resolves as --resume does: a folder (its newest), FOLDER/latest, an unpadded name */
    const char *inspect[][2] = {{"", "step           6"}, {"/latest", "step           6"},
                                {"/ckpt-step4.dpt", "step           4"}, {"/4", "step           4"}};
    for (int i = 0; i < 4; i++) {
        rc = run_capture(out, sizeof out, "./train --inspect %s%s", ck, inspect[i][0]);
        if (rc != 0) fail_msg("--inspect %s%s failed:\n%s", ck, inspect[i][0], out);
        assert_contains(out, inspect[i][1]);
    }
    rc = run_capture(out, sizeof out, "./train --inspect %s/3", ck);
    assert_int_equal(rc, 1);
    assert_contains(out, "/3: no such checkpoint");
    assert_contains(out, "holds checkpoints of steps 4, 6;");
    /* resuming an older checkpoint where newer ones exist: refused (two continuations) */
    snprintf(args, sizeof args, CK "--set checkpoint.every_steps=2 --resume 4", ck);
    expect_fail(args, 1, "holds 1 checkpoint newer than step 4, the one this run resumes", "--resume latest");
    /* folders that cannot take checkpoints: refused at start-up, naming the setting */
    snprintf(args, sizeof args, CK "--set checkpoint.every_epochs=1", write_file("afile", "x"));
    expect_fail(args, 1, "--set checkpoint.dir=", "is not a folder");
    assert_true(strstr(out, "epoch 1 |") == NULL);
    expect_fail(SMALL "--set checkpoint.every_epochs=1 --set checkpoint.dir=/proc/dptrain_x", 1,
                "cannot create checkpoint folder /proc/dptrain_x", "HINT: set [checkpoint] dir");
    assert_true(strstr(out, "epoch 1 |") == NULL);
    char nested[1024];
    snprintf(nested, sizeof nested, SMALL "--set checkpoint.dir=%s/sub/deeper", write_file("afile2", "x"));
    expect_fail(nested, 1, "cannot create checkpoint folder ", "afile2/sub: Not a directory");
    /* checkpoints only on a signal into levels that do not exist yet (a fresh clone has no
     * checkpoints/): accepted, the folder claimed (made and locked: a second run there is
     * refused at its start) and, no checkpoint written, removed at the end, every level made */
    char fresh[600];
    snprintf(fresh, sizeof fresh, "%s/fresh/a/b", dir);
    snprintf(args, sizeof args, SMALL "--set train.max_steps=2 --set checkpoint.every_epochs=0 --set checkpoint.dir=%s", fresh);
    rc = run_capture(out, sizeof out, "./train %s", args);
    if (rc != 0) fail_msg("a missing nested checkpoint folder was refused:\n%s", out);
    struct stat st;
    assert_true(stat(fresh, &st) != 0);
    snprintf(fresh, sizeof fresh, "%s/fresh", dir);
    assert_true(stat(fresh, &st) != 0);
#undef CK
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_usage),
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_data_errors),
        cmocka_unit_test(test_dry_run),
        cmocka_unit_test(test_training_controls),
        cmocka_unit_test(test_checkpoint_folder),
        cmocka_unit_test(test_final_checkpoint),
        cmocka_unit_test(test_planted_links),
        cmocka_unit_test(test_data_parallel_failure),
        cmocka_unit_test(test_memory),
        cmocka_unit_test(test_gpu_stats),
        cmocka_unit_test(test_cuda_plugin),
        cmocka_unit_test(test_host_syncs),
    };
    return cmocka_run_group_tests_name("cli", tests, setup, teardown);
}
