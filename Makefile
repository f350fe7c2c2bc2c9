# Mantissa build.
#
#   make            build build/release/mantissa (and the library the tests use)
#   make run        deps + model + build, then serve config/mantissa.json on :8080
#   make test       deps + model + build, then every test (unit, integration)
#   make eval       STS-B test Spearman of the default model
#   make bench      CPU speed against a peer (ONNX Runtime) in the same run
#   make SANITIZE=address,undefined test    the same under ASan+UBSan (build/asan/)
#
# Each configuration builds in its own folder under build/.

SANITIZE ?=
ifeq ($(SANITIZE),)
  CFG    ?= release
  OPT    ?= -O2
else
  CFG    ?= asan
  OPT    ?= -O1 -fno-omit-frame-pointer -fsanitize=$(SANITIZE) -fno-sanitize-recover=all
endif
BUILD    := build/$(CFG)
MARCH    ?= -march=x86-64-v3
CC       ?= cc
PKGS     := libmicrohttpd libcjson libuv
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CHECK_LIBS := $(shell pkg-config --libs check 2>/dev/null)

CFLAGS   ?=
CFLAGS   += -std=c11 -D_GNU_SOURCE -g $(OPT) $(MARCH) -fopenmp \
            -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter \
            -I. $(PKG_CFLAGS) -MMD -MP
LDFLAGS  += $(OPT) -fopenmp
LDLIBS   += $(PKG_LIBS) -ldnnl -lmvec -lm -lpthread

# Library sources: everything under engine/, models/, kernels/cpu/ and
# server/ except the entry point.
LIB_SRC  := $(wildcard engine/*.c) $(wildcard models/*.c) $(wildcard kernels/cpu/*.c) \
            $(filter-out server/main.c,$(wildcard server/*.c))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
LIB      := $(BUILD)/libmantissa.a
BIN      := $(BUILD)/mantissa

UNIT_SRC := $(wildcard tests/unit/test_*.c)
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)

PYTHON   ?= python3
VENV     := .venv
VPY      := $(VENV)/bin/python
MODEL_DIR := models/all-MiniLM-L6-v2
CONFIG   ?= config/mantissa.json

.PHONY: all build deps model run test unit integration eval bench clean distclean
all build: $(BIN) $(UNIT_BIN)

# The arithmetic kernels want the loop vectoriser at full strength.
$(BUILD)/kernels/%.o: CFLAGS += -O3

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(LIB): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BIN): $(BUILD)/server/main.o $(LIB)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@

$(BUILD)/tests/%: $(BUILD)/tests/unit/%.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) $(CHECK_LIBS) -o $@

# ---- set-up ---------------------------------------------------------------
# Debian packages and the Python virtual environment the tests and tools use.
deps: $(VENV)/.deps-ok
	@tools/install-deps.sh --check-debian

$(VENV)/.deps-ok: tools/install-deps.sh tools/requirements.txt
	tools/install-deps.sh
	@touch $@

model: $(MODEL_DIR)/model.safetensors

$(MODEL_DIR)/model.safetensors: tools/fetch-model.sh
	tools/fetch-model.sh $(MODEL_DIR)

# ---- use ------------------------------------------------------------------
run: deps model
	$(MAKE) --no-print-directory $(BIN)
	$(BIN) serve --config $(CONFIG)

test: deps model
	$(MAKE) --no-print-directory all
	BUILD=$(BUILD) PYTHON=$(abspath $(VPY)) tests/run.sh

eval: deps model
	$(MAKE) --no-print-directory $(BIN)
	$(BIN) eval --config $(CONFIG) --stsb ../shared/data/stsb/sts-test.csv

bench: deps model
	$(MAKE) --no-print-directory $(BIN)
	BUILD=$(BUILD) PYTHON=$(abspath $(VPY)) bench/cpu.sh

clean:
	rm -rf build

distclean: clean
	rm -rf $(VENV) models/*/

-include $(LIB_OBJ:.o=.d) $(BUILD)/server/main.d $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/unit/%.d)
