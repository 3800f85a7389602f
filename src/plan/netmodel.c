/* plan/netmodel.c - alpha-beta costs of the messages and collectives dtrain sends (plan.h), and the
 * machine they run on. The collective formulas are those of the algorithms Open MPI's tuned module
 * picks between (Thakur, Rabenseifner and Gropp, "Optimization of collective communication
 * operations in MPICH", 2005): recursive doubling, log2(p) (alpha + n beta), for short vectors,
 * and the ring's reduce-scatter + all-gather, 2(p - 1) alpha + 2 (p - 1)/p n beta, for long ones. */
#include "plan/plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "util/common.h"
#include "parallel/hier.h"

double dt_net_p2p(const dt_link *l, double n)
{
        return l->alpha + n * l->beta;
}

void dt_net_sim_link(const dt_link *l, double n, dt_sim_link *out)
{
        int whole = !(l->eager > 0 && n > l->eager);
        double first = whole ? n : l->eager;
        /* the send call pushes a message within the limit into the transport itself; a longer
         * one's only announced (measured: MPI_Isend of 256 KiB between namespaces took what 8 bytes
         * took, 7 us, and 32 KiB 16 us) */
        *out = (dt_sim_link){ .p2p = l->alpha + first * l->beta, .busy = first * l->beta,
                              .send = l->send_o + (whole ? n * l->send_beta : 0) };
        if (first < n)  /* the answer crosses back, then the rest comes as one more message */
                out->tail = l->alpha + (n - first) * l->beta, out->tail_busy = (n - first) * l->beta,
                out->ack = l->alpha;
}

/* How far n bytes lie past the caches: 0 up to l->near, 1 from l->far, log2 between (links with
 * no cache regime, gamma_near 0: 1) */
static double past_caches(const dt_link *l, double n)
{
        if (l->gamma_near <= 0 || n >= l->far) return 1.0;
        if (n <= l->near) return 0.0;
        return log2(n / l->near) / log2(l->far / l->near);
}

/* The reduction's seconds per byte for a sum of n bytes: gamma_near up to l->near, gamma from l->far */
static double gamma_at(const dt_link *l, double n)
{
        return l->gamma_near + (l->gamma - l->gamma_near) * past_caches(l, n);
}

double dt_net_allreduce(const dt_link *l, int p, double n)
{
        if (p <= 1 || n <= 0) return 0;
        double lg = ceil(log2(p)), gm = gamma_at(l, n);
        double rd = lg * (l->alpha + n * (l->beta + gm));
        double ring = 2.0 * (p - 1) * l->alpha + 2.0 * (p - 1) / p * n * (l->beta + gm);
        return rd < ring ? rd : ring;
}

double dt_net_allgather(const dt_link *l, int p, double n)
{
        if (p <= 1 || n <= 0) return 0;
        /* in shared memory the receiver copies each part from the peer's pages into its own: two
         * streams a byte where the sum moves three, so 2/3 of its work; dtrain bench's parameter
         * all-gather over 2 ranks here: 0.47 MB in 0.064 ms (136 ps a byte), 40 MB in 10.7 ms (267) */
        double gm = l->gamma_near > 0 ? 2.0 / 3.0 * gamma_at(l, n) : 0;
        return (p - 1) * l->alpha + (double)(p - 1) / p * n * (l->beta + gm);
}

/* The sum's work a byte is the all-reduce's (gamma by the bucket's regime: backward wrote the
 * whole bucket before its ring starts, so a part of a bucket past the caches comes from memory),
 * plus, past the caches, one copy's more: the part arrives whole in the ring's buffer, which the
 * add then reads back from memory, where dtrain's all-reduce adds each 8 MiB piece while it is
 * still in the caches. Measured on mlp-4096 over 2 ranks (buckets of 67 and 13 MB): the ring took
 * 17.5 ms against ~12.5 for half the all-reduce; this gives 17.3 (1.6 + 1 copies on 33.5 MB, 0.35
 * on 6.5), half the all-reduce's formula 12.8. */
double dt_net_reduce_scatter(const dt_machine *m, const dt_link *l, int p, double n)
{
        if (p <= 1 || n <= 0) return 0;
        double part = n / p, again = l->gamma_near > 0 ? m->copy_beta * past_caches(l, n) : 0;
        return (p - 1) * (l->alpha + part * (l->beta + gamma_at(l, n) + again));
}

const dt_link *dt_net_link(const dt_machine *m, int p, int stride)
{
        /* ranks r, r + stride, ... r + (p - 1) stride: one node holds them all only if the span fits */
        long span = (long)(p - 1) * stride + 1;
        return span <= m->ranks_per_node ? &m->intra : &m->inter;
}

double dt_net_node_bytes(const dt_machine *m, int p, int stride, int kind, double n)
{
        int local = DT_MAX(1, DT_MIN(p, m->ranks_per_node / DT_MAX(stride, 1)));
        double l = local, k = (p + local - 1) / local;
        if (p <= 1 || k < 2 || n <= 0) return 0;
        switch (kind) {
        case DT_NET_RING:
                return 2.0 * (p - 1) / p * n;
        case DT_NET_TWO_LEVEL:
                return 2.0 * (k - 1) / k * n;
        default:        /* DT_NET_GATHER, DT_NET_ALLTOALL */
                return l * l * (k - 1) * n / p;
        }
}

static dt_hier_link hl(const dt_link *l)
{
        return (dt_hier_link){ .alpha = l->alpha, .beta = l->beta, .gamma = l->gamma, .eager = l->eager };
}

double dt_net_allreduce_data2(const dt_data_sum *ds, int D, double n, double *flat, double *two, int *hier)
{
        const dt_machine *m = ds->m;
        int stride = ds->stride > 0 ? ds->stride : 1;
        int local = DT_MAX(1, DT_MIN(D, m->ranks_per_node / stride));
        int nodes = (D + local - 1) / local;
        *flat = *two = 0;
        if (D <= 1 || n <= 0) return 0;
        if (ds->ring) {         /* flat over the data axis, whatever partition.hierarchical says */
                *hier = 0;
                return *flat = dt_net_reduce_scatter(m, dt_net_link(m, D, stride), D, n);
        }
        dt_hier_link intra = hl(&m->intra), inter = hl(&m->inter);
        dt_hier_cost(&intra, &inter, local, D, n, flat, two);
        /* one node: the ring and recursive doubling formulas, fitted to dtrain bench's sums there */
        if (nodes == 1) *flat = dt_net_allreduce(&m->intra, D, n);
        /* the run's choice (parallel/hier.c's dt_hier_choose, on the cluster spec's links) */
        *hier = dt_hier_choose(m->hierarchical, nodes, local, &m->choice_intra, &m->choice_inter, D, &n, 1);
        if (!(nodes > 1 && local > 1) && !*hier) *two = 0;
        return *hier ? *two : *flat;
}

double dt_net_allreduce_data(const dt_data_sum *ds, int D, double n)
{
        double flat, two;
        int hier;
        return dt_net_allreduce_data2(ds, D, n, &flat, &two, &hier);
}

double dt_machine_stream(const dt_machine *m, double bytes)
{
        const dt_link *l = &m->intra;
        if (m->stream_slow <= 1.0 || l->far <= l->near || bytes <= l->near) return 1.0;
        double f = bytes >= l->far ? 1.0 : log2(bytes / l->near) / log2(l->far / l->near);
        return 1.0 + (m->stream_slow - 1.0) * f;
}

double dt_net_recv_copy(const dt_link *l, double n)
{
        return n * l->beta;
}

double dt_machine_share(const dt_machine *m)
{
        double want = (double)m->ranks_per_node * (m->threads > 0 ? m->threads : 1);
        return want > m->cores_per_node ? want / m->cores_per_node : 1.0;
}


/* Best of three copies of n bytes, bytes per second, in this thread's CPU time: a copy preempted by
 * the machine's other work is not slower (under load 15 at nice 19, copies timed by the wall clock
 * came out at 0.06 GB/s) */
static double memcpy_bytes_per_s(size_t n)
{
        char *a = dt_malloc(n), *b = dt_malloc(n);
        memset(a, 1, n);
        memset(b, 2, n);
        double best = 1e30;
        for (int k = 0; k < 3; k++) {
                double t0 = dt_thread_cpu();
                memcpy(b, a, n);
                double t = dt_thread_cpu() - t0;
                if (t < best) best = t;
                a[k] = b[n - 1 - k];    /* keep the copies */
        }
        free(a);
        free(b);
        return (double)n / (best > 0 ? best : 1e-9);
}

/* Copies of 4, 8, 16, 32 and 64 MiB: *bw the last one's bytes per second (a shared-memory transfer
 * moves each byte through one such copy: Open MPI's vader with CMA, or its copy-in/copy-out for
 * small messages); *near the largest size copied within 15% of 4 MiB's speed (in the caches),
 * *far the smallest within 15% of 64 MiB's (from memory). On the 2-vCPU Xeon: 14.7-15 GB/s to 16
 * MiB, 12.1 at 32, 7.6 at 64. */
static void copy_speeds(double *bw, double *slow, double *near, double *far)
{
        double v[5];
        for (int k = 0; k < 5; k++) v[k] = memcpy_bytes_per_s((size_t)4 << (20 + k));
        int a = 0, b = 4;
        while (a < 3 && v[a + 1] >= v[0] / 1.15) a++;
        while (b > a + 1 && v[b - 1] <= v[4] * 1.15) b--;
        *bw = v[4];
        *slow = DT_MIN(4.0, DT_MAX(1.0, v[0] / v[4]));     /* 1.5-2 on this machine's kind */
        *near = (double)((size_t)4 << (20 + a));
        *far = (double)((size_t)4 << (20 + b));
}

static long mem_total_bytes(void)
{
        long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
        return pages > 0 && size > 0 ? pages * size : 0;
}

void dt_machine_from(dt_machine *m, const dt_cluster_spec *cs, int ranks, int threads)
{
        static double copy_bw, slow, near, far; /* measured once per process */
        if (copy_bw <= 0) copy_speeds(&copy_bw, &slow, &near, &far);
        memset(m, 0, sizeof *m);
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        m->cores_per_node = cs && cs->cores_per_node > 0 ? cs->cores_per_node : (int)(cores > 0 ? cores : 1);
        m->ranks_per_node = cs && cs->ranks_per_node > 0 ? cs->ranks_per_node : ranks;
        if (m->ranks_per_node > ranks) m->ranks_per_node = ranks;
        m->hierarchical = cs ? cs->hierarchical : 0;
        m->threads = threads > 0 ? threads : 1;
        /* a nonblocking collective here costs a few microseconds per round: libnbc's schedule plus
         * dt_comm_wait's polling (measured 2-6 us for 8-byte all-reduces on this class of machine) */
        m->intra = (dt_link){ .alpha = cs && cs->intra_latency_us > 0 ? cs->intra_latency_us * 1e-6 : 4e-6,
                              .beta = cs && cs->intra_bandwidth_gbs > 0 ? 1.0 / (cs->intra_bandwidth_gbs * 1e9)
                                                                       : 1.0 / copy_bw };
        /* the reduction: dtrain bench measures MPI_Allreduce of 76 MiB over 2 ranks here at 2.3-2.6
         * GB/s against 8.1 GB/s memcpy, i.e. ~3.4 copies' time per byte where the formula counts one:
         * the sum reads two operands and writes one, and Open MPI copies in and out of its buffers.
         * dtrain's own sum, in 8 MiB pieces in flight together (DT_COMM_PIECE_BYTES), is faster:
         * mlp-4096's 80.3 MB over 2 ranks in 25 ms (3.2 GB/s) against 33 for MPI_Allreduce, at a
         * 7.5 GB/s memcpy: 2.6 copies */
        m->intra.gamma = 1.6 / copy_bw;
        /* but a sum whose buckets stay in the caches costs little beyond its transfer: dtrain bench
         * --network's all-reduce over 2 ranks here took 130-150 ps a byte from 256 KiB to 16 MiB (47
         * us, 277 us, 2.57 ms), and dtrain bench's bucket of mlp (0.94 MB) 0.135-0.15 ms, against
         * 103 ps a byte of transfer at the 64 MiB copy's speed: 0.35 copies for the sum's work */
        m->intra.gamma_near = 0.35 / copy_bw;
        m->intra.near = near;
        m->intra.far = far;
        /* a pipeline message past vader's 4 KiB eager limit is read by the receiver (CMA) once its
         * receive matches: dtrain bench --cluster on cnn-bn's 2-stage zb-v measured 51-77 us of
         * the receiver's own time per receive (messages of 0.2-0.8 MB at 16 micro-batches, twice
         * that at 8), where a copy from memory runs at 7.6-7.8 GB/s: the bytes were written by the
         * other core, so not a copy within the receiver's caches (2.8x faster here, 20 us) */
        m->intra.recv_copy = 1;
        m->copy_beta = 1.0 / copy_bw;
        m->stream_slow = slow;
        double lat = cs ? cs->latency_us : 1.0, bw = cs ? cs->bandwidth_gbs : 10.0;
        /* Open MPI's TCP transport sends 64 KiB of a longer message with its request and the rest
         * once the receiver has matched it and the sender's MPI runs again (no progress thread): on
         * the emulated 1 Gbit/s cluster a pipeline of 75 KB messages measured 9.3 ms per step at
         * that limit and 6.8 ms with a 256 KiB one. Shared memory (vader) hands a long message over
         * by the receiver's single copy once matched, already counted in the receive's time. */
        m->inter = (dt_link){ .alpha = lat * 1e-6, .beta = 1.0 / (bw * 1e9), .gamma = 2.4 / copy_bw,
                              .eager = (cs ? cs->eager_kb : 64.0) * 1024.0,
                              .send_o = cs ? cs->send_overhead_us * 1e-6 : 0,
                              .send_beta = cs && cs->send_overhead_gbs > 0 ? 1.0 / (cs->send_overhead_gbs * 1e9) : 0 };
        dt_hier_links(cs, &m->choice_intra, &m->choice_inter);
        /* ranks on a node share its memory; keep a quarter for the system and the data */
        long total = mem_total_bytes();
        m->mem_bytes = total > 0 ? 0.75 * (double)total / m->ranks_per_node : 1e12;
        if (cs && cs->memory_per_rank > 0) m->mem_bytes = cs->memory_per_rank;
}
