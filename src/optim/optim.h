/* optim/optim.h - optimizer updates on flat buffers (PyTorch's torch.optim semantics), learning
 * rate schedules as pure functions of the step, and global-norm gradient clipping. */
#ifndef DT_OPTIM_H
#define DT_OPTIM_H

#include <stddef.h>
#include "backend/backend.h"

extern const char *const dt_opt_names[];       /* by dt_opt_kind (backend.h, with dt_optim_hp) */

/* A learning rate schedule, filled from the model spec's 'train.schedule' by spec/model_spec.c. */
typedef enum { DT_SCHED_CONSTANT = 0, DT_SCHED_STEP, DT_SCHED_COSINE, DT_SCHED_LINEAR, DT_SCHED_COUNT } dt_sched_kind;
extern const char *const dt_sched_names[];

typedef struct dt_sched_spec {
        dt_sched_kind kind;
        long warmup_steps;              /* linear warm-up from 0 before any schedule */
        long step_size;                 /* step: decay every step_size steps (or epochs, see unit) */
        int step_unit_epochs;           /* step_size counted in epochs (default) or steps */
        double gamma;                   /* step: factor */
        double min_lr;                  /* cosine/linear: floor */
} dt_sched_spec;

/* Learning rate for 0-based step 'step': linear warm-up over warmup_steps, then the schedule
 * over the remaining steps. A pure function, so resume needs only the step. */
double dt_sched_lr(const dt_sched_spec *s, double base_lr, long step, long steps_per_epoch,
                   long total_steps);

/* Factor to multiply gradients by so that their global L2 norm is at most max_norm
 * (torch.nn.utils.clip_grad_norm_: max_norm / (norm + 1e-6) when norm > max_norm). */
float dt_clip_factor(double norm, double max_norm);

#endif
