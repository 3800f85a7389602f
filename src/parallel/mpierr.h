/* parallel/mpierr.h - dtrain's MPI error handler: a failing MPI call ends the job inside the
 * exit-status contract (1, or 6 for a failed peer where MPI can say so) with one line naming the
 * rank, the call and MPI's reason, instead of MPI_ERRORS_ARE_FATAL's banner and an exit status
 * that is an MPI error class (which collides with dtrain's 2 to 6). */
#ifndef DT_MPIERR_H
#define DT_MPIERR_H

#include <mpi.h>

/* Sets the handler on comm: on MPI_COMM_WORLD right after MPI_Init, and on every communicator
 * dtrain creates (they inherit it from their parent; setting it says so where they are made). */
void dt_mpi_errhandler_set(MPI_Comm comm);

#endif
