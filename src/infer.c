/* infer.c - a model for forward passes (see infer.h). */
#include "infer.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include "backend/backend.h"
#include "train/ckpt.h"
#include "train/finetune.h"
#include "util/common.h"

/* The weights file the options name. */
static int weights_path(const dt_infer_opts *o, const dt_setup *su, char *path, size_t n)
{
        char err[DT_PATH_MAX + 256], ck[DT_PATH_MAX];
        if (o->weights) {
                snprintf(path, n, "%s", o->weights);
        } else if (o->resume) {
                /* a run directory (its latest checkpoint), a checkpoint directory, or a pointer
                 * to one (checkpoints/best, checkpoints/latest) */
                if (dt_ckpt_resolve(o->resume, ck, sizeof ck, err, sizeof err) < 0) {
                        dt_error("--resume %s", err);
                        return DT_EXIT_CKPT;
                }
                if (snprintf(path, n, "%.*s/model.safetensors", (int)(n > 32 ? n - 32 : 1), ck) >= (int)n) {
                        dt_error("%s: path too long", ck);
                        return DT_EXIT_CKPT;
                }
        } else if (o->out) {
                snprintf(path, n, "%s/model.safetensors", o->out);
        } else {
                snprintf(path, n, "runs/%s/model.safetensors", su->spec.name);
        }
        return 0;
}

int dt_infer_open(dt_infer *in, const dt_infer_opts *o)
{
        memset(in, 0, sizeof *in);
        /* the run's recorded overrides: its architecture and data as it was trained */
        dt_sets sets = { 0 };
        int rc = dt_setup_reader_sets(o->model, o->weights, o->resume, o->out, &o->sets, &sets,
                                      o->cmd ? o->cmd : "eval");
        dt_setup_opts so = { .model = o->model, .max_steps = -1, .seed = -1, .epochs = -1, .batch = -1, .single = 1,
                             .sets = &sets };
        if (!rc) rc = dt_setup_model(&in->su, &so);
        dt_sets_free(&sets);
        if (rc) return rc;
        if ((rc = weights_path(o, &in->su, in->weights, sizeof in->weights))) return rc;
        int th = o->threads > 0 ? o->threads : dt_env_threads();
        in->su.be = dt_backend_cpu_new(th > 0 ? th : 1);
        /* forward only, in batches no larger than training's unless asked: eval_batch no longer
         * sets the memory (the outputs per sample do not depend on the batch they are in) */
        const dt_train_spec *tr = &in->su.spec.train;
        in->B = o->batch > 0 ? o->batch : DT_MIN(tr->eval_batch, tr->batch);
        in->su.g.forward_only = 1;
        if (dt_graph_alloc(&in->su.g, in->su.be, in->B) < 0) {
                dt_error("layer setup failed");
                return DT_EXIT_RUNTIME;
        }
        dt_graph_init_params(&in->su.g, in->su.spec.train.seed);
        return dt_finetune_load(in->weights, &in->su.g, 1, 1);
}

const float *dt_infer_forward(dt_infer *in, int b)
{
        dt_fwd_ctx c = { .training = 0, .seed = in->su.spec.train.seed };
        dt_graph_forward(&in->su.g, &c, b);
        return in->su.g.act[in->su.g.n];
}

void dt_infer_close(dt_infer *in)
{
        dt_setup_free(&in->su);
}
