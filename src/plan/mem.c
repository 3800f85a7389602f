/* plan/mem.c - the per-rank memory plan (see mem.h). */
#include "plan/mem.h"
#include "parallel/pipeline.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include "util/common.h"
#include "parallel/dp.h"
#include "parallel/shard.h"
#include "spec/cluster_spec.h"

/* The activations of the slots' forwards kept for backward: what dt_graph_memory_slots counts beyond
 * the flat buffers (inputs, outputs, their gradients, per-sample scratch; a recomputing graph's
 * kept tensors per slot and its one region, graph/recompute.c). */
static double activations(const dt_mem_in *in)
{
        const dt_graph *g = in->g;
        size_t all = dt_graph_memory_slots(g, in->batch, 0, in->nslots > 0 ? in->nslots : 1);
        if (all == SIZE_MAX) return 1e30;
        return (double)all - 4.0 * (2.0 * (double)g->nparams + (double)g->nbuffers);
}

/* oneDNN's library (loaded by the first convolution that takes it) and each layer's per-thread
 * buffers (blocked copies of a chunk of ~1 MiB of x and y, their gradients, scratchpads): VmHWM
 * of `dtrain run --conv onednn` against --conv im2col, 2-core Xeon: cnn-bn (2 layers) 11 MiB more
 * on one thread and 20 on two, resnet (13 layers, 2 threads) ~50; modelled as 2 MiB + 2 MiB per
 * layer and thread (within 5% of either run's peak). 1x1 kernels stay on im2col (conv.c's rule),
 * whose chunk buffers are at most 512 KiB per layer and thread. */
static double workspace(const dt_mem_in *in)
{
        const dt_graph *g = in->g;
        int th = in->threads > 0 ? in->threads : 1, conv = 0, dn = 0;
        for (int i = 0; i < g->n; i++) {
                const dt_layer *l = &g->layers[i];
                if (strcmp(l->ops->name, "conv") || l->np < 1) continue;
                conv++;
                size_t fc = (size_t)l->out.d[0] * (size_t)l->in.d[0];
                dn += in->onednn && fc && l->len[0] / fc > 1;
        }
        return (dn ? (2.0 + 2.0 * dn * th) * 1048576.0 : 0) + 524288.0 * th * (conv - dn);
}

/* Shard 3's most at once beyond this rank's parts (parallel/shard.h), in floats of the other
 * ranks' parts o(b) of each bucket b: backward at bucket b[i] (the buckets in backward order) holds
 * its parameters and the next one's, gathered meanwhile, and its gradient and the previous one's,
 * whose reduce-scatter may still be under way; forward holds less. The worst bucket's. */
static void gathered(const dt_mem_in *in, double *params, double *grads)
{
        const dt_graph *g = in->g;
        dt_bucket *b = dt_calloc((size_t)g->n + 1, sizeof *b);
        int nb = dt_dp_buckets(g, in->bucket_mb, b);
        double dp = in->dp > 1 ? in->dp : 1, most = -1;
        *params = *grads = 0;
        for (int i = 0; i < nb; i++) {  /* dt_dp_buckets fills them last layer's first */
                double o = 4.0 * (double)b[i].len * (dp - 1) / dp;
                double next = i + 1 < nb ? 4.0 * (double)b[i + 1].len * (dp - 1) / dp : 0;
                double prev = i > 0 ? 4.0 * (double)b[i - 1].len * (dp - 1) / dp : 0;
                if (2 * o + next + prev <= most) continue;
                most = 2 * o + next + prev;
                *params = o + next;
                *grads = o + prev;
        }
        free(b);
}

/* Shard 2 and 3's ring reduce-scatter receives one part of a bucket at a time into one buffer the
 * size of the largest part (parallel/shard.c): bucket b's part r is its DT_SHARD_BLOCK blocks
 * [nbk r / D, nbk (r + 1) / D). */
static double ring_buffer(const dt_mem_in *in)
{
        const dt_graph *g = in->g;
        dt_bucket *b = dt_calloc((size_t)g->n + 1, sizeof *b);
        int nb = dt_dp_buckets(g, in->bucket_mb, b);
        size_t K = DT_SHARD_BLOCK, D = (size_t)in->dp, most = 1;
        for (int i = 0; i < nb; i++) {
                size_t nbk = (b[i].len + K - 1) / K;
                for (size_t r = 0; r < D; r++)
                        most = DT_MAX(most, DT_MIN(K * (nbk * (r + 1) / D), b[i].len) - DT_MIN(K * (nbk * r / D), b[i].len));
        }
        free(b);
        return 4.0 * (double)most;
}

int dt_mem_stream_sends(int writer, int data_rank, int shard, int nmoments, int mixed)
{
        int parts = shard >= 3 || (shard >= 1 && nmoments > 0);
        return writer ? mixed || parts : data_rank == 0 || parts;
}

size_t dt_mem_stream_floats(const dt_graph *whole, int writer, int sends)
{
        size_t most = 0;
        for (int i = 0; i < whole->n; i++)
                for (int k = 0; k < whole->layers[i].np; k++)
                        most = DT_MAX(most, DT_MIN(DT_MEM_STREAM_PIECE, whole->layers[i].len[k]));
        return most * ((writer ? 1 : 0) + (sends ? 1 : 0));
}

int dt_mem_speculates(int stages, double clip_norm, int shard)
{
        return stages > 1 && clip_norm > 0 && shard == 0;
}

void dt_mem_set_walk(dt_mem_in *in, const dt_cluster_spec *cs, int pipelined, int slice, int replicas, int data_rank)
{
        in->pipelined = pipelined;
        in->accum = !pipelined && cs->micro_batch > 0 && cs->micro_batch < slice;
        in->sums_each = in->accum && cs->shard >= 3 && cs->sync == DT_SYNC_ALLREDUCE && replicas > 1 && !cs->reproducible;
        if (cs->reproducible && !pipelined) {   /* its chunk tree in place of the all-reduces */
                in->repro_bufs = dt_repro_buffers(cs->chunks, replicas, data_rank);
                in->sum_esz = 0;
        }
}

void dt_mem_plan_of(const dt_mem_in *in, dt_mem_plan *o)
{
        const dt_graph *g = in->g;
        double P = 4.0 * (double)g->nparams, dp = in->dp > 1 ? in->dp : 1;
        double xp = 0, xg = 0;
        if (in->shard >= 3 && in->dp > 1) gathered(in, &xp, &xg);
        memset(o, 0, sizeof *o);
        /* a recomputing graph's walks remake segments out of the layers' order, so shard 3 gathers
         * its parameters whole for the step (dt_shard_per_layer): planned as two buckets, the
         * 10-layer 2048-wide MLP's ranks peaked 30% (2 ranks) and 52% (4) above the plan */
        int whole = 0;
        for (int i = 0; i < g->n && !whole; i++) whole = dt_graph_recomputed(g, i);
        whole |= in->repro_bufs > 0;    /* its chunks' walks gather every bucket for the step */
        o->params = in->shard >= 3 && !whole ? DT_MIN(P, P / dp + xp) : P;
        /* and its gradient's other parts, handed back as each bucket's reduce-scatter completes:
         * on a data axis alone backward waits for all but one of them before it writes the next
         * bucket (dt_shard_bound_grads). Elsewhere the pokes between layers move the ring on, a
         * step per layer at best, and that MLP held most of its buckets (-32% and -42% against a
         * plan of two on 4 ranks), so they are planned whole there */
        int bound = !in->accum || (in->sums_each && !whole);   /* recomputing: dt_shard_per_layer */
        o->grads = in->shard >= 3 && !in->pipelined && bound && !in->repro_bufs ? DT_MIN(P, P / dp + xg) : P;
        /* the pages shard 3 gathers for a step and hands back at its end (dt_shard_release) */
        double lent = in->shard >= 3 && in->dp > 1 ? (o->params < P ? o->params - P / dp : 0) +
                                                     (o->grads < P ? o->grads - P / dp : 0) : 0;
        /* each chunk's whole gradient, the sums of every rank's tree nodes and the partial sums */
        o->repro = 4.0 * (double)g->nparams * in->repro_bufs;
        if (in->shard >= 2 && in->dp > 1) o->grads += ring_buffer(in);
        o->moments = in->nmoments * (in->shard >= 1 ? P / dp : P);
        o->buffers = 4.0 * (double)g->nbuffers;
        o->acts = activations(in);
        o->workspace = workspace(in);
        o->snapshots = (in->snapshots > 0 ? 4.0 * (double)in->snapshot_floats * in->snapshots : 0) +
                       4.0 * (double)in->stream_floats;
        /* shard 3 hands back the pages of the parameters it gathered and of the gradient's other
         * parts at the step's end (dt_shard_release), and a streamed checkpoint's pieces live between
         * steps: they take the same room at different times (mlp-even on 2 ranks: rank 0's step
         * peaked 7.8 MiB over its steady 67.3 MiB and the checkpoint 6.1; planned on top, +9.4%) */
        o->snapshots -= DT_MIN(4.0 * (double)in->stream_floats, DT_MAX(0.0, lent));
        o->data = (double)in->data;
        o->mapped = (double)in->mapped;
        o->fixed = (double)in->fixed;
        /* the buffers a stage's walk holds at once (dt_pipe_message_bufs: each send until its
         * receiver surely has it, a gradient until its B), each one micro-batch of its widest message */
        o->messages = in->msg_bufs > 0 ? 4.0 * in->msg_bufs * (double)in->batch * (double)dt_pipe_message_per(g) : 0;
        o->speculation = in->speculate ? 4.0 * ((2.0 + in->nmoments) * (double)g->nparams + (double)g->nbuffers) : 0;
        o->sums = in->dp > 1 && in->sum_esz ? dt_dp_inflight_bytes(g, in->bucket_mb, (size_t)in->sum_esz) : 0;
        o->need = o->params + o->grads + o->moments + o->buffers + o->acts + o->workspace + o->snapshots + o->data +
                  o->fixed + o->messages + o->speculation + o->sums + o->repro;
        /* a tensor-split rank initialises before its moments, checkpoints and messages exist (at
         * shard 3 layer by layer, its parts and the layer's: dt_shard_init_params), its shard-3
         * gradient still untouched pages (written first by backward) */
        double init = o->params + (in->shard >= 3 ? 0 : o->grads) + o->buffers + o->acts + o->workspace + o->data +
                      o->fixed + 4.0 * (double)in->init_floats;
        o->init = in->init_floats && init > o->need ? init - o->need : 0;
        o->total = o->need + DT_MAX(o->mapped, o->init);      /* the caches are read after it */
        o->need += o->init;
        /* a high-water mark keeps setup's own peak, however little of it is held later */
        if (o->total < (double)in->floor) o->total = (double)in->floor;
        if (!(o->total < 1e29)) o->total = o->need = 1e30;
}

void dt_mem_plan_str(const dt_mem_plan *p, char *buf, size_t n)
{
        struct { const char *name; double v; } t[] = {
                { "parameters", p->params }, { "gradients", p->grads }, { "optimizer moments", p->moments },
                { "buffers", p->buffers }, { "activations", p->acts }, { "workspace", p->workspace }, { "checkpoint snapshots", p->snapshots },
                { "data", p->data }, { "dataset caches mapped", p->mapped }, { "fixed (libraries, MPI, threads)", p->fixed },
                { "pipeline messages", p->messages }, { "post-validation copies", p->speculation }, { "initialisation's whole tensors", p->init },
                { "gradient sums in flight", p->sums }, { "reproducible chunk sums", p->repro },
        };
        enum { NT = sizeof t / sizeof *t };
        int used[NT] = { 0 };
        size_t k = 0;
        buf[0] = 0;
        for (int r = 0; r < NT; r++) {  /* largest first: what to cut is read first */
                int b = -1;
                for (int i = 0; i < NT; i++)
                        if (!used[i] && (b < 0 || t[i].v > t[b].v)) b = i;
                used[b] = 1;
                if (t[b].v < 0.05 * 1048576.0 || k >= n) continue;
                k += (size_t)snprintf(buf + k, n - k, "%s%s %.1f MiB", k ? ", " : "", t[b].name, t[b].v / 1048576.0);
        }
        if (k < n) snprintf(buf + k, n - k, "%stotal %.1f MiB", k ? "; " : "", p->total / 1048576.0);
}

/* Measured on the 2-core Xeon this was written on (VmRSS after MPI_Init and the backend, before any
 * model buffer): 8.7 MiB for one rank; under mpirun each rank also maps Open MPI's shared-memory
 * transport, ~1.5 MiB more per rank on the node. */
size_t dt_mem_fixed_model(int local_ranks)
{
        size_t base = (size_t)87 << 20, per = (size_t)3 << 19;
        return base / 10 + (local_ranks > 1 ? per * (size_t)local_ranks : 0);
}
