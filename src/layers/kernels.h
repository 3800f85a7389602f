/* layers/kernels.h - the layers' CPU kernel families (util/cpu.h), for whoever lists what runs. */
#ifndef DT_LAYER_KERNELS_H
#define DT_LAYER_KERNELS_H

#include "layers/attn_kern.h"
#include "layers/attn_mm.h"
#include "layers/cells.h"
#include "layers/convdirect.h"
#include "layers/im2col.h"
#include "layers/layernorm_kern.h"
#include "layers/pool_kern.h"
#include "layers/stepgemm.h"

/* batchnorm.c: (C,H,W) forward and backward with f none or relu; generic: the plain loops */
extern const dt_kfam dt_bn_kfam;

#endif
