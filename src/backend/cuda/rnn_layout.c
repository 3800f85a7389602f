/* backend/cuda/rnn_layout.c - PyTorch <-> cuDNN recurrent weight layout as a list of contiguous
 * copies (see rnn_layout.h). Pure host code, built with or without CUDA, so it is unit-tested
 * everywhere. */
#include "backend/cuda/rnn_layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dt_rnn_layout_ntensors(const dt_rnn_shape *s)
{
        return s->L * (s->bias ? 4 : 2);
}

size_t dt_rnn_layout_tensor_len(const dt_rnn_shape *s, int t)
{
        int per = s->bias ? 4 : 2, k = t / per, which = t % per;
        size_t GH = (size_t)s->gates * s->H;
        switch (which) {
        case 0: return GH * (size_t)(k ? s->H : s->I);  /* weight_ih */
        case 1: return GH * (size_t)s->H;               /* weight_hh */
        default: return GH;                             /* bias_ih, bias_hh */
        }
}

int dt_rnn_layout_nsegs(const dt_rnn_shape *s)
{
        return s->L * 2 * s->gates * (s->bias ? 2 : 1);
}

static int seg_cmp(const void *a, const void *b)
{
        const dt_rnn_seg *x = a, *y = b;
        return x->foff < y->foff ? -1 : x->foff > y->foff;
}

int dt_rnn_layout_plan(const dt_rnn_shape *s, const dt_rnn_offsets *o, size_t flat_len,
                       dt_rnn_seg *segs, char *why, size_t whylen)
{
        if (s->gates != 1 && s->gates != 3 && s->gates != 4) {
                snprintf(why, whylen, "rnn layout: %d gates (expected 1, 3 or 4)", s->gates);
                return -1;
        }
        if (s->L < 1 || s->L > DT_RNN_LAYOUT_MAX_LAYERS || s->H < 1 || s->I < 1) {
                snprintf(why, whylen, "rnn layout: bad shape (I %d, H %d, L %d)", s->I, s->H, s->L);
                return -1;
        }
        int G = s->gates, per = s->bias ? 4 : 2, n = 0;
        size_t H = (size_t)s->H;
        for (int k = 0; k < s->L; k++) {
                size_t I = (size_t)(k ? s->H : s->I);
                for (int id = 0; id < 2 * G; id++) {
                        int rec = id >= G, g = id % G;
                        size_t cols = rec ? H : I;
                        /* matrix: gate g's rows of weight_ih (id < G) or weight_hh */
                        segs[n++] = (dt_rnn_seg){ .tensor = k * per + rec, .toff = (size_t)g * H * cols,
                                                  .foff = o->w[k][id], .len = H * cols };
                        if (s->bias)
                                segs[n++] = (dt_rnn_seg){ .tensor = k * per + 2 + rec, .toff = (size_t)g * H,
                                                          .foff = o->b[k][id], .len = H };
                }
        }
        /* every segment inside the flat space, none overlapping another */
        dt_rnn_seg *sorted = malloc((size_t)n * sizeof *sorted);
        if (!sorted) {
                snprintf(why, whylen, "rnn layout: out of memory");
                return -1;
        }
        memcpy(sorted, segs, (size_t)n * sizeof *sorted);
        qsort(sorted, (size_t)n, sizeof *sorted, seg_cmp);
        int rc = n;
        for (int i = 0; i < n && rc >= 0; i++) {
                if (sorted[i].foff > flat_len || sorted[i].len > flat_len - sorted[i].foff) {
                        snprintf(why, whylen, "rnn layout: segment at %zu (+%zu) leaves the weight space of %zu floats",
                                 sorted[i].foff, sorted[i].len, flat_len);
                        rc = -1;
                } else if (i && sorted[i - 1].foff + sorted[i - 1].len > sorted[i].foff) {
                        snprintf(why, whylen, "rnn layout: segments at %zu and %zu overlap", sorted[i - 1].foff,
                                 sorted[i].foff);
                        rc = -1;
                }
        }
        free(sorted);
        return rc;
}

void dt_rnn_layout_pack(const dt_rnn_seg *segs, int n, const float *const *tensors, float *flat)
{
        for (int i = 0; i < n; i++)
                memcpy(flat + segs[i].foff, tensors[segs[i].tensor] + segs[i].toff, segs[i].len * sizeof *flat);
}

void dt_rnn_layout_unpack(const dt_rnn_seg *segs, int n, const float *flat, float *const *tensors,
                          int accumulate)
{
        for (int i = 0; i < n; i++) {
                float *d = tensors[segs[i].tensor] + segs[i].toff;
                const float *s = flat + segs[i].foff;
                if (accumulate)
                        for (size_t j = 0; j < segs[i].len; j++) d[j] += s[j];
                else
                        memcpy(d, s, segs[i].len * sizeof *d);
        }
}
