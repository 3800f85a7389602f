/* bench/netbench.c - `mpirun -np N dtrain bench --network`: the interconnect as the planner's
 * alpha-beta model sees it. Point-to-point ping-pong between world rank 0 and the last rank (on
 * another node when there is one) and MPI_Allreduce over all ranks, for messages of 8 bytes to
 * 16 MiB; medians; alpha from the smallest message and beta from the largest, or from a stream of
 * messages in flight where that is faster; Open MPI's TCP eager limit read through MPI_T; the
 * cluster spec line that describes the measured network. */
#include "bench/bench.h"

#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include <mpi.h>
#include "util/common.h"
#include "util/stats.h"
#include "parallel/comm.h"

#define NSIZES 8

/* Waits for r the way comm.c's dt_comm_wait does (testing, a sched_yield every 256 tests), so that
 * on a machine whose cores the ranks share the latency measured is the one dtrain's sums see:
 * MPI's own blocking calls spin without yielding, and 4 ranks on 2 cores then measured 2-4 ms. */
static void wait_yield(MPI_Request *r)
{
        for (unsigned long k = 0;; k++) {
                int done;
                MPI_Test(r, &done, MPI_STATUS_IGNORE);
                if (done) return;
                if ((k & 255) == 255) sched_yield();
        }
}

static void xfer(int send, char *buf, int n, int peer)
{
        MPI_Request r;
        if (send) MPI_Isend(buf, n, MPI_CHAR, peer, 7, MPI_COMM_WORLD, &r);
        else MPI_Irecv(buf, n, MPI_CHAR, peer, 7, MPI_COMM_WORLD, &r);
        wait_yield(&r);
}

static double pingpong(int peer, int rank, char *buf, int n, int iters)
{
        double *t = dt_malloc((size_t)iters * sizeof *t);
        for (int i = 0; i < iters; i++) {
                MPI_Request b;
                MPI_Ibarrier(MPI_COMM_WORLD, &b);
                wait_yield(&b);
                double t0 = MPI_Wtime();
                if (rank == 0) {
                        xfer(1, buf, n, peer);
                        xfer(0, buf, n, peer);
                } else if (rank == peer) {
                        xfer(0, buf, n, 0);
                        xfer(1, buf, n, 0);
                }
                t[i] = (MPI_Wtime() - t0) / 2;
        }
        double m = dt_median(t, iters);
        free(t);
        return m;
}

/* How long rank 0's MPI_Isend call of n bytes takes, its receive posted at the peer beforehand: the
 * sender's core time for a message (on TCP, the copy into the socket; between network namespaces
 * also the whole stack on both sides, which a veth runs on the sending core), which compute does
 * not overlap. Past the eager limit the call pushes only the first part. */
static double isend_time(int peer, int rank, char *buf, int n, int iters)
{
        double *t = dt_malloc((size_t)iters * sizeof *t);
        for (int i = 0; i < iters; i++) {
                MPI_Request r = MPI_REQUEST_NULL;
                if (rank == peer) MPI_Irecv(buf, n, MPI_CHAR, 0, 8, MPI_COMM_WORLD, &r);
                MPI_Barrier(MPI_COMM_WORLD);
                double t0 = MPI_Wtime();
                if (rank == 0) MPI_Isend(buf, n, MPI_CHAR, peer, 8, MPI_COMM_WORLD, &r);
                t[i] = MPI_Wtime() - t0;
                MPI_Wait(&r, MPI_STATUS_IGNORE);
        }
        double m = dt_median(t, iters);
        free(t);
        return m;
}

/* End to end time of m messages of s bytes that src sends to dst back to back, all in flight at once
 * and their receives posted beforehand, until src hears dst has them all (a 1-byte answer); every
 * sending rank at once, the slowest's time (src -1: this rank only waits). */
static double stream(int src, int dst, int rank, char *buf, int s, int m, int iters)
{
        double *t = dt_malloc((size_t)iters * sizeof *t);
        MPI_Request *r = dt_malloc((size_t)m * sizeof *r);
        char ack = 0;
        for (int i = 0; i < iters; i++) {
                for (int k = 0; k < m; k++) r[k] = MPI_REQUEST_NULL;
                if (src >= 0 && rank == dst)
                        for (int k = 0; k < m; k++) MPI_Irecv(buf + (size_t)k * s, s, MPI_CHAR, src, 9, MPI_COMM_WORLD, &r[k]);
                MPI_Barrier(MPI_COMM_WORLD);
                double t0 = MPI_Wtime(), ti = 0;
                if (src >= 0 && rank == src) {
                        for (int k = 0; k < m; k++) MPI_Isend(buf + (size_t)k * s, s, MPI_CHAR, dst, 9, MPI_COMM_WORLD, &r[k]);
                        MPI_Waitall(m, r, MPI_STATUSES_IGNORE);
                        MPI_Recv(&ack, 1, MPI_CHAR, dst, 10, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                        ti = MPI_Wtime() - t0;
                } else if (src >= 0 && rank == dst) {
                        MPI_Waitall(m, r, MPI_STATUSES_IGNORE);
                        MPI_Send(&ack, 1, MPI_CHAR, src, 10, MPI_COMM_WORLD);
                }
                MPI_Allreduce(&ti, &t[i], 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        }
        double med = dt_median(t, iters);
        free(r);
        free(t);
        return med;
}

/* This rank's part in the stream: each rank on rank 0's node sends to the rank of the same local
 * index on the peer's node, as a collective's ranks all cross the link at once; on one node, rank 0
 * to the peer alone. *pairs: how many send. */
static void stream_pair(int peer, int rank, int size, int *src, int *dst, int *pairs)
{
        MPI_Comm node;
        int me[2], li, nid;
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
        MPI_Comm_rank(node, &li);
        MPI_Allreduce(&rank, &nid, 1, MPI_INT, MPI_MIN, node);  /* a node's name: its lowest rank */
        MPI_Comm_free(&node);
        me[0] = nid, me[1] = li;
        int *all = dt_malloc((size_t)size * 2 * sizeof *all);
        MPI_Allgather(me, 2, MPI_INT, all, 2, MPI_INT, MPI_COMM_WORLD);
        int pn = all[2 * peer];
        *src = *dst = -1, *pairs = 0;
        for (int r = 0; r < size; r++) {
                int d = -1;
                if (pn == 0) d = r == 0 ? peer : -1;
                else if (all[2 * r] == 0)
                        for (int q = 0; q < size; q++)
                                if (all[2 * q] == pn && all[2 * q + 1] == all[2 * r + 1]) d = q;
                if (d < 0) continue;
                ++*pairs;
                if (r == rank || d == rank) *src = r, *dst = d;
        }
        free(all);
}

/* The bandwidth a collective's data gets, in GB/s: a ring or a tree keeps messages on the link back
 * to back, from every rank of a node at once, where a ping-pong has one message of one pair on it at
 * a time and waits out each message's round trip, so the planner should not take the ping-pong's
 * rate where a stream gets more. The rate is the bytes of messages two to eight of every pair over
 * the time they add to a stream of one, so the latency and the answer's trip cancel. (Measured over
 * a 1 Gbit/s tbf link between network namespaces, the stream gets no more: 0.102 GB/s with one pair
 * or two against the ping-pong's 0.100, both short of the 0.1195 the line carries as TCP payload.) */
static double stream_gbs(int peer, int rank, int size, char *buf, int s, int iters, int *pairs)
{
        const int m = 8;
        int src, dst;
        stream_pair(peer, rank, size, &src, &dst, pairs);
        stream(src, dst, rank, buf, s, m, 2);                   /* warm-up */
        double t1 = stream(src, dst, rank, buf, s, 1, iters), tm = stream(src, dst, rank, buf, s, m, iters);
        return tm > t1 ? (double)*pairs * (m - 1) * s / (tm - t1) / 1e9 : 0;
}

static double allreduce(float *buf, int n, int iters)
{
        double *t = dt_malloc((size_t)iters * sizeof *t);
        for (int i = 0; i < iters; i++) {
                MPI_Barrier(MPI_COMM_WORLD);
                double t0 = MPI_Wtime();
                MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
                t[i] = MPI_Wtime() - t0;
        }
        double m = dt_median(t, iters);
        free(t);
        return m;
}

/* alpha: the smallest message's time; beta: what the largest adds per byte. A least-squares line
 * through all sizes fits neither end: TCP's window and a token bucket's burst bend the middle of the
 * curve (measured over a 1 Gbit/s tbf link: 0.49 GB/s fitted against the 0.12 GB/s the large
 * messages really get), and the planner's costs are dominated by one end or the other. */
static void fit(const double *n, const double *t, int k, double *a, double *b)
{
        *a = t[0];
        *b = (t[k - 1] - t[0]) / (n[k - 1] - n[0]);
        if (*b <= 0) *b = 1e-12;
}

/* Open MPI's TCP transport's eager limit (btl_tcp_eager_limit), in KiB, read through the MPI tool
 * interface: past it a message waits for the receiver's answer (dtrain-cluster(5), eager_kb).
 * -1 where the variable or MPI_T is not there (another MPI, TCP not built in). */
static double tcp_eager_kb(void)
{
        int prov, n = 0;
        double kb = -1;
        if (MPI_T_init_thread(MPI_THREAD_SINGLE, &prov) != MPI_SUCCESS) return -1;
        if (MPI_T_cvar_get_num(&n) != MPI_SUCCESS) n = 0;
        for (int i = 0; i < n && kb < 0; i++) {
                char name[256], desc[8];
                int nlen = sizeof name, dlen = sizeof desc, verb, bind, scope, count;
                MPI_Datatype dt;
                MPI_T_enum et;
                if (MPI_T_cvar_get_info(i, name, &nlen, &verb, &dt, &et, desc, &dlen, &bind, &scope) != MPI_SUCCESS ||
                    strcmp(name, "btl_tcp_eager_limit") != 0 || bind != MPI_T_BIND_NO_OBJECT)
                        continue;
                MPI_T_cvar_handle h;
                if (MPI_T_cvar_handle_alloc(i, NULL, &h, &count) != MPI_SUCCESS) continue;
                union { int i; unsigned u; unsigned long ul; unsigned long long ull; char pad[16]; } v;
                memset(&v, 0, sizeof v);
                if (count == 1 && MPI_T_cvar_read(h, &v) == MPI_SUCCESS) {
                        if (dt == MPI_INT) kb = v.i / 1024.0;
                        else if (dt == MPI_UNSIGNED) kb = v.u / 1024.0;
                        else if (dt == MPI_UNSIGNED_LONG) kb = (double)v.ul / 1024.0;
                        else if (dt == MPI_UNSIGNED_LONG_LONG) kb = (double)v.ull / 1024.0;
                }
                MPI_T_cvar_handle_free(&h);
        }
        MPI_T_finalize();
        return kb;
}

int dt_bench_network(const dt_bench_opts *o)
{
        int rank, size;
        dt_comm_world_rank(&rank, &size);
        if (size < 2) {
                if (rank == 0) dt_error("bench --network measures between ranks: run it under mpirun -np 2 or more");
                return DT_EXIT_USAGE;
        }
        const int bytes[NSIZES] = { 8, 64, 512, 4096, 32768, 262144, 2097152, 16777216 };
        char *buf = dt_malloc((size_t)bytes[NSIZES - 1]);
        memset(buf, 0, (size_t)bytes[NSIZES - 1]);
        double n[NSIZES], p2p[NSIZES], ar[NSIZES], snd[NSIZES];
        int peer = size - 1;
        for (int i = 0; i < NSIZES; i++) {
                int iters = bytes[i] >= 2097152 ? (o->iters < 10 ? o->iters : 10) : o->iters * 5;
                n[i] = bytes[i];
                pingpong(peer, rank, buf, bytes[i], 3);         /* warm-up: connections, registration */
                p2p[i] = pingpong(peer, rank, buf, bytes[i], iters);
                snd[i] = isend_time(peer, rank, buf, bytes[i], iters);
                allreduce((float *)buf, bytes[i] / 4 > 0 ? bytes[i] / 4 : 1, 2);
                ar[i] = allreduce((float *)buf, bytes[i] / 4 > 0 ? bytes[i] / 4 : 1, iters);
        }
        int pairs;
        double sgbs = stream_gbs(peer, rank, size, buf, bytes[NSIZES - 1] / 8, o->iters < 10 ? o->iters : 10, &pairs);
        free(buf);
        double a, b, eager = tcp_eager_kb();
        fit(n, p2p, NSIZES, &a, &b);
        /* the planner's bandwidth is the better of the two: a ping-pong's when the stream adds nothing */
        double pgbs = 1e-9 / b, gbs = sgbs > pgbs ? sgbs : pgbs;
        /* the sender's own time: o from the smallest message, its per-byte part from the largest
         * that the call pushes whole (within the eager limit) */
        int big = 0;
        for (int i = 1; i < NSIZES; i++)
                if (bytes[i] <= (eager > 0 ? eager * 1024 : 65536)) big = i;
        double o_us = 1e6 * snd[0], per = big ? (snd[big] - snd[0]) / (n[big] - n[0]) : 0;
        double o_gbs = per > 0 ? 1e-9 / per : 0;
        char ek[160] = "";
        if (eager >= 0) snprintf(ek, sizeof ek, ", eager_kb: %g", eager);
        snprintf(ek + strlen(ek), sizeof ek - strlen(ek), ", send_overhead_us: %.3g, send_overhead_gbs: %.3g", o_us,
                 o_gbs);
        if (rank == 0) {
                if (o->json) {
                        json_t *j = json_object(), *pts = json_array();
                        for (int i = 0; i < NSIZES; i++)
                                json_array_append_new(pts, json_pack("{s:i, s:f, s:f, s:f}", "bytes", bytes[i], "p2p_us",
                                                                     1e6 * p2p[i], "allreduce_us", 1e6 * ar[i],
                                                                     "isend_us", 1e6 * snd[i]));
                        json_object_set_new(j, "ranks", json_integer(size));
                        json_object_set_new(j, "points", pts);
                        json_object_set_new(j, "latency_us", json_real(a * 1e6));
                        json_object_set_new(j, "bandwidth_gbs", json_real(gbs));
                        json_object_set_new(j, "p2p_bandwidth_gbs", json_real(pgbs));
                        json_object_set_new(j, "stream_bandwidth_gbs", json_real(sgbs));
                        json_object_set_new(j, "stream_pairs", json_integer(pairs));
                        json_object_set_new(j, "eager_kb", eager >= 0 ? json_real(eager) : json_null());
                        json_object_set_new(j, "send_overhead_us", json_real(o_us));
                        json_object_set_new(j, "send_overhead_gbs", json_real(o_gbs));
                        json_dumpf(j, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
                        fputc('\n', stdout);
                        json_decref(j);
                } else {
                        printf("network: rank 0 <-> rank %d point to point (half round trip), all-reduce over %d ranks; "
                               "medians; isend: the sender's MPI_Isend call\n%12s %14s %12s %14s %12s %10s\n", peer, size,
                               "bytes", "p2p us", "p2p GB/s", "allreduce us", "allr GB/s", "isend us");
                        for (int i = 0; i < NSIZES; i++)
                                printf("%12d %14.2f %12.3f %14.2f %12.3f %10.2f\n", bytes[i], 1e6 * p2p[i],
                                       n[i] / p2p[i] / 1e9, 1e6 * ar[i], n[i] / ar[i] / 1e9, 1e6 * snd[i]);
                        if (eager >= 0)
                                printf("Open MPI's TCP transport sends up to %g KiB at once (btl_tcp_eager_limit)\n", eager);
                        printf("a send costs its own core %.2f us, plus a byte per %.3g GB/s up to %d bytes (the "
                               "isend column)\n", o_us, o_gbs, bytes[big]);
                        printf("%d stream(s) at once of 8 messages of %d bytes in flight: %.3f GB/s in all\n", pairs,
                               bytes[NSIZES - 1] / 8, sgbs);
                        printf("fitted point to point: alpha %.2f us, beta %.3f GB/s; with the better of the two "
                               "bandwidths, as a cluster spec (between nodes when ranks 0 and %d are on two):\n"
                               "  network: {latency_us: %.2f, bandwidth_gbs: %.3f%s}\n", a * 1e6, pgbs, peer,
                               a * 1e6, gbs, ek);
                }
        }
        return 0;
}
