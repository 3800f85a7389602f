/* parallel/mpierr.c - the MPI error handler: "dtrain[rank r/n]: fatal: MPI_Xxx failed: CLASS:
 * reason", then MPI_Abort with 1 (6 when MPI reports a failed process), so no peer waits. */
#include "parallel/mpierr.h"

#include <stdarg.h>
#include <stdio.h>
#include "util/common.h"

static void on_mpi_error(MPI_Comm *comm, int *code, ...)
{
        const char *call = NULL;
#ifdef OPEN_MPI
        /* Open MPI passes the failing function's name as the first extra argument (ompi/errhandler/
         * errhandler_invoke.c: eh_comm_fn(&comm, &err_code, message, NULL)); the standard leaves
         * the extra arguments to the implementation, so other MPIs get no name */
        va_list ap;
        va_start(ap, code);
        call = va_arg(ap, const char *);
        va_end(ap);
#endif
        char reason[MPI_MAX_ERROR_STRING] = "";
        int len = 0, cls = MPI_ERR_UNKNOWN, rank = 0, size = 1;
        MPI_Error_class(*code, &cls);
        MPI_Error_string(*code, reason, &len);
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        (void)comm;
        /* the handler may run before the run sets the rank prefix (MPI_Init to comm_init, bench) */
        if (size > 1) snprintf(dt_msg_prefix, sizeof dt_msg_prefix, "dtrain[rank %d/%d]", rank, size);
        int exit_code = DT_EXIT_RUNTIME;
#ifdef MPIX_ERR_PROC_FAILED
        if (cls == MPIX_ERR_PROC_FAILED || cls == MPIX_ERR_REVOKED) exit_code = DT_EXIT_PEER;
#endif
        dt_die(exit_code, "%s failed: %s", call && *call ? call : "an MPI call", reason);
}

void dt_mpi_errhandler_set(MPI_Comm comm)
{
        MPI_Errhandler h;
        MPI_Comm_create_errhandler(on_mpi_error, &h);
        MPI_Comm_set_errhandler(comm, h);
        MPI_Errhandler_free(&h);        /* comm keeps its own reference */
}
