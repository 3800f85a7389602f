/* plan_runs.c - `dtrain plan --validate`'s runs: a layout written as a cluster spec and run with
 * `dtrain run` (under mpirun for several ranks), its median step read from its metrics and its
 * layers' compute from its trace. */
#include "plan_runs.h"

#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <wordexp.h>
#include <jansson.h>
#include "util/common.h"

/* A span of a trace, microseconds. */
typedef struct span {
        double a, b;
} span;

static int span_cmp(const void *x, const void *y)
{
        double a = ((const span *)x)->a, b = ((const span *)y)->a;
        return (a > b) - (a < b);
}

static int is_cat(json_t *e, const char *c1, const char *c2)
{
        const char *cat = json_string_value(json_object_get(e, "cat"));
        return cat && (!strcmp(cat, c1) || !strcmp(cat, c2));
}

/* The compute of a run's busiest rank, ms a step: its layers' forward, backward and recompute spans in its
 * trace (out/trace.json, or trace.rankR.json for N ranks) between its first and last optimizer
 * step, less what is traced inside them (waits, collectives, shard 3's readying of its parameters:
 * pages, gathers), over the steps between; < 0 where a trace is missing or holds under two steps. */
static double trace_compute(const char *out, int N)
{
        double most = -1;
        for (int r = 0; r < N; r++) {
                char path[DT_PATH_MAX + 64];
                if (N > 1) snprintf(path, sizeof path, "%s/trace.rank%d.json", out, r);
                else snprintf(path, sizeof path, "%s/trace.json", out);
                json_t *root = json_load_file(path, 0, NULL);
                json_t *ev = json_is_object(root) ? json_object_get(root, "traceEvents") : root;
                if (!json_is_array(ev)) { json_decref(root); return -1; }
                double first = INFINITY, last = -INFINITY, sum = 0;
                int steps = 0;
                size_t i, nl = 0;
                json_t *e;
                json_array_foreach(ev, i, e) {
                        if (!is_cat(e, "optimizer", "optimizer")) continue;
                        double end = json_number_value(json_object_get(e, "ts")) + json_number_value(json_object_get(e, "dur"));
                        first = DT_MIN(first, end), last = DT_MAX(last, end), steps++;
                }
                span *ls = dt_malloc((json_array_size(ev) + 1) * sizeof *ls);
                json_array_foreach(ev, i, e) {
                        double ts = json_number_value(json_object_get(e, "ts")), d = json_number_value(json_object_get(e, "dur"));
                        /* a recomputed layer's forward again, traced before the backward that reads it */
                        if ((is_cat(e, "forward", "backward") || is_cat(e, "recompute", "recompute")) && ts >= first && ts < last)
                                sum += d, ls[nl++] = (span){ ts, ts + d };
                }
                qsort(ls, nl, sizeof *ls, span_cmp);
                span *in = dt_malloc((json_array_size(ev) + 1) * sizeof *in);
                size_t ni = 0;
                json_array_foreach(ev, i, e) {
                        double ts = json_number_value(json_object_get(e, "ts")), d = json_number_value(json_object_get(e, "dur"));
                        if (!is_cat(e, "wait", "comm") && !is_cat(e, "shard", "shard")) continue;
                        if (ts < first || ts >= last || nl == 0) continue;
                        size_t lo = 0, hi = nl;         /* the last layer span that starts by ts */
                        while (hi - lo > 1) {
                                size_t mid = (lo + hi) / 2;
                                if (ls[mid].a <= ts) lo = mid;
                                else hi = mid;
                        }
                        if (ls[lo].a <= ts && ts + d <= ls[lo].b) in[ni++] = (span){ ts, ts + d };
                }
                /* what they cover, once: a wait sits inside shard 3's span around it */
                qsort(in, ni, sizeof *in, span_cmp);
                for (size_t k = 0; k < ni;) {
                        double a = in[k].a, b = in[k].b;
                        for (k++; k < ni && in[k].a <= b; k++) b = DT_MAX(b, in[k].b);
                        sum -= b - a;
                }
                free(in);
                free(ls);
                json_decref(root);
                if (steps < 2) return -1;
                most = DT_MAX(most, 1e-3 * sum / (steps - 1));  /* the trace's microseconds */
        }
        return most;
}

/* The median step time a `dtrain run` of L wrote into its metrics, ms; < 0 when it failed; *compute:
 * its busiest rank's compute a step, as trace_compute. */
int dt_plan_validate_steps(const dt_plan_opts *o, double step_s)
{
        if (o->steps > 0) return o->steps;
        /* a fixed 30 steps was 60 ms of mlp's training, a run that short is its start-up's (the
         * launch, the first pages, the loader thread) and this machine's moment's: mlp's 2-rank
         * median read 2.71 and 2.07 ms in two validations minutes apart, at 300 steps 1.95 and
         * 2.11 (predicted 1.7-2.1); past 2000 steps the trace is not read */
        double n = step_s > 0 ? ceil(DT_PLAN_VALIDATE_SECONDS / step_s) : 30;
        return (int)DT_MAX(30.0, DT_MIN(2000.0, n));
}

double dt_plan_run_layout(const dt_plan_opts *o, dt_planner *p, const dt_layout *L, int N, int threads,
                          int nsteps, const char *dir, int k, double *compute)
{
        *compute = -1;
        char cl[DT_PATH_MAX + 32], out[DT_PATH_MAX + 32], self[DT_PATH_MAX];
        snprintf(cl, sizeof cl, "%s/plan%d.yaml", dir, k);
        snprintf(out, sizeof out, "%s/run%d", dir, k);
        FILE *f = fopen(cl, "w");
        if (!f) return -1;
        dt_layout_yaml(p, L, f);
        fclose(f);
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n <= 0) return -1;
        self[n] = 0;
        /* enough epochs for the steps whatever the epoch's length; mpirun refuses root without the flag;
         * DTRAIN_PLAN_MPIRUN replaces the launcher (e.g. mpirun with an emulated cluster's options),
         * split into words as the shell would (quotes, no commands run) */
        const char *launcher = getenv("DTRAIN_PLAN_MPIRUN");
        if (!launcher || !*launcher)
                launcher = geteuid() == 0 ? "mpirun --oversubscribe --allow-run-as-root" : "mpirun --oversubscribe";
        wordexp_t we = { 0 };
        int words = N == 1 || wordexp(launcher, &we, WRDE_NOCMD | WRDE_SHOWERR) == 0;
        if (!words) dt_error("DTRAIN_PLAN_MPIRUN: cannot split '%s' into words", launcher);
        char np[16], steps[16], nthr[16], log[DT_PATH_MAX + 48], trace[DT_PATH_MAX + 48];
        snprintf(np, sizeof np, "%d", N);
        snprintf(steps, sizeof steps, "%d", nsteps);
        snprintf(nthr, sizeof nthr, "%d", threads);
        snprintf(log, sizeof log, "%s.log", out);
        snprintf(trace, sizeof trace, "%s/trace.json", out);
        size_t na = (N > 1 && words ? we.we_wordc + 2 : 0) + 22 + 2 * (size_t)o->sets.n, j = 0;
        char **av = dt_malloc(na * sizeof *av);
        if (N > 1 && words) {
                for (size_t i = 0; i < we.we_wordc; i++) av[j++] = we.we_wordv[i];
                av[j++] = "-np";
                av[j++] = np;
        }
        const char *run[] = { self, "run", o->model, "--cluster", cl, "--out", out, "--force", "--max-steps", steps,
                              "--epochs", "100000", "--threads", nthr, "--quiet", "--trace", trace };
        /* traced for the layers' time; past 2000 steps a trace would be hundreds of MB to read */
        int traced = nsteps <= 2000;
        for (size_t i = 0; i < sizeof run / sizeof *run - 2 * !traced; i++) av[j++] = (char *)run[i];
        if (N > 1) av[j++] = "--collective-timeout", av[j++] = "120";
        /* the model spec's overrides go along; the cluster spec's are in the layout already */
        for (int i = 0; i < o->sets.n; i++)
                if (dt_sets_is_model(o->sets.kv[i])) av[j++] = "--set", av[j++] = (char *)o->sets.kv[i];
        av[j] = NULL;
        /* the run's output, both streams, into OUT.log (the shell's >'OUT.log' 2>&1) */
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0666);
        posix_spawn_file_actions_adddup2(&fa, 1, 2);
        pid_t pid;
        int st = -1, sys = words ? posix_spawnp(&pid, av[0], &fa, NULL, av, environ) : -1;
        if (sys == 0) {
                while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
                sys = WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
        }
        posix_spawn_file_actions_destroy(&fa);
        free(av);
        if (N > 1 && words) wordfree(&we);
        if (sys != 0) {
                char mark[DT_PATH_MAX + 48];
                snprintf(mark, sizeof mark, "%s.failed", out);
                FILE *m = fopen(mark, "w");
                if (m) fputs("1\n", m), fclose(m);
                return -1;
        }
        char path[DT_PATH_MAX + 64], line[1024];
        snprintf(path, sizeof path, "%s/metrics.jsonl", out);
        f = fopen(path, "r");
        if (!f) return -1;
        double ms = -1;
        while (fgets(line, sizeof line, f)) {
                char *s = strstr(line, "\"step_ms\":");
                if (s) ms = strtod(s + 10, NULL);
        }
        fclose(f);
        if (ms > 0 && traced) *compute = trace_compute(out, N);
        return ms;
}

/* Whether a run in dir failed: a non-empty NAME.failed that run_layout left. */
int dt_plan_any_failed(const char *dir)
{
        DIR *d = opendir(dir);
        if (!d) return 0;
        int failed = 0;
        struct dirent *e;
        while (!failed && (e = readdir(d))) {
                size_t n = strlen(e->d_name);
                if (n <= 7 || strcmp(e->d_name + n - 7, ".failed")) continue;
                char p[DT_PATH_MAX + 300];
                snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
                struct stat sb;
                failed = stat(p, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > 0;
        }
        closedir(d);
        return failed;
}
