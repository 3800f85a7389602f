/* plan/search.c - the layouts worth trying on N ranks (plan.h): every grid data x pipeline x
 * tensor whose product is N; stages cut by the runtime's own balancing; for each tensor degree the
 * splits every layer would take by default, then pruned one split unit (a column-row pair, or one
 * layer) at a time while the prediction improves, which is a dynamic programme over the layer
 * order when, as here, the units' costs add up; micro-batch counts of 1 to 8 times the stages; and
 * each schedule; with each, the shard stages (data > 1) and recompute all. Every candidate is
 * predicted (plan/predict.c) and ranked. */
#include "plan/plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "util/common.h"
#include "parallel/pipeline.h"
#include "parallel/tensor.h"
#include "plan/planner.h"

static int cuts_of(dt_planner *p, dt_layout *L)
{
        dt_diag d = { 0 };
        dt_cluster_spec cs = p->cs;
        cs.cuts.n = 0;
        int rc = dt_layout_cut(L, &cs, p->g, &d);
        dt_diag_free(&d);
        return rc;
}

/* Each stage's default splits (parallel/tensor.h's rule) into L; the number of split layers. */
static int unit_at(const dt_layout *L, int n, int i, int *end);

static int default_splits(dt_planner *p, dt_layout *L)
{
        int n = 0;
        dt_diag d = { 0 };
        int rc = dt_layout_splits(L, &p->cs, p->g, &d);        /* the planner's cs names no splits: the rule's */
        dt_diag_free(&d);
        if (rc < 0) return 0;   /* too many layers to split */
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

int dt_plan_tie(const dt_prediction *a, const dt_prediction *b)
{
        return fabs(a->step - b->step) <= DT_PLAN_TIE * DT_MIN(a->step, b->step);
}

/* memory within 1% is the same memory: a few bytes of buffers must not outweigh simplicity */
static int mem_apart(const dt_prediction *a, const dt_prediction *b)
{
        return fabs(a->mem - b->mem) > 0.01 * DT_MIN(a->mem, b->mem);
}

static int dims(const dt_layout *L)
{
        return (L->grid[0] > 1) + (L->grid[1] > 1) + (L->grid[2] > 1);
}

/* < 0 when a is the simpler layout: fewer ranks hold one copy of the model (fewer meeting points,
 * nothing idle waiting for a stage), then fewer kinds of parallelism, then fewer micro-batches */
static int simpler(const dt_layout *a, const dt_layout *b)
{
        int pa = a->grid[1] * a->grid[2], pb = b->grid[1] * b->grid[2];
        if (pa != pb) return pa - pb;
        if (dims(a) != dims(b)) return dims(a) - dims(b);
        return a->micro - b->micro;
}

/* what a layout gives up for memory: the shard stage's gather, recomputation's forwards */
static int mem_ways(const dt_layout *L)
{
        return (L->shard > 0) + L->shard + 2 * L->recompute;
}

/* < 0 when a wins a tie against b: both fit, so a layout that trades time for memory (shard,
 * recompute) is not chosen for its memory when the prediction cannot tell that it is no slower */
static int tie_break(const dt_candidate *a, const dt_candidate *b)
{
        if (mem_ways(&a->L) != mem_ways(&b->L)) return mem_ways(&a->L) - mem_ways(&b->L);
        if (mem_apart(&a->pr, &b->pr)) return a->pr.mem < b->pr.mem ? -1 : 1;
        int k = simpler(&a->L, &b->L);
        if (k) return k;
        return (a->pr.step > b->pr.step) - (a->pr.step < b->pr.step);
}

void dt_plan_rank(dt_candidate *c, int n)
{
        qsort(c, (size_t)n, sizeof *c, cmp_cand);
        /* c[i] is the fastest of those left; the winner of the layouts tied with it moves in front,
         * the others keep their order, so c[i + 1] is again the fastest left (a comparator with a
         * tolerance is not transitive, so this is not left to qsort) */
        for (int i = 0; i < n && c[i].pr.fits; i++) {
                int w = i;
                for (int j = i + 1; j < n && c[j].pr.fits && dt_plan_tie(&c[i].pr, &c[j].pr); j++)
                        if (tie_break(&c[j], &c[w]) < 0) w = j;
                if (w == i) continue;
                dt_candidate t = c[w];
                memmove(&c[i + 1], &c[i], (size_t)(w - i) * sizeof *c);
                c[i] = t;
        }
}

/* L under each shard stage (data > 1) and with recompute all (not with zb-h1, zb-v or v-half, whose
 * deferred weight passes recomputation refuses), unless the cluster spec names them: predicted into out[*n..]. A variant
 * is kept only where the layout it varies (L as the spec has it for a shard stage, the same shard
 * stage keeping its activations for recomputation) does not fit, or (a shard stage) where it is
 * faster beyond a tie: they trade time for memory, and one that merely ties must not win on memory
 * a run that fits anyway does not need. -1 when out is full. */
static int memory_ways(dt_planner *p, const dt_machine *m, const dt_layout *L, dt_candidate *out, int *n, int max)
{
        /* zb-h1's and the V's split backward refuse recomputation at the key (interleaved's chunks
         * each recompute their own) */
        int D = L->grid[0], zb = L->sched == DT_SCHEDULE_ZB_H1 || dt_schedule_is_v(L->sched), plain = -1;
        int z0 = D > 1 && p->shard_set ? p->cs.shard : 0, z1 = D > 1 && !p->shard_set ? 3 : z0;
        /* shard 2 and 3 reduce-scatter uncompressed: a compressing spec runs shard 1 at most */
        int squeezed = p->cs.compression != DT_COMP_NONE && p->cs.compression != DT_COMP_AUTO;
        if (squeezed && !p->shard_set && z1 > 1) z1 = 1;
        if (zb && p->rc_set && p->cs.recompute.mode != DT_RECOMPUTE_NONE) return 0;
        for (int z = z0; z <= z1; z++) {
                dt_prediction twin = { .fits = 0 };     /* shard stage z keeping its activations */
                for (int r = 0; r <= (!p->rc_set && !zb); r++) {
                        if (*n == max) return -1;
                        dt_candidate *c = &out[*n];
                        c->L = *L;
                        c->L.shard = z;
                        c->L.recompute = r;
                        if (dt_plan_predict(p, m, &c->L, &c->pr) < 0) continue;
                        /* a shard stage against the spec's layout, kept where it fits what that
                         * does not or is faster beyond a tie; recomputation only where the same shard
                         * stage keeping its activations does not fit: it does that stage's work and
                         * more, so a prediction calling it faster is the profile's noise (the deep
                         * MLP predicted 45% faster under load ran 27% slower) */
                        const dt_prediction *ref = r ? &twin : plain >= 0 ? &out[plain].pr : NULL;
                        if (r == 0) twin = c->pr;
                        if (z == z0 && r == 0) plain = *n;
                        else if (ref && ref->fits && (r || c->pr.step >= ref->step * (1.0 - DT_PLAN_TIE))) continue;
                        (*n)++;
                }
        }
        return 0;
}

int dt_plan_search(dt_planner *p, const dt_machine *m, int N, dt_candidate *out, int max)
{
        int n = 0, nl = p->g->n;
        for (int T = 1; T <= N && T <= 64; T++) {
                if (N % T) continue;
                for (int P = 1; P <= N / T && P <= nl && P <= DT_MAX_STAGES; P++) {
                        if ((N / T) % P) continue;
                        int D = N / T / P;
                        if (D > p->batch || (p->data_pin && D != (p->data_pin < 0 ? N : p->data_pin))) continue;
                        dt_layout L = { .grid = { D, P, T }, .micro = 1, .sched = DT_SCHEDULE_1F1B };
                        if (cuts_of(p, &L) < 0) continue;
                        if (T > 1 && default_splits(p, &L) == 0) continue;      /* nothing splits */
                        int slice = (p->batch + D - 1) / D;
                        int micros[4], nm = 0;
                        for (int k = 1; k <= 8 && P > 1; k *= 2)
                                if (k * P <= slice || k == 1) micros[nm++] = DT_MIN(k * P, slice);
                        if (P == 1) micros[nm++] = 1;
                        /* with two chunks per stage (virtual stages: interleaved, zb-v, v-half)
                         * where the model has a layer for each of the 2P pieces, their cut made for
                         * them; v-half is the one that fits where the others' activations do not */
                        static const dt_schedule_kind scheds[] = { DT_SCHEDULE_1F1B, DT_SCHEDULE_GPIPE, DT_SCHEDULE_ZB_H1,
                                                                   DT_SCHEDULE_INTERLEAVED, DT_SCHEDULE_ZB_V,
                                                                   DT_SCHEDULE_V_HALF };
                        int ns = P > 1 ? (2 * P <= nl && 2 * P <= DT_MAX_STAGES ? 6 : 3) : 1;
                        if (T > 1) {    /* the splits, tuned on the first micro-batch count */
                                L.micro = micros[nm > 1 ? 1 : 0];
                                dt_prediction pr;
                                if (dt_plan_predict(p, m, &L, &pr) == 0 && pr.fits) prune_splits(p, m, &L, &pr);
                        }
                        for (int a = 0; a < nm; a++)
                                for (int b = 0; b < ns; b++) {
                                        dt_layout Lb = L;
                                        Lb.micro = micros[a];
                                        Lb.sched = scheds[b];
                                        if (b >= 3) {
                                                Lb.chunks = 2;
                                                if (cuts_of(p, &Lb) < 0) continue;
                                                if (T > 1 && default_splits(p, &Lb) == 0) continue;
                                        }
                                        if (memory_ways(p, m, &Lb, out, &n, max) < 0) goto done;
                                }
                }
        }
done:
        dt_plan_rank(out, n);
        return n;
}

/* Whether a's stages are b's shapes: the same grid, cuts, micro-batch and splits (schedules differ
 * in order and memory, not in what a layer computes, so they are timed once) */
static int same_shapes(const dt_layout *a, const dt_layout *b, int nl)
{
        if (memcmp(a->grid, b->grid, sizeof a->grid) || a->micro != b->micro) return 0;
        if (dt_layout_chunks(a) != dt_layout_chunks(b) || (dt_layout_chunks(a) > 1 && a->sched != b->sched)) return 0;
        if (memcmp(a->first, b->first, (size_t)(dt_layout_pieces(a) + 1) * sizeof a->first[0])) return 0;
        return a->grid[2] == 1 || (!memcmp(a->split, b->split, (size_t)nl) && !memcmp(a->gather, b->gather, (size_t)nl));
}

void dt_plan_refine(dt_planner *p, dt_plan_group *g, int ng, int rounds)
{
        if (!p->pf.measure) return;
        /* the layouts to time, each set of shapes once */
        int n = 0, nl = DT_MIN(p->g->n, DT_LAYOUT_MAX_LAYERS);
        for (int i = 0; i < ng; i++) n += g[i].n;
        const dt_layout **u = dt_malloc((size_t)(n + 1) * sizeof *u);
        n = 0;
        for (int i = 0; i < ng; i++)
                for (int k = 0; k < g[i].n; k++) {
                        int j = 0;
                        while (j < n && !same_shapes(u[j], &g[i].c[k].L, nl)) j++;
                        if (j == n) u[n++] = &g[i].c[k].L;
                }
        /* the samples taken while searching came at each rank count's own moment: on a busy
         * machine the 1-rank layout timed in a quiet moment and a 2-rank pipeline in a busy one
         * (or the other way) predicted 4.49x from 2 ranks. Only samples taken side by side stay */
        for (int j = 0; j < n; j++) dt_plan_forget(p, u[j]);
        for (int r = 0; r < rounds; r++)
                for (int j = 0; j < n; j++) dt_plan_remeasure(p, u[j]);
        free(u);
        for (int i = 0; i < ng; i++) {
                for (int k = 0; k < g[i].n; k++) dt_plan_predict(p, g[i].m, &g[i].c[k].L, &g[i].c[k].pr);
                dt_plan_rank(g[i].c, g[i].n);
        }
}

void dt_layout_str(const dt_planner *p, const dt_layout *L, char *buf, size_t len)
{
        size_t k = (size_t)snprintf(buf, len, "data %d x pipeline %d x tensor %d", L->grid[0], L->grid[1], L->grid[2]);
        if (L->grid[1] > 1 && k < len) {
                k += (size_t)snprintf(buf + k, len - k, ", cut at");
                for (int s = 1; s < dt_layout_pieces(L) && k < len; s++)
                        k += (size_t)snprintf(buf + k, len - k, "%s %s", s > 1 ? "," : "", p->g->layers[L->first[s]].name);
                if (k < len)
                        k += (size_t)snprintf(buf + k, len - k, ", %d micro-batches, %s", L->micro,
                                              dt_schedule_kind_name(L->sched));
                if (dt_layout_chunks(L) > 1 && k < len)
                        k += (size_t)snprintf(buf + k, len - k, " x %d chunks", dt_layout_chunks(L));
        }
        if (L->shard && k < len) k += (size_t)snprintf(buf + k, len - k, ", shard %d", L->shard);
        if (L->recompute && k < len) k += (size_t)snprintf(buf + k, len - k, ", recompute all");
        int first = 1;
        for (int i = 0; i < p->g->n && L->grid[2] > 1 && k < len; i++) {
                dt_split s = (dt_split)L->split[i];
                if (s == DT_SPLIT_NONE || s == DT_SPLIT_PASS) continue;
                k += (size_t)snprintf(buf + k, len - k, "%s%s %s", first ? "; " : ", ", p->g->layers[i].name,
                                      dt_split_names[s]);
                first = 0;
        }
}

/* "fc2" or "fc2 .. fc3": the layers of stage s (with chunks each chunk's, joined by " + ") */
static void stage_names(const dt_planner *p, const dt_layout *L, int s, char *buf, size_t n)
{
        int V = dt_layout_chunks(L);
        size_t k = 0;
        buf[0] = 0;
        for (int c = 0; c < V && k < n; c++) {
                int vs = V > 1 ? dt_schedule_vstage(L->sched, L->grid[1], V, s, c) : s;
                int a = L->first[vs], b = L->first[vs + 1] - 1;
                const char *j = c ? " + " : "";
                if (!p) k += (size_t)snprintf(buf + k, n - k, "%slayers %d .. %d", j, a, b);
                else if (a == b) k += (size_t)snprintf(buf + k, n - k, "%s%s", j, p->g->layers[a].name);
                else k += (size_t)snprintf(buf + k, n - k, "%s%s .. %s", j, p->g->layers[a].name, p->g->layers[b].name);
        }
}

/* Appends why a's light stage is there (a pipeline whose stage computes < DT_PLAN_LIGHT of the
 * busiest one's): users distrust a rank that holds a dropout layer and nothing else unless told. */
static void why_light(const dt_planner *p, const dt_candidate *a, char *buf, size_t n)
{
        const dt_prediction *x = &a->pr;
        int P = a->L.grid[1];
        if (P < 2 || x->light_frac >= DT_PLAN_LIGHT) return;
        char light[160], heavy[160];
        stage_names(p, &a->L, x->light, light, sizeof light);
        stage_names(p, &a->L, x->heavy, heavy, sizeof heavy);
        size_t len = strlen(buf);
        if (len >= n) return;
        len += (size_t)snprintf(buf + len, n - len, "; stage %d (%s) is deliberately light, %.0f%% of the busiest "
                                "stage's compute: stage %d (%s) holds %.0f%% of the model's compute and cuts fall "
                                "between layers, so %d stages cannot be even; the light stage's rank mostly waits",
                                x->light, light, 100.0 * x->light_frac, x->heavy, heavy, 100.0 * x->heavy_frac, P);
        if (len < n && x->share > 1.0)
                snprintf(buf + len, n - len, ", giving its core to the other stages (%.3g ranks per core here)",
                         x->share);
}

/* the tie's line and what broke it */
static void why_tie(const dt_candidate *a, const dt_candidate *b, char *buf, size_t n)
{
        const dt_prediction *x = &a->pr, *y = &b->pr;
        size_t len = (size_t)snprintf(buf, n, "a tie with the runner-up (%.2f and %.2f ms per step, within %.0f%%, "
                                      "closer than the planner can tell apart); ", 1e3 * x->step, 1e3 * y->step,
                                      100.0 * DT_PLAN_TIE);
        if (len >= n) return;
        int pa = a->L.grid[1] * a->L.grid[2], pb = b->L.grid[1] * b->L.grid[2];
        if (mem_apart(x, y))
                snprintf(buf + len, n - len, "chosen for %s memory: %.1f MiB on its fullest rank against %.1f",
                         x->mem < y->mem ? "less" : "more", x->mem / 1048576.0, y->mem / 1048576.0);
        else if (pa != pb)
                snprintf(buf + len, n - len, "as much memory; chosen as the simpler: %d rank%s per model copy "
                         "against %d", pa, pa == 1 ? "" : "s", pb);
        else if (dims(&a->L) != dims(&b->L))
                snprintf(buf + len, n - len, "as much memory; chosen as the simpler: %d kind%s of parallelism "
                         "against %d", dims(&a->L), dims(&a->L) == 1 ? "" : "s", dims(&b->L));
        else if (a->L.micro != b->L.micro)
                snprintf(buf + len, n - len, "as much memory; chosen as the simpler: %d micro-batches against %d",
                         a->L.micro, b->L.micro);
        else
                snprintf(buf + len, n - len, "as much memory and as simple: either would do");
}

static void why_body(const dt_planner *p, const dt_candidate *a, const dt_candidate *b, char *buf, size_t n)
{
        const dt_prediction *x = &a->pr;
        if (!x->fits) {
                snprintf(buf, n, "no layout fits%s: it %s", b ? "; this one needs the least memory" : "", x->why);
                return;
        }
        if (!b) {
                snprintf(buf, n, "the only layout");
                why_light(p, a, buf, n);
                return;
        }
        const dt_prediction *y = &b->pr;
        if (!y->fits) {
                snprintf(buf, n, "the runner-up does not fit: it %s", y->why);
                why_light(p, a, buf, n);
                return;
        }
        if (dt_plan_tie(x, y)) {
                why_tie(a, b, buf, n);
                why_light(p, a, buf, n);
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
        why_light(p, a, buf, n);
}

/* Appends what a's shard stage and recomputation buy and cost: its memory against the limit, and
 * its step against the runner-up's (users take a sharded or recomputing layout on trust only when
 * told that it was needed to fit and what it costs) */
static void why_memory(const dt_candidate *a, const dt_candidate *b, char *buf, size_t n)
{
        const dt_prediction *x = &a->pr;
        size_t len = strlen(buf);
        if (!(a->L.shard || a->L.recompute) || !x->fits || len >= n) return;
        char what[64];
        snprintf(what, sizeof what, "%s%s%s", a->L.shard == 1 ? "shard 1" : a->L.shard == 2 ? "shard 2" : a->L.shard ? "shard 3" : "",
                 a->L.shard && a->L.recompute ? ", " : "", a->L.recompute ? "recompute all" : "");
        len += (size_t)snprintf(buf + len, n - len, "; %s: fits %.1f MiB of the %.1f MiB per rank", what,
                                x->mem / 1048576.0, x->limit / 1048576.0);
        if (b && len < n && b->pr.step > 0)
                snprintf(buf + len, n - len, ", %.1f%% %s than the runner-up (%.1f MiB%s)",
                         100.0 * fabs(x->step - b->pr.step) / b->pr.step, x->step > b->pr.step ? "slower" : "faster",
                         b->pr.mem / 1048576.0, b->pr.fits ? "" : ", does not fit");
}

void dt_plan_why(const dt_planner *p, const dt_candidate *a, const dt_candidate *b, char *buf, size_t n)
{
        why_body(p, a, b, buf, n);
        why_memory(a, b, buf, n);
}

int dt_plan_superlinear(const dt_prediction *one, const dt_prediction *x, int N, char *buf, size_t n)
{
        if (!(one->step > 0 && x->step > 0 && N > 1)) return 0;
        double sp = one->step / x->step;
        if (sp <= N * (1.0 + DT_PLAN_TIE)) return 0;
        size_t len = (size_t)snprintf(buf, n, "%.2fx on %d ranks is above linear: ", sp, N);
        if (len >= n) return 1;
        if (x->work < one->work * (1.0 - DT_PLAN_TIE))
                /* the step cannot beat the ranks' compute shared out evenly; where that is less than
                 * one rank's, the smaller shapes compute faster per sample */
                snprintf(buf + len, n - len, "its ranks compute the batch's layers in %.2f ms in all against %.2f ms "
                         "on one rank (%.0f%% less): their smaller shapes run faster per sample here, as timed side "
                         "by side with the 1-rank layout (caches hold a smaller working set)",
                         1e3 * x->work, 1e3 * one->work, 100.0 * (1.0 - x->work / one->work));
        else if (N * x->update < one->update)
                snprintf(buf + len, n - len, "its optimizer update, %.2f ms against %.2f ms on one rank: each rank "
                         "updates a share of the parameters, and smaller arrays update faster per parameter "
                         "(caches)", 1e3 * x->update, 1e3 * one->update);
        else
                snprintf(buf + len, n - len, "its parts (compute %.2f, update %.2f ms) against one rank's (%.2f, "
                         "%.2f ms) do not explain it: noise in the timings", 1e3 * x->compute,
                         1e3 * x->update, 1e3 * one->compute, 1e3 * one->update);
        return 1;
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
                for (int s = 1; s < dt_layout_pieces(L); s++)
                        snprintf(cs->cuts.name[s - 1], sizeof cs->cuts.name[0], "%s", g->layers[L->first[s]].name);
                cs->cuts.n = dt_layout_pieces(L) - 1;
                cs->micro_batches = L->micro;
                cs->schedule = (dt_pipe_schedule)L->sched;
                cs->virtual_stages = dt_layout_chunks(L);
                cs->set |= DT_CS_STAGES | DT_CS_MICROS | DT_CS_SCHEDULE | DT_CS_VSTAGES;
        }
        memset(&cs->splits, 0, sizeof cs->splits);
        for (int i = 0; i < g->n && L->grid[2] > 1 && cs->splits.n < DT_MAX_SPLITS; i++) {
                dt_split s = (dt_split)L->split[i];
                if (s == DT_SPLIT_NONE || s == DT_SPLIT_PASS) continue;
                snprintf(cs->splits.pattern[cs->splits.n], sizeof cs->splits.pattern[0], "%s", g->layers[i].name);
                cs->splits.how[cs->splits.n++] = s;
        }
        if (cs->splits.n) cs->set |= DT_CS_SPLITS;
        /* the run reads these from the spec, as check's table, plan.txt and the YAML show them */
        if (L->shard > 0) {
                cs->shard = L->shard;
                cs->set |= DT_CS_SHARD;
        }
        if (L->recompute) {
                memset(&cs->recompute, 0, sizeof cs->recompute);
                cs->recompute.mode = DT_RECOMPUTE_ALL;
                cs->set |= DT_CS_RECOMPUTE;
        }
}

/* The cluster spec's own recompute rules, which the search keeps (L->recompute 0 then) */
static void yaml_recompute(const dt_recompute_rules *r, FILE *f)
{
        static const char *mode[] = { "none", "all", "auto" };
        if (r->mode != DT_RECOMPUTE_LIST) {
                fprintf(f, "  recompute: %s\n", mode[r->mode]);
                return;
        }
        fprintf(f, "  recompute: [");
        for (int i = 0; i < r->n; i++) fprintf(f, "%s\"%s\"", i ? ", " : "", r->pattern[i]);
        fprintf(f, "]\n");
}

void dt_layout_yaml(const dt_planner *p, const dt_layout *L, FILE *f)
{
        dt_cluster_spec cs;
        dt_cluster_spec_init(&cs);
        dt_layout_apply(p, L, &cs);
        fprintf(f, "partition:\n  strategy: %s\n", dt_part_names[cs.strategy]);
        if (L->shard) fprintf(f, "  shard: %d\n", L->shard);
        if (L->recompute) fprintf(f, "  recompute: all\n");
        else if (p->rc_set) yaml_recompute(&p->cs.recompute, f);    /* --validate's runs recompute as planned */
        if (cs.strategy == DT_PART_DATA) return;
        fprintf(f, "  data: %d\n  pipeline: %d\n  tensor: %d\n", L->grid[0], L->grid[1], L->grid[2]);
        if (cs.cuts.n) {
                fprintf(f, "  stages: [");
                for (int s = 0; s < cs.cuts.n; s++) fprintf(f, "%s%s", s ? ", " : "", cs.cuts.name[s]);
                fprintf(f, "]\n  micro_batches: %d\n  schedule: %s\n", L->micro, dt_schedule_kind_name(L->sched));
                if (dt_layout_chunks(L) > 1) fprintf(f, "  virtual_stages: %d\n", dt_layout_chunks(L));
        }
        if (cs.splits.n) {
                fprintf(f, "  splits: {");
                for (int i = 0; i < cs.splits.n; i++)
                        fprintf(f, "%s%s: %s", i ? ", " : "", cs.splits.pattern[i], dt_split_names[cs.splits.how[i]]);
                fprintf(f, "}\n");
        }
}
