/* layers/recurrent.c - the keys, shapes, tensors and FLOPs common to rnn, lstm and gru. */
#include "layers/recurrent.h"

#include <stdio.h>
#include <string.h>

int dt_rec_parse(dt_ymap *m, struct dt_rec_cfg *c, int max_layers)
{
        long hidden = 0, layers = 1, bptt = 0;
        int rc = 0;
        if (dt_ymap_int(m, "hidden", &hidden, 0, 1, 1 << 16, 1) < 0) rc = -1;
        if (dt_ymap_int(m, "layers", &layers, 1, 1, max_layers, 0) < 0) rc = -1;
        if (dt_ymap_bool(m, "return_sequences", &c->return_seq, 0, 0) < 0) rc = -1;
        if (dt_ymap_int(m, "bptt", &bptt, 0, 0, 1 << 24, 0) < 0) rc = -1;
        if (dt_ymap_bool(m, "bias", &c->bias, 1, 0) < 0) rc = -1;
        c->hidden = (int)hidden;
        c->layers = (int)layers;
        c->bptt = (int)bptt;
        return rc;
}

int dt_rec_infer(const struct dt_rec_cfg *c, const dt_shape *in, dt_shape *out, char *why, size_t n)
{
        if (in->n != 2) {
                char b[64];
                snprintf(why, n, "needs a sequence input (T,F), got %s; give the data as (T,F), e.g. input: [28, 28]",
                         dt_shape_str(in, b, sizeof b));
                return -1;
        }
        if (c->return_seq) *out = (dt_shape){ 2, { in->d[0], c->hidden } };
        else *out = (dt_shape){ 1, { c->hidden } };
        return 0;
}

/* Split: G blocks of the rank's Hl rows each (parallel/tensor.c cuts and joins them block by
 * block, .groups = G); the fans stay the whole tensor's, which the initialisation draws. */
int dt_rec_params(const struct dt_rec_cfg *c, int G, const dt_shape *in, dt_param_spec *ps)
{
        int H = c->hidden, R = G * dt_rec_units(c), k = 0;
        for (int l = 0; l < c->layers; l++) {
                int I = l ? H : in->d[1];
                const char *names[4] = { "weight_ih_l%d", "weight_hh_l%d", "bias_ih_l%d", "bias_hh_l%d" };
                dt_shape shapes[4] = { { 2, { R, I } }, { 2, { R, H } }, { 1, { R } }, { 1, { R } } };
                for (int t = 0; t < (c->bias ? 4 : 2); t++, k++) {
                        ps[k] = (dt_param_spec){ .shape = shapes[t], .init = DT_INIT_TORCH, .fan_in = H,
                                                 .fan_out = G * H, .trainable = 1, .groups = G };
                        snprintf(ps[k].suffix, sizeof ps[k].suffix, names[t], l);
                }
        }
        return k;
}

/* this rank's share: its Hl units' gates */
double dt_rec_flops(const struct dt_rec_cfg *c, int G, const dt_shape *in)
{
        double T = in->d[0], H = c->hidden, U = dt_rec_units(c), f = 0;
        for (int l = 0; l < c->layers; l++) f += 2.0 * T * G * U * ((l ? H : in->d[1]) + H);
        return f;
}

void dt_rec_time_major(float *dst, const float *src, int B, int T, int F)
{
        for (int b = 0; b < B; b++)
                for (int t = 0; t < T; t++)
                        memcpy(dst + ((size_t)t * B + b) * F, src + ((size_t)b * T + t) * F, (size_t)F * sizeof *dst);
}

void dt_rec_batch_major(float *dst, const float *src, int B, int T, int F)
{
        for (int b = 0; b < B; b++)
                for (int t = 0; t < T; t++)
                        memcpy(dst + ((size_t)b * T + t) * F, src + ((size_t)t * B + b) * F, (size_t)F * sizeof *dst);
}

void dt_rec_output(const struct dt_rec_cfg *c, float *y, const float *top, int B, int T)
{
        size_t sB = (size_t)B * c->hidden;
        if (c->return_seq) dt_rec_batch_major(y, top, B, T, c->hidden);
        else memcpy(y, top + (size_t)(T - 1) * sB, sB * sizeof *y);
}

void dt_rec_seed_grad(const struct dt_rec_cfg *c, float *dH, const float *dy, int B, int T)
{
        size_t sB = (size_t)B * c->hidden;
        if (c->return_seq) {
                dt_rec_time_major(dH, dy, B, T, c->hidden);
        } else {
                memset(dH, 0, (size_t)(T - 1) * sB * sizeof *dH);
                memcpy(dH + (T - 1) * sB, dy, sB * sizeof *dH);
        }
}

int dt_rec_supports(const struct dt_rec_cfg *c, const char *backend, unsigned caps, char *why, size_t n)
{
        if (caps & DT_CAP_HOST_MEMORY) return 0;
        if (dt_rec_nshards(c) > 1) {    /* the fused op runs whole layers; a shard's steps need collectives */
                snprintf(why, n, "a hidden-unit split runs on the cpu backend only, not %s; use --device cpu", backend);
                return -1;
        }
        if (!(caps & DT_CAP_FUSED_RNN)) {
                snprintf(why, n, "the %s backend has no recurrent op; use --device cpu", backend);
                return -1;
        }
        if (c->bptt > 0 && !(caps & DT_CAP_RNN_BPTT)) {
                snprintf(why, n, "bptt is not supported on the %s backend; remove it or use --device cpu", backend);
                return -1;
        }
        return 0;
}

const dt_split_way dt_rec_splits[] = {
        { .split = DT_SPLIT_HIDDEN, .role = DT_ROLE_ALONE, .what = "the units of every gate", .ncoll = 3,
          .coll = { { 1, 0, DT_COLL_STEP, DT_COLL_ALWAYS }, { 0, 1, DT_COLL_STEP, DT_COLL_ALWAYS },
                    { 0, 1, DT_COLL_INPUT, DT_COLL_IF_DX } } },
};

int dt_rec_shard(const struct dt_rec_cfg *c, const dt_placement *pl, struct dt_rec_cfg *lc, char *why, size_t n)
{
        if (pl->nshards < 1 || c->hidden % pl->nshards) {
                snprintf(why, n, "hidden %d does not divide into %d shards of hidden units", c->hidden, pl->nshards);
                return -1;
        }
        lc->t = pl->nshards;
        return 0;
}

void dt_rec_gather_h(const dt_layer *l, const float *hl, float *h, int B, int Hl)
{
        l->place.tp->allgather_cols(l->place.tp, hl, h, (size_t)B, (size_t)Hl);
}

void dt_rec_reduce_h(const dt_layer *l, float *part, float *dhl, int B, int H, int Hl)
{
        l->place.tp->allreduce(l->place.tp, part, (size_t)B * H);
        const float *mine = part + (size_t)l->place.shard * Hl;
        for (int b = 0; b < B; b++)
                for (int j = 0; j < Hl; j++) dhl[(size_t)b * Hl + j] += mine[(size_t)b * H + j];
}
