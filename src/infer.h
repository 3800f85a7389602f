/* infer.h - a trained model ready for forward passes in one process (eval, predict): the spec,
 * the graph on the cpu backend for batches up to B, and weights from --weights FILE (ours or a
 * PyTorch state_dict in safetensors, every tensor by name), --resume DIR (a run directory's
 * latest checkpoint, or a checkpoint directory) or --out DIR/model.safetensors. With --resume, --out
 * or neither (runs/<name>), the --set overrides the run recorded apply before the command line's. */
#ifndef DT_INFER_H
#define DT_INFER_H

#include "train/setup.h"

typedef struct dt_infer {
        dt_setup su;
        int B;                          /* largest batch */
        char weights[4096];             /* the file the weights came from */
} dt_infer;

typedef struct dt_infer_opts {
        const char *model, *weights, *resume, *out;
        int batch;                      /* 0: train.eval_batch */
        int threads;                    /* 0: OPENBLAS_NUM_THREADS, else 1 */
        dt_sets sets;                   /* --set; a run directory's recorded ones apply first */
        const char *cmd;                /* "eval", "predict": for the note naming those */
} dt_infer_opts;

/* 0, or an exit status after printing. */
int dt_infer_open(dt_infer *in, const dt_infer_opts *o);
/* act[0] holds b inputs: forward in evaluation mode; returns the outputs (b x rows x C). */
const float *dt_infer_forward(dt_infer *in, int b);
void dt_infer_close(dt_infer *in);

#endif
