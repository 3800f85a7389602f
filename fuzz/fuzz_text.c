/* fuzz/fuzz_text.c - libFuzzer harness for text sources (character-level data). The first four
 * bytes of an input are the source's settings, the rest is the text:
 *   byte 0  seq_len = 1 + b % 64           byte 2  holdout = b / 256
 *   byte 1  stride = b % (seq_len + 1)     byte 3  bit 0: the text is a directory tree: the rest
 *           (0: seq_len)                           is cut at each 0x1e byte into files spread
 *                                                  over subdirectories, with an empty directory
 *                                                  and a symbolic link (which the reader skips)
 *                                          bit 1: the holdout part    bit 2: limit 3
 *                                          bit 3: data.classes 40     bit 4: a regression loss
 *                                          bit 5: a model input one longer than seq_len
 * It goes through dt_dataset_load (dt_text_read, dt_text_load) and, when accepted, a batch is
 * gathered. Any outcome but a clean return is a finding. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz.h"
#include "fuzz_data.h"

const char fuzz_name[] = "text";

#define MAX_FILES 16

/* the text as a tree: text/d<k % 3>/f<k> for each piece, text/empty/, text/link -> the first piece */
static const char *write_tree(const uint8_t *p, size_t n)
{
        fuzz_remove("text");
        int k = 0;
        for (;;) {
                const uint8_t *sep = k < MAX_FILES - 1 ? memchr(p, 0x1e, n) : NULL;
                size_t len = sep ? (size_t)(sep - p) : n;
                char rel[64];
                snprintf(rel, sizeof rel, "text/d%d/f%02d", k % 3, k);
                fuzz_write(rel, p, len);
                k++;
                if (!sep) break;
                p += len + 1;
                n -= len + 1;
        }
        mkdir(fuzz_path("text/empty"), 0700);
        char target[2048];
        snprintf(target, sizeof target, "%s", fuzz_path("text/d0/f00"));
        if (symlink(target, fuzz_path("text/link"))) {
                perror("fuzz text: symlink");
                abort();
        }
        return fuzz_path("text");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < 4) return 0;
        const uint8_t *p = data + 4;
        size_t n = size - 4;
        dt_source_spec src;
        memset(&src, 0, sizeof src);
        src.present = 1;
        src.format = DT_FMT_TEXT;
        src.seq_len = 1 + data[0] % 64;
        src.stride = data[1] % (src.seq_len + 1);
        src.holdout = data[2] / 256.0;
        unsigned flags = data[3];
        src.part = flags & 2 ? DT_TEXT_HOLDOUT : DT_TEXT_TRAIN;
        src.limit = flags & 4 ? 3 : 0;
        const char *path = flags & 1 ? write_tree(p, n) : fuzz_write("text.txt", p, n);
        snprintf(src.images, sizeof src.images, "%s", path);

        dt_data_spec spec;
        memset(&spec, 0, sizeof spec);
        spec.train = src;
        spec.classes = flags & 8 ? 40 : 0;
        dt_shape in = { .n = 1, .d = { src.seq_len + (flags & 32 ? 1 : 0) } };
        char msg[2048];
        dt_dataset ds;
        if (dt_dataset_load(&ds, &spec.train, &spec, &in, flags & 16 ? 0 : 256, msg, sizeof msg) == 0) {
                fuzz_gather(&ds);
                dt_dataset_free(&ds);
        }
        return 0;
}
