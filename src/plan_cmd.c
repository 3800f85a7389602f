/* plan_cmd.c - `dtrain plan MODEL.yaml [--cluster C] [--ranks N,...]`: for each rank count the
 * best layouts the planner finds, the chosen one's per-layer table and why it won; a scaling table
 * to 1024 ranks on the cluster spec's network (and an SVG of it with --plot); --validate runs the
 * candidates with `dtrain run` (under mpirun) and sets measured step times beside the predictions;
 * --json prints the same as one JSON object. One process: the planner needs no MPI. */
#include "plan_cmd.h"
#include "plan_runs.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <jansson.h>
#include "cli.h"
#include "util/common.h"
#include "train/setup.h"
#include "plan/plan.h"
#include "plan/planner.h"
#include "util/stats.h"

enum { O_CLUSTER = 256, O_RANKS, O_TOP, O_JSON, O_PLOT, O_VALIDATE, O_THREADS, O_STEPS, O_NOSCALE, O_REPEAT, O_SET, O_DATA };

static const dt_cli_opt opts[] = {
        { "cluster", required_argument, O_CLUSTER, "FILE", "cluster spec (network, cores_per_node, ranks_per_node, threads)" },
        { "ranks", required_argument, O_RANKS, "N[,N...]", "rank counts to plan for (default: the spec's ranks, else 1,2,4)" },
        { "top", required_argument, O_TOP, "K", "layouts shown per rank count (default 3)" },
        { "data", required_argument, O_DATA, "D|all", "only layouts with data degree D (all: the rank count)" },
        { "threads", required_argument, O_THREADS, "N", "BLAS threads per rank (default: the cluster spec's, else 1)" },
        { "validate", no_argument, O_VALIDATE, NULL,
          "run each shown layout (dtrain run under mpirun) and print\n"
          "measured against predicted step time" },
        { "steps", required_argument, O_STEPS, "N", "steps each validation run trains (default: 2 s of training by the prediction, 30 to 2000)" },
        { "repeat", required_argument, O_REPEAT, "R", "validation runs of each layout, alternating; medians (default 3)" },
        { "no-scaling", no_argument, O_NOSCALE, NULL, "leave out the scaling table" },
        { "set", required_argument, O_SET, "KEY=VALUE", "override a model or cluster spec key, as for run (repeatable)" },
        { "plot", required_argument, O_PLOT, "FILE", "write the scaling table's speedup curve as an SVG" },
        { "json", no_argument, O_JSON, NULL, "print one JSON object instead of the tables" },
        { NULL, 0, 0, NULL, NULL },
};

const dt_cli_cmd dt_plan_cmd = {
        .name = "plan", .synopsis = "plan MODEL.yaml",
        .summary = "choose how to split the model over N ranks and explain why",
        .usage = "usage: dtrain plan MODEL.yaml [options]\n"
                 "\n"
                 "Predicts the training step of every layout (data x pipeline x tensor grid, tensor\n"
                 "splits, stage cuts, micro-batches, schedule) on each rank count from this machine's\n"
                 "measured layer costs and the cluster spec's network, shows the best, the chosen one's\n"
                 "layers and why it won, and a scaling table to 1024 ranks. strategy: auto uses it.\n",
        .opts = opts,
};

int dt_plan_parse(int argc, char **argv, dt_plan_opts *o)
{
        memset(o, 0, sizeof *o);
        o->top = 3;
        o->steps = 0;   /* by the layout's predicted step (dt_plan_validate_steps) */
        o->repeat = 3;
        dt_cli_getopt g;
        dt_cli_getopt_init(&g, &dt_plan_cmd);
        long long v;
        int c;
        while ((c = dt_cli_next(&g, argc, argv)) != -1) {
                switch (c) {
                case 'h': dt_cli_help(&dt_plan_cmd, stdout); return 1;
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
                case O_DATA:
                        o->data = strcmp(optarg, "all") ? (dt_cli_decimal(optarg, &v) || v < 1 || v > 1048576 ? 0 : (int)v) : -1;
                        if (!o->data) {
                                fprintf(stderr, "dtrain plan: error: --data wants a data degree in [1, 1048576] or "
                                        "'all', got '%s'\n", optarg);
                                return DT_EXIT_USAGE;
                        }
                        break;
                case O_TOP: if (dt_cli_int("plan", "--top", optarg, 1, 100, &v)) return DT_EXIT_USAGE; o->top = (int)v; break;
                case O_JSON: o->json = 1; break;
                case O_PLOT: o->plot = optarg; break;
                case O_VALIDATE: o->validate = 1; break;
                case O_SET: dt_sets_add(&o->sets, optarg, NULL); break;
                case O_THREADS: if (dt_cli_int("plan", "--threads", optarg, 1, 1024, &v)) return DT_EXIT_USAGE; o->threads = (int)v; break;
                case O_STEPS: if (dt_cli_int("plan", "--steps", optarg, 5, 100000, &v)) return DT_EXIT_USAGE; o->steps = (int)v; break;
                case O_NOSCALE: o->no_scaling = 1; break;
                case O_REPEAT: if (dt_cli_int("plan", "--repeat", optarg, 1, 16, &v)) return DT_EXIT_USAGE; o->repeat = (int)v; break;
                default: return dt_cli_bad_option("plan", argv, 0);
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

/* The median, least and greatest of n > 0 values. */
static void spread(double *v, int n, double *med, double *lo, double *hi)
{
        *lo = *hi = v[0];
        for (int r = 1; r < n; r++) *lo = DT_MIN(*lo, v[r]), *hi = DT_MAX(*hi, v[r]);
        *med = dt_median(v, n);
}

/* ---- the scaling table ---- */

static const char *limit_of(const dt_prediction *pr)
{
        struct { const char *what; double v; } k[] = {
                { "compute", pr->compute }, { "tensor collectives", pr->tensor }, { "pipeline messages", pr->p2p },
                { "bubble", pr->bubble }, { "gradient all-reduce", pr->dp }, { "update", pr->update },
                { "data and loss", pr->data },
        };
        int b = 0;
        for (int i = 1; i < 7; i++)
                if (k[i].v > k[b].v) b = i;
        return k[b].what;
}

/* s with the characters XML gives a meaning escaped */
static void xml_text(FILE *f, const char *s)
{
        for (; *s; s++)
                if (*s == '<') fputs("&lt;", f);
                else if (*s == '>') fputs("&gt;", f);
                else if (*s == '&') fputs("&amp;", f);
                else fputc(*s, f);
}

/* y of log2(v) on the plot's axis [lo, hi] (log2 units) */
static double plot_y(double v, double lo, double hi, double y0, double yh)
{
        return y0 - yh * (log2(v) - lo) / (hi - lo);
}

void dt_plan_svg(FILE *f, const int *n, const double *speed, const int *anchored, int count, const char *title,
                 const char *note)
{
        /* both axes log2: linear scaling, speedup N on N ranks, is then the straight diagonal (on a
         * linear speedup axis against log2 ranks it bends upwards and dwarfs the curve) */
        double W = 680, H = 460, x0 = 70, y0 = 370, xw = 560, yh = 320;
        double top = 1, bot = 1;
        int last = count > 0 ? n[count - 1] : 2;
        for (int i = 0; i < count; i++) top = DT_MAX(top, speed[i]), bot = DT_MIN(bot, speed[i]);
        top = DT_MAX(top, (double)last);
        double lo = floor(log2(bot > 0 ? bot : 1)), hi = ceil(log2(top));
        if (hi <= lo) hi = lo + 1;
        double lx = log2(last > 1 ? last : 2);
#define PX(r) (x0 + xw * log2((double)(r)) / lx)
        fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" font-family=\"sans-serif\" "
                "font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", W, H);
        fprintf(f, "<text x=\"%g\" y=\"20\" font-size=\"14\">", x0);
        xml_text(f, title);
        fprintf(f, "</text>\n");
        /* a tick and a grid line at every power of two of the speedup (every other past 12) */
        int step = hi - lo > 12 ? 2 : 1;
        for (double e = lo; e <= hi + 1e-9; e += step) {
                double v = exp2(e), y = plot_y(v, lo, hi, y0, yh);
                fprintf(f, "<line class=\"grid\" x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" stroke=\"#e6e6e6\"/>\n",
                        x0, y, x0 + xw, y);
                fprintf(f, "<text class=\"ytick\" x=\"%g\" y=\"%.1f\" text-anchor=\"end\">%gx</text>\n", x0 - 6, y + 4, v);
        }
        for (int i = 0; i < count; i++)
                fprintf(f, "<text class=\"xtick\" x=\"%.1f\" y=\"%g\" text-anchor=\"middle\">%d</text>\n", PX(n[i]),
                        y0 + 16, n[i]);
        fprintf(f, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"black\"/>\n", x0, y0, x0 + xw, y0);
        fprintf(f, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"black\"/>\n", x0, y0, x0, y0 - yh);
        fprintf(f, "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">ranks (log scale)</text>\n", x0 + xw / 2, y0 + 34);
        fprintf(f, "<text x=\"16\" y=\"%g\" text-anchor=\"middle\" transform=\"rotate(-90 16 %g)\">speedup over one rank "
                "(log scale)</text>\n", y0 - yh / 2, y0 - yh / 2);
        /* linear scaling: two points make it, a straight line on these axes */
        fprintf(f, "<line class=\"ideal\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#999999\" "
                "stroke-dasharray=\"5 4\"/>\n", PX(1), plot_y(1, lo, hi, y0, yh), PX(last), plot_y(last, lo, hi, y0, yh));
        fprintf(f, "<polyline class=\"predicted\" fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"");
        for (int i = 0; i < count; i++) fprintf(f, "%.1f,%.1f ", PX(n[i]), plot_y(speed[i], lo, hi, y0, yh));
        fprintf(f, "\"/>\n");
        for (int i = 0; i < count; i++)
                fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" stroke=\"#1f77b4\" stroke-width=\"1.5\" fill=\"%s\"/>\n",
                        PX(n[i]), plot_y(speed[i], lo, hi, y0, yh), anchored && anchored[i] ? "#1f77b4" : "white");
        /* the legend, top left, where the curves start low */
        double lx0 = x0 + 14, ly0 = y0 - yh + 14;
        fprintf(f, "<g class=\"legend\">\n<rect x=\"%g\" y=\"%g\" width=\"330\" height=\"74\" fill=\"white\" "
                "stroke=\"#cccccc\"/>\n", lx0 - 6, ly0 - 12);
        fprintf(f, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"#1f77b4\" stroke-width=\"2\"/>"
                "<text x=\"%g\" y=\"%g\">predicted speedup (the layout each count gets)</text>\n",
                lx0, ly0, lx0 + 24, ly0, lx0 + 32, ly0 + 4);
        fprintf(f, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"#999999\" stroke-dasharray=\"5 4\"/>"
                "<text x=\"%g\" y=\"%g\">linear: N times one rank's speed</text>\n",
                lx0, ly0 + 18, lx0 + 24, ly0 + 18, lx0 + 32, ly0 + 22);
        fprintf(f, "<circle cx=\"%g\" cy=\"%g\" r=\"4\" fill=\"#1f77b4\"/><text x=\"%g\" y=\"%g\">as the per-count "
                "tables (measured layer costs)</text>\n", lx0 + 12, ly0 + 36, lx0 + 32, ly0 + 40);
        fprintf(f, "<circle cx=\"%g\" cy=\"%g\" r=\"4\" fill=\"white\" stroke=\"#1f77b4\"/><text x=\"%g\" y=\"%g\">"
                "modelled from FLOPs, scaled to the measured layers</text>\n</g>\n", lx0 + 12, ly0 + 54, lx0 + 32,
                ly0 + 58);
        if (note && *note) {
                fprintf(f, "<text class=\"note\" x=\"%g\" y=\"%g\">", x0, H - 14);
                xml_text(f, note);
                fprintf(f, "</text>\n");
        }
        fprintf(f, "</svg>\n");
#undef PX
}

/* ---- the command ---- */

/* The scaling table's machine for N ranks: a core per rank (threads cores each), as many to a node
 * as the cluster spec's (or this machine's) cores hold unless it says ranks_per_node, and each rank
 * the memory of its node's share (set before dt_machine_from: fixed up after it, the memory stayed
 * a node's over all N ranks, and at 64 ranks nothing fitted, which ended the table there). */
static void scaling_machine(dt_machine *m, const dt_cluster_spec *cs, int N, int threads)
{
        dt_cluster_spec c = *cs;
        if (!c.ranks_per_node) {
                dt_machine_from(m, cs, 1, threads);
                c.ranks_per_node = DT_MAX(1, m->cores_per_node / DT_MAX(1, m->threads));
        }
        dt_machine_from(m, &c, N, threads);
}

static json_t *pred_json(const dt_planner *p, const dt_candidate *c, int batch)
{
        char lay[1024];
        dt_layout_str(p, &c->L, lay, sizeof lay);
        json_t *j = json_pack("{s:s, s:[i,i,i], s:i, s:s, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:b}",
                         "layout", lay, "grid", c->L.grid[0], c->L.grid[1], c->L.grid[2], "micro_batches",
                         c->L.micro, "schedule", dt_schedule_kind_name(c->L.sched), "step_ms", 1e3 * c->pr.step,
                         "samples_per_sec", batch / c->pr.step, "compute_ms", 1e3 * c->pr.compute,
                         "tensor_ms", 1e3 * c->pr.tensor, "p2p_ms", 1e3 * c->pr.p2p, "bubble_ms", 1e3 * c->pr.bubble,
                         "dp_ms", 1e3 * c->pr.dp, "update_ms", 1e3 * c->pr.update, "data_ms", 1e3 * c->pr.data, "memory_mib",
                         c->pr.mem / 1048576.0, "dp_mb", c->pr.bytes_dp / 1e6, "dp_link_mb", c->pr.link_dp / 1e6, "fits", c->pr.fits);
        if (c->pr.dp_two > 0)   /* the gradients' whole sum each way, and the one that runs */
                json_object_set_new(j, "gradient_sum", json_pack("{s:f, s:f, s:s}", "flat_ms", 1e3 * c->pr.dp_flat,
                                    "two_level_ms", 1e3 * c->pr.dp_two, "runs",
                                    c->pr.dp_hier ? "two-level" : "flat"));
        return j;
}

/* What one `dtrain plan` holds while it reports: the options, the planner, the rank counts and the
 * layouts kept for each (the 1-rank group added when the counts lack it), the JSON being built. */
struct plan_run {
        const dt_plan_opts *o;
        const dt_graph *g;
        dt_cluster_spec cs;
        dt_planner *p;
        int threads, batch;
        int counts[DT_PLAN_MAX_COUNTS], nc, ng, one_g;
        dt_machine ms[DT_PLAN_MAX_COUNTS + 1];
        dt_plan_group grp[DT_PLAN_MAX_COUNTS + 1];
        dt_candidate *cand, *kept;
        dt_prediction one;              /* the 1-rank layout the speedups divide */
        int lat_assumed, bw_assumed;
        char net[160], dir[32];
        json_t *root;
};

enum { MAXC = 512 };    /* layouts one search returns */

/* A layout's validation figures: median step and its runs' range, and the machine's drift. */
struct measured {
        double meas[100], lo[100], hi[100], speed[100], slo[100], shi[100], comp[100], at_pred[100];
        double at_drift[100], drift_err[100];
};

/* The rank counts to plan for: --ranks, else the cluster spec's ranks, else 1, 2 and 4. */
static void plan_counts(struct plan_run *r)
{
        r->nc = r->o->nranks;
        if (r->nc) memcpy(r->counts, r->o->ranks, sizeof r->counts);
        else if (r->cs.ranks > 0) r->counts[r->nc++] = r->cs.ranks;
        else for (int n = 1; n <= 4; n *= 2) r->counts[r->nc++] = n;
}

/* The network line shown with each table, saying which figures dtrain assumed for want of them. */
static void plan_network(struct plan_run *r)
{
        /* the network figures dtrain assumes when the cluster spec gives none, said so wherever shown */
        r->lat_assumed = !(r->cs.set & DT_CS_LATENCY);
        r->bw_assumed = !(r->cs.set & DT_CS_BANDWIDTH);
        snprintf(r->net, sizeof r->net, "%.1f us%s, %.2f GB/s%s", r->cs.latency_us,
                 r->lat_assumed ? " (assumed)" : "", r->cs.bandwidth_gbs, r->bw_assumed ? " (assumed)" : "");
        json_object_set_new(r->root, "network_assumed", json_boolean(r->lat_assumed || r->bw_assumed));
        json_object_set_new(r->root, "profile_drift", json_real(r->p->pf.drift));
        json_object_set_new(r->root, "profile_reference_ms", json_real(1e3 * r->p->pf.ref_now));
        /* said, not used: a few ms timed now is a moment of the machine, the cache its usual state */
        if (!r->o->json && fabs(r->p->pf.drift - 1.0) > 0.1)
                printf("(timed now, the model's layers take %.2fx the time the profile cache holds: this machine "
                       "runs %s than usual now; the costs used are the cache's)\n", r->p->pf.drift,
                       r->p->pf.drift > 1 ? "slower" : "faster");
}

/* Search every count's layouts, keep the best, and time the kept ones again side by side. */
static void plan_search_all(struct plan_run *r)
{
        /* Every count's layouts are searched first (each shape timed when first needed), then the
         * ones shown, with their runner-up and the 1-rank layout the speedups divide, are timed
         * again side by side (dt_plan_refine): timed at their own moments, one count's layouts in a
         * quiet spell and another's under load gave a 4.49x speedup on 2 ranks. */
        int keep = r->o->top + 1;
        r->ng = r->nc;
        r->one_g = -1;
        for (int ci = 0; ci < r->nc && r->one_g < 0; ci++)
                if (r->counts[ci] == 1) r->one_g = ci;
        if (r->one_g < 0) r->one_g = r->ng++;
        r->kept = dt_malloc((size_t)r->ng * (size_t)keep * sizeof *r->kept);
        for (int gi = 0; gi < r->ng; gi++) {
                int N = gi < r->nc ? r->counts[gi] : 1;
                dt_machine_from(&r->ms[gi], &r->cs, N, r->threads);
                r->p->data_pin = gi < r->nc ? r->o->data : 0;   /* the speedups' 1-rank layout: any */
                int n = dt_plan_search(r->p, &r->ms[gi], N, r->cand, MAXC);
                r->grp[gi] = (dt_plan_group){ &r->ms[gi], &r->kept[(size_t)gi * keep],
                                              DT_MIN(n, gi < r->nc ? keep : 1) };
                memcpy(r->grp[gi].c, r->cand, (size_t)r->grp[gi].n * sizeof *r->cand);
        }
        dt_plan_refine(r->p, r->grp, r->ng, 3);
        r->one = (dt_prediction){ 0 };
        if (r->grp[r->one_g].n && r->grp[r->one_g].c[0].pr.fits) r->one = r->grp[r->one_g].c[0].pr;
}

/* The line that opens a count's table: its machine, and how much slower a busy node computes. */
static void print_count_head(const struct plan_run *r, int N, const dt_machine *m)
{
        printf("%d rank%s (%d per node, %d core%s per node, %d thread%s per rank; shared memory %.1f us, "
               "%.2f GB/s; network %s):\n", N, N == 1 ? "" : "s", m->ranks_per_node,
               m->cores_per_node, m->cores_per_node == 1 ? "" : "s", m->threads, m->threads == 1 ? "" : "s",
               m->intra.alpha * 1e6, 1e-9 / m->intra.beta, r->net);
        if (m->ranks_per_node > 1) {
                int busy = DT_MIN(m->ranks_per_node * m->threads, m->cores_per_node);
                printf("  (measured now: with %d cores busy each computes %.2fx slower than alone, and takes its "
                       "optimizer step %.2fx slower)\n", busy, dt_prof_neighbours(&r->p->pf, busy),
                       dt_prof_neighbours_mem(&r->p->pf, busy));
        }
        printf("  %-3s %9s %10s %8s %10s  %s\n", "#", "step ms", "samples/s", "speedup", "mem MiB", "layout");
}

/* --validate: run a count's top layouts, alternating, and keep each one's medians in *ms. */
static void validate_count(const struct plan_run *r, int ci, int top, struct measured *ms)
{
        const dt_plan_opts *o = r->o;
        const dt_candidate *c = r->grp[ci].c;
        /* the runs alternate (A B C A B C ...) and each layout keeps the median of its repeats:
         * this machine's speed drifts by tens of percent from run to run, and alternating
         * spreads the drift over every layout alike */
        double rep[100][16], spd[100][16], cmp[100][16];
        /* before each run the model's layers are timed alone as when planning: how fast the
         * machine is then, to tell the model's error from the machine's drift */
        for (int rr = 0; rr < o->repeat; rr++)
                for (int k = 0; k < top; k++) {
                        double before = c[k].pr.fits ? dt_prof_speed(&r->p->pf) : 0;
                        cmp[k][rr] = -1;
                        rep[k][rr] = c[k].pr.fits ? dt_plan_run_layout(o, r->p, &c[k].L, r->counts[ci], r->threads,
                                                               dt_plan_validate_steps(o, c[k].pr.step), r->dir,
                                                               (ci * 100 + k) * 16 + rr, &cmp[k][rr]) : -1;
                        /* and after it: the run lasts seconds, and this machine's speed moves
                         * within them */
                        double after = c[k].pr.fits ? dt_prof_speed(&r->p->pf) : 0;
                        spd[k][rr] = before > 0 && after > 0 ? sqrt(before * after) : 0;
                }
        for (int k = 0; k < top; k++) {
                int ok = 0, ns = 0, nc = 0, nt = 0;
                double v[16], w[16], cm[16], at[16], sp[16], se[16], x;
                /* the layers' own time in the run (its trace) against the time predicted for them:
                 * each run's step scaled by that ratio is the step the rest of the model (sums,
                 * update, data, overlap, bubbles) predicts for the predicted compute, whatever
                 * speed the machine had while the run computed */
                double pc = 1e3 * c[k].pr.compute;      /* the tensor collectives are traced apart */
                /* not where ranks outnumber cores: the prediction stretches each rank's compute by its
                 * share of a core, while ranks that take turns trace their layers partly unstretched
                 * (4 ranks on 2 cores: mlp's and lstm's spans were 0.5-0.7 of the stretched compute,
                 * their waits the rest), so the ratio would read the turns as the model's error */
                int turns = dt_machine_share(&r->ms[ci]) > 1.0;
                for (int rr = 0; rr < o->repeat; rr++) {
                        if (rep[k][rr] > 0) v[ok++] = rep[k][rr];
                        if (spd[k][rr] > 0) w[ns++] = spd[k][rr];
                        if (rep[k][rr] > 0 && cmp[k][rr] > 0 && pc > 0)
                                cm[nc] = cmp[k][rr], at[nc++] = turns ? -1 : rep[k][rr] * pc / cmp[k][rr];
                        /* the prediction with its compute at the machine's speed around this run:
                         * the whole model (compute included) judged apart from the machine's drift,
                         * the run's own compute not used */
                        if (rep[k][rr] > 0 && spd[k][rr] > 0) {
                                double p = 1e3 * c[k].pr.step + pc * (spd[k][rr] - 1.0);
                                sp[nt] = p, se[nt++] = (p - rep[k][rr]) / rep[k][rr];
                        }
                }
                if (ok == o->repeat && nt == ok) {
                        spread(sp, nt, &ms->at_drift[k], &x, &x);
                        spread(se, nt, &ms->drift_err[k], &x, &x);
                } else {
                        ms->at_drift[k] = 0;
                }
                if (ok == o->repeat && nc == ok) {
                        spread(cm, nc, &ms->comp[k], &x, &x);
                        if (turns) ms->at_pred[k] = -1;
                        else spread(at, nc, &ms->at_pred[k], &x, &x);
                } else {
                        ms->comp[k] = ms->at_pred[k] = -1;
                }
                if (ok == o->repeat) spread(v, ok, &ms->meas[k], &ms->lo[k], &ms->hi[k]);
                else ms->meas[k] = ms->lo[k] = ms->hi[k] = -1;
                if (ns) spread(w, ns, &ms->speed[k], &ms->slo[k], &ms->shi[k]);
                else ms->speed[k] = ms->slo[k] = ms->shi[k] = 0;
        }
}

/* One row of a count's table (layout k of N ranks), appended to jc as JSON too. */
static void layout_row(const struct plan_run *r, const dt_candidate *c, int k, int N, const struct measured *ms,
                       json_t *jc)
{
        const dt_plan_opts *o = r->o;
        char lay[1024];
        dt_layout_str(r->p, &c->L, lay, sizeof lay);
        json_t *jp = pred_json(r->p, c, r->batch);
        if (o->validate) {
                double m = ms->meas[k];
                json_object_set_new(jp, "measured_step_ms", m > 0 ? json_real(m) : json_null());
                json_object_set_new(jp, "validation_steps", json_integer(dt_plan_validate_steps(o, c->pr.step)));
                json_object_set_new(jp, "measured_min_ms", m > 0 ? json_real(ms->lo[k]) : json_null());
                json_object_set_new(jp, "measured_max_ms", m > 0 ? json_real(ms->hi[k]) : json_null());
                json_object_set_new(jp, "machine_drift", ms->speed[k] > 0 ? json_real(ms->speed[k]) : json_null());
                json_object_set_new(jp, "machine_drift_min", ms->speed[k] > 0 ? json_real(ms->slo[k]) : json_null());
                json_object_set_new(jp, "machine_drift_max", ms->speed[k] > 0 ? json_real(ms->shi[k]) : json_null());
                json_object_set_new(jp, "measured_compute_ms", ms->comp[k] > 0 ? json_real(ms->comp[k]) : json_null());
                json_object_set_new(jp, "measured_at_predicted_compute_ms",
                                    ms->at_pred[k] > 0 ? json_real(ms->at_pred[k]) : json_null());
                json_object_set_new(jp, "predicted_at_drift_ms", ms->at_drift[k] > 0 ? json_real(ms->at_drift[k]) : json_null());
                json_object_set_new(jp, "error_at_drift", ms->at_drift[k] > 0 ? json_real(ms->drift_err[k]) : json_null());
        }
        char note[512];
        int super = c->pr.fits && dt_plan_superlinear(&r->one, &c->pr, N, note, sizeof note);
        if (super) json_object_set_new(jp, "superlinear", json_string(note));
        json_array_append_new(jc, jp);
        if (o->json) return;
        printf("  %-3d %9.2f %10.0f %7.2fx %10.1f  %s%s%s\n", k + 1, 1e3 * c->pr.step,
               r->batch / c->pr.step, r->one.step > 0 ? r->one.step / c->pr.step : 0,
               c->pr.mem / 1048576.0, lay, c->pr.fits ? "" : "  [does not fit: ",
               c->pr.fits ? "" : c->pr.why);
        if (!c->pr.fits) printf("]\n");
        if (super) printf("      note: %s\n", note);
        double meas = o->validate ? ms->meas[k] : -1;
        if (o->validate && meas > 0 && o->repeat > 1)
                printf("      measured %.2f ms (runs %.2f .. %.2f, %d steps each), predicted %.2f ms: error %+.1f%%\n",
                       meas, ms->lo[k], ms->hi[k], dt_plan_validate_steps(o, c->pr.step), 1e3 * c->pr.step,
                       100.0 * (1e3 * c->pr.step - meas) / meas);
        else if (o->validate)
                printf("      measured %s%.2f ms, predicted %.2f ms: error %+.1f%%\n",
                       meas > 0 ? "" : "(failed) ", meas, 1e3 * c->pr.step,
                       meas > 0 ? 100.0 * (1e3 * c->pr.step - meas) / meas : 0.0);
        if (o->validate && meas > 0 && ms->speed[k] > 0)
                printf("      (the model's layers, timed alone before and after each of its runs, took %.2fx .. %.2fx "
                       "their time when planning: the machine's own drift)\n", ms->slo[k], ms->shi[k]);
        if (o->validate && meas > 0 && ms->at_drift[k] > 0)
                printf("      with its compute at that drift, run by run, the model predicts %.2f ms: error %+.1f%% (the "
                       "median of each run's)\n", ms->at_drift[k], 100.0 * ms->drift_err[k]);
        if (o->validate && meas > 0 && ms->comp[k] > 0 && ms->at_pred[k] <= 0)
                printf("      its layers computed %.2f ms a step in the runs' traces against %.2f predicted (ranks "
                       "outnumber cores and take turns, so the traces do not show the compute's share of a core: "
                       "no rest of the step's error)\n", ms->comp[k], 1e3 * c->pr.compute);
        if (o->validate && meas > 0 && ms->comp[k] > 0 && ms->at_pred[k] > 0)
                printf("      its layers computed %.2f ms a step in the runs against %.2f predicted; at the predicted "
                       "compute the runs took %.2f ms: error %+.1f%% (the rest of the step's model)\n", ms->comp[k],
                       1e3 * c->pr.compute, ms->at_pred[k],
                       100.0 * (1e3 * c->pr.step - ms->at_pred[k]) / ms->at_pred[k]);
}

/* --validate: does the measured order of a count's top layouts hold the predicted one? */
static void order_check(const struct plan_run *r, const dt_candidate *c, int n, const struct measured *ms,
                        json_t *jn)
{
        /* a pair the prediction orders one way and the medians the other is a tie
         * when their runs overlap (the slower one's fastest run beat the faster
         * one's slowest): the machine's drift, not the model, decided it; and when
         * the predictions are within 1% (schedules of one pipeline that differ
         * in a few micro-seconds): the model called them equal, it ordered nothing */
        const double *meas = ms->meas, *lo = ms->lo, *hi = ms->hi;
        int k = n < r->o->top ? n : r->o->top, ok = 1, firm = 1;
        char tie[256] = "", rev[256] = "";
        for (int a = 0; a < k; a++)
                for (int b = a + 1; b < k; b++) {
                        if (!(meas[a] > 0 && meas[b] > 0 && meas[a] > meas[b])) continue;
                        ok = 0;
                        int apart = lo[a] > hi[b] && !dt_plan_tie(&c[a].pr, &c[b].pr);
                        char *w = apart ? rev : tie;
                        if (apart) firm = 0;
                        if (!*w)
                                snprintf(w, sizeof tie, "#%d ran %.2f ms (%.2f .. %.2f), #%d %.2f ms "
                                         "(%.2f .. %.2f)", b + 1, meas[b], lo[b], hi[b], a + 1,
                                         meas[a], lo[a], hi[a]);
                }
        json_object_set_new(jn, "order_holds", json_boolean(ok));
        json_object_set_new(jn, "order_holds_beyond_noise", json_boolean(firm));
        if (r->o->json) return;
        if (ok) printf("  measured order of the top %d: as predicted\n", k);
        else if (firm)
                printf("  measured order of the top %d: as predicted, but for a tie (runs "
                       "that overlap, or predictions within 1%%): %s\n", k, tie);
        else printf("  measured order of the top %d: differs: %s\n", k, rev);
}

/* The chosen layout of a count: why it beat the runner-up, its step's parts, layers and spec. */
static void chosen_report(const struct plan_run *r, const dt_machine *m, const dt_candidate *c, int n, json_t *jn)
{
        char why[1024];
        dt_plan_why(r->p, &c[0], n > 1 ? &c[1] : NULL, why, sizeof why);
        json_object_set_new(jn, "why", json_string(why));
        char cx[512] = "";      /* compression: auto: what the run would pick, and why */
        if (r->cs.compression == DT_COMP_AUTO) {
                dt_plan_compression(r->p, m, &c[0].L, cx, sizeof cx);
                json_object_set_new(jn, "compression", json_string(cx));
        }
        if (r->o->json) return;
        char lay[1024];
        dt_layout_str(r->p, &c[0].L, lay, sizeof lay);
        printf("  chosen: %s\n  why: %s\n", lay, why);
        if (cx[0]) printf("  compression auto: %s\n", cx);
        printf("  memory: %.1f MiB on its fullest rank (besides the dataset caches mapped from disk), %s the %.1f MiB %s\n",
               c[0].pr.mem / 1048576.0,
               c[0].pr.fits ? "within" : "over", m->mem_bytes / 1048576.0,
               r->cs.memory_per_rank > 0 ? "of memory_per_rank" : "a rank may use here (3/4 of the node's memory over its ranks)");
        printf("  predicted: %.2f ms per step (compute %.2f, tensor %.2f, pipeline messages "
               "%.2f, bubble %.2f, exposed all-reduce %.2f, update %.2f, data and loss %.2f), %.0f samples/s\n",
               1e3 * c[0].pr.step, 1e3 * c[0].pr.compute, 1e3 * c[0].pr.tensor,
               1e3 * c[0].pr.p2p, 1e3 * c[0].pr.bubble, 1e3 * c[0].pr.dp, 1e3 * c[0].pr.update, 1e3 * c[0].pr.data,
               r->batch / c[0].pr.step);
        const dt_prediction *pr = &c[0].pr;
        if (pr->dp_two > 0)     /* the data axis spans nodes that hold several of its ranks */
                printf("  gradient sum: %s, predicted %.2f ms a step against %.2f ms %s (partition.hierarchical "
                       "%s%s\n", pr->dp_hier ? "two-level" : "flat", 1e3 * (pr->dp_hier ? pr->dp_two : pr->dp_flat),
                       1e3 * (pr->dp_hier ? pr->dp_flat : pr->dp_two), pr->dp_hier ? "flat" : "two-level",
                       dt_hier_names[r->cs.hierarchical], r->cs.hierarchical ? ", as the spec says)" :
                       pr->dp_hier ? "): the cheaper; the flat ring sends 2(D - 1)/D of each bucket across every "
                       "link each way in 2(D - 1) rounds, one after the other, where each node's ranks cross with "
                       "their segments once, both ways at once"
                       : "): the cheaper");
        dt_plan_print_layers(r->p, m, &c[0].L, stdout);
        printf("  as a cluster spec:\n");
        dt_layout_yaml(r->p, &c[0].L, stdout);
        printf("\n");
}

/* One rank count's part of the report: its table, the validation runs, the chosen layout. */
static json_t *count_report(const struct plan_run *r, int ci)
{
        const dt_plan_opts *o = r->o;
        int N = r->counts[ci], n = r->grp[ci].n;
        dt_machine m = r->ms[ci];
        const dt_candidate *c = r->grp[ci].c;
        json_t *jn = json_object(), *jc = json_array();
        json_object_set_new(jn, "ranks", json_integer(N));
        if (m.ranks_per_node > 1) {     /* as print_count_head says it */
                int busy = DT_MIN(m.ranks_per_node * m.threads, m.cores_per_node);
                json_object_set_new(jn, "busy_cores", json_integer(busy));
                json_object_set_new(jn, "neighbour_factor", json_real(dt_prof_neighbours(&r->p->pf, busy)));
                json_object_set_new(jn, "neighbour_factor_update", json_real(dt_prof_neighbours_mem(&r->p->pf, busy)));
        }
        if (!o->json) print_count_head(r, N, &m);
        struct measured ms;
        int top = n < o->top ? n : o->top;
        if (o->validate) validate_count(r, ci, top, &ms);
        for (int k = 0; k < top; k++) layout_row(r, &c[k], k, N, &ms, jc);
        if (o->validate && n > 1) order_check(r, c, n, &ms, jn);     /* does the predicted order hold? */
        json_object_set_new(jn, "plans", jc);
        if (n > 0) chosen_report(r, &m, c, n, jn);
        return jn;
}

/* --plot: the scaling table's speedups as an SVG, the network figures said in its note. */
static void scaling_plot(const struct plan_run *r, const char *name, int ranks_per_node, const int *sn,
                         const double *sp, const int *anch, int ns)
{
        char title[256], note[256] = "";
        snprintf(title, sizeof title, "%s: predicted speedup, a core per rank, %d per node", name, ranks_per_node);
        if (r->lat_assumed && r->bw_assumed)
                snprintf(note, sizeof note, "network between nodes: %.1f us, %.2f GB/s, assumed (dtrain's "
                         "defaults: the cluster spec gives no network figures)", r->cs.latency_us,
                         r->cs.bandwidth_gbs);
        else snprintf(note, sizeof note, "network between nodes: %s", r->net);
        FILE *f = fopen(r->o->plot, "w");
        if (!f) dt_error("--plot %s: %s", r->o->plot, strerror(errno));
        else {
                dt_plan_svg(f, sn, sp, anch, ns, title, note);
                if (fclose(f)) dt_error("--plot %s: %s", r->o->plot, strerror(errno));
        }
}

/* The scaling table's best layout for N ranks on m: a per-count table's when it planned the same
 * machine (*measured set), else q's search; 0 when no layout exists. */
static int scaling_best(const struct plan_run *r, dt_planner *q, const dt_machine *m, int N, dt_candidate *row,
                        int *measured)
{
        *measured = 0;
        for (int gi = 0; gi < r->ng; gi++)
                if ((gi < r->nc ? r->counts[gi] : 1) == N && r->grp[gi].n && !memcmp(&r->ms[gi], m, sizeof *m)) {
                        *row = r->grp[gi].c[0];
                        *measured = 1;
                        return 1;
                }
        if (dt_plan_search(q, m, N, r->cand, MAXC) > 0) {
                *row = r->cand[0];
                return 1;
        }
        return 0;
}

/* The scaling table to 1024 ranks, a core per rank, into root's "scaling" (and --plot's SVG). */
static void scaling_report(struct plan_run *r, const char *name)
{
        const dt_plan_opts *o = r->o;
        /* many ranks: a core per rank; the costs the tables above measured, the FLOP model
         * scaled to them for the rest (dt_prof_anchor), so the two agree where they meet */
        dt_planner *q = dt_planner_new(r->g, &r->cs, r->threads, 0);
        dt_prof_anchor(&q->pf, &r->p->pf, r->g, r->batch);
        json_t *js = json_array();
        int ns = 0, sn[16], anch[16];
        double sp[16];
        dt_prediction base = { 0 };
        dt_machine m1;
        scaling_machine(&m1, &r->cs, 1024, r->threads);
        if (!o->json)
                printf("scaling to 1024 ranks, a core per rank, %d rank%s per node, network between nodes %s:\n"
                       "  layer costs as the tables above measured them, else modelled from FLOPs and scaled to "
                       "those measurements;\n  'measured' rows repeat a table above (the same machine); the "
                       "others may differ from a table above that puts more ranks on a node\n"
                       "  %6s %10s %10s %8s  %-22s %-9s %s\n", m1.ranks_per_node,
                       m1.ranks_per_node == 1 ? "" : "s", r->net, "ranks", "step ms", "samples/s", "speedup",
                       "limited by", "from", "layout");
        for (int N = 1; N <= 1024; N *= 2) {
                dt_machine m;
                scaling_machine(&m, &r->cs, N, r->threads);
                dt_candidate row;
                int measured, have = scaling_best(r, q, &m, N, &row, &measured);
                char why[512];
                if (!have || !row.pr.fits) {
                        /* said and skipped, never the end of the table */
                        if (have) snprintf(why, sizeof why, "no layout fits: %s", row.pr.why);
                        else snprintf(why, sizeof why, "no layout: the batch (%d) gives at most %d replicas, the "
                                      "layers at most %d stages, and tensor degrees must divide the layers",
                                      r->batch, r->batch, DT_MIN(r->g->n, DT_MAX_STAGES));
                        json_array_append_new(js, json_pack("{s:i, s:n, s:s}", "ranks", N, "step_ms", "why", why));
                        if (!o->json) printf("  %6d  %s\n", N, why);
                        continue;
                }
                if (N == 1) base = row.pr;
                char lay[1024], note[512];
                dt_layout_str(q, &row.L, lay, sizeof lay);
                double x = base.step > 0 ? base.step / row.pr.step : 0;
                int super = dt_plan_superlinear(&base, &row.pr, N, note, sizeof note);
                if (x > 0 && ns < 16) sn[ns] = N, anch[ns] = measured, sp[ns++] = x;
                json_t *jr = json_pack("{s:i, s:f, s:f, s:s, s:s, s:s}", "ranks", N, "step_ms", 1e3 * row.pr.step,
                                       "speedup", x, "limited_by", limit_of(&row.pr), "layout", lay, "from",
                                       measured ? "measured" : "modelled");
                if (super) json_object_set_new(jr, "superlinear", json_string(note));
                json_array_append_new(js, jr);
                if (o->json) continue;
                printf("  %6d %10.3f %10.0f %7.2fx  %-22s %-9s %s\n", N, 1e3 * row.pr.step,
                       r->batch / row.pr.step, x, limit_of(&row.pr), measured ? "measured" : "modelled", lay);
                if (super) printf("         note: %s\n", note);
        }
        json_object_set_new(r->root, "scaling", js);
        if (o->plot && ns > 1) scaling_plot(r, name, m1.ranks_per_node, sn, sp, anch, ns);
        dt_planner_free(q);
}

/* The model and its cluster spec (the model's parallel: section merged with --cluster) into su, *cs. */
static int plan_load(const dt_plan_opts *o, dt_setup *su, dt_cluster_spec *cs)
{
        dt_setup_opts so = { .model = o->model, .cluster = o->cluster, .max_steps = -1, .seed = -1, .single = 1,
                             .quiet = 1, .sets = &o->sets };
        int rc = dt_setup_model(su, &so);
        if (rc) return rc;
        dt_cluster_spec file;
        dt_cluster_spec_init(&file);
        dt_diag d = { 0 };
        if (o->cluster && dt_cluster_spec_load_sets(&file, o->cluster, &o->sets, &d) < 0) {
                dt_diag_print(&d, stderr);
                dt_diag_free(&d);
                return DT_EXIT_USAGE;
        }
        dt_diag_free(&d);
        dt_cluster_spec_merge(cs, &su->spec.parallel, &file);
        return 0;
}

int dt_cmd_plan(const dt_plan_opts *o)
{
        dt_setup su = { 0 };
        struct plan_run r = { .o = o, .dir = "/tmp/dtrain-plan.XXXXXX" };
        int rc = plan_load(o, &su, &r.cs);
        if (rc) {
                dt_setup_free(&su);
                return rc;
        }
        r.threads = o->threads ? o->threads : r.cs.threads_per_rank ? r.cs.threads_per_rank : 1;
        plan_counts(&r);
        r.g = &su.g;
        r.batch = su.spec.train.batch;
        r.p = dt_planner_new(r.g, &r.cs, r.threads, 1);
        size_t ps, mapped, data = dt_setup_data_bytes(&su, &ps, &mapped);
        dt_planner_set_memory(r.p, 0, (double)data, (double)ps, dt_setup_onednn(&su));
        dt_setup_plan_data(&su, r.p);
        r.root = json_object();
        json_t *jcounts = json_array();
        r.cand = dt_malloc(MAXC * sizeof *r.cand);
        if (o->validate && !mkdtemp(r.dir)) {
                dt_error("--validate: cannot make a scratch directory: %s", strerror(errno));
                json_decref(jcounts);
                json_decref(r.root);
                free(r.cand);
                dt_planner_free(r.p);
                dt_setup_free(&su);
                return DT_EXIT_DATA;
        }
        plan_network(&r);
        plan_search_all(&r);
        if (!o->json)
                printf("layouts per rank count, from layer costs measured on this machine (the layouts shown timed "
                       "again side by side with the 1-rank layout):\n\n");
        for (int ci = 0; ci < r.nc; ci++) json_array_append_new(jcounts, count_report(&r, ci));
        json_object_set_new(r.root, "model", json_string(su.spec.name));
        json_object_set_new(r.root, "counts", jcounts);
        if (!o->no_scaling) scaling_report(&r, su.spec.name);
        if (o->validate) {      /* the runs' directories go, unless one failed (its log is there) */
                int failed = dt_plan_any_failed(r.dir);
                if (!failed && dt_rm_rf(r.dir) != 0) dt_error("cannot remove %s", r.dir);
                else if (failed) fprintf(stderr, "dtrain plan: a validation run failed; its log is in %s\n", r.dir);
        }
        if (o->json) {
                char *s = json_dumps(r.root, JSON_INDENT(1));
                puts(s);
                free(s);
        }
        json_decref(r.root);
        free(r.cand);
        free(r.kept);
        dt_planner_free(r.p);
        dt_setup_free(&su);
        return 0;
}
