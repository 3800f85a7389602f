/* layers/loss.h - losses over R rows of C outputs (R = B for classifiers, B*T for per-step
 * sequence outputs). Each returns the SUM of per-row losses and writes d(scale * sum)/d(output),
 * so slices of one global batch computed on different ranks add up to the global gradient when
 * scale = 1 / (global rows). */
#ifndef DT_LOSS_H
#define DT_LOSS_H

#include <stdint.h>
#include "backend/backend.h"

/* -log softmax(z)[label]; dz = scale * (softmax(z) - onehot). correct += rows whose argmax is
 * the label. */
double dt_loss_softmax_xent(const float *z, const int32_t *labels, int R, int C, float scale,
                            float *dz, long *correct);
/* the same on be's threads (NULL: this one), rows split among them: the same bits, as the rows'
 * losses are summed in row order */
#define DT_LOSS_MAXT 64
double dt_loss_softmax_xent_be(dt_backend *be, const float *z, const int32_t *labels, int R, int C, float scale,
                               float *dz, long *correct);
/* sum_c (y - t)^2 / C per row (PyTorch's MSELoss 'mean' over elements when scale = 1/R);
 * dy = scale * 2 (y - t) / C. With labels instead of targets, t is the one-hot label. */
double dt_loss_mse(const float *y, const float *t, const int32_t *labels, int R, int C, float scale,
                   float *dy, long *correct);

#endif
