/* train_keys.c: the trainer's own settings ([train], [distributed], [checkpoint], [log] and
 * [optim] clip_norm), read once into run_config by train_main.c. The keys of models, optimizers,
 * schedules, data sources and losses are declared by those. */
#include "dpt.h"
#include "registry.h"

static const dpt_config_key train_keys[] = {
    {"train", "epochs", DPT_KEY_INT, "5", 1, 1e6, NULL, "passes over the training set", 0},
    {"train", "max_steps", DPT_KEY_INT, "0", 0, 1e12, NULL, "stop after this many optimizer steps (0 = no limit)", 0},
    {"train", "batch", DPT_KEY_INT, "64", 1, 1 << 20, NULL, "samples per step (per rank); see global_batch", 0},
    {"train", "global_batch", DPT_KEY_INT, "0", 0, 1 << 30, NULL,
     "samples per optimizer step over all ranks and accumulation steps (0 = batch x ranks x accum_steps). "
     "When set, each rank's batch is global_batch / (ranks x accum_steps) and [train] batch is not used: the "
     "same config runs on any world size that divides it, and resumes mid-epoch on another", 0},
    {"train", "eval_batch", DPT_KEY_INT, "1000", 1, 1 << 20, NULL, "samples per evaluation forward pass", 0},
    {"train", "deterministic", DPT_KEY_BOOL, "false", 1, 0, NULL,
     "bit-identical weights for any power-of-two world size (1, 2, 4, ...), DataParallel included: each step is "
     "cut into shards of deterministic_shard samples, each shard's gradient computed alone and the shards "
     "summed in one fixed binary tree; dropout drawn per shard, batch norm normalised per shard (ghost batch "
     "norm, running statistics averaged through the same tree). Needs the same [train] threads on every rank, "
     "accum_steps = 1, drop_last, a power-of-two number of shards; on GPUs cudnn_benchmark = false (deterministic "
     "cuDNN algorithms; two runs on one H200 gave one hash, more GPUs unverified)", 0},
    {"train", "deterministic_shard", DPT_KEY_INT, "16", 1, 1 << 20, NULL,
     "deterministic: samples per shard (the global batch / this must be a power of two)", 0},
    {"train", "seed", DPT_KEY_INT, "42", 0, 9.2e18, NULL,
     "seeds initialisation and shuffling: the same seed gives the same run", 0},
    {"train", "device", DPT_KEY_ENUM, "auto", 1, 0, "auto|cpu|cuda",
     "auto: cuda:<local rank> when a GPU is visible, else cpu", 0},
    {"train", "threads", DPT_KEY_INT, "0", 0, 1024, NULL, "CPU threads for BLAS and kernels per rank (0 = the cores this rank may use: the ones mpirun bound it to, else the node's cores / its ranks, split again between DataParallel replicas; the header says which)", 0},
    {"train", "adapt_threads", DPT_KEY_BOOL, "false", 1, 0, NULL,
     "CPU: follow the cores left free by other processes. When this run's threads wait for a core 20% or more of two "
     "log windows in a row, the next windows run with fewer (as many as the cores they got) and keep them if the "
     "steps are 3% faster, else go back; every 10 windows with fewer it tries all of them again. Each change is "
     "logged (and the metrics' threads). The thread count changes a run's last bits: not with [train] "
     "deterministic", 0},
    {"train", "cpu_kernels", DPT_KEY_ENUM, "onednn", 1, 0, "onednn|native",
     "cpu: convolutions, batch norm, pooling and GEMMs (linear layers) on oneDNN (blocked layouts, JIT "
     "kernels) or the native im2col + OpenBLAS reference", 0},
    {"train", "precision", DPT_KEY_ENUM, "fp32", 1, 0, "fp32|bf16|fp16",
     "bf16: convolutions read bf16 inputs and weights and accumulate in fp32 (torch.autocast's idea); the "
     "activations between convolutions, batch norm, relu, residual adds and pooling are kept in bf16 (about "
     "half the activation memory; see bf16_activations); linear layers' GEMMs take bf16 inputs, and so do attention's products on the CPU (its softmax and "
     "statistics stay fp32); batch-norm statistics, the loss, gradients, the weights and the "
     "optimizer stay fp32. CPU: oneDNN kernels; fp32 where the CPU lacks AVX512-BF16 (said in the header); "
     "faster than fp32 only where the CPU runs bf16 products faster (AMX, or AMD Zen 4's two bf16 units; "
     "measured at start, a warning below 0.9x). "
     "CUDA: cuDNN's bf16 convolutions (tensor cores; weight gradients come out in bf16) and cuBLAS's bf16 GEMMs, "
     "activations fp32. "
     "fp16: the same on CUDA in IEEE half, with loss_scale = dynamic (required); not on the CPU", 0},
    {"train", "bf16_activations", DPT_KEY_BOOL, "true", 1, 0, NULL,
     "precision = bf16 on the CPU: keep the activations between convolutions, batch norm, relu, residual adds "
     "and pooling in bf16 (false: in fp32, only the convolutions' inputs rounded to bf16; more memory). CUDA "
     "keeps them in fp32 either way", 0},
    {"train", "memory_format", DPT_KEY_ENUM, "nchw", 1, 0, "nchw|nhwc",
     "how activations lie in memory between the layers that take them. nchw: CPU: oneDNN's blocked nChw16c "
     "where the channels are a multiple of 16 (its fastest), else NCHW; CUDA: NCHW. nhwc: channels last "
     "(PyTorch's channels_last): convolutions, batch norm, pooling, relu and residual adds keep (N, H, W, C), "
     "and CUDA's filters are handed to cuDNN as (K, R, S, C), where cuDNN's tensor-core kernels are fastest; "
     "the rest (linear layers, the loss, reshapes) reads NCHW, converted once where it begins. The same "
     "model and numbers either way; not with cpu_kernels = native", 0},
    {"train", "loss_scale", DPT_KEY_ENUM, "none", 1, 0, "none|dynamic",
     "dynamic: multiply the loss by a scale before backward and the gradients by its inverse after the "
     "AllReduce (torch.cuda.amp.GradScaler's rule: a step whose gradients are inf or nan on any rank is "
     "skipped by every rank and the scale halved; after loss_scale_growth clean steps it doubles); keeps small "
     "gradients above fp16's smallest value, e.g. with [distributed] grad_compression = fp16", 0},
    {"train", "loss_scale_init", DPT_KEY_FLOAT, "65536", 1, 1e38, NULL, "dynamic loss scaling: the first scale", 0},
    {"train", "loss_scale_growth", DPT_KEY_INT, "2000", 1, 1e12, NULL,
     "dynamic loss scaling: clean steps after which the scale doubles", 0},
    {"train", "tf32", DPT_KEY_BOOL, "false", 1, 0, NULL,
     "cuda: TF32 tensor cores for float32 GEMMs and convolutions (faster; ~1e-3 relative error)", 0},
    {"train", "cudnn_benchmark", DPT_KEY_BOOL, "false", 1, 0, NULL,
     "cuda: time cuDNN's convolution algorithms once per shape and take the fastest (PyTorch's benchmark "
     "mode; "
     "false: cuDNN's heuristics, the same choice every run)", 0},
    {"train", "memory_limit_mb", DPT_KEY_FLOAT, "0", 0, 1e9, NULL,
     "cap on the memory the device's caching allocator may reserve, per rank (0 = none)", DPT_KEY_NOT_HASHED},
    {"train", "memory_check", DPT_KEY_BOOL, "true", 1, 0, NULL,
     "before step 1, estimate the memory the run needs and stop if this machine (or GPU) cannot hold it; on the CPU, "
     "until then (the model built, traced, given its optimizer) the allocator takes no more than the memory available "
     "at start, so a model too large to build stops naming the allocation", DPT_KEY_NOT_HASHED},
    {"train", "eval_every_steps", DPT_KEY_INT, "0", 0, 1e12, NULL,
     "also evaluate every N optimizer steps (0 = only at the end of each epoch)", 0},
    {"train", "nonfinite", DPT_KEY_ENUM, "stop", 1, 0, "stop|skip",
     "a NaN/Inf loss or gradient: stop the job naming the step, or skip that step and count it", 0},
    {"model", "init", DPT_KEY_STRING, "", 1, 0, NULL,
     "start from these weights instead of the model's initialisation (fine-tuning): a dptrain checkpoint (a file, "
     "or FOLDER/latest, FOLDER/best), its parameters and buffers by name, not its optimizer state or position; "
     "ema:CKPT for its weight averages ([train] ema_decay) instead; a safetensors file (PyTorch's state_dict, "
     "timm's or the Hugging Face hub's model.safetensors, --export safetensors), by name (resnet's names are "
     "torchvision's); or, for gpt, llmc:PATH, llm.c's fp32 GPT-2 checkpoint (gpt2_124M.bin; the shape keys must match the file's), or "
     "hf:PATH, a Hugging Face GPT-2's model.safetensors (its Conv1D weights transposed, the vocabulary padded); "
     "for llama, hf:DIR, a Hugging Face LLaMA's folder (config.json checked against the keys, then "
     "model.safetensors)",
     0},
    {"model", "init_exclude", DPT_KEY_STRING, "", 1, 0, NULL,
     "with init: GLOBs, comma separated, of tensors left at the model's initialisation (a new head: fc2.*), "
     "and of the checkpoint's tensors this model does not have; any other difference in names or shapes is an "
     "error",
     0},
    {"train", "ema_decay", DPT_KEY_FLOAT, "0", 0, 0.999999, NULL,
     "keep an exponential moving average of the weights (parameters and buffers, timm's ModelEmaV2): after each "
     "optimizer step avg = decay * avg + (1 - decay) * weights, e.g. 0.999; every evaluation also evaluates the "
     "averages (\"ema test loss\" on the epoch line, ema_test_* in the metrics), checkpoints keep them, --eval/--predict/"
     "--sample --ema use them; best.dpt and early_stop follow the weights. 0 = none", 0},
    {"train", "ema_warmup", DPT_KEY_BOOL, "false", 1, 0, NULL,
     "ema_decay's warm-up: at step k the decay is min(ema_decay, (1 + k) / (10 + k)) (TensorFlow's "
     "ExponentialMovingAverage with num_updates), so the first averages follow the weights instead of the start", 0},
    {"train", "early_stop", DPT_KEY_STRING, "", 1, 0, NULL,
     "stop when the epochs' evaluation stops improving: METRIC:PATIENCE[:MIN_DELTA], METRIC test_loss or test_acc "
     "(a fraction or a percentage for its delta), e.g. test_loss:3:0.001 (3 epochs without a fall of more than "
     "0.001); \"\" = off", 0},
    {"distributed", "bucket_mb", DPT_KEY_FLOAT, "25", 1e-9, 1e5, "auto",
     "gradient bucket size in MiB (buckets fill in reverse parameter order and close once they hold it, with the "
     "parameter that filled them; the first at 1 MiB, as PyTorch's). auto: the ranks measure sizes from 0.25 to 256 MiB (those that make different plans) turn by "
     "turn over the first steps of the run, keep the fastest, say which in the log and the metrics, and record it in "
     "checkpoints so a resume does not measure again; at 3 or more ranks MPI may sum a different size in another "
     "order, so for bit-identical reruns set the size it chose. Host communicators and NCCL alike",
     0},
    {"distributed", "overlap", DPT_KEY_BOOL, "true", 1, 0, NULL,
     "AllReduce each bucket as soon as it is complete, during backward (false: after backward)", 0},
    {"distributed", "zero", DPT_KEY_INT, "0", 0, 2, NULL,
     "ZeRO: 1 = the optimizer state and update sharded over the ranks (each rank keeps and steps 1/N of every "
     "parameter's elements, gradients AllReduced as with 0, the updated ranges all-gathered: bit-identical to 0 at any "
     "world size); 2 = the gradients also reduce-scattered by those ranges instead of AllReduced (bit-identical to 0 "
     "where MPI's non-blocking reduce-scatter adds in its non-blocking AllReduce's order: Open MPI 4.1 does, measured at "
     "2-5 ranks; MPI does not promise it), and a rank keeps only its ranges of them between steps (zero_grads). Host communicators (mpirun on CPUs, DataParallel), not "
     "CUDA yet; 2 takes buckets of at most 4 MiB (a larger bucket_mb is lowered to 4: MPI's non-blocking reduce-scatter is slow above that); with bucket_mb = auto the sizes tried are cut inside the first plan's buckets, whose ranges the ranks keep",
     DPT_KEY_NOT_HASHED},
    {"distributed", "zero_overlap", DPT_KEY_ENUM, "auto", 1, 0, "auto|true|false",
     "zero = 1 or 2: true = the all-gather of the parameters after a step runs on a thread of its own, in pieces in "
     "the order the forward reads them, while the next step's data loading and forward run (each op waits only for "
     "the pieces it reads, predicted from the forward before and checked: a forward that reads them in another "
     "order than the step before ends the run with the op named); false = the whole all-gather after the step; "
     "auto = both measured, alternating every 3 steps over 24 (once bucket_mb and grad_compression = auto have decided), and the faster kept (by 1%, else false; the "
     "ranks decide together; said in the log and the metrics). The same weights either way", DPT_KEY_NOT_HASHED},
    {"distributed", "accum_steps", DPT_KEY_INT, "1", 1, 1e6, NULL,
     "micro-batches per optimizer step; only the last one communicates (no_sync)", 0},
    {"distributed", "zero_grads", DPT_KEY_ENUM, "auto", 1, 0, "auto|ranges|whole",
     "zero = 2: ranges = a rank keeps only its ranges of the gradients between steps (a bucket gets its memory when "
     "backward first writes into it and gives it back once reduce-scattered; backward opens a fifth bucket only after "
     "the oldest one on the wire is done); whole = every bucket keeps its memory (the gradients whole, as under zero 0 "
     "and 1); auto = ranges where that lowers the peak (the ranges plus the largest bucket and 3 of the next largest, "
     "less than all the buckets: not for 2 buckets, or one tensor dwarfing the rest). Memory only: the weights are the "
     "same. The metrics' grad_mb is the most a rank held at once", DPT_KEY_NOT_HASHED},
    {"distributed", "grad_compression", DPT_KEY_ENUM, "none", 1, 0, "none|bf16|fp16|auto",
     "gradient buckets AllReduced in 16 bits (half the bytes on the wire), rounded to nearest even after each "
     "addition, fp32 again before the optimizer; error per value about ranks x 2^-8 (bf16) or 2^-11 (fp16) of the "
     "mean magnitude; MPI and DataParallel threads on the CPU, NCCL's bf16/fp16 AllReduce on GPUs (checked on one H200 at world size 1; not across GPUs). auto: after bucket_mb's choice (or from the second step), the share of the step the AllReduces were exposed is measured on the rank that waited least (the others add imbalance, which bf16 does not shorten); under 5% the gradients stay fp32 (no step ever in bf16: the weights are none's), above it fp32 and bf16 are tried in turn and bf16 kept only if the step is 2% faster; said in the log, kept in checkpoints; host communicators only", 0},
    {"distributed", "find_unused", DPT_KEY_BOOL, "false", 1, 0, NULL,
     "treat a parameter that got no gradient as zero instead of stopping with an error", 0},
    {"distributed", "comm_timeout_s", DPT_KEY_FLOAT, "300", 0.01, 1e7, NULL,
     "a collective not done in this time ends the job with a report naming it", DPT_KEY_NOT_HASHED},
    {"distributed", "devices", DPT_KEY_STRING, "", 1, 0, NULL,
     "DataParallel in one process: a device list such as cpu:0,cpu:1 (empty = one device per process)", 0},
    {"distributed", "bench_comm_ms_per_mb", DPT_KEY_FLOAT, "0", 0, 1e5, NULL,
     "benchmarks: a slow network: each gradient AllReduce first sleeps this long per MiB", DPT_KEY_NOT_HASHED},
    {"distributed", "fault", DPT_KEY_ENUM, "none", 1, 0, "none|exit|hang|nan",
     "tests: make fault_rank exit, hang, or compute a NaN loss at fault_step (exit and hang: once; not again in "
     "scripts/dptrun's restarts)", 0},
    {"distributed", "fault_rank", DPT_KEY_INT, "0", 0, 1e6, NULL, "tests: the rank that fails", 0},
    {"distributed", "fault_step", DPT_KEY_INT, "0", 0, 1e12, NULL, "tests: after this many steps it fails (5: exit or hang before the 6th step, a NaN loss in the 6th, as messages number steps)", 0},
    {"checkpoint", "dir", DPT_KEY_STRING, "checkpoints", 1, 0, NULL,
     "folder for ckpt-step*.dpt files (written by rank 0; under [distributed] zero each rank also writes its part "
     "of the optimizer state there: [checkpoint] sharded)", DPT_KEY_NOT_HASHED},
    {"checkpoint", "every_steps", DPT_KEY_INT, "0", 0, 1e12, NULL,
     "write a checkpoint every N optimizer steps (0 = off)", DPT_KEY_NOT_HASHED},
    {"checkpoint", "every_epochs", DPT_KEY_INT, "0", 0, 1e6, NULL,
     "write a checkpoint every N epochs, after evaluation (0 = off)", DPT_KEY_NOT_HASHED},
    {"checkpoint", "keep_last", DPT_KEY_INT, "3", 0, 1e6, NULL,
     "keep only the newest N checkpoints of this run (0 = keep all); another run's files are never deleted", DPT_KEY_NOT_HASHED},
    {"checkpoint", "final", DPT_KEY_ENUM, "auto", 1, 0, "auto|true|false",
     "a checkpoint of the last step when the run ends (max_steps mid-epoch, or past the last periodic one): auto "
     "= when the run writes checkpoints every N steps or epochs; true = always (a run without periodic ones then "
     "leaves one, and the next run in the folder meets [checkpoint] existing)", DPT_KEY_NOT_HASHED},
    {"checkpoint", "best", DPT_KEY_ENUM, "auto", 1, 0, "auto|true|false",
     "keep dir/best.dpt, the checkpoint of the epoch with the best evaluation (test accuracy, or test loss for a "
     "task without accuracy), rewritten when one beats it (--eval DIR/best, --resume DIR/best): auto = when the "
     "run writes checkpoints every N steps or epochs", DPT_KEY_NOT_HASHED},
    {"checkpoint", "sharded", DPT_KEY_BOOL, "true", 1, 0, NULL,
     "under [distributed] zero = 1 or 2: each rank writes its own ranges of the optimizer state beside the "
     "checkpoint (NAME.<id>.optimQ-of-N, every rank at once, no rank gathering it), the checkpoint file written last "
     "by rank 0 (the folder must be one every rank sees, as for a resume); false: rank 0 gathers the state into the "
     "one file, a tensor at a time. Either resumes at any world size and zero stage", DPT_KEY_NOT_HASHED},
    {"checkpoint", "existing", DPT_KEY_ENUM, "stop", 1, 0, "stop|archive",
     "the folder holds another run's checkpoints (or, on resume, newer ones than the one resumed): stop "
     "with an error, or move them into dir/previous-<time>/ and go on", DPT_KEY_NOT_HASHED},
    {"log", "interval", DPT_KEY_INT, "100", 1, 1e9, NULL, "steps between progress lines", DPT_KEY_NOT_HASHED},
    {"log", "all_ranks", DPT_KEY_BOOL, "false", 1, 0, NULL,
     "every rank prints its progress lines (prefixed by its rank), not only rank 0", DPT_KEY_NOT_HASHED},
    {"log", "progress", DPT_KEY_ENUM, "auto", 1, 0, "auto|bar|lines",
     "auto: a progress bar with ETA on a terminal, plain lines otherwise (CI logs)", DPT_KEY_NOT_HASHED},
    {"log", "timeline", DPT_KEY_STRING, "", 1, 0, NULL,
     "Chrome-trace JSON per rank ({rank} in the path is replaced; else .rankN goes before the extension when ranks > 1: trace.rank0.json)", DPT_KEY_NOT_HASHED},
    {"log", "gpu_stats", DPT_KEY_ENUM, "auto", 1, 0, "auto|off",
     "auto: the GPU's utilisation, memory, temperature and power in the progress line and the metrics (NVML, "
     "when the driver provides it)", DPT_KEY_NOT_HASHED},
    {"log", "metrics", DPT_KEY_STRING, "", 1, 0, NULL,
     "JSONL metrics file, one line per interval and per evaluation (empty = none)", DPT_KEY_NOT_HASHED},
    {"optim", "clip_norm", DPT_KEY_FLOAT, "0", 0, 1e9, NULL,
     "clip gradients to this global L2 norm, after the AllReduce (0 = off)", 0},
};
DPT_BUILTIN(settings_train) = {DPT_KIND_SETTINGS, "train", "the training run", train_keys, DPT_COUNT(train_keys),
                               NULL};
