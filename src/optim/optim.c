/* optim/optim.c - the optimizers' and schedules' names, LR schedules, gradient clipping. The
 * update kernels on the host are the cpu backend's (backend/cpu_optim.c). */
#include "optim/optim.h"

#include <math.h>
#include "util/common.h"

const char *const dt_opt_names[] = { "sgd", "momentum", "nesterov", "rmsprop", "adam", "adamw", NULL };
const char *const dt_sched_names[] = { "constant", "step", "cosine", "linear", NULL };

double dt_sched_lr(const dt_sched_spec *s, double base, long step, long steps_per_epoch, long total)
{
        long w = s->warmup_steps;
        if (step < w) return base * (double)(step + 1) / (double)w;
        long k = step - w, span = total - w;
        if (span < 1) span = 1;
        double frac = (double)k / (double)span;
        if (frac > 1) frac = 1;
        switch (s->kind) {
        case DT_SCHED_CONSTANT: return base;
        case DT_SCHED_STEP: {
                long unit = s->step_unit_epochs ? (steps_per_epoch > 0 ? steps_per_epoch : 1) : 1;
                long ndecay = step / unit / (s->step_size > 0 ? s->step_size : 1);
                return base * pow(s->gamma, (double)ndecay);
        }
        case DT_SCHED_COSINE: return s->min_lr + (base - s->min_lr) * 0.5 * (1.0 + cos(M_PI * frac));
        case DT_SCHED_LINEAR: return s->min_lr + (base - s->min_lr) * (1.0 - frac);
        default: DT_ASSERT(0);
        }
        return base;
}

float dt_clip_factor(double norm, double max_norm)
{
        if (max_norm <= 0 || norm <= max_norm) return 1.0f;
        return (float)(max_norm / (norm + 1e-6));
}
