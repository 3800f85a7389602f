/* backend/onednn.h - convolutions through oneDNN (libdnnl 2.x, the library PyTorch uses for CPU
 * convolutions) for the cpu backend: forward, backward-data and backward-weights (+bias) of one conv
 * layer over a range of samples, each call on one of the backend's threads with oneDNN itself kept
 * to one thread, so the backend's pool is the only parallelism and a result depends on the thread
 * count, never on timing. Tensors stay as dtrain keeps them: x (mb,C,H,W), y (mb,F,OH,OW), weight
 * (F,C/G,KH,KW); copies in oneDNN's blocked formats are internal. libdnnl is loaded (dlopen) the
 * first time a layer asks for it, so runs without convolutions map none of it. In a build without
 * oneDNN (configure --without-onednn or no libdnnl-dev) every call says why not: callers need no
 * #ifdef. */
#ifndef DT_ONEDNN_H
#define DT_ONEDNN_H

#include "backend/backend.h"

typedef struct dt_onednn_conv dt_onednn_conv;

/* 1 when oneDNN can run (loaded on the first call); else 0 with *why (static storage). */
int dt_onednn_available(const char **why);
/* "2.6.3", or "" when not available. */
const char *dt_onednn_version(void);

/* A convolution of geometry d (d->state unused) for up to max_mb samples a call and nt threads
 * (t in [0, nt)); relu: y = max(0, conv + b) in the forward's own output pass. NULL with *why
 * (one line, static storage) when oneDNN is missing or has no implementation of it. */
dt_onednn_conv *dt_onednn_conv_new(const dt_conv_desc *d, int bias, int relu, int max_mb, int nt, const char **why);
void dt_onednn_conv_free(dt_onednn_conv *c);

/* Samples per call the caller should give: a call's copies of x and y in oneDNN's formats then stay
 * within dt_onednn_chunk_bytes, in the core's cache from the conversion to the convolution and
 * back (measured faster than one call per thread's share: see onednn.c). */
int dt_onednn_conv_chunk(const dt_onednn_conv *c);
/* The budget above, read by dt_onednn_conv_new. Not const: the unit tests lower it to exercise
 * the chunk loops, benchmarks may tune it. */
extern size_t dt_onednn_chunk_bytes;

/* y = f(conv(x, w) + b) for mb samples on thread t (b NULL: no bias). Keeps thread t's copy of x in
 * the backward's format for a backward of the same x, and its copies of w for the other calls of
 * the same forward and backward (see dt_onednn_conv_forget). */
void dt_onednn_conv_fwd(dt_onednn_conv *c, int t, const float *x, const float *w, const float *b, float *y, int mb);
/* Thread t, mb samples: dx = conv^T(dy) when dx is not NULL (overwritten); when dw is not NULL,
 * dw += dL/dw and db += sum of dy (db NULL: no bias). */
void dt_onednn_conv_bwd(dt_onednn_conv *c, int t, const float *x, const float *w, const float *dy, float *dx,
                        float *dw, float *db, int mb);
/* The copies of x and w kept since the last call are no longer the layer's input and weights (a
 * new forward begins: the weights may have been updated in place). */
void dt_onednn_conv_forget(dt_onednn_conv *c);
/* The implementations oneDNN chose ("jit:avx512_core"), for reports: the forward's, once created. */
const char *dt_onednn_conv_impl(const dt_onednn_conv *c);

#endif
