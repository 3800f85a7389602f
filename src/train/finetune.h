/* train/finetune.h - fine-tuning: weights loaded by tensor name from a safetensors file (ours or a
 * PyTorch state_dict saved with safetensors), strictly (every tensor of the model and nothing else,
 * shapes equal) or not (what matches, the rest listed); and frozen layers (train.freeze patterns)
 * whose parameters and buffers stay bitwise unchanged: their gradients are zeroed before the norm
 * and clipping, and their values put back after each optimizer step (so weight decay and momentum
 * cannot move them either). */
#ifndef DT_FINETUNE_H
#define DT_FINETUNE_H

#include <stddef.h>
#include "graph/graph.h"
#include "backend/backend.h"
#include "spec/model_spec.h"

/* Loads path (a weights file; a checkpoint directory, checkpoints/best or latest, or a run directory:
 * its checkpoint's model.safetensors) into g's host parameters and buffers. verbose 1 prints errors, 2 also what was loaded
 * and, when anything did not match, the lists of missing, unexpected and mismatched tensors. Strict: any
 * mismatch is an error and g is untouched. Returns 0 or DT_EXIT_CKPT (unreadable, not safetensors, or not matching). */
int dt_finetune_load(const char *path, dt_graph *g, int strict, int verbose);

typedef struct dt_freeze {
        int n;                  /* frozen ranges */
        struct { int buffer; size_t off, len; } *r;
        float *saved;           /* backend memory: the ranges' values when frozen, back to back */
        size_t total;
} dt_freeze;

/* Matches tr->freeze against the whole model's layer names (full; each pattern must match one,
 * else a spec error at its position, DT_EXIT_USAGE) and keeps this rank's graph g's ranges of
 * those layers and a copy of their values. verbose 1 prints errors, 2 also what is frozen.
 * Returns 0 or an exit status. */
int dt_freeze_init(dt_freeze *fz, const dt_model_spec *spec, const dt_graph *full, const dt_graph *g,
                   dt_backend *be, int verbose);
/* Zeroes the frozen layers' gradients. */
void dt_freeze_grads(const dt_freeze *fz, dt_backend *be, float *grads);
/* Puts the frozen values back (after an optimizer step). */
void dt_freeze_restore(const dt_freeze *fz, const dt_graph *g, dt_backend *be);
void dt_freeze_free(dt_freeze *fz, dt_backend *be);

#endif
