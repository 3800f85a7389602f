/* plan/predict.c - one layout's predicted training step (plan.h): each stage's graph of shards is
 * built as the run builds it, its layers costed (plan/profile.c) with the tensor collectives they
 * call priced by the network model, and the step played out: without stages, the backward pass
 * with the data-parallel buckets as events on one channel, each starting when its layers are done
 * and the channel is free; with stages, the pipeline's own action lists through the schedule
 * simulator, then the gradient sum over replicas. */
#include "plan/plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "util/common.h"
#include "optim/optim.h"
#include "parallel/dp.h"
#include "parallel/pipeline.h"
#include "parallel/tensor.h"
#include "plan/profile.h"
#include "plan/mem.h"
#include "plan/planner.h"

/* The layers recomputed under the spec's own rules (rc[0]) and under recompute all (rc[1]), as the
 * run marks them on the whole model before the cut: a stage graph takes its range of either. */
static void plan_marks(dt_planner *p)
{
        dt_graph w;
        dt_graph_range(p->g, 0, p->g->n, &w);
        const dt_recompute_rules all = { .mode = DT_RECOMPUTE_ALL };
        for (int k = 0; k < 2; k++) {
                dt_graph_set_recompute(&w, k ? &all : &p->cs.recompute);
                p->rc[k] = dt_malloc((size_t)(w.n ? w.n : 1));
                for (int i = 0; i < w.n; i++) p->rc[k][i] = (signed char)w.layers[i].recompute;
        }
        dt_graph_free(&w);
        p->shard_set = (p->cs.set & DT_CS_SHARD) != 0;
        p->rc_set = (p->cs.set & DT_CS_RECOMPUTE) != 0;
}

dt_planner *dt_planner_new(const dt_graph *g, const dt_cluster_spec *cs, int threads, int measure)
{
        dt_planner *p = dt_calloc(1, sizeof *p);
        p->g = g;
        if (cs) p->cs = *cs;
        else dt_cluster_spec_init(&p->cs);
        p->cs.splits.n = 0;     /* the planner chooses the splits */
        p->batch = g->spec->train.batch;
        p->maxb = DT_MAX(g->spec->train.batch, g->spec->train.eval_batch);
        p->nmo = dt_optim_nmoments(&g->spec->train.opt);
        p->mem_fixed = (double)dt_mem_fixed_model(1);
        dt_prof_init(&p->pf, threads, measure);
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        p->pf.ref = g;          /* each core's share of the batch, as data parallelism would give it */
        p->pf.ref_b = DT_MAX(1, p->batch / (int)(cores > 0 ? cores : 1));
        dt_prof_calibrate(&p->pf);
        dt_prof_time_loss(&p->pf, g, p->batch);
        plan_marks(p);
        return p;
}

void dt_planner_set_memory(dt_planner *p, double fixed, double data, double per_sample, int onednn)
{
        p->mem_data_ps = per_sample;
        p->mem_onednn = onednn;
        if (fixed > 0) p->mem_fixed = fixed;
        p->mem_data = data > 0 ? data : 0;
}

void dt_planner_time_data(dt_planner *p, const struct dt_dataset *ds)
{
        dt_prof_time_data(&p->pf, ds, p->batch, p->g->spec ? p->g->spec->train.seed : 1);
}

void dt_planner_free(dt_planner *p)
{
        if (!p) return;
        dt_prof_free(&p->pf);
        free(p->rc[0]);
        free(p->rc[1]);
        free(p);
}

int dt_plan_stage_graphs(const dt_planner *p, const dt_layout *L, int s, dt_graph *sg, dt_graph *lg)
{
        dt_layout_stage_graph(L, p->g, s, sg);  /* zb-h1's per-slot memory too */
        const signed char *rc = p->rc[L->recompute ? 1 : 0];   /* the shards copy the marks */
        for (int i = 0; i < sg->n; i++) sg->layers[i].recompute = rc[sg->layers[i].index];
        if (L->grid[2] <= 1) return 0;
        dt_tp tp = { .size = L->grid[2], .rank = 0 };   /* shapes only; the shards are alike */
        dt_layout_shard_graph(L, sg, &tp, lg);
        return 1;
}

/* Seconds of the tensor collectives of one layer for b samples: [0] forward, [1] backward; their
 * bytes added into *bytes. Returns how many there are. */
static int tensor_cost(const dt_layer *l, int b, int dx, const dt_link *k, int T, double c[2], double *bytes)
{
        dt_tp_coll m[3];
        int n = dt_tp_layer_colls(l, b, dx, m), count = 0;
        c[0] = c[1] = 0;
        for (int i = 0; i < n; i++) {
                double by = 4.0 * m[i].floats;
                c[m[i].backward] += m[i].repeat * (m[i].gather ? dt_net_allgather(k, T, by) : dt_net_allreduce(k, T, by));
                *bytes += m[i].repeat * by;
                count += m[i].repeat;
        }
        return count;
}

typedef struct stage_cost {
        double f, b, w;         /* one micro-batch: compute and tensor collectives */
        double tp;              /* of which tensor collectives */
        double colls;           /* how many tensor collectives */
        double raw;             /* its layers' compute alone: no sharing, no turns, no collectives */
        double nparams;         /* this rank's */
        double regather;        /* shard 3: floats of them its backward gathers again (dt_plan_regathered) */
        double fwd_again;       /* ... and a micro-batch's forward after the first */
        int walks;              /* shard 3: the step's walks (micro-batches walked layer by layer,
                                 * each reduce-scattered; 1 where the step gathers every bucket once) */
        double upd;             /* its optimizer step and norm, slowed as its compute */
        double mem;
        double tp_bytes;
        double out_floats;      /* per sample, leaving the stage */
        double cout[DT_SCHEDULE_MAX_CHUNKS];    /* per sample, leaving each chunk (one: out_floats) */
        int out_tensors;        /* the most tensors one of its messages carries (a branched cut's) */
        int n;
        double *bwd;            /* per layer backward (input + weight + collectives), for buckets */
        double cf[DT_SCHEDULE_MAX_CHUNKS], cb[DT_SCHEDULE_MAX_CHUNKS], cw[DT_SCHEDULE_MAX_CHUNKS];
                                /* with chunks, each one's share of f, b and w */
        double *pbytes;         /* per layer gradient bytes */
        dt_cx_bucket *cx;       /* per layer, the gradient as the compressors see it */
        dt_cx_bucket all;       /* the stage's */
} stage_cost;

static int micro_batch(const dt_planner *p, const dt_layout *L, int *micro, int *slice);

/* What crosses stage graph g's next cut into sc: every tensor a later stage reads, not only the last
 * output (with chunks, the largest message), and the most tensors one message carries. */
static void cut_of(const dt_graph *g, stage_cost *sc)
{
        sc->out_floats = 0;
        sc->out_tensors = g->nchunks > 1 ? 0 : g->nout;
        for (int k = 0; k < g->nout && g->nchunks <= 1; k++)
                sc->out_floats += (double)dt_shape_size(dt_graph_tensor_shape(g, g->out_t[k]));
        sc->cout[0] = sc->out_floats;
        for (int c = 0; c < g->nchunks && g->nchunks > 1; c++) {
                double fl = 0;
                for (int k = 0; k < g->chunk[c].nout; k++)
                        fl += (double)dt_shape_size(dt_graph_tensor_shape(g, g->chunk[c].out_t[k]));
                sc->out_floats = DT_MAX(sc->out_floats, fl);
                sc->cout[c] = fl;
                sc->out_tensors = DT_MAX(sc->out_tensors, g->chunk[c].nout);
        }
}

/* turns: how much slower the stage computes taking turns with the others on its core (1: alone) */
static void cost_stage(dt_planner *p, const dt_machine *m, const dt_layout *L, int s, int bm, int slots,
                       double share, double ushare, double turns, stage_cost *sc)
{
        dt_graph sg, lg;
        int split = dt_plan_stage_graphs(p, L, s, &sg, &lg);
        const dt_graph *g = split ? &lg : &sg;
        if (g->nchunks > 1) {   /* each chunk's own slots, as the run allocates them */
                int micro;
                micro_batch(p, L, &micro, NULL);
                dt_pipe_graph_slots(split ? &lg : &sg, L->sched, L->grid[1], s, micro);
        }
        dt_layer_cost *lc = dt_malloc((size_t)g->n * sizeof *lc);
        dt_prof_graph(&p->pf, g, bm, lc);
        memset(sc, 0, sizeof *sc);
        for (int i = 0; i < g->n; i++) sc->raw += lc[i].f + lc[i].bi + lc[i].bw;
        for (int i = 0; i < g->n; i++) lc[i].f *= turns, lc[i].bi *= turns, lc[i].bw *= turns, lc[i].r *= turns;
        const dt_link *tl = dt_net_link(m, L->grid[2], dt_layout_stride(L->grid, DT_AXIS_TENSOR));
        sc->n = g->n;
        sc->bwd = dt_malloc((size_t)g->n * sizeof *sc->bwd);
        sc->pbytes = dt_malloc((size_t)g->n * sizeof *sc->pbytes);
        sc->cx = dt_malloc((size_t)g->n * sizeof *sc->cx);
        for (int i = 0; i < g->n; i++) {
                const dt_layer *l = &g->layers[i];
                double c[2] = { 0, 0 };
                if (split) sc->colls += tensor_cost(l, bm, i || g->input_grad, tl, L->grid[2], c, &sc->tp_bytes);
                /* a recomputed layer's forward again in backward, as profiled in its region */
                double again = dt_graph_recomputed(g, i) ? lc[i].r : 0;
                sc->raw += again / turns;
                sc->f += lc[i].f * share + c[0];
                sc->b += (lc[i].bi + again) * share + c[1];
                sc->w += lc[i].bw * share;
                int ch = 0;
                while (ch + 1 < g->nchunks && i >= g->chunk[ch + 1].lo) ch++;
                sc->cf[ch] += lc[i].f * share + c[0];
                sc->cb[ch] += (lc[i].bi + again) * share + c[1];
                sc->cw[ch] += lc[i].bw * share;
                sc->tp += c[0] + c[1];
                sc->bwd[i] = (lc[i].bi + again + lc[i].bw) * share + c[1];
                double pb = 0;
                for (int k = 0; k < l->np; k++) pb += l->ps[k].trainable ? 4.0 * l->len[k] : 0;
                sc->pbytes[i] = pb;
                dt_plan_cx_layer(l, &p->cs, &sc->cx[i]);
                dt_plan_cx_add(&sc->all, &sc->cx[i]);
        }
        sc->nparams = (double)g->nparams;
        int zs = L->grid[0] > 1 ? L->shard : 0;
        sc->upd = dt_plan_stage_update(p, L, sc->nparams) * ushare;
        if (zs == 3) sc->regather = dt_plan_regathered(p, L, g, &sc->fwd_again);
        sc->walks = 1;
        if (zs == 3 && L->grid[1] == 1 && !p->cs.reproducible) {
                int micro, rc = 0;
                micro_batch(p, L, &micro, NULL);
                for (int i = 0; i < g->n && !rc; i++) rc = dt_graph_recomputed(g, i);
                if (!rc) sc->walks = micro;
        }
        /* plan/mem.h's plan, as the run allocates it: a replica's slice per slot (a pipeline's: its largest
         * micro-batch), the evaluation in pieces of that size; rank 0's snapshot of the whole model on stage 0 */
        const dt_graph *whole = p->g;
        dt_mem_in mi = { .g = g, .batch = L->grid[1] > 1 ? dt_layout_act_batch(L, p->batch, (p->batch + L->grid[0] - 1) / L->grid[0]) : bm,
                         .nslots = slots, .nmoments = p->nmo,
                         .dp = L->grid[0], .fixed = (size_t)p->mem_fixed, .threads = m->threads, .data = (size_t)(p->mem_data + p->mem_data_ps * ((p->batch + L->grid[0] - 1) / L->grid[0])),
                         .onednn = p->mem_onednn,
                         .msg_bufs = L->grid[1] > 1 ? dt_pipe_message_bufs(L->sched, L->grid[1], dt_layout_chunks(L), s,
                                                                           DT_MIN(L->micro, (p->batch + L->grid[0] - 1) / L->grid[0]),
                                                                           dt_pipe_one_tensor(g)) : 0,
                         .snapshot_floats = whole->nparams * (size_t)(1 + p->nmo) + whole->nbuffers,
                         .init_floats = split ? dt_tp_init_floats(&sg, 1) : 0 };        /* dt_grid_init_params, on the cpu */
        /* as train/memory.c counts them: none written synchronously, one for a run of one
         * checkpoint (one epoch) or under checkpoint_snapshots: 1, else two, and a split model's
         * rank 0 the whole model for each, all when the checkpoints are not streamed */
        const dt_train_spec *tr = &whole->spec->train;
        const char *sync = getenv("DTRAIN_CKPT_SYNC");      /* "1": train/ckpt_writer.h's rule */
        int many = tr->epochs > 1 || tr->checkpoint_every > 0;
        /* a grid in parts or sharded streams them (train/ckpt_stream.c) without a compressor's state */
        int parts = L->grid[1] > 1 || L->grid[2] > 1, stream = (zs || parts) && p->cs.compression == DT_COMP_NONE;
        if (s == 0 && !stream && !(sync && !strcmp(sync, "1"))) mi.snapshots = many && p->cs.checkpoint_snapshots != 1 ? 2 : 1;
        if (s == 0 && parts && !stream) mi.snapshots++;
        mi.shard = zs;
        mi.mixed = parts;
        mi.speculate = dt_mem_speculates(L->grid[1], tr->clip_norm, zs);
        /* stage s's rank on data rank 0 (rank 0 itself on stage 0), the most of its data ranks */
        if (stream) mi.stream_floats = dt_mem_stream_floats(whole, s == 0, dt_mem_stream_sends(s == 0, 0, zs, p->nmo, parts));
        mi.bucket_mb = p->cs.bucket_mb;
        mi.sum_esz = dt_dp_sum_esz(&p->cs, zs);
        dt_mem_set_walk(&mi, &p->cs, L->grid[1] > 1, (p->batch + L->grid[0] - 1) / L->grid[0], L->grid[0], -1);
        dt_mem_plan mp;
        dt_mem_plan_of(&mi, &mp);
        if (mi.shard && !stream) mp.need += 4.0 * p->nmo * (double)g->nparams;   /* a checkpoint's moments gathered whole */
        sc->mem = mp.need;      /* what a limit must hold (the dataset caches mapped from disk apart) */
        cut_of(g, sc);
        free(lc);
        if (split) dt_graph_free(&lg);
        dt_graph_free(&sg);
}

/* The stages of L (unsplit: only pipelines without tensor shards take turns) on a core. */
static double stage_turns(dt_planner *p, const dt_layout *L, int micro, int bm)
{
        int P = L->grid[1];
        dt_graph *sg = dt_calloc((size_t)P, sizeof *sg), lg;
        const dt_graph **g = dt_calloc((size_t)P, sizeof *g);
        for (int s = 0; s < P; s++) {
                if (dt_plan_stage_graphs(p, L, s, &sg[s], &lg)) dt_graph_free(&lg);
                g[s] = &sg[s];
        }
        double f = dt_prof_turns(&p->pf, g, P, micro, bm);
        for (int s = 0; s < P; s++) dt_graph_free(&sg[s]);
        free(sg);
        free(g);
        return f;
}

/* The samples a stage computes at once under L: each replica's slice of the batch (into *slice,
 * where not NULL) cut into *micro micro-batches. */
static int micro_batch(const dt_planner *p, const dt_layout *L, int *micro, int *slice)
{
        int D = L->grid[0], P = L->grid[1];
        int sl = (p->batch + D - 1) / D, mb = p->cs.micro_batch;
        /* without stages, partition.micro_batch accumulates the slice in pieces of that size */
        *micro = P > 1 ? DT_MIN(L->micro, sl) : mb > 0 && mb < sl ? (sl + mb - 1) / mb : 1;
        if (slice) *slice = sl;
        if (P == 1 && *micro > 1) return mb;    /* the last piece shorter, priced as the others */
        return (sl + *micro - 1) / *micro;
}

/* Each stage graph of L (shards placed) at its micro-batch size, to fn. */
static void each_stage(dt_planner *p, const dt_layout *L, void (*fn)(dt_prof *, const dt_graph *, int))
{
        int P = L->grid[1];
        int micro, bm = micro_batch(p, L, &micro, NULL);
        for (int s = 0; s < P; s++) {
                dt_graph sg, lg;
                int split = dt_plan_stage_graphs(p, L, s, &sg, &lg);
                fn(&p->pf, split ? &lg : &sg, bm);
                if (split) dt_graph_free(&lg);
                dt_graph_free(&sg);
        }
}

void dt_plan_remeasure(dt_planner *p, const dt_layout *L)
{
        each_stage(p, L, dt_prof_refine);
}

void dt_plan_forget(dt_planner *p, const dt_layout *L)
{
        each_stage(p, L, dt_prof_forget);
}

static void free_stage(stage_cost *sc)
{
        free(sc->bwd);
        free(sc->pbytes);
        free(sc->cx);
}

/* Backward, then the data-parallel buckets (about bucket_mb of gradient each, last layers first, as
 * parallel/dp.c packs them) one after another, each compressed as cs says (plan/cxmodel.c). On the
 * cpu backend a nonblocking all-reduce moves only while its rank is inside MPI, and the ranks
 * compute until backward ends: dtrain bench measures 2-3% of the sum hidden behind backward here,
 * so none is assumed. Returns the end of the last sum; *bwd_end the end of the backward compute,
 * *wire the bytes of this rank's messages. */
static double overlap_buckets(const stage_cost *sc, double t0, const dt_data_sum *dl, int D, double bucket,
                              const dt_cluster_spec *cs, double *bwd_end, dt_prediction *pr, double *wire)
{
        double t = t0, comm = 0, acc = 0, w = 0;
        dt_cx_bucket cx = { 0 };
        int method = cs->compression == DT_COMP_AUTO ? DT_COMP_NONE : (int)cs->compression;
        *wire = 0;
        for (int i = sc->n - 1; i >= 0; i--) {
                t += sc->bwd[i];
                acc += sc->pbytes[i];
                dt_plan_cx_add(&cx, &sc->cx[i]);
                if (D > 1 && acc > 0 && (acc >= bucket || i == 0)) {
                        if (method == DT_COMP_NONE) {
                                double flat, two;
                                comm += dt_net_allreduce_data2(dl, D, acc, &flat, &two, &pr->dp_hier);
                                pr->dp_flat += flat;
                                pr->dp_two += two;
                                *wire += acc;
                                pr->link_dp += dt_net_node_bytes(dl->m, D, dl->stride > 0 ? dl->stride : 1,
                                                                 pr->dp_hier ? DT_NET_TWO_LEVEL : DT_NET_RING, acc);
                        } else {
                                double lk;
                                comm += dt_plan_cx_sum(dl, D, cs, method, &cx, &w, &lk);
                                *wire += w;
                                pr->link_dp += lk;
                        }
                        acc = 0;
                        memset(&cx, 0, sizeof cx);
                }
        }
        *bwd_end = t;
        return t + comm;
}

/* The pipeline messages' cost on each stage's own cores: the copies in and out, and, where a
 * pipeline's stages take turns on one core (shared), each side's call and transfer. */
static void message_costs(stage_cost *sc, int P, int bm, const dt_machine *m, const dt_link *pl, int shared)
{
        /* a message of several tensors (a branched cut) is packed into a buffer of its own and
         * unpacked by its receiver (parallel/pipeline.c: post_send, unpack), two copies on the
         * stages' own cores whatever the link: forward unpacks the activation in and packs its own
         * out, backward unpacks the output's gradient and packs the input's. One tensor (a chain's
         * cut) goes straight from and into the layers' tensors on the host (dt_pipe_direct): no
         * copy but the transport's */
        for (int s = 0; P > 1 && s < P; s++) {
                int packed_in = s > 0 && sc[s - 1].out_tensors > 1, packed_out = s < P - 1 && sc[s].out_tensors > 1;
                double in = packed_in ? 4.0 * bm * sc[s - 1].out_floats * m->copy_beta : 0;
                double out = packed_out ? 4.0 * bm * sc[s].out_floats * m->copy_beta : 0;
                sc[s].f += in + out;
                sc[s].b += in + out;
        }
        /* stages taking turns on a core also take turns at their messages: each side's call, and
         * the receiver's copy, are core time like the layers' (on one core, pipeline 2 of mlp at
         * batch 64 measured 0.83-0.86 ms with 16 micro-batches against 0.62-0.65 with 2, about
         * 14 us per micro-batch; two messages a micro-batch at alpha a side is 16) */
        for (int s = 0; shared && s < P; s++) {
                double a = pl->alpha, in = s > 0 ? 4.0 * bm * sc[s - 1].out_floats * pl->beta : 0;
                double back = s < P - 1 ? 4.0 * bm * sc[s].out_floats * pl->beta : 0;
                sc[s].f += (s > 0) * (a + in) + (s < P - 1) * a;
                sc[s].b += (s < P - 1) * (a + back) + (s > 0) * a;
        }
}

/* How a step is slowed where its node's ranks share cores (dt_plan_predict): compute by 'share',
 * stage s's further by sf[s] (NULL: 1); the data axis's collectives (sums, gathers, the norm and
 * the agreement) by csum, since in shared memory their copies and adds are each rank's own work;
 * shared: each pipeline's stages take turns on one core, and their sums with them. */
typedef struct slowdown {
        double share;
        const double *sf;
        double csum;
        int shared;
        double umul;    /* the optimizer step's slowdown over the compute's: busy neighbours
                         * slow a memory-bound pass by a factor of its own */
} slowdown;

/* The update's seconds: the slowest stage's optimizer step, the gradient norm's sum, the step's
 * own parts (the slice's data and loss, also into *data) and the world's signal agreement. */
static double update_cost(const dt_planner *p, const dt_machine *m, const dt_layout *L, const stage_cost *sc,
                          const slowdown *sl, int slice, const dt_link *pl, const dt_link *tl, double *data)
{
        int D = L->grid[0], P = L->grid[1], T = L->grid[2];
        double upd = 0, most_sf = 1.0;
        for (int s = 0; s < P; s++) {
                upd = DT_MAX(upd, sc[s].upd);
                most_sf = DT_MAX(most_sf, sl->sf ? sl->sf[s] : 1.0);
        }
        if (T > 1 || P > 1) upd += sl->csum * dt_net_allreduce(T > 1 ? tl : pl, T > 1 ? T : P, 8);     /* the norm */
        /* the step's own parts (the zeroing is in the update): its slice's data, which the loader
         * thread prepares on the rank's own core (mpirun binds the rank, and the thread, woken
         * as the step ends, runs there first: mlp on 2 ranks spent 68 us of its 0.97 ms step in
         * dt_loader_release), and the loss; on a pipeline's first and last stage, other ranks.
         * Then (more than one rank) the signal agreement every step takes over the world. */
        double feed = dt_prof_feed(&p->pf, slice), loss = dt_prof_loss(&p->pf, slice);
        *data = (P > 1 ? DT_MAX(feed, loss) : feed + loss) * sl->share * most_sf;
        upd += *data;
        int N = D * P * T;
        if (N > 1) upd += sl->csum * dt_net_allreduce(dt_net_link(m, N, 1), N, 4);
        return upd;
}

/* The meeting points of the busiest rank into pr->syncs: tensor collectives, pipeline messages (one
 * in and one out per micro-batch and direction), gradient buckets, the norm and the agreement. */
static void count_syncs(const stage_cost *sc, int P, int D, int micro, double bucket, dt_prediction *pr)
{
        for (int s = 0; s < P; s++) {
                double k = micro * (sc[s].colls + 2.0 * ((s > 0) + (s < P - 1))) + 2.0;
                if (D > 1) k += ceil(4.0 * sc[s].nparams / DT_MAX(bucket, 1.0));
                pr->syncs = DT_MAX(pr->syncs, k);
        }
}

/* The step without stages: forward, backward with the gradient buckets behind it, the update; with
 * 'micro' micro-batches the first ones' walks before it, or at shard 3 walking layer by layer
 * (c->walks) each one's buckets reduce-scattered behind its own backward (stepper.c's grad_range). */
static void play_flat(const stage_cost *c, int micro, const dt_data_sum *dl, int D, double bucket,
                      const dt_cluster_spec *cs, double upd, const slowdown *sl, dt_prediction *pr)
{
        double bwd_end, wire, end = overlap_buckets(c, c->f, dl, D, bucket, cs, &bwd_end, pr, &wire);
        end = bwd_end + sl->csum * (end - bwd_end);
        int each = D > 1 && c->walks > 1 ? micro : 1;
        double before = (micro - each) * (c->f + c->b + c->w) + (each - 1) * end;
        pr->compute = micro * (c->f + c->b + c->w - c->tp);
        pr->tensor = micro * c->tp;
        pr->dp = each * (end - bwd_end);
        end += before;
        pr->bytes_dp = D > 1 ? each * (cs->compression == DT_COMP_NONE || cs->compression == DT_COMP_AUTO ? 4.0 * c->nparams
                                                                                                   : wire) : 0;
        pr->step = end + upd;
}

/* A recv_copy link's messages as the simulator plays them: each arrives once its sender posts it
 * (the link's latency), and its bytes are the receiver's copy after it reaches the receive, not
 * a transfer the receiver may have been computing through. The simulator takes one message
 * time for all, so the copy is the mean over the schedule's messages: one each way per micro-batch
 * across every cut between virtual stages, a chunk's message to its own stage too (MPI's copy to
 * itself). Stages that take turns on a core are charged their messages' copies in their compute
 * instead (message_costs). Without it a 2-stage zb-v of cnn-bn was predicted 14-19% fast: its
 * receiver idled 5-6 ms a step against 0.7 simulated. */
static void recv_copy_link(const stage_cost *sc, const dt_layout *L, int bm, const dt_link *pl, dt_sim_link *lk)
{
        int P = L->grid[1], V = dt_layout_chunks(L), S = P * V;
        double sum = 0;
        for (int s = 0; s < P; s++)
                for (int c = 0; c < V; c++)
                        if (dt_schedule_vstage(L->sched, P, V, s, c) < S - 1) sum += sc[s].cout[c];
        double n = S > 1 ? 4.0 * bm * sum / (S - 1) : 0;
        *lk = (dt_sim_link){ .p2p = pl->alpha, .recv = dt_net_recv_copy(pl, n) };
}

/* The step with stages: L's schedule played by the simulator over the stages' costs and the link
 * between them, then the gradient sum over replicas and the update. -1 (pr->why set) when L's
 * schedule cannot be built. */
static int play_pipeline(const dt_layout *L, const stage_cost *sc, int busiest, int micro, int bm, int slice,
                         const dt_link *pl, const dt_data_sum *dl, const dt_cluster_spec *cs, double upd,
                         const slowdown *sl, dt_prediction *pr)
{
        int D = L->grid[0], P = L->grid[1];
        dt_schedule sch;
        char err[256];
        int V = dt_layout_chunks(L);
        if (dt_schedule_build_v(&sch, L->sched, P, V, micro, err, sizeof err) < 0) {
                snprintf(pr->why, sizeof pr->why, "%.150s", err);
                pr->step = INFINITY;
                return -1;
        }
        dt_stage_cost *cost = dt_calloc((size_t)(P * V), sizeof *cost);
        double p2p = 0, cut = 0;
        int zb = L->sched == DT_SCHEDULE_ZB_H1 || dt_schedule_is_v(L->sched);
        for (int s = 0; s < P; s++) {
                if (V == 1) cost[s] = (dt_stage_cost){ sc[s].f, zb ? sc[s].b : sc[s].b + sc[s].w, zb ? sc[s].w : 0 };
                for (int c = 0; c < V && V > 1; c++)    /* each chunk its own share, at its virtual stage */
                        cost[dt_schedule_vstage(L->sched, P, V, s, c)] =
                                (dt_stage_cost){ sc[s].cf[c], zb ? sc[s].cb[c] : sc[s].cb[c] + sc[s].cw[c], zb ? sc[s].cw[c] : 0 };
                if (s < P - 1 || V > 1) cut = DT_MAX(cut, sc[s].out_floats);
        }
        p2p = dt_net_p2p(pl, 4.0 * bm * cut);
        dt_sim_link lk;
        dt_net_sim_link(pl, 4.0 * bm * cut, &lk);
        if (pl->recv_copy && !sl->shared) recv_copy_link(sc, L, bm, pl, &lk);
        dt_schedule_sim sim;
        if (dt_schedule_simulate_link(&sch, cost, &lk, &sim, err, sizeof err) < 0)
                dt_die(DT_EXIT_RUNTIME, "planner: schedule simulation: %s", err);
        /* each stage's replicas sum their gradients at once; where a pipeline's stages share a
         * core, its ranks copy and add their parts in turn */
        double dp = 0, wire = 0, link = 0;
        int method = cs->compression == DT_COMP_AUTO ? DT_COMP_NONE : (int)cs->compression;
        for (int s = 0; s < P; s++) {
                double flat, two, w = 4.0 * sc[s].nparams, t, lk;
                if (method == DT_COMP_NONE) {
                        t = dt_net_allreduce_data2(dl, D, w, &flat, &two, &pr->dp_hier);
                        lk = dt_net_node_bytes(dl->m, D, dl->stride > 0 ? dl->stride : 1,
                                               pr->dp_hier ? DT_NET_TWO_LEVEL : DT_NET_RING, w);
                        if (s == busiest) pr->dp_flat = flat, pr->dp_two = two;
                } else {
                        t = dt_plan_cx_sum(dl, D, cs, method, &sc[s].all, &w, &lk);
                }
                t *= sl->csum;
                dp = sl->shared ? dp + t : DT_MAX(dp, t);
                if (s == busiest) wire = w, link = lk;
        }
        const stage_cost *c = &sc[busiest];
        pr->compute = micro * (c->f + c->b + c->w - c->tp);
        pr->tensor = micro * c->tp;
        pr->bubble = sim.idle[busiest];
        pr->p2p = 2.0 * micro * V * p2p;
        pr->dp = dp;
        pr->bytes_dp = D > 1 ? wire : 0;
        pr->link_dp = D > 1 ? link : 0;
        pr->bytes_p2p = 2.0 * 4.0 * slice * cut;
        pr->step = sim.makespan + dp + upd;
        free(cost);
        dt_schedule_free(&sch);
        return 0;
}

/* partition.shard's parameter all-gathers. Stage 1 gathers after the gradients' all-reduce, so
 * more bytes. At stage 2 the gradients' ring reduce-scatter is priced as what runs (the buckets'
 * dt_net_reduce_scatter, not half the all-reduce: its add reads its buffer back from memory) and
 * the parameters' all-gather after the update here. Stage 3 gathers those bytes before the layers,
 * the backward's gathers again (dt_plan_regathered), and makes the pages of the others' parts resident
 * again every step, those of the parameters before their gathers and those of the gradient before
 * its backward (compute: 'share' slows it). Measured on mlp-4096,
 * 2 ranks, 2 buckets (none gathered again): the gathers' copies are the receiver's own work inside
 * its MPI calls (Open MPI's shared-memory transport reads the peer's memory), as the all-reduce's
 * are, so what a prefetch hides is only the peer's lateness; the pages were what shard 3 cost. */
static void shard_gather(const dt_planner *p, const dt_machine *m, const dt_layout *L, const stage_cost *sc, int P,
                         const slowdown *sl, dt_prediction *pr)
{
        int D = L->grid[0];
        if (D < 2 || L->shard < 1) return;
        const dt_link *dl = dt_net_link(m, D, dt_layout_stride(L->grid, DT_AXIS_DATA));
        double t = 0, most = 0, others = (D - 1.0) / D;
        for (int s = 0; s < P; s++) {
                double by = 4.0 * (sc[s].nparams + (L->shard == 3 ? sc[s].regather : 0));
                double g = by > 0 ? sl->csum * dt_net_allgather(dl, D, by) : 0;
                if (L->shard == 3) g += sl->share * dt_prof_pages(&p->pf, 4.0 * others * (2.0 * sc[s].nparams + sc[s].regather));
                /* each micro-batch after the first: its forward gathers again what the previous
                 * backward let go and its backward what this forward did, and its gradient's other
                 * parts are made resident again (handed back by each reduce-scatter) */
                double again = L->shard == 3 ? (sc[s].walks - 1) * (sc[s].fwd_again + sc[s].regather) : 0;
                if (again > 0) g += sl->csum * dt_net_allgather(dl, D, 4.0 * again);
                if (L->shard == 3 && sc[s].walks > 1)
                        g += sl->share * dt_prof_pages(&p->pf, 4.0 * others * (again + (sc[s].walks - 1) * sc[s].nparams));
                by += 4.0 * again;
                t = sl->shared ? t + g : DT_MAX(t, g);
                most = DT_MAX(most, by);
        }
        pr->dp += t;
        pr->step += t;
        pr->bytes_dp += most;
        pr->link_dp += dt_net_node_bytes(m, D, dt_layout_stride(L->grid, DT_AXIS_DATA), DT_NET_GATHER, most);
}

/* What the step asks of the machine: the node's compute demand (*demand), each stage's work
 * (work, where not NULL), the light and heavy stages, and whether the fullest rank fits. */
static void step_demand(const dt_machine *m, const dt_layout *L, const stage_cost *sc, int micro, double upd,
                        dt_prediction *pr, double *demand, double *work)
{
        int D = L->grid[0], P = L->grid[1], T = L->grid[2];
        /* each stage's D x T ranks compute micro x (f + b + w) less their collectives, and update */
        double want = 0, most = 0;
        pr->share = dt_machine_share(m);
        pr->light_frac = 1.0;
        for (int s = 0; s < P; s++) {
                double busy = micro * (sc[s].f + sc[s].b + sc[s].w - sc[s].tp);
                want += (double)D * T * (busy + upd);
                most = DT_MAX(most, busy + upd);
                if (work) work[s] = busy + sc[s].upd;
                pr->work += (double)D * T * micro * sc[s].raw;
                if (sc[s].raw < sc[pr->light].raw) pr->light = s;
        }
        /* unslowed, so that a stage that shares its core more than another is not called light */
        double all_raw = 0;
        for (int s = 0; s < P; s++) {
                all_raw += sc[s].raw;
                if (sc[s].raw > sc[pr->heavy].raw) pr->heavy = s;
        }
        if (P > 1 && sc[pr->heavy].raw > 0) {
                pr->light_frac = sc[pr->light].raw / sc[pr->heavy].raw;
                pr->heavy_frac = sc[pr->heavy].raw / all_raw;
        }
        *demand = want * (m->threads > 0 ? m->threads : 1) * DT_MIN(1.0, (double)m->ranks_per_node / (D * P * T));
        /* the cores computing while the busiest rank does, its peers' work laid over its own (a data
         * axis's replicas compute in step, between the same sums) */
        pr->busy = most > 0 ? DT_MIN((double)m->cores_per_node, DT_MAX(1.0, *demand / most)) : 1.0;
        pr->limit = m->mem_bytes;
        pr->fits = pr->mem <= m->mem_bytes;
        if (!pr->fits)
                snprintf(pr->why, sizeof pr->why, "needs %.1f MiB on its fullest rank, %.1f MiB available",
                         pr->mem / 1048576.0, m->mem_bytes / 1048576.0);
}

/* The step slowed as *sl says; *demand: the compute seconds all ranks of one node want in that step
 * (to find how much they really slow each other); work[s] (NULL: not wanted): the seconds a rank of
 * stage s computes in it. */
static int predict_with(dt_planner *p, const dt_machine *m, const dt_layout *L, const slowdown *sl,
                        dt_prediction *pr, double *demand, double *work)
{
        memset(pr, 0, sizeof *pr);
        int D = L->grid[0], P = L->grid[1], T = L->grid[2];
        if (p->batch < D) {
                snprintf(pr->why, sizeof pr->why, "batch %d is smaller than %d replicas", p->batch, D);
                pr->step = INFINITY;
                return -1;
        }
        int micro, slice, bm = micro_batch(p, L, &micro, &slice);
        const dt_data_sum dsum = { m, dt_layout_stride(L->grid, DT_AXIS_DATA), D > 1 && L->shard >= 2 }, *dl = &dsum;
        const dt_link *pl = dt_net_link(m, 2, dt_layout_stride(L->grid, DT_AXIS_PIPE));
        const dt_link *tl = dt_net_link(m, T, dt_layout_stride(L->grid, DT_AXIS_TENSOR));
        stage_cost *sc = dt_calloc((size_t)P, sizeof *sc);
        double turns = sl->shared ? stage_turns(p, L, micro, bm) : 1.0;
        for (int s = 0; s < P; s++) {
                int slots = P > 1 ? dt_pipe_slots(L->sched, P, dt_layout_chunks(L), s, micro) : 1;
                double sh = sl->share * (sl->sf ? sl->sf[s] : 1.0);
                cost_stage(p, m, L, s, bm, slots, sh, sh * sl->umul, turns, &sc[s]);
        }
        message_costs(sc, P, bm, m, pl, sl->shared);
        double bucket = p->cs.bucket_mb * 1048576.0;
        int busiest = 0;
        for (int s = 0; s < P; s++) {
                if (sc[s].mem > pr->mem) pr->mem = sc[s].mem;
                if (sc[s].f + sc[s].b + sc[s].w > sc[busiest].f + sc[busiest].b + sc[busiest].w) busiest = s;
        }
        double data, upd = update_cost(p, m, L, sc, sl, slice, pl, tl, &data);
        pr->update = upd - data;
        pr->data = data;
        pr->bytes_tp = sc[busiest].tp_bytes * micro;
        count_syncs(sc, P, D, micro, bucket, pr);
        int rc = 0;
        if (P == 1) play_flat(&sc[0], micro, dl, D, bucket, &p->cs, upd, sl, pr);
        else rc = play_pipeline(L, sc, busiest, micro, bm, slice, pl, dl, &p->cs, upd, sl, pr);
        if (rc == 0) shard_gather(p, m, L, sc, P, sl, pr);
        if (rc == 0) step_demand(m, L, sc, micro, upd, pr, demand, work);
        for (int s = 0; s < P; s++) free_stage(&sc[s]);
        free(sc);
        return rc;
}

/* Ranks that outnumber a node's cores share them by time-slicing, and parallel/place.c pins them so
 * that the ranks of one pipeline share a core unit when each unit holds at most one pipeline.
 * Those ranks take turns: a stage waiting on a message yields its core to the stage it waits
 * for, so the node slows only by its demand for core time (the step is played with no slowdown,
 * the demand measured against the cores, and played again slowed by that ratio). Taking turns
 * costs more than the stages' sum (each resumes with caches and TLB the other has used; the
 * switches): that is measured, the stages run as processes on one core (dt_prof_turns), and
 * their costs scaled by it. Their gradient sums, too, take turns (predict_with). Every other
 * way of sharing (replicas or tensor shards of one stage on one core, which compute at the same
 * time and synchronise with ranks on other cores) runs each rank at cores / (ranks x threads) of
 * its speed for the whole step, plus DT_PLAN_OVERSUB_PENALTY: a collective completes only when
 * every co-located rank has done its part. Their data-parallel collectives slow by as much. Measured with 4 ranks on 2 cores, pinned (dtrain run,
 * 20 steps, 3 runs): lstm tensor 4 12.8-14.1 ms (8.1 by the demand, 12.8 by the ratio), mlp
 * pipeline 2 x tensor 2 1.65-1.74 (1.0 and 1.6). */
int dt_plan_predict(dt_planner *p, const dt_machine *m, const dt_layout *L, dt_prediction *pr)
{
        double most = dt_machine_share(m), demand = 0;
        int P = L->grid[1];
        int units = DT_MAX(1, m->cores_per_node / DT_MAX(1, m->threads));
        int pipelines = (m->ranks_per_node + P - 1) / P;
        /* stages take turns on a core; tensor shards of a stage on different cores must also run
         * at the same time for every collective, which the turns do not keep to: 4 ranks on 2
         * cores measured mlp pipeline 2 x tensor 2 at 1.0-1.7 ms against 0.67 by the turns, cnn
         * 19.8-23.9 against 14.9 (and chosen over data 2 x pipeline 2 at 13-14), so those share
         * by the ratio */
        int turns = most > 1.0 && P > 1 && L->grid[2] == 1 && pipelines <= units;
        /* the other ways stages share a core (tensor shards in each stage, one pipeline per core
         * unit): each rank computes at the same time as the other stages of its pipeline only while
         * they have work; waiting on a message they poll and yield. So a stage is slowed by how busy
         * the others are, not by the ratio: 4 ranks on 2 cores measured the wide MLP's pipeline 2 x
         * tensor 2 (a light first stage) at 100-106 ms, against 199 by the ratio and 111-113 by this */
        int by_stage = most > 1.0 && P > 1 && !turns && pipelines <= units && fabs(most - P) < 1e-9;
        double *work = by_stage ? dt_malloc((size_t)P * sizeof *work) : NULL;
        double *sf = by_stage ? dt_malloc((size_t)P * sizeof *sf) : NULL;
        int rc = predict_with(p, m, L, &(slowdown){ 1.0, NULL, 1.0, turns, 1.0 }, pr, &demand, work);
        if (rc < 0 || m->ranks_per_node < 2) {
                free(work);
                free(sf);
                return rc;
        }
        /* how much of the time-slicing penalty the step's meeting points make it pay */
        const double fine = DT_MIN(1.0, pr->syncs * DT_PLAN_SYNC_QUANTUM / pr->step);
        if (by_stage) {
                /* two rounds towards the fixed point: the others' busy share of the step they slow */
                for (int round = 0; round < 2 && rc == 0; round++) {
                        for (int a = 0; a < P; a++) {
                                double others = 0;
                                for (int b = 0; b < P; b++)
                                        if (b != a) others += DT_MIN(1.0, work[b] / pr->step);
                                sf[a] = DT_MIN(most, 1.0 + others);
                                sf[a] *= 1.0 + fine * DT_PLAN_OVERSUB_PENALTY * (sf[a] - 1.0) / (most - 1.0);
                        }
                        double pen = dt_prof_neighbours(&p->pf, pr->busy);
                        double umul = dt_prof_neighbours_mem(&p->pf, pr->busy) / pen;
                        for (int a = 0; a < P; a++) sf[a] *= pen;
                        rc = predict_with(p, m, L, &(slowdown){ 1.0, sf, 1.0, turns, umul }, pr, &demand, work);
                }
                free(work);
                free(sf);
                return rc;
        }
        double s;
        if (most > 1.0 && !turns) {
                s = most;
        } else {
                s = demand / (m->cores_per_node * pr->step);
                s = s < 1.0 ? 1.0 : s > most ? most : s;
        }
        /* time-slicing more busy ranks than cores costs more than their ratio (context switches,
         * caches shared); where stages take turns the cold costs are that */
        if (most > 1.0 && !turns) s *= 1.0 + fine * DT_PLAN_OVERSUB_PENALTY * (s - 1.0) / (most - 1.0);
        /* and busy cores slow each other even when there are enough of them: by how many compute
         * while the busiest rank computes, not their average over the step (rounded to whole cores,
         * the step's average put mlp's 2 replicas on either side of 1.5 from one profile to the next,
         * and its prediction 6% apart; averaged without rounding, the sums' share of the step hid a
         * slowdown its compute has in full) */
        double pen = dt_prof_neighbours(&p->pf, pr->busy);
        s *= pen;
        /* replicas and tensor shards sharing a core also share it for their collectives: in shared
         * memory the copies and adds of a sum or a gather are each rank's own work inside its MPI
         * calls, and every rank of a core has its part, so they slow as the compute does (4 ranks
         * on 2 cores, mlp data 4: the gradient sum's 0.94 MB took 1.1-1.6 ms of a 2.5 ms step,
         * against 0.28 priced unslowed; mlp-4096's 80 MB 66 ms against 35) */
        const slowdown sl = { s, NULL, most > 1.0 && !turns ? s : 1.0, turns,
                              dt_prof_neighbours_mem(&p->pf, pr->busy) / pen };
        return s > 1.0 ? predict_with(p, m, L, &sl, pr, &demand, NULL) : 0;
}

void dt_plan_print_layers(dt_planner *p, const dt_machine *m, const dt_layout *L, FILE *f)
{
        int P = L->grid[1], T = L->grid[2];
        int micro, bm = micro_batch(p, L, &micro, NULL);
        const dt_link *tl = dt_net_link(m, T, dt_layout_stride(L->grid, DT_AXIS_TENSOR));
        double share = dt_machine_share(m);
        fprintf(f, "%-14s %-6s %-16s %10s %10s %10s %12s %12s %10s\n", "layer", "stage", "split", "fwd ms", "bwd ms",
                "tp ms", "tp MB/step", "params", "mem MiB");
        for (int s = 0; s < P; s++) {
                dt_graph sg, lg;
                int split = dt_plan_stage_graphs(p, L, s, &sg, &lg);
                const dt_graph *g = split ? &lg : &sg;
                dt_layer_cost *lc = dt_malloc((size_t)g->n * sizeof *lc);
                dt_prof_graph(&p->pf, g, bm, lc);
                for (int i = 0; i < g->n; i++) {
                        const dt_layer *l = &g->layers[i];
                        double c[2] = { 0, 0 }, bytes = 0;
                        if (split) tensor_cost(l, bm, i || g->input_grad, tl, T, c, &bytes);
                        size_t np = 0;
                        for (int k = 0; k < l->np; k++) np += l->ps[k].trainable ? l->len[k] : 0;
                        char sp[32];
                        snprintf(sp, sizeof sp, "%s%s", dt_split_names[l->place.split],
                                 l->place.split == DT_SPLIT_COLUMN && l->place.gather ? "+gather" : "");
                        /* this rank's share for the layer: parameters, gradients and moments, and
                         * its output and output gradient for a replica's slice (one slot: what the
                         * run allocates; the evaluation runs in pieces of that size) */
                        double slice = (p->batch + L->grid[0] - 1) / L->grid[0];
                        double mem = 4.0 * np * (2 + p->nmo) + 4.0 * slice * 2 * dt_shape_size(&l->out);
                        fprintf(f, "%-14s %-6d %-16s %10.3f %10.3f %10.3f %12.3f %12zu %10.1f\n", l->name, s, sp,
                                1e3 * micro * lc[i].f * share, 1e3 * micro * (lc[i].bi + lc[i].bw) * share,
                                1e3 * micro * (c[0] + c[1]), micro * bytes / 1e6, np, mem / 1048576.0);
                }
                free(lc);
                if (split) dt_graph_free(&lg);
                dt_graph_free(&sg);
        }
}
