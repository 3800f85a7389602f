/* plan/search.c - the layouts worth trying on N ranks (plan.h): every grid data x pipeline x
 * tensor whose product is N; stages cut by the runtime's own balancing; for each tensor degree the
 * splits every layer would take by default, then pruned one split unit (a column-row pair, or one
 * layer) at a time while the prediction improves, which is a dynamic programme over the layer
 * order when, as here, the units' costs add up; micro-batch counts of 1 to 8 times the stages; and
 * each schedule. Every candidate is predicted (plan/predict.c) and ranked. */
#include "plan/plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "util/common.h"
#include "parallel/pipeline.h"
#include "parallel/tensor.h"
#include "plan/planner.h"

static int cuts_of(dt_planner *p, int P, dt_layout *L)
{
        dt_stage_plan sp;
        dt_diag d = { 0 };
        dt_cluster_spec cs = p->cs;
        cs.cuts.n = 0;
        int rc = dt_stage_plan_make(&cs, p->g, P, &sp, &d);
        dt_diag_free(&d);
        if (rc < 0) return -1;
        memcpy(L->first, sp.first, sizeof L->first);
        return 0;
}

/* Each stage's default splits (parallel/tensor.h's rule) into L; the number of split layers. */
static int unit_at(const dt_layout *L, int n, int i, int *end);

static int default_splits(dt_planner *p, dt_layout *L)
{
        int n = 0;
        memset(L->split, 0, sizeof L->split);
        memset(L->gather, 0, sizeof L->gather);
        for (int s = 0; s < L->grid[1]; s++) {
                dt_graph sg;
                dt_graph_range(p->g, L->first[s], L->first[s + 1], &sg);
                dt_tp_plan pl;
                dt_diag d = { 0 };
                dt_tp_plan_make(&p->cs, &sg, L->grid[2], &pl, &d);
                dt_diag_free(&d);
                for (int i = 0; i < sg.n; i++) {
                        L->split[sg.first + i] = (signed char)pl.pl[i].split;
                        L->gather[sg.first + i] = (signed char)pl.pl[i].gather;
                }
                dt_tp_plan_free(&pl);
                dt_graph_free(&sg);
        }
        /* units, not layers: prune_splits drops one unit at a time and keeps the last (counted by
         * layers, a column-row pair counted twice and the last unit went too) */
        for (int i = 0, end; i < p->g->n; i++) n += unit_at(L, p->g->n, i, &end);
        L->nsplit = n;
        return n;
}

/* The split unit starting at layer i: [i, *end) (a column layer with the pass-through layers and
 * the row layer that take its shard, or one layer). 0 when layer i starts none. */
static int unit_at(const dt_layout *L, int n, int i, int *end)
{
        dt_split s = (dt_split)L->split[i];
        if (s == DT_SPLIT_NONE || s == DT_SPLIT_PASS || s == DT_SPLIT_ROW) return 0;
        int j = i + 1;
        if (s == DT_SPLIT_COLUMN && !L->gather[i]) {
                while (j < n && L->split[j] == DT_SPLIT_PASS) j++;
                j++;    /* the row layer */
        }
        *end = j;
        return 1;
}

static void drop_unit(dt_layout *L, int i, int end)
{
        for (int k = i; k < end; k++) L->split[k] = L->gather[k] = 0;
        L->nsplit--;
}

/* Removes split units while that lowers the prediction (never the last: tensor > 1 with nothing
 * split only repeats the work). */
static void prune_splits(dt_planner *p, const dt_machine *m, dt_layout *L, dt_prediction *best)
{
        int n = p->g->n, improved = 1;
        while (improved && L->nsplit > 1) {
                improved = 0;
                for (int i = 0; i < n && L->nsplit > 1; i++) {
                        int end;
                        if (!unit_at(L, n, i, &end)) continue;
                        dt_layout t = *L;
                        drop_unit(&t, i, end);
                        dt_prediction pr;
                        if (dt_plan_predict(p, m, &t, &pr) == 0 && pr.fits && pr.step < best->step) {
                                *L = t;
                                *best = pr;
                                improved = 1;
                        }
                }
        }
}

static int cmp_cand(const void *a, const void *b)
{
        const dt_candidate *x = a, *y = b;
        if (x->pr.fits != y->pr.fits) return y->pr.fits - x->pr.fits;
        /* when none fits, the one nearest to fitting first: it is what could run with less elsewhere */
        if (!x->pr.fits && x->pr.mem != y->pr.mem) return (x->pr.mem > y->pr.mem) - (x->pr.mem < y->pr.mem);
        return (x->pr.step > y->pr.step) - (x->pr.step < y->pr.step);
}

int dt_plan_search(dt_planner *p, const dt_machine *m, int N, dt_candidate *out, int max)
{
        int n = 0, nl = p->g->n;
        for (int T = 1; T <= N && T <= 64; T++) {
                if (N % T) continue;
                for (int P = 1; P <= N / T && P <= nl && P <= DT_MAX_STAGES; P++) {
                        if ((N / T) % P) continue;
                        int D = N / T / P;
                        if (D > p->batch) continue;
                        dt_layout L = { .grid = { D, P, T }, .micro = 1, .sched = DT_SCHEDULE_1F1B };
                        if (cuts_of(p, P, &L) < 0) continue;
                        if (T > 1 && default_splits(p, &L) == 0) continue;      /* nothing splits */
                        int slice = (p->batch + D - 1) / D;
                        int micros[4], nm = 0;
                        for (int k = 1; k <= 8 && P > 1; k *= 2)
                                if (k * P <= slice || k == 1) micros[nm++] = DT_MIN(k * P, slice);
                        if (P == 1) micros[nm++] = 1;
                        static const dt_schedule_kind scheds[] = { DT_SCHEDULE_1F1B, DT_SCHEDULE_GPIPE, DT_SCHEDULE_ZB_H1 };
                        int ns = P > 1 ? (dt_plan_zb_ok ? 3 : 2) : 1;
                        if (T > 1) {    /* the splits, tuned on the first micro-batch count */
                                L.micro = micros[nm > 1 ? 1 : 0];
                                dt_prediction pr;
                                if (dt_plan_predict(p, m, &L, &pr) == 0 && pr.fits) prune_splits(p, m, &L, &pr);
                        }
                        for (int a = 0; a < nm; a++)
                                for (int b = 0; b < ns; b++) {
                                        if (n == max) goto done;
                                        dt_candidate *c = &out[n];
                                        c->L = L;
                                        c->L.micro = micros[a];
                                        c->L.sched = scheds[b];
                                        if (dt_plan_predict(p, m, &c->L, &c->pr) == 0) n++;
                                }
                }
        }
done:
        qsort(out, (size_t)n, sizeof *out, cmp_cand);
        return n;
}

void dt_plan_refine(dt_planner *p, const dt_machine *m, dt_candidate *c, int n)
{
        if (!p->pf.measure || n < 1) return;
        /* round robin over the layouts, so that each one's samples are apart in time */
        for (int r = 0; r < 2; r++)
                for (int k = 0; k < n; k++) dt_plan_remeasure(p, &c[k].L);
        for (int k = 0; k < n; k++) dt_plan_predict(p, m, &c[k].L, &c[k].pr);
        qsort(c, (size_t)n, sizeof *c, cmp_cand);
}

int dt_plan_zb_ok = 1;

void dt_layout_str(const dt_planner *p, const dt_layout *L, char *buf, size_t len)
{
        size_t k = (size_t)snprintf(buf, len, "data %d x pipeline %d x tensor %d", L->grid[0], L->grid[1], L->grid[2]);
        if (L->grid[1] > 1 && k < len) {
                k += (size_t)snprintf(buf + k, len - k, ", cut at");
                for (int s = 1; s < L->grid[1] && k < len; s++)
                        k += (size_t)snprintf(buf + k, len - k, "%s %s", s > 1 ? "," : "", p->g->layers[L->first[s]].name);
                if (k < len)
                        k += (size_t)snprintf(buf + k, len - k, ", %d micro-batches, %s", L->micro,
                                              dt_schedule_kind_name(L->sched));
        }
        int first = 1;
        for (int i = 0; i < p->g->n && L->grid[2] > 1 && k < len; i++) {
                dt_split s = (dt_split)L->split[i];
                if (s == DT_SPLIT_NONE || s == DT_SPLIT_PASS) continue;
                k += (size_t)snprintf(buf + k, len - k, "%s%s %s", first ? "; " : ", ", p->g->layers[i].name,
                                      dt_split_names[s]);
                first = 0;
        }
}

void dt_plan_why(const dt_candidate *a, const dt_candidate *b, char *buf, size_t n)
{
        const dt_prediction *x = &a->pr;
        if (!x->fits) {
                snprintf(buf, n, "no layout fits%s: it %s", b ? "; this one needs the least memory" : "", x->why);
                return;
        }
        if (!b) {
                snprintf(buf, n, "the only layout");
                return;
        }
        const dt_prediction *y = &b->pr;
        if (!y->fits) {
                snprintf(buf, n, "the runner-up does not fit: it %s", y->why);
                return;
        }
        struct { const char *what; double d; } k[] = {
                { "compute", y->compute - x->compute }, { "tensor-parallel collectives", y->tensor - x->tensor },
                { "pipeline messages", y->p2p - x->p2p }, { "pipeline bubble", y->bubble - x->bubble },
                { "exposed data-parallel all-reduce", y->dp - x->dp }, { "optimizer update", y->update - x->update },
        };
        int best = 0;
        for (int i = 1; i < 6; i++)
                if (k[i].d > k[best].d) best = i;
        snprintf(buf, n, "%.1f%% faster than the runner-up: %.2f ms less %s", 100.0 * (y->step - x->step) / y->step,
                 1e3 * k[best].d, k[best].what);
        size_t len = strlen(buf);
        if (best == 4 || (x->bytes_tp > 0 && y->bytes_dp > x->bytes_dp))
                snprintf(buf + len, n - len, " (it moves %.2f MB per step in tensor collectives and %.2f MB in the "
                         "gradient all-reduce, against %.2f MB and %.2f MB)", x->bytes_tp / 1e6, x->bytes_dp / 1e6,
                         y->bytes_tp / 1e6, y->bytes_dp / 1e6);
        else if (best == 0)
                snprintf(buf + len, n - len, " (its busiest rank computes less)");
        else if (best == 3)
                snprintf(buf + len, n - len, " (%s against %s of the step idle)", "less", "more");
}

void dt_layout_apply(const dt_planner *p, const dt_layout *L, dt_cluster_spec *cs)
{
        dt_layout_apply_graph(p->g, L, cs);
}

void dt_layout_apply_graph(const dt_graph *g, const dt_layout *L, dt_cluster_spec *cs)
{
        cs->strategy = L->grid[0] > 1 ? DT_PART_HYBRID : DT_PART_MODEL;
        if (L->grid[1] == 1 && L->grid[2] == 1) cs->strategy = DT_PART_DATA;
        cs->set |= DT_CS_STRATEGY;
        if (cs->strategy != DT_PART_DATA) {
                cs->grid_data = L->grid[0];
                cs->grid_pipeline = L->grid[1];
                cs->grid_tensor = L->grid[2];
                cs->set |= DT_CS_GDATA | DT_CS_GPIPE | DT_CS_GTENSOR;
        }
        memset(&cs->cuts, 0, sizeof cs->cuts);
        if (L->grid[1] > 1) {
                for (int s = 1; s < L->grid[1]; s++)
                        snprintf(cs->cuts.name[s - 1], sizeof cs->cuts.name[0], "%s", g->layers[L->first[s]].name);
                cs->cuts.n = L->grid[1] - 1;
                cs->micro_batches = L->micro;
                cs->schedule = (dt_pipe_schedule)L->sched;
                cs->set |= DT_CS_STAGES | DT_CS_MICROS | DT_CS_SCHEDULE;
        }
        memset(&cs->splits, 0, sizeof cs->splits);
        for (int i = 0; i < g->n && L->grid[2] > 1 && cs->splits.n < DT_MAX_SPLITS; i++) {
                dt_split s = (dt_split)L->split[i];
                if (s == DT_SPLIT_NONE || s == DT_SPLIT_PASS) continue;
                snprintf(cs->splits.pattern[cs->splits.n], sizeof cs->splits.pattern[0], "%s", g->layers[i].name);
                cs->splits.how[cs->splits.n++] = s;
        }
        if (cs->splits.n) cs->set |= DT_CS_SPLITS;
}

void dt_layout_yaml(const dt_planner *p, const dt_layout *L, FILE *f)
{
        dt_cluster_spec cs;
        dt_cluster_spec_init(&cs);
        dt_layout_apply(p, L, &cs);
        fprintf(f, "partition:\n  strategy: %s\n", dt_part_names[cs.strategy]);
        if (cs.strategy == DT_PART_DATA) return;
        fprintf(f, "  data: %d\n  pipeline: %d\n  tensor: %d\n", L->grid[0], L->grid[1], L->grid[2]);
        if (cs.cuts.n) {
                fprintf(f, "  stages: [");
                for (int s = 0; s < cs.cuts.n; s++) fprintf(f, "%s%s", s ? ", " : "", cs.cuts.name[s]);
                fprintf(f, "]\n  micro_batches: %d\n  schedule: %s\n", L->micro, dt_schedule_kind_name(L->sched));
        }
        if (cs.splits.n) {
                fprintf(f, "  splits: {");
                for (int i = 0; i < cs.splits.n; i++)
                        fprintf(f, "%s%s: %s", i ? ", " : "", cs.splits.pattern[i], dt_split_names[cs.splits.how[i]]);
                fprintf(f, "}\n");
        }
}
