/* plan/profile_cache.c - the layer costs plan/profile.c remembers: per shape in memory (the median
 * of the newest DT_PROF_SAMPLES timings, as timed) and on disk, one line per timing in
 * $XDG_CACHE_HOME/dtrain/profile.tsv keyed by this machine and build, each stored with the speed
 * reference timed beside it, for the record (profile_int.h). */
#include "plan/profile.h"
#include "plan/profile_int.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <link.h>
#include <elf.h>
#include "util/common.h"
#include "util/cpu_fix.h"
#include "config.h"

/* What a layer's cost depends on: its kind and configuration (the shard's, when split), its input
 * and output shapes, the micro-batch and whether backward makes an input gradient. Not its place
 * in the model, so the cache serves any model with the same layer. */
uint64_t dt_prof_key(const dt_layer *l, int b, int dx)
{
        uint64_t h = dt_hash64((uint64_t)b, (uint64_t)dx | (uint64_t)l->place.split << 8 | (uint64_t)l->place.nshards << 16 |
                                                 (uint64_t)l->place.gather << 40);
        for (const char *s = l->ops->name; *s; s++) h = dt_hash64(h, (unsigned char)*s);
        const unsigned char *c = l->cfg;
        for (size_t i = 0; i < l->ops->cfg_size; i++) h = dt_hash64(h, c[i]);
        for (int d = 0; d < l->in.n; d++) h = dt_hash64(h, (uint64_t)l->in.d[d]);
        for (int d = 0; d < l->out.n; d++) h = dt_hash64(h, (uint64_t)l->out.d[d] << 32);
        return h;
}

uint64_t dt_prof_gkey(const dt_graph *g, int i, int b)
{
        uint64_t k = dt_prof_key(&g->layers[i], b, i || g->input_grad);
        int any = 0;
        for (int j = 0; j < g->n && !any; j++) any = dt_graph_recomputed(g, j);
        return any ? dt_hash64(k, 0x7265636f6d70ull + (uint64_t)dt_graph_recomputed(g, i)) : k;
}

dt_layer_cost *dt_prof_find(dt_prof *pf, uint64_t key)
{
        for (int i = 0; i < pf->n; i++)
                if (pf->key[i] == key) return &pf->cost[i];
        return NULL;
}

static int cmp_double(const void *a, const void *b)
{
        double x = *(const double *)a, y = *(const double *)b;
        return (x > y) - (x < y);
}

/* The median, of an even count the mean of the middle two. Not the lower median, nor any sample
 * scaled by a speed reference: runs meet this machine's slow spells as often as the profile does, and
 * the lower median of a shape's samples, each scaled by a 256^3 SGEMM timed beside it and by the
 * model's own layers timed at each start, moved one prediction (mlp-4096's 2-rank compute) between
 * 61.9 and 112.6 ms within a day while the runs' own compute stayed within 89.6-98.7 ms (Zen 3). */
static double median(double *v, int n)
{
        qsort(v, (size_t)n, sizeof *v, cmp_double);
        return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void dt_prof_settle(dt_prof *pf, int i)
{
        double v[4][DT_PROF_SAMPLES];
        int n = pf->ns[i];
        for (int k = 0; k < n; k++)
                v[0][k] = pf->samp[i][k].f, v[1][k] = pf->samp[i][k].bi, v[2][k] = pf->samp[i][k].bw, v[3][k] = pf->samp[i][k].r;
        pf->cost[i] = (dt_layer_cost){ median(v[0], n), median(v[1], n), median(v[2], n), median(v[3], n) };
}

/* Adds a sample of key (a new key, or the newest of its samples, the oldest dropped past
 * DT_PROF_SAMPLES). */
void dt_prof_put(dt_prof *pf, uint64_t key, dt_layer_cost c, int timed)
{
        for (int i = 0; i < pf->n; i++)
                if (pf->key[i] == key) {
                        if (pf->ns[i] == DT_PROF_SAMPLES) {
                                memmove(pf->samp[i], pf->samp[i] + 1, (DT_PROF_SAMPLES - 1) * sizeof pf->samp[i][0]);
                                pf->ns[i]--;
                        }
                        pf->samp[i][pf->ns[i]++] = c;
                        dt_prof_settle(pf, i);
                        return;
                }
        if (pf->n == pf->cap) {
                pf->cap = pf->cap ? 2 * pf->cap : 256;
                pf->key = realloc(pf->key, (size_t)pf->cap * sizeof *pf->key);
                pf->cost = realloc(pf->cost, (size_t)pf->cap * sizeof *pf->cost);
                pf->samp = realloc(pf->samp, (size_t)pf->cap * sizeof *pf->samp);
                pf->ns = realloc(pf->ns, (size_t)pf->cap);
                pf->timed = realloc(pf->timed, (size_t)pf->cap);
                if (!pf->key || !pf->cost || !pf->samp || !pf->ns || !pf->timed)
                        dt_die(DT_EXIT_RUNTIME, "out of memory");
        }
        pf->key[pf->n] = key;
        pf->timed[pf->n] = (unsigned char)timed;
        pf->samp[pf->n][0] = c;
        pf->ns[pf->n] = 1;
        pf->cost[pf->n++] = c;
}

/* ---- this machine's speed now ---- */

/* Seconds of a 256^3 SGEMM on the profile's backend, the least of 15 after 3 warm-ups (~3 ms in
 * all), stored beside each timing and reported (profile_reference_ms), so that a cache can be read
 * against the machine's speed when it was written. Costs are not scaled by it: it fits in L2 and
 * reads 0.40-0.53 ms from moment to moment on a 2-vCPU Zen 3 whose layers, streaming their weights,
 * do not move with it. */
double dt_prof_reference(dt_prof *pf)
{
        enum { N = 256 };
        float *a = dt_falloc((size_t)N * N), *b = dt_falloc((size_t)N * N), *c = dt_falloc((size_t)N * N);
        for (size_t i = 0; i < (size_t)N * N; i++) a[i] = b[i] = 0.01f * (float)(i % 7);
        double best = 1e30;
        for (int k = 0; k < 18; k++) {
                double t0 = dt_now();
                pf->be->ops->gemm(pf->be, 0, 0, N, N, N, 1.0f, a, N, b, N, 0.0f, c, N);
                double t = dt_now() - t0;
                if (k >= 3 && t < best) best = t;
        }
        free(a), free(b), free(c);
        return best;
}

/* ---- the file cache: one line "machine key f bi bw ref" per shape (ref: the reference's
 * seconds when measured; 0 for ratios), and "machine key f bi bw ref r" for a
 * recomputed layer (its forward run again, dt_layer_cost's r; a line without it reads r = 0) ---- */

/* One line of the file cache; r only where there is one, so every other line reads as it did. */
static void put_line(FILE *f, uint64_t machine, uint64_t key, dt_layer_cost c, double ref)
{
        fprintf(f, "%llx %llx %.9g %.9g %.9g %.9g", (unsigned long long)machine, (unsigned long long)key, c.f, c.bi,
                c.bw, ref);
        if (c.r > 0) fprintf(f, " %.9g", c.r);
        fputc('\n', f);
}

/* The running program's GNU build ID (dl_iterate_phdr visits it first), hashed into *h. */
static int hash_build_id(struct dl_phdr_info *info, size_t size, void *arg)
{
        (void)size;
        uint64_t *h = arg;
        for (int i = 0; i < info->dlpi_phnum; i++) {
                const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
                if (ph->p_type != PT_NOTE) continue;
                const char *p = (const char *)(info->dlpi_addr + ph->p_vaddr), *end = p + ph->p_memsz;
                while (p + sizeof(ElfW(Nhdr)) <= end) {
                        const ElfW(Nhdr) *n = (const ElfW(Nhdr) *)p;
                        const char *name = p + sizeof *n, *desc = name + ((n->n_namesz + 3) & ~3u);
                        if (desc + n->n_descsz > end) break;
                        if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 && !memcmp(name, "GNU", 4)) {
                                for (unsigned k = 0; k < n->n_descsz; k++) *h = dt_hash64(*h, (unsigned char)desc[k]);
                                return 1;
                        }
                        p = desc + ((n->n_descsz + 3) & ~3u);
                }
        }
        return 1;       /* only the program itself */
}

/* Which build measured: a rebuilt dtrain has other kernels, and costs cached by an older build
 * misled the planner by a third (the wide MLP's fc2 forward cached at 16.4 ms, 21.9 in the run
 * and in a fresh profile). The GNU build ID, else the program file's size and time. */
static uint64_t build_key(void)
{
        uint64_t h = 0x6275696c64ull, h0 = h;
        dl_iterate_phdr(hash_build_id, &h);
        struct stat st;
        if (h == h0 && stat("/proc/self/exe", &st) == 0)
                h = dt_hash64(dt_hash64(h, (uint64_t)st.st_size), (uint64_t)st.st_mtim.tv_sec * 1000000000ull +
                                                                (uint64_t)st.st_mtim.tv_nsec);
        return h;
}

uint64_t dt_prof_machine_key(int threads)
{
        char host[256] = "";
        gethostname(host, sizeof host - 1);
        uint64_t h = dt_hash64((uint64_t)threads, 0x9e3779b97f4a7c15ull);
        for (const char *s = host; *s; s++) h = dt_hash64(h, (unsigned char)*s);
        for (const char *s = dt_blas_core_desc(); *s; s++) h = dt_hash64(h, (unsigned char)*s);
        for (const char *s = PACKAGE_VERSION; *s; s++) h = dt_hash64(h, (unsigned char)*s);
        h = dt_hash64(h, build_key());
        /* a sanitized build runs its layers 1.5x slower or more: its costs are no one else's */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_UNDEFINED__)
        h = dt_hash64(h, 0x5a417);
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(undefined_behavior_sanitizer)
        h = dt_hash64(h, 0x5a417);
#endif
#endif
        return h;
}

static void cache_path(char *buf, size_t n)
{
        const char *x = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
        buf[0] = 0;
        if (x && *x) snprintf(buf, n, "%s/dtrain", x);
        else if (home && *home) snprintf(buf, n, "%s/.cache/dtrain", home);
}

void dt_prof_cache_load(dt_prof *pf)
{
        char dir[DT_PATH_MAX], path[DT_PATH_MAX + 16], line[256];
        cache_path(dir, sizeof dir);
        if (!dir[0]) return;
        snprintf(path, sizeof path, "%s/profile.tsv", dir);
        FILE *f = fopen(path, "r");
        if (!f) return;
        /* every build keys its own lines and every plan adds samples, so the file only grows:
         * past 4 MiB it is written again with what this build keeps (each shape's newest samples),
         * to a temporary file renamed over it (a cache: a failure only leaves it as it was) */
        struct stat st;
        FILE *keep = NULL;
        char tmp[DT_PATH_MAX + 32];
        if (fstat(fileno(f), &st) == 0 && st.st_size > (4 << 20)) {
                snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
                keep = fopen(tmp, "w");
        }
        while (fgets(line, sizeof line, f)) {
                unsigned long long mk, k;
                double a, b, c, ref = 0, r = 0;
                int n = sscanf(line, "%llx %llx %lg %lg %lg %lg %lg", &mk, &k, &a, &b, &c, &ref, &r);
                if (n < 5 || mk != pf->machine || a < 0 || b < 0 || c < 0 || r < 0) continue;
                dt_prof_put(pf, k, (dt_layer_cost){ a, b, c, r }, n < 6 || ref > 0);
        }
        fclose(f);
        if (keep) {
                for (int i = 0; i < pf->n; i++)
                        for (int k = 0; k < pf->ns[i]; k++)
                                put_line(keep, pf->machine, pf->key[i], pf->samp[i][k], pf->timed[i] ? pf->ref_now : 0.0);
                if (fclose(keep) == 0 && rename(tmp, path) == 0) return;
                unlink(tmp);
        }
}

/* c as measured now, when the reference took ref seconds (0: a ratio) */
void dt_prof_cache_save(const dt_prof *pf, uint64_t key, dt_layer_cost c, double ref)
{
        char dir[DT_PATH_MAX], path[DT_PATH_MAX + 16], failed[DT_PATH_MAX];
        cache_path(dir, sizeof dir);
        if (!dir[0] || dt_mkdir_p(dir, 0755, failed, sizeof failed) < 0) return;        /* a cache, not a need */
        snprintf(path, sizeof path, "%s/profile.tsv", dir);
        FILE *f = fopen(path, "a");
        if (!f) return;
        put_line(f, pf->machine, key, c, ref);
        fclose(f);
}
