# swarm — build, test and lab entry points. See README.md.
#   make lab    install missing Debian packages (as root), build, generate the lab model, run the lab
#   make test   build and run every test (unit + end to end) on the tiny config
CC      ?= cc
CLANG   ?= clang
BUILD   ?= build
BIN     ?= bin
PREFIX  ?= /usr/local
PKGS     = libzmq msgpack openblas libbpf inih jansson libxxhash liburing libcrypto libpcre2-8 \
           libmicrohttpd
DEB_PKGS = build-essential pkg-config clang llvm bpftool libzmq3-dev libmsgpack-dev \
           libopenblas-dev libbpf-dev libelf-dev zlib1g-dev libinih-dev libjansson-dev \
           libxxhash-dev liburing-dev libssl-dev gnuplot-nox iproute2 libclang-rt-14-dev \
           python3 procps iputils-ping util-linux libpcre2-dev \
           libmicrohttpd-dev chromium curl
WERROR  ?= $(if $(CI),-Werror,)
GIT_REV := $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)$(shell git diff --quiet HEAD 2>/dev/null || echo -dirty)

# -Wno-format-truncation: error messages are cut to their buffers on purpose (snprintf).
# Recursive (=) on purpose: pkg-config is only asked when something is compiled, after `deps`.
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS))
PKG_LIBS   = $(shell pkg-config --libs $(PKGS))
CFLAGS  ?= -O2 -g
SANITIZE ?=
ALL_CFLAGS = -std=c11 -D_GNU_SOURCE $(CFLAGS) $(SANITIZE) -Wall -Wextra -Wshadow \
             -Wstrict-prototypes -Wmissing-prototypes $(WERROR) \
             -Wno-format-truncation -I. -I$(BUILD)/netem \
             -DSWARM_GIT_REV=\"$(GIT_REV)\" $(PKG_CFLAGS) -MMD -MP
LDLIBS   = $(PKG_LIBS) -lpthread -lm

MAIN_SRC = cli/main.c
# The layers, lowest first (docs/design.md "Layout"): a folder includes only from itself and
# the folders before it in this list; tests/include_order.sh checks every #include against it.
LAYERS   = base gguf quant proto netem arch runtime text dist serve lab cli
SRC_DIRS = $(LAYERS)
LIB_SRC  = $(filter-out $(MAIN_SRC) %.bpf.c,$(wildcard $(SRC_DIRS:%=%/*.c)))
LIB_OBJ  = $(LIB_SRC:%.c=$(BUILD)/%.o)
BPF_SRC  = $(wildcard netem/*.bpf.c)
BPF_SKEL = $(BPF_SRC:netem/%.bpf.c=$(BUILD)/netem/%.skel.h)
TEST_SRC = $(wildcard tests/test_*.c)
TEST_BIN = $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
# Helper programs for the end-to-end scripts (hostile sender, hop bench): built by the
# $(BUILD)/tests/% rule below as $(BUILD)/tests/tools/NAME; run.sh does not run them as tests.
TOOL_SRC = $(wildcard tests/tools/*.c)
TOOL_BIN = $(TOOL_SRC:tests/%.c=$(BUILD)/tests/%)

.PHONY: all test check lab asan clean install deps npm-deps fuzz lab-quick soak
# Keep the BPF object and skeleton (make would delete them as intermediates and rebuild).
.SECONDARY: $(BPF_SKEL) $(BPF_SKEL:.skel.h=.bpf.o)
all: $(BIN)/swarm

$(BUILD)/netem/%.bpf.o: netem/%.bpf.c
	@mkdir -p $(@D)
	$(CLANG) -O2 -g -target bpf -D__TARGET_ARCH_x86 -I/usr/include/x86_64-linux-gnu -c $< -o $@

$(BUILD)/netem/%.skel.h: $(BUILD)/netem/%.bpf.o
	bpftool gen skeleton $< > $@

$(BUILD)/%.o: %.c | $(BPF_SKEL)
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

# The chat page is assembled into page.o (.incbin): an edited page rebuilds it.
$(BUILD)/serve/page.o: serve/page.html

$(BUILD)/libswarm.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BIN)/swarm: $(BUILD)/$(MAIN_SRC:.c=.o) $(BUILD)/libswarm.a
	@mkdir -p $(@D)
	$(CC) $(SANITIZE) -o $@ $^ $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(BUILD)/libswarm.a
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(BUILD)/libswarm.a $(LDLIBS)

# `make test` works on a fresh machine too: packages first (a no-op when present), then build
# and run in a second make, which only then asks pkg-config.
test: deps
	$(MAKE) --no-print-directory check

check: $(BIN)/swarm $(TEST_BIN) $(TOOL_BIN)
	SWARM_BIN=$(abspath $(BIN)/swarm) TEST_BIN_DIR=$(abspath $(BUILD)/tests) tests/run.sh

# The soak test (tests/soak.py): serve --arm resident under faults from outside for
# SOAK_SECONDS (a short one runs in `make test`, tests/e2e_soak.sh). Fails on a lost, different
# or hung request, or a /health answer slower than 10x the healthy ones.
SOAK_SECONDS ?= 60
soak: $(BIN)/swarm
	SWARM_BIN=$(abspath $(BIN)/swarm) SOAK_SECONDS=$(SOAK_SECONDS) python3 tests/soak.py

# Workers run inside memory cgroups sized for real builds: ASan's default 256 MiB quarantine of
# freed memory would push a 192 MiB worker over its cap (OOM-killed, seen 2026-11-30), so the
# quarantine is kept small; every other check stays on.
asan: deps
	ASAN_OPTIONS=$${ASAN_OPTIONS:-quarantine_size_mb=8:thread_local_quarantine_size_kb=256} \
	$(MAKE) --no-print-directory BUILD=build/asan BIN=build/asan/bin CFLAGS="-O1 -g -fno-omit-frame-pointer" \
	    SANITIZE="-fsanitize=address,undefined -fno-sanitize-recover=undefined" check

# libFuzzer on the wire decoder (proto/fuzz/fuzz_proto.c), from a copy of the seed corpus so
# proto/fuzz/corpus stays as committed. Fails on any crash, leak, timeout or UB report.
FUZZ_SECONDS ?= 60
FUZZ_DIR = $(BUILD)/fuzz
fuzz:
	@mkdir -p $(FUZZ_DIR)
	$(CLANG) -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I. \
	    proto/fuzz/fuzz_proto.c proto/*.c $(shell pkg-config --cflags --libs msgpack) \
	    -o $(FUZZ_DIR)/fuzz_proto
	@rm -rf $(FUZZ_DIR)/corpus $(FUZZ_DIR)/crashes && mkdir -p $(FUZZ_DIR)/crashes && \
	    cp -r proto/fuzz/corpus $(FUZZ_DIR)/corpus
	@cd $(FUZZ_DIR) && ./fuzz_proto -max_total_time=$(FUZZ_SECONDS) -max_len=4096 -timeout=10 \
	    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix=crashes/ corpus \
	    >fuzz.log 2>&1; rc=$$?; \
	  grep -E '^Done [0-9]+ runs|stat::number_of_executed_units|stat::average_exec_per_sec' fuzz.log; \
	  if [ $$rc -ne 0 ] || [ -n "$$(ls crashes)" ]; then tail -40 fuzz.log; \
	    cp crashes/* $(CURDIR)/proto/fuzz/regress/ 2>/dev/null; \
	    echo "fuzz: the inputs are copied to proto/fuzz/regress: commit them (test_proto replays them)"; \
	    echo "fuzz: FAILED (exit $$rc; inputs in $(FUZZ_DIR)/crashes: $$(ls crashes | tr '\n' ' '))"; \
	    exit 1; fi; \
	  echo "fuzz: $(FUZZ_SECONDS) s, no crash ($$(ls corpus | wc -l) corpus inputs)"

# Installs what is missing when run as root; otherwise names the packages to install.
deps:
	@missing=""; for p in $(DEB_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then echo "deps: installing:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	  else echo "deps: missing Debian packages; run as root: apt-get install$$missing"; exit 1; fi; \
	fi
	@$(MAKE) --no-print-directory npm-deps

# The client libraries the serve tests drive (the openai SDK, the AI SDK, LangChain), pinned by
# tests/js/package-lock.json and installed under build/npm (ignored by git). Node comes from
# Debian when the machine has none. Re-run only when the lock file changes.
NPM_DIR = build/npm
npm-deps: $(NPM_DIR)/.installed
$(NPM_DIR)/.installed: tests/js/package.json tests/js/package-lock.json
	@command -v npm >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm; } || \
	    { echo "deps: node and npm are missing; run as root: apt-get install nodejs npm"; exit 1; }
	@mkdir -p $(NPM_DIR) && cp tests/js/package.json tests/js/package-lock.json $(NPM_DIR)/
	cd $(NPM_DIR) && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

# configs/lab02.ini says [model] generate = 1: the lab makes models/lab02.gguf (24 x 4096, seed
# 1, 1.5 GiB, fsynced before the machine is measured) when it is missing, so the model's shape
# is written in one place. tests/e2e_paths.sh runs the same config in a fresh folder.
lab: deps
	$(MAKE) all
	$(BIN)/swarm lab configs/lab02.ini

lab-quick: deps
	$(MAKE) all
	$(BIN)/swarm lab configs/tiny.ini --quick

install: $(BIN)/swarm
	install -D -m 0755 $(BIN)/swarm $(DESTDIR)$(PREFIX)/bin/swarm
	install -D -m 0644 configs/lab02.ini $(DESTDIR)$(PREFIX)/share/swarm/lab02.ini
	install -D -m 0644 configs/tiny.ini $(DESTDIR)$(PREFIX)/share/swarm/tiny.ini

clean:
	rm -rf $(BUILD) $(BIN)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
