# memattach - attach to a running jemalloc process and analyse its heap.
#
#   make demo    install missing Debian packages, build, run the demo daemon
#   make test    install missing Debian packages, build, run every test
#   make bench   side-by-side benchmarks against gdb / jeprof

CC      ?= cc
CFLAGS  ?= -O2 -g
# The architecture: its code in attach/arch_$(ARCH).c, its constants in
# include/arch_$(ARCH).h (arch.h includes it); a port adds those two files
# (and attach/arch_$(ARCH)_detour.c for frag's inline detours, optional).
ARCH    ?= $(shell uname -m)
ARCH_DEF := -DMA_ARCH_HEADER='"arch_$(ARCH).h"'
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Iinclude -Iattach/cli -MMD -MP $(ARCH_DEF)
LDLIBS  += -lunwind-ptrace -lunwind-generic -lunwind -ldw -lelf -liberty -lcapstone -lz -lm

B := build

# Debian packages the build, the fixtures and the tests need.
DEB_PACKAGES := gcc g++ make libelf-dev libdw-dev libunwind-dev libiberty-dev \
	libjemalloc-dev libjemalloc2 zlib1g-dev gdb rustfilt binutils python3 \
	clang libclang-rt-14-dev util-linux procps redis-server redis-tools knot-resolver \
	knot-dnsutils curl prometheus golang-go libc6-dbg chromium python3-pil strace valgrind \
	heaptrack libcapstone-dev
BENCH_PACKAGES := lldb

# Three layers: the ptrace core (attach/), the commands (attach/cli/, the
# only code that prints), the analysis core (analysis/, no process access).
ANALYSIS_SRC := $(sort $(wildcard analysis/*.c))
CORE_SRC     := $(sort $(filter-out attach/arch_%.c,$(wildcard attach/*.c)) $(wildcard attach/arch_$(ARCH).c attach/arch_$(ARCH)_*.c))
CLI_SRC      := $(sort $(wildcard attach/cli/*.c))
ANALYSIS_OBJ := $(ANALYSIS_SRC:%.c=$(B)/%.o)
CORE_OBJ     := $(CORE_SRC:%.c=$(B)/%.o) $(B)/agent/agent_blob.o
CLI_OBJ      := $(CLI_SRC:%.c=$(B)/%.o)

UNIT_SRC  := $(sort $(wildcard tests/unit/*.c))
UNIT_BINS := $(UNIT_SRC:tests/unit/%.c=$(B)/tests/unit/%)

.PHONY: all deps bench-deps install-packages demo test bench fixtures clean install uninstall check-layers golden docs soak
all: $(B)/memattach

deps:
	@$(MAKE) --no-print-directory install-packages PACKAGES="$(DEB_PACKAGES)"

# The peer tools only the benchmarks run (lldb: gdb 13 cannot call
# functions on CPUs with AMX).
bench-deps: deps
	@$(MAKE) --no-print-directory install-packages PACKAGES="$(BENCH_PACKAGES)"

install-packages:
	@missing=""; for p in $(PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	command -v rustc >/dev/null || [ -x /root/.cargo/bin/rustc ] || missing="$$missing rustc"; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

$(B)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c -o $@ $<

# The frag agent (attach/agent/): a small shared object dlopen'ed inside the
# target, embedded in memattach as a byte array, with the offsets of its
# entry points as a generated header.  It needs nothing but libc and
# libgcc_s (which Debian's libjemalloc already links) and never calls malloc.
AGENT_SO := $(B)/agent/memattach-agent.so
AGENT_SRC := attach/agent/agent.c attach/agent/agent_ctl.c attach/agent/agent_got.c attach/agent/agent_detour.c
$(AGENT_SO): $(AGENT_SRC) attach/agent/agent_int.h include/agent_abi.h include/arch_$(ARCH).h
	@mkdir -p $(@D)
	$(CC) -std=c11 -D_GNU_SOURCE $(ARCH_DEF) -O2 -Wall -Wextra -Werror -Iinclude -fPIC -fexceptions -fvisibility=hidden \
	  -shared -s -Wl,-z,now -Wl,--no-undefined -o $@ $(AGENT_SRC) -lgcc_s
$(B)/agent/agent_syms.h: $(AGENT_SO)
	nm -D --defined-only $< | awk '$$3 ~ /^ma_agent_/ { sub(/^ma_agent_/, "", $$3); \
	  printf "#define MA_AGENT_OFF_%s 0x%sULL\n", $$3, $$1 }' > $@.tmp && mv $@.tmp $@
$(B)/agent/agent_blob.c: $(AGENT_SO)
	{ echo 'const unsigned char ma_agent_so[] = {'; od -An -v -tx1 $< | sed -e 's/ \([0-9a-f][0-9a-f]\)/0x\1,/g'; \
	  echo '};'; echo 'const unsigned long ma_agent_so_len = sizeof(ma_agent_so);'; } > $@.tmp && mv $@.tmp $@
$(B)/agent/agent_blob.o: $(B)/agent/agent_blob.c
	$(CC) -c -o $@ $<
$(B)/attach/fragctl.o: $(B)/agent/agent_syms.h
$(B)/attach/fragctl.o: CFLAGS += -I$(B)/agent

$(B)/memattach: $(CLI_OBJ) $(CORE_OBJ) $(ANALYSIS_OBJ)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The test build: the same objects, but those that read the test hooks
# (include/testhooks.h) compiled with them.  The tests run it where they
# need a hook; the shipped build/memattach has none.
TESTHOOK_SRC := attach/steps.c attach/safepoint.c attach/remote_call.c attach/session_stops.c attach/live.c attach/cli/main.c analysis/input.c
TESTHOOK_OBJ := $(TESTHOOK_SRC:%.c=$(B)/testbuild/%.o)
$(B)/testbuild/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -DMEMATTACH_TEST_BUILD -c -o $@ $<
$(B)/memattach-test: $(filter-out $(TESTHOOK_SRC:%.c=$(B)/%.o),$(CLI_OBJ) $(CORE_OBJ) $(ANALYSIS_OBJ)) $(TESTHOOK_OBJ)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(B)/tests/unit/%: tests/unit/%.c $(CORE_OBJ) $(ANALYSIS_OBJ)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Itests -o $@ $< $(CORE_OBJ) $(ANALYSIS_OBJ) $(LDLIBS)

# Each fixtures/*.mk adds its programs as prerequisites of 'fixtures'.
FIX := $(B)/fixtures
fixtures:
include $(sort $(wildcard fixtures/*.mk))

# The agent's GOT passes run in-process on jemalloc, beside a library loaded
# and unloaded in a loop (the library is a fixture).
$(B)/tests/unit/agent_passes: tests/unit/agent_passes.c include/agent_abi.h $(AGENT_SO) $(FIX)/libfragplug.so
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Itests -o $@ $< -Wl,--no-as-needed -ljemalloc -Wl,--as-needed -ldl -lpthread

# Its child (the target) must hold a jemalloc: libc's functions are looked up once one is found.
$(B)/tests/unit/thread_fns: tests/unit/thread_fns.c $(CORE_OBJ) $(ANALYSIS_OBJ)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Itests -o $@ $< $(CORE_OBJ) $(ANALYSIS_OBJ) $(LDLIBS) -Wl,--no-as-needed -ljemalloc -Wl,--as-needed

# The agent's detour writer runs in-process against threads calling what it rewrites.
$(B)/tests/unit/agent_detour: $(AGENT_SO)

# The layers from the objects' symbols: analysis/ never calls attach/, the
# core never calls the commands, no two modules call each other.
check-layers: all
	python3 tests/check_layers.py $(B)

# The jemalloc builds of the version matrix start first, in the background
# (fixtures/jemalloc.mk), yield to memattach's own build once Debian's
# packages are in, and share the CPUs with the tests.
test:
	@$(MAKE) --no-print-directory jemalloc-matrix-background
	@$(MAKE) --no-print-directory deps
	@$(MAKE) --no-print-directory jemalloc-matrix-yield
	$(MAKE) all $(B)/memattach-test fixtures $(UNIT_BINS) $(B)/fuzz/heapprof
	@$(MAKE) --no-print-directory check-layers
	@$(MAKE) --no-print-directory jemalloc-matrix-share
	bash tests/run.sh

# The same tests with the randomized campaigns at full size (1,000 random
# kills each, 500 fork-loop runs...; tests/lib/common.sh, sized): about twice
# as long as make test.
soak:
	MA_SOAK=1 $(MAKE) test

# Rewrite the expected outputs of the golden cases (fixtures/golden/cases)
# from this checkout's binary; the diff is then the review of the change.
golden: all
	GOLDEN_UPDATE=1 bash tests/cli/golden.sh >/dev/null

# The example outputs in README.md and attach/cli/README.md, made again from
# real runs on the fixtures and on Debian's redis-server (tests/make_docs.py).
docs: deps
	$(MAKE) all fixtures
	python3 tests/make_docs.py

demo: deps
	$(MAKE) all fixtures
	bash fixtures/demo.sh

bench: bench-deps
	$(MAKE) all fixtures bench-fixtures
	for b in tests/bench/*.sh; do bash $$b || exit 1; done

clean:
	rm -rf $(B)

# make install [PREFIX=/usr/local] [DESTDIR=staging root]
PREFIX  ?= /usr/local
BINDIR  := $(PREFIX)/bin
MANDIR  := $(PREFIX)/share/man/man1
COMPDIR := $(PREFIX)/share/bash-completion/completions
install: $(B)/memattach
	install -D -m 755 $(B)/memattach $(DESTDIR)$(BINDIR)/memattach
	install -D -m 644 attach/cli/memattach.1 $(DESTDIR)$(MANDIR)/memattach.1
	install -D -m 644 attach/cli/memattach.bash $(DESTDIR)$(COMPDIR)/memattach

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/memattach $(DESTDIR)$(MANDIR)/memattach.1 \
	  $(DESTDIR)$(COMPDIR)/memattach

-include $(ANALYSIS_OBJ:.o=.d) $(CORE_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(TESTHOOK_OBJ:.o=.d)

# libFuzzer target for the heap dump parser (needs clang):
#   make fuzz && build/fuzz/heapprof -max_total_time=600 build/fuzz/corpus fixtures/dumps
FUZZ_SRC := analysis/heapprof.c analysis/symbolize.c analysis/profile.c analysis/demangle.c \
	analysis/elfsyms.c analysis/error.c analysis/flame.c analysis/input.c analysis/format.c
.PHONY: fuzz
fuzz: $(B)/fuzz/heapprof
$(B)/fuzz/heapprof: tests/fuzz/heapprof_fuzz.c $(FUZZ_SRC)
	@mkdir -p $(@D) $(@D)/corpus
	clang -g -O1 -std=c11 -D_GNU_SOURCE -Iinclude -fsanitize=fuzzer,address,undefined \
	  -fno-sanitize-recover=undefined -o $@ $^ -ldw -lelf -liberty -lz -lm

# Heap-profile unit tests need only the analysis objects.
PROF_UNIT := $(B)/tests/unit/heapprof $(B)/tests/unit/demangle $(B)/tests/unit/profdiff $(B)/tests/unit/profile $(B)/tests/unit/headline $(B)/tests/unit/format
$(PROF_UNIT): $(B)/tests/unit/%: tests/unit/%.c $(ANALYSIS_OBJ)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Itests -o $@ $< $(ANALYSIS_OBJ) $(LDLIBS)
