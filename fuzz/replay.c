/* fuzz/replay.c - runs a harness over files, without libFuzzer: each file given, or each file in
 * each directory given, is one LLVMFuzzerTestOneInput call. With no arguments it replays
 * $top_srcdir/fuzz/corpus/<name>/ (required) and $top_srcdir/fuzz/crashes/<name>/ (if present),
 * which is how `make check` keeps every input ever found interesting, and every crash, passing.
 * Built with the ordinary compiler (and the sanitizers under --enable-sanitizers), so the suite
 * needs no clang. Exit 0 when every input returned, 1 on usage or I/O errors; a finding aborts. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

#pragma weak LLVMFuzzerInitialize

static int strp_cmp(const void *a, const void *b)
{
        return strcmp(*(char *const *)a, *(char *const *)b);
}

/* One input: the whole file, in a buffer of exactly its size so an overread is caught. */
static int run_file(const char *path)
{
        FILE *f = fopen(path, "rb");
        if (!f) {
                fprintf(stderr, "replay %s: cannot open '%s': %s\n", fuzz_name, path, strerror(errno));
                return -1;
        }
        size_t cap = 1 << 16, n = 0, k;
        unsigned char *buf = malloc(cap);
        while (buf && (k = fread(buf + n, 1, cap - n, f)) > 0)
                if ((n += k) == cap) buf = realloc(buf, cap *= 2);
        int bad = !buf || ferror(f);
        fclose(f);
        if (bad) {
                fprintf(stderr, "replay %s: cannot read '%s'\n", fuzz_name, path);
                free(buf);
                return -1;
        }
        unsigned char *exact = malloc(n ? n : 1);
        if (!exact) abort();
        memcpy(exact, buf, n);
        free(buf);
        LLVMFuzzerTestOneInput(exact, n);
        free(exact);
        return 0;
}

/* Every regular file of dir (not hidden: .gitignore and the like), in name order. Returns the
 * number replayed, or -1. */
static long run_dir(const char *dir)
{
        DIR *d = opendir(dir);
        if (!d) {
                fprintf(stderr, "replay %s: cannot open directory '%s': %s\n", fuzz_name, dir, strerror(errno));
                return -1;
        }
        char **names = NULL;
        size_t n = 0, cap = 0;
        struct dirent *e;
        while ((e = readdir(d))) {
                if (e->d_name[0] == '.') continue;
                if (n == cap) names = realloc(names, (cap = cap ? 2 * cap : 64) * sizeof *names);
                if (!names || !(names[n++] = strdup(e->d_name))) abort();
        }
        closedir(d);
        qsort(names, n, sizeof *names, strp_cmp);
        long done = 0;
        for (size_t i = 0; i < n; i++) {
                char path[4096];
                struct stat st;
                snprintf(path, sizeof path, "%s/%s", dir, names[i]);
                if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
                        if (run_file(path)) done = -1;
                        else if (done >= 0) done++;
                }
                free(names[i]);
        }
        free(names);
        return done;
}

/* A path given on the command line: a directory's files, or one file. */
static long run_path(const char *path)
{
        struct stat st;
        if (stat(path, &st)) {
                fprintf(stderr, "replay %s: '%s': %s\n", fuzz_name, path, strerror(errno));
                return -1;
        }
        if (S_ISDIR(st.st_mode)) return run_dir(path);
        return run_file(path) ? -1 : 1;
}

int main(int argc, char **argv)
{
        if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
        int rc = 0;
        if (argc > 1) {
                for (int i = 1; i < argc; i++) {
                        long k = run_path(argv[i]);
                        if (k < 0) rc = 1;
                        else printf("replay %s: %s: %ld input%s\n", fuzz_name, argv[i], k, k == 1 ? "" : "s");
                }
                return rc;
        }
        const char *top = getenv("top_srcdir");
        if (!top || !*top) top = ".";
        char corpus[4096], crashes[4096];
        struct stat st;
        snprintf(corpus, sizeof corpus, "%s/fuzz/corpus/%s", top, fuzz_name);
        snprintf(crashes, sizeof crashes, "%s/fuzz/crashes/%s", top, fuzz_name);
        long nc = run_dir(corpus), nx = 0;
        if (stat(crashes, &st) == 0) nx = run_dir(crashes);
        if (nc < 0 || nx < 0) return 1;
        if (nc == 0) {
                fprintf(stderr, "replay %s: '%s' holds no inputs\n", fuzz_name, corpus);
                return 1;
        }
        printf("replay %s: %ld corpus inputs, %ld crash reproducers: all passed\n", fuzz_name, nc, nx);
        return 0;
}
