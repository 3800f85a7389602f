/* layers/bnpool.h - batch norm with relu and the 2x2 stride-2 max pool after it as one op each way
 * (batchnorm's dt_layer_ops.forward_pair and backward_pair, bnpool.c), and what it asks of pool.c. */
#ifndef DT_BNPOOL_H
#define DT_BNPOOL_H

#include "layers/layer.h"

#include <stdint.h>

void dt_bnpool_forward(dt_layer *l, dt_layer *next, const dt_fwd_ctx *c, const float *x, float *mid, float *y, int B);
void dt_bnpool_backward(dt_layer *l, dt_layer *next, const dt_fwd_ctx *c, const float *x, const float *mid,
                        const float *y, const float *dy, float *dmid, float *dx, int B);

/* pool.c: a maxpool layer's (B, C, OH, OW) window codes where its host loops take the 2x2 stride-2
 * path (pool_kern.h's max2x2_fwd and max2x2_bwd); NULL for any other layer or path */
uint8_t *dt_maxpool_codes(const dt_layer *l);

#endif
