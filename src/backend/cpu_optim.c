/* backend/cpu_optim.c - SGD (momentum, Nesterov), RMSprop, Adam, AdamW on flat host slices, the
 * cpu backend's optim_step (backend.h). Each update is written as the torch.optim docs state it. */
#include "backend/backend.h"

#include <math.h>
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

/* sgd:      g' = g + wd p;  p -= lr g'
 * momentum: b = mu b + (1 - damp) g'  (b = g' at t = 1);  p -= lr b
 * nesterov: as momentum, then p -= lr (g' + mu b) */
static void sgd(const dt_optim_hp *hp, float lr, long t, float *p, const float *g, float *m, size_t n)
{
        const float wd = hp->weight_decay, mu = hp->momentum, damp = hp->dampening;
        if (hp->kind == DT_OPT_SGD) {
                for (size_t i = 0; i < n; i++) p[i] -= lr * (g[i] + wd * p[i]);
                return;
        }
        const int nest = hp->kind == DT_OPT_NESTEROV;
        for (size_t i = 0; i < n; i++) {
                float gi = g[i] + wd * p[i];
                float b = t == 1 ? gi : mu * m[i] + (1.0f - damp) * gi;
                m[i] = b;
                p[i] -= lr * (nest ? gi + mu * b : b);
        }
}

/* rmsprop: v = a v + (1 - a) g'^2;  d = g' / (sqrt(v) + eps);
 *          with momentum: b = mu b + d, p -= lr b;  else p -= lr d */
static void rmsprop(const dt_optim_hp *hp, float lr, float *p, const float *g, float *m, float *v, size_t n)
{
        const float wd = hp->weight_decay, a = hp->alpha, eps = hp->eps, mu = hp->momentum;
        for (size_t i = 0; i < n; i++) {
                float gi = g[i] + wd * p[i];
                v[i] = a * v[i] + (1.0f - a) * gi * gi;
                float d = gi / (sqrtf(v[i]) + eps);
                if (mu > 0) {
                        m[i] = mu * m[i] + d;
                        d = m[i];
                }
                p[i] -= lr * d;
        }
}

/* adam:  g' = g + wd p;  adamw: p *= 1 - lr wd, g' = g
 *        m = b1 m + (1 - b1) g';  v = b2 v + (1 - b2) g'^2
 *        p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps) */
static void adam(const dt_optim_hp *hp, float lr, long t, float *p, const float *g, float *m, float *v, size_t n)
{
        const float b1 = hp->beta1, b2 = hp->beta2, eps = hp->eps, wd = hp->weight_decay;
        const int decoupled = hp->kind == DT_OPT_ADAMW;
        const float bc1 = 1.0f - powf(b1, (float)t);
        const float bc2s = sqrtf(1.0f - powf(b2, (float)t));
        const float step = lr / bc1;
        for (size_t i = 0; i < n; i++) {
                float gi = g[i];
                if (decoupled) p[i] *= 1.0f - lr * wd;
                else gi += wd * p[i];
                m[i] = b1 * m[i] + (1.0f - b1) * gi;
                v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
                p[i] -= step * m[i] / (sqrtf(v[i]) / bc2s + eps);
        }
}

void dt_optim_update_cpu(const dt_optim_hp *hp, float lr, long t, float *p, const float *g,
                         float *m, float *v, size_t n)
{
        switch (hp->kind) {
        case DT_OPT_SGD: case DT_OPT_MOMENTUM: case DT_OPT_NESTEROV: sgd(hp, lr, t, p, g, m, n); break;
        case DT_OPT_RMSPROP: rmsprop(hp, lr, p, g, m, v, n); break;
        case DT_OPT_ADAM: case DT_OPT_ADAMW: adam(hp, lr, t, p, g, m, v, n); break;
        default: DT_ASSERT(0);
        }
}
