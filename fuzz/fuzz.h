/* fuzz/fuzz.h - what every harness shares: the libFuzzer entry points, the harness's name (the
 * replay driver finds fuzz/corpus/<name>/ and fuzz/crashes/<name>/ by it) and a private scratch
 * directory for the files the readers open by path. A harness frees everything it allocates in
 * each call and never exits: a leak, an exit() or a sanitizer report is a finding. */
#ifndef DT_FUZZ_H
#define DT_FUZZ_H

#include <stddef.h>
#include <stdint.h>

/* libFuzzer calls Initialize once (optional, argc/argv may be ignored), then TestOneInput per input. */
int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Defined by each harness: "model_spec", "idx", ... */
extern const char fuzz_name[];

/* The harness's scratch directory (made on first use under $TMPDIR or /tmp, removed at exit). */
const char *fuzz_dir(void);
/* Writes data to fuzz_dir()/rel (truncating it; directories on the way are created) and returns
 * the full path (static storage, valid until the next call). Aborts when the scratch directory
 * cannot be written: that is the machine's failure, not a finding, and skipping the input
 * silently would hide bugs. */
const char *fuzz_write(const char *rel, const void *data, size_t size);
/* fuzz_dir()/rel (static storage, valid until the next call to fuzz_path or fuzz_write). */
const char *fuzz_path(const char *rel);
/* Removes fuzz_dir()/rel recursively (not following links); missing is fine. */
void fuzz_remove(const char *rel);

#endif
