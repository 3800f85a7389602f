/* plan/plan_cmd.c - `dtrain plan MODEL.yaml [--cluster C] [--ranks N,...]`: for each rank count the
 * best layouts the planner finds, the chosen one's per-layer table and why it won; a scaling table
 * to 1024 ranks on the cluster spec's network (and an SVG of it with --plot); --validate runs the
 * candidates with `dtrain run` (under mpirun) and sets measured step times beside the predictions;
 * --json prints the same as one JSON object. One process: the planner needs no MPI. */
#include "plan/plan_cmd.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <jansson.h>
#include "cli.h"
#include "util/common.h"
#include "train/setup.h"
#include "plan/plan.h"
#include "plan/planner.h"
#include "bench/bench.h"

int dt_plan_parse(int argc, char **argv, dt_plan_opts *o)
{
        enum { O_CLUSTER = 256, O_RANKS, O_TOP, O_JSON, O_PLOT, O_VALIDATE, O_THREADS, O_STEPS, O_NOSCALE, O_REPEAT };
        static const struct option opts[] = {
                { "cluster", required_argument, 0, O_CLUSTER }, { "ranks", required_argument, 0, O_RANKS },
                { "top", required_argument, 0, O_TOP }, { "json", no_argument, 0, O_JSON },
                { "plot", required_argument, 0, O_PLOT }, { "validate", no_argument, 0, O_VALIDATE },
                { "threads", required_argument, 0, O_THREADS }, { "steps", required_argument, 0, O_STEPS },
                { "no-scaling", no_argument, 0, O_NOSCALE }, { "repeat", required_argument, 0, O_REPEAT },
                { "help", no_argument, 0, 'h' }, { 0, 0, 0, 0 },
        };
        memset(o, 0, sizeof *o);
        o->top = 3;
        o->steps = 30;
        o->repeat = 3;
        optind = 1;
        opterr = 0;
        long long v;
        int c;
        while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
                switch (c) {
                case 'h': dt_cli_cmd_help("plan", stdout); return 1;
                case O_CLUSTER: o->cluster = optarg; break;
                case O_RANKS: {
                        /* comma-separated decimal counts: no blanks, no empty element ('1,,2', '1,2,') */
                        const char *s = optarg;
                        o->nranks = 0;
                        for (;;) {
                                size_t len = strcspn(s, ",");
                                char item[24];
                                long long n = 0;
                                int ok = len > 0 && len < sizeof item && o->nranks < DT_PLAN_MAX_COUNTS;
                                if (ok) {
                                        memcpy(item, s, len);
                                        item[len] = 0;
                                        ok = dt_cli_decimal(item, &n) == 0 && n >= 1 && n <= 1048576;
                                }
                                if (!ok) {
                                        fprintf(stderr, "dtrain plan: error: --ranks wants rank counts like 1,2,4 "
                                                "(up to %d, each in [1, 1048576]), got '%s'\n", DT_PLAN_MAX_COUNTS, optarg);
                                        return DT_EXIT_USAGE;
                                }
                                o->ranks[o->nranks++] = (int)n;
                                if (!s[len]) break;
                                s += len + 1;
                        }
                        break;
                }
                case O_TOP: if (dt_cli_int("plan", "--top", optarg, 1, 100, &v)) return DT_EXIT_USAGE; o->top = (int)v; break;
                case O_JSON: o->json = 1; break;
                case O_PLOT: o->plot = optarg; break;
                case O_VALIDATE: o->validate = 1; break;
                case O_THREADS: if (dt_cli_int("plan", "--threads", optarg, 1, 1024, &v)) return DT_EXIT_USAGE; o->threads = (int)v; break;
                case O_STEPS: if (dt_cli_int("plan", "--steps", optarg, 5, 100000, &v)) return DT_EXIT_USAGE; o->steps = (int)v; break;
                case O_NOSCALE: o->no_scaling = 1; break;
                case O_REPEAT: if (dt_cli_int("plan", "--repeat", optarg, 1, 16, &v)) return DT_EXIT_USAGE; o->repeat = (int)v; break;
                default:
                        fprintf(stderr, "dtrain plan: error: unknown or incomplete option '%s'\n"
                                "try 'dtrain plan --help'\n", argv[optind - 1]);
                        return DT_EXIT_USAGE;
                }
        }
        if (optind != argc - 1) {
                fprintf(stderr, "dtrain plan: error: give one MODEL.yaml\ntry 'dtrain plan --help'\n");
                return DT_EXIT_USAGE;
        }
        o->model = argv[optind];
        return 0;
}

/* ---- validation: the candidates run for real ---- */

/* The median step time a `dtrain run` of L wrote into its metrics, ms; < 0 when it failed. */
static double run_layout(const dt_plan_opts *o, dt_planner *p, const dt_layout *L, int N, int threads,
                         const char *dir, int k)
{
        char cl[DT_PATH_MAX + 32], out[DT_PATH_MAX + 32], cmd[4 * DT_PATH_MAX + 512], self[DT_PATH_MAX];
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
         * DTRAIN_PLAN_MPIRUN replaces the launcher (e.g. mpirun with an emulated cluster's options) */
        const char *launcher = getenv("DTRAIN_PLAN_MPIRUN");
        if (!launcher || !*launcher)
                launcher = geteuid() == 0 ? "mpirun --oversubscribe --allow-run-as-root" : "mpirun --oversubscribe";
        snprintf(cmd, sizeof cmd, "%s -np %d '%s' run '%s' --cluster '%s' --out '%s' --force --max-steps %d --epochs 100000 "
                 "--threads %d --quiet --collective-timeout 120 >'%s.log' 2>&1",
                 launcher, N, self, o->model, cl, out, o->steps, threads, out);
        if (N == 1) snprintf(cmd, sizeof cmd, "'%s' run '%s' --cluster '%s' --out '%s' --force --max-steps %d --epochs 100000 "
                             "--threads %d --quiet >'%s.log' 2>&1", self, o->model, cl, out, o->steps, threads, out);
        if (system(cmd) != 0) {
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
        return ms;
}

/* The median, least and greatest of n > 0 values. */
static void spread(double *v, int n, double *med, double *lo, double *hi)
{
        *lo = *hi = v[0];
        for (int r = 1; r < n; r++) *lo = DT_MIN(*lo, v[r]), *hi = DT_MAX(*hi, v[r]);
        *med = dt_bench_median(v, n);
}

/* ---- the scaling table ---- */

static const char *limit_of(const dt_prediction *pr)
{
        struct { const char *what; double v; } k[] = {
                { "compute", pr->compute }, { "tensor collectives", pr->tensor }, { "pipeline messages", pr->p2p },
                { "bubble", pr->bubble }, { "gradient all-reduce", pr->dp }, { "update", pr->update },
        };
        int b = 0;
        for (int i = 1; i < 6; i++)
                if (k[i].v > k[b].v) b = i;
        return k[b].what;
}

static void plot_svg(const char *path, const int *n, const double *speed, int count, const char *title)
{
        FILE *f = fopen(path, "w");
        if (!f) {
                dt_error("--plot %s: %s", path, strerror(errno));
                return;
        }
        double W = 640, H = 420, x0 = 60, y0 = 360, xw = 540, yh = 320, maxs = 1;
        for (int i = 0; i < count; i++)
                if (speed[i] > maxs) maxs = speed[i];
        double lx = log2((double)n[count - 1] > 1 ? n[count - 1] : 2);
        fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" font-family=\"sans-serif\" "
                "font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", W, H);
        fprintf(f, "<text x=\"%g\" y=\"20\">%s</text>\n", x0, title);
        fprintf(f, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"black\"/>\n", x0, y0, x0 + xw, y0);
        fprintf(f, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"black\"/>\n", x0, y0, x0, y0 - yh);
        fprintf(f, "<text x=\"%g\" y=\"%g\">ranks (log2)</text>\n<text x=\"5\" y=\"%g\">speedup</text>\n",
                x0 + xw / 2, y0 + 35, y0 - yh - 8);
        fprintf(f, "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"");
        for (int i = 0; i < count; i++)
                fprintf(f, "%.1f,%.1f ", x0 + xw * log2((double)n[i]) / lx, y0 - yh * speed[i] / maxs);
        fprintf(f, "\"/>\n<polyline fill=\"none\" stroke=\"#aaaaaa\" stroke-dasharray=\"4\" points=\"");
        for (int i = 0; i < count && n[i] <= maxs; i++)     /* linear scaling for reference */
                fprintf(f, "%.1f,%.1f ", x0 + xw * log2((double)n[i]) / lx, y0 - yh * n[i] / maxs);
        fprintf(f, "\"/>\n");
        for (int i = 0; i < count; i++)
                fprintf(f, "<text x=\"%.1f\" y=\"%g\" text-anchor=\"middle\">%d</text>\n",
                        x0 + xw * log2((double)n[i]) / lx, y0 + 16, n[i]);
        fprintf(f, "<text x=\"%g\" y=\"%g\" text-anchor=\"end\">%.0fx</text>\n", x0 - 4, y0 - yh + 4, maxs);
        fprintf(f, "</svg>\n");
        fclose(f);
}

/* ---- the command ---- */

static json_t *pred_json(const dt_planner *p, const dt_candidate *c, int batch)
{
        char lay[1024];
        dt_layout_str(p, &c->L, lay, sizeof lay);
        return json_pack("{s:s, s:[i,i,i], s:i, s:s, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:b}",
                         "layout", lay, "grid", c->L.grid[0], c->L.grid[1], c->L.grid[2], "micro_batches",
                         c->L.micro, "schedule", dt_schedule_kind_name(c->L.sched), "step_ms", 1e3 * c->pr.step,
                         "samples_per_sec", batch / c->pr.step, "compute_ms", 1e3 * c->pr.compute,
                         "tensor_ms", 1e3 * c->pr.tensor, "p2p_ms", 1e3 * c->pr.p2p, "bubble_ms", 1e3 * c->pr.bubble,
                         "dp_ms", 1e3 * c->pr.dp, "update_ms", 1e3 * c->pr.update, "memory_mib",
                         c->pr.mem / 1048576.0, "dp_mb", c->pr.bytes_dp / 1e6, "fits", c->pr.fits);
}

int dt_cmd_plan(const dt_plan_opts *o)
{
        dt_setup su = { 0 };
        dt_setup_opts so = { .model = o->model, .max_steps = -1, .seed = -1, .single = 1, .quiet = 1 };
        int rc = dt_setup_model(&su, &so);
        if (rc) {
                dt_setup_free(&su);
                return rc;
        }
        dt_cluster_spec cs, file;
        dt_cluster_spec_init(&file);
        dt_diag d = { 0 };
        if (o->cluster && dt_cluster_spec_load(&file, o->cluster, &d) < 0) {
                dt_diag_print(&d, stderr);
                dt_diag_free(&d);
                dt_setup_free(&su);
                return DT_EXIT_USAGE;
        }
        dt_cluster_spec_merge(&cs, &su.spec.parallel, &file);
        int threads = o->threads ? o->threads : cs.threads_per_rank ? cs.threads_per_rank : 1;
        int counts[DT_PLAN_MAX_COUNTS], nc = o->nranks;
        if (nc) memcpy(counts, o->ranks, sizeof counts);
        else if (cs.ranks > 0) counts[nc++] = cs.ranks;
        else for (int n = 1; n <= 4; n *= 2) counts[nc++] = n;
        const dt_graph *g = &su.g;
        int batch = su.spec.train.batch;
        dt_planner *p = dt_planner_new(g, &cs, threads, 1);
        json_t *root = json_object(), *jcounts = json_array();
        enum { MAXC = 512 };
        dt_candidate *c = dt_malloc(MAXC * sizeof *c);
        double one = 0;
        char dir[] = "/tmp/dtrain-plan.XXXXXX";
        if (o->validate && !mkdtemp(dir)) {
                dt_error("--validate: cannot make a scratch directory: %s", strerror(errno));
                return DT_EXIT_DATA;
        }
        json_object_set_new(root, "profile_drift", json_real(p->pf.drift));
        if (!o->json && p->pf.drift != 1.0)
                printf("(timed now, the model's layers take %.2fx the time the profile cache holds: every cached "
                       "cost is scaled by that)\n", p->pf.drift);
        for (int ci = 0; ci < nc; ci++) {
                int N = counts[ci];
                dt_machine m;
                dt_machine_from(&m, &cs, N, threads);
                if (one <= 0 && N != 1) {      /* the 1-rank step, for speedups */
                        dt_machine m1;
                        dt_machine_from(&m1, &cs, 1, threads);
                        dt_candidate c1;
                        if (dt_plan_search(p, &m1, 1, &c1, 1)) {
                                dt_plan_refine(p, &m1, &c1, 1);
                                one = c1.pr.step;
                        }
                }
                int n = dt_plan_search(p, &m, N, c, MAXC);
                dt_plan_refine(p, &m, c, DT_MIN(n, o->top));
                if (N == 1 && n > 0) one = c[0].pr.step;
                json_t *jn = json_object(), *jc = json_array();
                json_object_set_new(jn, "ranks", json_integer(N));
                if (!o->json) {
                        printf("%d rank%s (%d per node, %d core%s per node, %d thread%s per rank; shared memory %.1f us, "
                               "%.2f GB/s; network %.1f us, %.2f GB/s):\n", N, N == 1 ? "" : "s", m.ranks_per_node,
                               m.cores_per_node, m.cores_per_node == 1 ? "" : "s", m.threads, m.threads == 1 ? "" : "s",
                               m.intra.alpha * 1e6, 1e-9 / m.intra.beta, m.inter.alpha * 1e6, 1e-9 / m.inter.beta);
                        if (m.ranks_per_node > 1)
                                printf("  (measured now: with %d cores busy each computes %.2fx slower than alone)\n",
                                       DT_MIN(m.ranks_per_node * m.threads, m.cores_per_node),
                                       dt_prof_neighbours(&p->pf, DT_MIN(m.ranks_per_node * m.threads, m.cores_per_node)));
                        printf("  %-3s %9s %10s %8s %10s  %s\n", "#", "step ms", "samples/s", "speedup", "mem MiB",
                               "layout");
                }
                double meas[100], lo[100], hi[100];
                /* the runs alternate (A B C A B C ...) and each layout keeps the median of its repeats:
                 * this machine's speed drifts by tens of percent from run to run, and alternating
                 * spreads the drift over every layout alike */
                int top = n < o->top ? n : o->top;
                double rep[100][16], spd[100][16], speed[100], slo[100], shi[100];
                /* before each run the model's layers are timed alone as when planning: how fast the
                 * machine is then, to tell the model's error from the machine's drift */
                for (int r = 0; r < (o->validate ? o->repeat : 0); r++)
                        for (int k = 0; k < top; k++) {
                                spd[k][r] = c[k].pr.fits ? dt_prof_speed(&p->pf) : 0;
                                rep[k][r] = c[k].pr.fits ? run_layout(o, p, &c[k].L, N, threads, dir, (ci * 100 + k) * 16 + r) : -1;
                        }
                for (int k = 0; k < top && o->validate; k++) {
                        int ok = 0, ns = 0;
                        double v[16], w[16];
                        for (int r = 0; r < o->repeat; r++) {
                                if (rep[k][r] > 0) v[ok++] = rep[k][r];
                                if (spd[k][r] > 0) w[ns++] = spd[k][r];
                        }
                        if (ok == o->repeat) spread(v, ok, &meas[k], &lo[k], &hi[k]);
                        else meas[k] = lo[k] = hi[k] = -1;
                        if (ns) spread(w, ns, &speed[k], &slo[k], &shi[k]);
                        else speed[k] = slo[k] = shi[k] = 0;
                }
                for (int k = 0; k < top; k++) {
                        char lay[1024];
                        dt_layout_str(p, &c[k].L, lay, sizeof lay);
                        if (!o->validate) meas[k] = -1;
                        json_t *jp = pred_json(p, &c[k], batch);
                        if (o->validate) {
                                json_object_set_new(jp, "measured_step_ms", meas[k] > 0 ? json_real(meas[k]) : json_null());
                                json_object_set_new(jp, "measured_min_ms", meas[k] > 0 ? json_real(lo[k]) : json_null());
                                json_object_set_new(jp, "measured_max_ms", meas[k] > 0 ? json_real(hi[k]) : json_null());
                                json_object_set_new(jp, "machine_drift", speed[k] > 0 ? json_real(speed[k]) : json_null());
                                json_object_set_new(jp, "machine_drift_min", speed[k] > 0 ? json_real(slo[k]) : json_null());
                                json_object_set_new(jp, "machine_drift_max", speed[k] > 0 ? json_real(shi[k]) : json_null());
                        }
                        json_array_append_new(jc, jp);
                        if (o->json) continue;
                        printf("  %-3d %9.2f %10.0f %7.2fx %10.1f  %s%s%s\n", k + 1, 1e3 * c[k].pr.step,
                               batch / c[k].pr.step, one > 0 ? one / c[k].pr.step : 0, c[k].pr.mem / 1048576.0, lay,
                               c[k].pr.fits ? "" : "  [does not fit: ", c[k].pr.fits ? "" : c[k].pr.why);
                        if (!c[k].pr.fits) printf("]\n");
                        if (o->validate && meas[k] > 0 && o->repeat > 1)
                                printf("      measured %.2f ms (runs %.2f .. %.2f), predicted %.2f ms: error %+.1f%%\n",
                                       meas[k], lo[k], hi[k], 1e3 * c[k].pr.step,
                                       100.0 * (1e3 * c[k].pr.step - meas[k]) / meas[k]);
                        else if (o->validate)
                                printf("      measured %s%.2f ms, predicted %.2f ms: error %+.1f%%\n",
                                       meas[k] > 0 ? "" : "(failed) ", meas[k], 1e3 * c[k].pr.step,
                                       meas[k] > 0 ? 100.0 * (1e3 * c[k].pr.step - meas[k]) / meas[k] : 0.0);
                        if (o->validate && meas[k] > 0 && speed[k] > 0)
                                printf("      (the model's layers, timed alone before each of its runs, took %.2fx .. %.2fx "
                                       "their time when planning: the machine's own drift)\n", slo[k], shi[k]);
                }
                if (o->validate && n > 1) {     /* does the predicted order hold? */
                        /* a pair the prediction orders one way and the medians the other is a tie
                         * when their runs overlap (the slower one's fastest run beat the faster
                         * one's slowest): the machine's drift, not the model, decided it; and when
                         * the predictions are within 1% (schedules of one pipeline that differ
                         * in a few micro-seconds): the model called them equal, it ordered nothing */
                        int k = n < o->top ? n : o->top, ok = 1, firm = 1;
                        char tie[256] = "", rev[256] = "";
                        for (int a = 0; a < k; a++)
                                for (int b = a + 1; b < k; b++) {
                                        if (!(meas[a] > 0 && meas[b] > 0 && meas[a] > meas[b])) continue;
                                        ok = 0;
                                        double pa = c[a].pr.step, pb = c[b].pr.step;
                                        int apart = lo[a] > hi[b] && fabs(pa - pb) > 0.01 * DT_MIN(pa, pb);
                                        char *w = apart ? rev : tie;
                                        if (apart) firm = 0;
                                        if (!*w)
                                                snprintf(w, sizeof tie, "#%d ran %.2f ms (%.2f .. %.2f), #%d %.2f ms "
                                                         "(%.2f .. %.2f)", b + 1, meas[b], lo[b], hi[b], a + 1,
                                                         meas[a], lo[a], hi[a]);
                                }
                        json_object_set_new(jn, "order_holds", json_boolean(ok));
                        json_object_set_new(jn, "order_holds_beyond_noise", json_boolean(firm));
                        if (!o->json) {
                                if (ok) printf("  measured order of the top %d: as predicted\n", k);
                                else if (firm)
                                        printf("  measured order of the top %d: as predicted, but for a tie (runs "
                                               "that overlap, or predictions within 1%%): %s\n", k, tie);
                                else printf("  measured order of the top %d: differs: %s\n", k, rev);
                        }
                }
                json_object_set_new(jn, "plans", jc);
                if (n > 0) {
                        char why[512];
                        dt_plan_why(&c[0], n > 1 ? &c[1] : NULL, why, sizeof why);
                        json_object_set_new(jn, "why", json_string(why));
                        if (!o->json) {
                                char lay[1024];
                                dt_layout_str(p, &c[0].L, lay, sizeof lay);
                                printf("  chosen: %s\n  why: %s\n", lay, why);
                                printf("  predicted: %.2f ms per step (compute %.2f, tensor %.2f, pipeline messages "
                                       "%.2f, bubble %.2f, exposed all-reduce %.2f, update %.2f), %.0f samples/s\n",
                                       1e3 * c[0].pr.step, 1e3 * c[0].pr.compute, 1e3 * c[0].pr.tensor,
                                       1e3 * c[0].pr.p2p, 1e3 * c[0].pr.bubble, 1e3 * c[0].pr.dp, 1e3 * c[0].pr.update,
                                       batch / c[0].pr.step);
                                dt_plan_print_layers(p, &m, &c[0].L, stdout);
                                printf("  as a cluster spec:\n");
                                dt_layout_yaml(p, &c[0].L, stdout);
                                printf("\n");
                        }
                }
                json_array_append_new(jcounts, jn);
        }
        json_object_set_new(root, "model", json_string(su.spec.name));
        json_object_set_new(root, "counts", jcounts);
        if (!o->no_scaling) {
                /* many ranks: FLOP-modelled layer costs, the cluster spec's network between nodes */
                dt_planner *q = dt_planner_new(g, &cs, threads, 0);
                json_t *js = json_array();
                int ns = 0, sn[16];
                double sp[16], base = 0;
                if (!o->json) printf("scaling on the cluster spec's network (%.1f us, %.2f GB/s), FLOP-modelled layers:\n"
                                     "  %6s %10s %10s %8s  %-22s %s\n", cs.latency_us, cs.bandwidth_gbs, "ranks",
                                     "step ms", "samples/s", "speedup", "limited by", "layout");
                for (int N = 1; N <= 1024; N *= 2) {
                        dt_machine m;
                        dt_machine_from(&m, &cs, N, threads);
                        if (!cs.ranks_per_node) m.ranks_per_node = DT_MIN(N, m.cores_per_node / m.threads > 0 ? m.cores_per_node / m.threads : 1);
                        int n = dt_plan_search(q, &m, N, c, MAXC);
                        if (!n || !c[0].pr.fits) break;
                        if (N == 1) base = c[0].pr.step;
                        char lay[1024];
                        dt_layout_str(q, &c[0].L, lay, sizeof lay);
                        sn[ns] = N;
                        sp[ns++] = base / c[0].pr.step;
                        json_array_append_new(js, json_pack("{s:i, s:f, s:f, s:s, s:s}", "ranks", N, "step_ms",
                                                            1e3 * c[0].pr.step, "speedup", base / c[0].pr.step,
                                                            "limited_by", limit_of(&c[0].pr), "layout", lay));
                        if (!o->json)
                                printf("  %6d %10.3f %10.0f %7.2fx  %-22s %s\n", N, 1e3 * c[0].pr.step,
                                       batch / c[0].pr.step, base / c[0].pr.step, limit_of(&c[0].pr), lay);
                }
                json_object_set_new(root, "scaling", js);
                if (o->plot && ns > 1) {
                        char title[256];
                        snprintf(title, sizeof title, "%s: predicted speedup, %.1f us, %.2f GB/s", su.spec.name,
                                 cs.latency_us, cs.bandwidth_gbs);
                        plot_svg(o->plot, sn, sp, ns, title);
                }
                dt_planner_free(q);
        }
        if (o->validate) {      /* the runs' directories go, unless one failed (its log is there) */
                int failed = 0;
                char cmd[DT_PATH_MAX + 32];
                snprintf(cmd, sizeof cmd, "grep -qs . %s/*.failed", dir);
                failed = system(cmd) == 0;
                snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
                if (!failed && system(cmd) != 0) dt_error("cannot remove %s", dir);
                else if (failed) fprintf(stderr, "dtrain plan: a validation run failed; its log is in %s\n", dir);
        }
        if (o->json) {
                char *s = json_dumps(root, JSON_INDENT(1));
                puts(s);
                free(s);
        }
        json_decref(root);
        free(c);
        dt_planner_free(p);
        dt_diag_free(&d);
        dt_setup_free(&su);
        return 0;
}
