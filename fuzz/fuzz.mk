# fuzz/fuzz.mk - `make fuzz` and `make fuzz-merge` (GNU make; the automake Makefile calls it with
# the settings configure found). Builds the library sources and each harness with clang,
# libFuzzer, AddressSanitizer and UndefinedBehaviorSanitizer into fuzz/build/ (the ordinary
# build is not touched), then runs each harness FUZZ_SECONDS on its working corpus.
#
#   fuzz/build/obj/...            the library sources and harnesses, compiled with FUZZ_CC
#   fuzz/build/fuzz_<name>        one libFuzzer binary per harness
#   fuzz/build/corpus/<name>/     the working corpus (grows across runs; seeded from
#                                 fuzz/corpus/<name>/, which libFuzzer only reads)
#   fuzz/build/crashes/<name>/    crash, leak, timeout and out-of-memory reproducers
#   fuzz/build/<name>.log         libFuzzer's output of the last run
#
# fuzz-merge minimises the committed corpus: fuzz/corpus/<name>/ becomes a small set of inputs
# from itself and the working corpus that covers every edge they cover.

FUZZ_SECONDS ?= 60
FUZZ_MAX_LEN ?= 65536
# Specs are a few KiB. libyaml's time grows with the square of the nesting depth (64 KiB of '['
# takes a minute under ASan), which would stop a run at the first such input; 16 KiB is seconds.
FUZZ_YAML_MAX_LEN ?= 16384
FUZZ_TIMEOUT ?= 10
FUZZ_RSS_MB ?= 2048
FUZZ_ARGS ?=
FUZZ_HARNESSES ?= model_spec cluster_spec ckpt idx npy csv text

B := fuzz/build
SAN := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g -O1
# clang before 15 knows _Float16 (parallel/dp.c) on x86 only with the CPU's own flags
ARCH_CFLAGS ?=
CFLAGS_F := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-command-line-argument $(SAN) \
	$(ARCH_CFLAGS) -I$(srcdir)/src -I$(srcdir)/fuzz -I. $(DT_CPPFLAGS)

# the library as the binary has it (its CUDA entry points are backend/cuda_load.c's; nvcc has no libFuzzer)
LIB_C := $(filter-out $(CUDA_SOURCES),$(filter %.c,$(LIB_SOURCES)))
LIB_O := $(patsubst %.c,$(B)/obj/%.o,$(LIB_C))
DATA_H := idx npy csv text

$(B)/obj/src/%.o: $(srcdir)/src/%.c
	@mkdir -p $(@D)
	@echo "  FUZZCC   $<"
	@$(FUZZ_CC) $(CFLAGS_F) -fsanitize=fuzzer-no-link -MMD -MP -c -o $@ $<

$(B)/obj/fuzz/%.o: $(srcdir)/fuzz/%.c
	@mkdir -p $(@D)
	@echo "  FUZZCC   $<"
	@$(FUZZ_CC) $(CFLAGS_F) -fsanitize=fuzzer-no-link -MMD -MP -c -o $@ $<

$(B)/libdtrain-fuzz.a: $(LIB_O)
	@rm -f $@
	@$(AR) cr $@ $^

# each harness: its file, the scratch-file helper, the data helper for the data formats
$(B)/fuzz_%: $(B)/obj/fuzz/fuzz_%.o $(B)/obj/fuzz/fuzz_util.o $(B)/obj/fuzz/fuzz_data.o $(B)/libdtrain-fuzz.a
	@echo "  FUZZLD   $@"
	@$(FUZZ_CC) $(SAN) -fsanitize=fuzzer -o $@ $(B)/obj/fuzz/fuzz_$*.o $(B)/obj/fuzz/fuzz_util.o \
		$(if $(filter $*,$(DATA_H)),$(B)/obj/fuzz/fuzz_data.o) $(B)/libdtrain-fuzz.a $(FUZZ_LIBS)

# dictionaries: YAML syntax and values, plus every key the spec readers accept (dtrain keys)
$(B)/yaml.dict: $(srcdir)/fuzz/yaml.dict $(DTRAIN)
	@mkdir -p $(@D)
	@{ cat $(srcdir)/fuzz/yaml.dict; \
	   $(DTRAIN) keys | sed 's/.*\.//' | sort -u | sed 's/.*/"&:"/'; } > $@.tmp && mv $@.tmp $@

dict_model_spec := $(B)/yaml.dict
dict_cluster_spec := $(B)/yaml.dict
dict_ckpt := $(srcdir)/fuzz/json.dict
dict_npy := $(srcdir)/fuzz/npy.dict

BINS := $(addprefix $(B)/fuzz_,$(FUZZ_HARNESSES))

.PHONY: fuzz fuzz-build fuzz-merge
fuzz-build: $(BINS) $(B)/yaml.dict

# Runs every harness (one process each, one after the other), prints a line per harness, and
# fails when any found something; its reproducer is in fuzz/build/crashes/<name>/.
fuzz: fuzz-build
	@failed=; \
	printf '%-13s %8s %12s %9s %7s %7s %6s  %s\n' harness seconds execs exec/s cov ft corpus result; \
	for h in $(FUZZ_HARNESSES); do \
	  mkdir -p $(B)/corpus/$$h $(B)/crashes/$$h; \
	  case $$h in \
	    model_spec|cluster_spec) dict=-dict=$(B)/yaml.dict; len=$(FUZZ_YAML_MAX_LEN) ;; \
	    ckpt) dict=-dict=$(srcdir)/fuzz/json.dict; len=$(FUZZ_MAX_LEN) ;; \
	    npy) dict=-dict=$(srcdir)/fuzz/npy.dict; len=$(FUZZ_MAX_LEN) ;; \
	    *) dict=; len=$(FUZZ_MAX_LEN) ;; \
	  esac; \
	  DTRAIN_FUZZ_SEEDS=$(B)/corpus/$$h ./$(B)/fuzz_$$h -max_total_time=$(FUZZ_SECONDS) \
	    -max_len=$$len -timeout=$(FUZZ_TIMEOUT) -rss_limit_mb=$(FUZZ_RSS_MB) \
	    -print_final_stats=1 -artifact_prefix=$(B)/crashes/$$h/ $$dict $(FUZZ_ARGS) \
	    $(B)/corpus/$$h $(srcdir)/fuzz/corpus/$$h > $(B)/$$h.log 2>&1; \
	  rc=$$?; \
	  execs=`sed -n 's/^stat::number_of_executed_units: *//p' $(B)/$$h.log`; \
	  rate=`sed -n 's/^stat::average_exec_per_sec: *//p' $(B)/$$h.log`; \
	  cov=`grep -o 'cov: [0-9]*' $(B)/$$h.log | tail -1 | cut -d' ' -f2`; \
	  ft=`grep -o 'ft: [0-9]*' $(B)/$$h.log | tail -1 | cut -d' ' -f2`; \
	  corp=`grep -o 'corp: [0-9]*' $(B)/$$h.log | tail -1 | cut -d' ' -f2`; \
	  if [ $$rc -eq 0 ]; then res=ok; else res="FOUND (exit $$rc; see $(B)/$$h.log)"; failed="$$failed $$h"; fi; \
	  printf '%-13s %8s %12s %9s %7s %7s %6s  %s\n' $$h $(FUZZ_SECONDS) "$${execs:-?}" "$${rate:-?}" \
	    "$${cov:-?}" "$${ft:-?}" "$${corp:-?}" "$$res"; \
	done; \
	if [ -n "$$failed" ]; then \
	  echo "make fuzz: findings in:$$failed; reproducers in $(B)/crashes/<name>/"; exit 1; \
	fi

# -use_counters=0: keep one input per set of edges, not one per hit-count bucket of each edge,
# which keeps the committed corpus (and the replay in make check) a few hundred files.
fuzz-merge: fuzz-build
	@for h in $(FUZZ_HARNESSES); do \
	  rm -rf $(B)/merge && mkdir -p $(B)/merge $(B)/corpus/$$h || exit 1; \
	  ./$(B)/fuzz_$$h -merge=1 -use_counters=0 -max_len=$(FUZZ_MAX_LEN) -timeout=$(FUZZ_TIMEOUT) -rss_limit_mb=$(FUZZ_RSS_MB) \
	    $(B)/merge $(srcdir)/fuzz/corpus/$$h $(B)/corpus/$$h > $(B)/$$h-merge.log 2>&1 \
	    || { echo "fuzz-merge $$h failed: see $(B)/$$h-merge.log"; exit 1; }; \
	  rm -f $(srcdir)/fuzz/corpus/$$h/* && cp $(B)/merge/* $(srcdir)/fuzz/corpus/$$h/ || exit 1; \
	  echo "fuzz-merge $$h: `ls $(srcdir)/fuzz/corpus/$$h | wc -l` inputs"; \
	done; rm -rf $(B)/merge

# keep the objects of the pattern rules (make would delete them as intermediates)
.SECONDARY:

-include $(LIB_O:.o=.d) $(wildcard $(B)/obj/fuzz/*.d)
