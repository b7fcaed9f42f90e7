# dptrain: plain make. `make` builds; `make demo`, `make test`, `make bench` also install the
# Debian packages that are missing (scripts/deps.sh). CUDA parts are built when nvcc is found.

CC       ?= gcc
BUILD    := build
OPT      ?= -O3 -g -fno-math-errno
SAN      ?=
OMP      ?= -fopenmp
CFLAGS   := $(OPT) $(SAN) -std=c11 -D_DEFAULT_SOURCE -Wall -Wextra -Wshadow -Wno-unused-parameter $(OMP) \
            -Iinclude -I/usr/include/x86_64-linux-gnu -MMD -MP
# OpenBLAS's OpenMP build, so BLAS and our OpenMP kernels share one thread pool. With the
# default pthread build the two pools spin against each other and 2 threads run at half the
# speed of 1 (bench_mlp measured 23k vs 44k img/s). Falls back to the default build.
OPENBLAS_OMP := /usr/lib/x86_64-linux-gnu/openblas-openmp
OPENBLAS_OMP_LIBS := $(OPENBLAS_OMP)/libopenblas.so.0 -Wl,-rpath,$(OPENBLAS_OMP)
BLAS_LIBS := $(if $(wildcard $(OPENBLAS_OMP)/libopenblas.so.0),$(OPENBLAS_OMP_LIBS),-lopenblas)
MPI_CFLAGS := $(shell mpicc --showme:compile 2>/dev/null)
MPI_LIBS   := $(shell mpicc --showme:link 2>/dev/null)
CFLAGS   += $(MPI_CFLAGS)
OMP_LIBS ?= $(OMP)
# oneDNN (Debian libdnnl-dev) for the CPU convolutions; without it the native kernels run.
DNNL     ?= $(if $(wildcard /usr/include/oneapi/dnnl/dnnl.h),yes,no)
CFLAGS   += $(if $(filter yes,$(DNNL)),-DDPT_DNNL=1)
LDLIBS   := $(SAN) $(BLAS_LIBS) $(if $(filter yes,$(DNNL)),-ldnnl) $(MPI_LIBS) -lz -lm $(OMP_LIBS) -lpthread

# ---- CUDA auto-detection: nvcc, cuBLAS, cuDNN, NCCL
CUDA_HOME ?= $(firstword $(wildcard /usr/local/cuda /usr/local/cuda-*))
NVCC      := $(shell command -v nvcc 2>/dev/null || ls $(CUDA_HOME)/bin/nvcc 2>/dev/null)
HAVE_CUDNN := $(if $(wildcard $(CUDA_HOME)/include/cudnn.h /usr/include/cudnn.h),yes,no)
HAVE_NCCL  := $(if $(wildcard $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h),yes,no)

LIB_SRCS := $(wildcard runtime/*.c layers/*.c optim/*.c data/*.c models/*.c)
CU_SRCS  := $(wildcard runtime/*.cu layers/*.cu optim/*.cu)
ifneq ($(NVCC),)
ifneq ($(CU_SRCS),)
  CUDA_ON  := yes
  CFLAGS   += -DDPT_CUDA=1 -I$(CUDA_HOME)/include
  NVFLAGS  := -O2 -std=c++17 -Iinclude -Iruntime -I$(CUDA_HOME)/include -DDPT_CUDA=1 $(MPI_CFLAGS) \
              -Xcompiler -Wall,-Wextra,-Wno-unused-parameter \
              -gencode arch=compute_90,code=sm_90 -gencode arch=compute_80,code=sm_80
  LDLIBS   += -L$(CUDA_HOME)/lib64 -L$(CUDA_HOME)/lib -Wl,-rpath,$(CUDA_HOME)/lib64 \
              -Wl,-rpath,$(CUDA_HOME)/lib -lcudart -lcublas -lcudnn $(if $(filter yes,$(HAVE_NCCL)),-lnccl) -lstdc++
  ifeq ($(HAVE_NCCL),yes)
    CFLAGS  += -DDPT_NCCL=1
    NVFLAGS += -DDPT_NCCL=1
  endif
endif
endif

LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/%.o) $(if $(CUDA_ON),$(CU_SRCS:%.cu=$(BUILD)/%.cu.o))
LIB      := $(BUILD)/libdpt.a
TEST_SRCS  := $(wildcard tests/test_*.c)
MPI_TEST_SRCS := $(wildcard tests/mpi_*.c)
TEST_BINS  := $(TEST_SRCS:tests/%.c=$(BUILD)/tests/%) $(MPI_TEST_SRCS:tests/%.c=$(BUILD)/tests/%) \
              $(BUILD)/tests/doc_example $(BUILD)/tests/test_cuda_harness
BENCH_SRCS := $(wildcard bench/bench_*.c bench/mpi_bench_*.c)
BENCH_BINS := $(BENCH_SRCS:bench/%.c=$(BUILD)/bench/%)

.PHONY: all deps demo test bench tests benches clean format compile_commands summary asan asan-build print-libs \
        fuzz fuzz-build
all: summary train tests benches

summary:
	@echo "dptrain build: cc=$(CC) | blas=$(if $(findstring openmp,$(BLAS_LIBS)),openblas-openmp,openblas-pthread) onednn=$(DNNL) zlib openmp mpi=$(if $(MPI_LIBS),yes,no) | cuda=$(if $(CUDA_ON),yes ($(NVCC)),no) cudnn=$(HAVE_CUDNN) nccl=$(HAVE_NCCL)"

deps:
	@scripts/deps.sh

demo: deps
	@$(MAKE) --no-print-directory all
	./train configs/fmnist_mlp.ini

test: deps
	@$(MAKE) --no-print-directory all asan-build fuzz-build
	@tests/run.sh $(BUILD)/tests

bench:
	@scripts/deps.sh bench
	@$(MAKE) --no-print-directory all
	@bench/run.sh $(BUILD)/bench

# The unit tests once more under AddressSanitizer and UBSan, in their own build folder.
ASAN_TESTS := test_ops test_autograd test_conv test_data test_config test_checkpoint test_schedule test_optim
asan-build:
	@$(MAKE) --no-print-directory BUILD=build-asan OPT="-O1 -g" SAN="-fsanitize=address,undefined -fno-omit-frame-pointer" \
	    $(ASAN_TESTS:%=build-asan/tests/%)

asan: asan-build
	@for t in $(ASAN_TESTS); do echo "=== asan $$t"; ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	    build-asan/tests/$$t || exit 1; done

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

fuzz: deps fuzz-build
	@scripts/fuzz.sh $(FUZZ_S)

tests: $(TEST_BINS)
benches: $(BENCH_BINS)

train: train.c $(LIB)
	$(CC) $(CFLAGS) -I. -o $@ train.c $(LIB) $(LDLIBS)

$(LIB): $(LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -MMD -MP -MF $(@:.o=.d) -c -o $@ $<

$(BUILD)/tests/test_%: tests/test_%.c tests/testutil.h tests/ddp_common.h $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I. -o $@ $< $(LIB) $(LDLIBS) -lcmocka

# test_cuda.c once more with the CPU standing in for the GPU (see the file's head).
$(BUILD)/tests/test_cuda_harness: tests/test_cuda.c tests/testutil.h tests/ddp_common.h $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DDPT_TEST_HARNESS_ON_CPU -I. -o $@ $< $(LIB) $(LDLIBS) -lcmocka

$(BUILD)/tests/mpi_%: tests/mpi_%.c tests/ddp_common.h $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I. -o $@ $< $(LIB) $(LDLIBS)

# The C program in docs/writing-a-model.md is extracted and built so the doc cannot rot.
$(BUILD)/tests/doc_example.c: docs/writing-a-model.md
	@mkdir -p $(dir $@)
	awk '/^```c$$/{on=1;next} /^```$$/{on=0} on' $< > $@

$(BUILD)/tests/doc_example: $(BUILD)/tests/doc_example.c $(LIB)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDLIBS)

$(BUILD)/bench/%: bench/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I. -o $@ $< $(LIB) $(LDLIBS)

# The link flags a program using libdpt.a needs (BLAS, MPI, zlib, OpenMP, CUDA when built).
print-libs:
	@echo $(LDLIBS)

format:
	clang-format -i $$(git ls-files '*.c' '*.h' '*.cu')

compile_commands:
	$(MAKE) clean && bear -- $(MAKE) all

clean:
	rm -rf $(BUILD) build-asan build-fuzz train

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
