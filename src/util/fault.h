/* util/fault.h - DTRAIN_FAULT: faults injected at a chosen rank and step, so that every path of
 * the exit-status contract can be driven deterministically by a test. Always compiled in; with
 * the variable unset every hook is one test of a counter. Grammar and semantics: dtrain(1),
 * ENVIRONMENT. */
#ifndef DT_FAULT_H
#define DT_FAULT_H

#include <stddef.h>

typedef enum dt_fault_kind {
        DT_FAULT_EXIT,          /* the rank _exit()s with 'code', no MPI_Finalize (a crash that exits) */
        DT_FAULT_KILL,          /* the rank SIGKILLs itself */
        DT_FAULT_HANG,          /* the rank stops answering inside its first collective of the step */
        DT_FAULT_SLOW,          /* the rank sleeps 'secs' at the start of every step from 'step' on */
        DT_FAULT_NAN_GRAD,      /* a NaN in the summed gradient before the update */
        DT_FAULT_NAN_LOSS,      /* a NaN loss */
        DT_FAULT_IO_ERROR,      /* the checkpoint write fails with ENOSPC (the run exits 3) */
        DT_FAULT_CKPT_KILL,     /* ckpt_kill_mid_write: SIGKILL between the checkpoint's files */
        DT_FAULT_SIGNAL,        /* the rank raises 'sig' (TERM, INT, USR1) at the start of the step */
        DT_FAULT_MPI_ERROR,     /* the rank makes an invalid MPI call (the MPI error handler's path) */
        DT_FAULT_CKPT_SLOW,     /* ckpt_slow: every checkpoint commit from 'step' on waits 'secs' first */
        DT_FAULT_NKINDS
} dt_fault_kind;

typedef struct dt_fault {
        dt_fault_kind kind;
        int rank;               /* -1: every rank */
        long step;              /* 1-based: the step being computed, or the checkpoint after it */
        int code;               /* exit */
        double secs;            /* slow */
        int sig;                /* signal */
        int fired;
} dt_fault;

enum { DT_FAULT_MAX = 16 };

/* Parses a DTRAIN_FAULT value into f[0..max). Returns the number of faults (0 for NULL or an
 * empty value), or -1 with the reason in err. Pure: the unit tests call it. */
int dt_fault_parse(const char *spec, dt_fault *f, int max, char *err, size_t errlen);
/* Parses the value for this process. 0, or DT_EXIT_USAGE after printing the error. */
int dt_fault_init(const char *spec);

/* Hook at the start of training step 'step' (1-based): exit, kill, slow, signal, mpi_error. */
void dt_fault_step(long step);
/* Hook for the other kinds: 1 when a fault of 'kind' is due on this rank at 'step' (each fires
 * once, the first time its hook runs at or after its step). hang and ckpt_kill_mid_write act
 * here and never return. */
int dt_fault_at(dt_fault_kind kind, long step);
/* io_error at the checkpoint after 'step': -1 with err filled as a failed write of path would
 * be, else 0. */
int dt_fault_io(long step, const char *path, char *err, size_t errlen);
/* ckpt_slow: sleeps the fault's secs before committing the checkpoint of 'step' (a slow disk, so
 * that a test sees requests coalesced). Called on the checkpoint writer's thread. */
void dt_fault_ckpt_slow(long step);

#endif
