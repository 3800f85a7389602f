/* tests/unit/test_comm_mpi.c - communicators as values, under real mpirun (tests/cli/comm.sh):
 * a 2 x 2 grid split from the world, collectives on each axis, world ranks behind group ranks,
 * and the deadline: with argument "stall", world rank 3 never reaches a collective on its column
 * and the job must end with exit 6 naming world rank 3 as the one not answering. Plain C: prints
 * "FAIL ..." and exits 1 on a wrong value. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <mpi.h>
#include "parallel/comm.h"
#include "util/common.h"

static int fails;
#define EXPECT(c, ...) do { if (!(c)) { fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
        fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); fails++; } } while (0)

int main(int argc, char **argv)
{
        MPI_Init(&argc, &argv);
        dt_comm w;
        dt_comm_world(&w, 6.0);     /* long enough that a rank starved on a busy machine is not blamed */
        EXPECT(w.world[w.rank] == w.rank, "world maps to itself");
        int stall = argc > 1 && !strcmp(argv[1], "stall");
        if (w.size == 4) {
                dt_comm row, col;
                dt_comm_split(&w, w.rank / 2, w.rank, &row);
                dt_comm_split(&w, w.rank % 2, w.rank, &col);
                EXPECT(row.size == 2 && col.size == 2, "axis sizes %d %d", row.size, col.size);
                EXPECT(row.world[row.rank] == w.rank && col.world[col.rank] == w.rank, "world ranks");
                EXPECT(col.world[0] == w.rank % 2 && col.world[1] == w.rank % 2 + 2, "column members");
                EXPECT(row.timeout == 6.0, "the deadline is inherited");
                long x = w.rank;
                dt_comm_allreduce(&row, &x, 1, MPI_LONG, "row sum");
                EXPECT(x == (w.rank / 2) * 4 + 1, "row sum %ld", x);
                x = w.rank;
                dt_comm_allreduce(&col, &x, 1, MPI_LONG, "column sum");
                EXPECT(x == 2 * (w.rank % 2) + 2, "column sum %ld", x);
                int v = col.rank == 0 ? 100 + w.rank : -1;
                dt_comm_bcast(&col, &v, 1, MPI_INT, 0, "column broadcast");
                EXPECT(v == 100 + w.rank % 2, "broadcast %d", v);
                EXPECT(dt_comm_agree(&w, w.rank == 2 ? 3 : 0, "agree") == 3, "agree");
                if (stall) {
                        dt_comm_announce(&col, 1);     /* a new step: rank 3 announced step 0 above */
                        if (w.rank == 3) sleep(40);     /* never arrives within the 6 s deadline */
                        x = 1;
                        dt_comm_allreduce(&col, &x, 1, MPI_LONG, "stalled column sum");
                        /* the other column waits in a collective, as training ranks would (not in
                         * MPI_Finalize, where Open MPI 4.1's abort can hang or crash mpirun); world
                         * rank 0 hears every heartbeat but rank 3's and names it */
                        dt_comm_allreduce(&w, &x, 1, MPI_LONG, "world sum");
                }
                dt_comm_free(&row);
                dt_comm_free(&col);
        }
        dt_comm_free(&w);
        if (w.size != 0 || w.world) fails++;
        MPI_Finalize();
        if (fails) return 1;
        printf("ok\n");
        return 0;
}
