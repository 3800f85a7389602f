/* backend/cpu_optim.c - SGD (momentum, Nesterov), RMSprop, Adam, AdamW on flat host slices, the
 * cpu backend's optim_step (backend.h). The updates themselves are ewkern.h's, one per CPU path. */
#include "backend/backend.h"
#include "backend/ew.h"

#include "util/common.h"

int dt_optim_nmoments(const dt_optim_hp *hp)
{
        switch (hp->kind) {
        case DT_OPT_SGD: return 0;
        case DT_OPT_MOMENTUM: case DT_OPT_NESTEROV: return 1;
        case DT_OPT_RMSPROP: case DT_OPT_ADAM: case DT_OPT_ADAMW: return 2;
        default: DT_ASSERT(0);
        }
        return 0;
}

void dt_optim_update_cpu(const dt_optim_hp *hp, float lr, long t, float *p, const float *g,
                         float *m, float *v, size_t n)
{
        dt_ew_get()->optim(hp, lr, t, p, g, m, v, n);
}
