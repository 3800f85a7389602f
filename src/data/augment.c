/* data/augment.c - training-time image augmentation: a random crop of the sample's own size from
 * the sample padded by 'crop' pixels on each side (the padding is a raw 0, normalised), then a
 * horizontal flip with probability 1/2, as torchvision's RandomCrop(padding) + RandomHorizontalFlip.
 * Each draw is a pure function of (seed, epoch, sample index), never of the rank or the batch, so N
 * ranks draw what one rank draws and a resumed run what the uninterrupted run drew. */
#include "data/data.h"

#include <string.h>

/* a stream of its own, apart from the shuffle's (seed, epoch) stream */
#define AUG_STREAM 0x61756720636f7079ull

int dt_augment_check(const dt_augment *a, const dt_shape *in, char *why, size_t len)
{
        char sb[64];
        if (!a->crop && !a->flip) return 0;
        if (in->n != 2 && in->n != 3) {
                snprintf(why, len, "augmentation needs an image input, (C,H,W) or (H,W), but the model's input is %s",
                         dt_shape_str(in, sb, sizeof sb));
                return -1;
        }
        int H = in->d[in->n - 2], W = in->d[in->n - 1];
        if (a->crop > H || a->crop > W) {
                snprintf(why, len, "'crop' padding %d is larger than the image (%d x %d)", a->crop, H, W);
                return -1;
        }
        return 0;
}

/* x (C,H,W): x[c,y,x] = src[c, y + dy - p, x + dx - p] (fill outside), mirrored in x when flip */
void dt_augment_sample(const dt_augment *a, const dt_shape *in, const float *fill, uint64_t seed, long epoch,
                       long index, float *x, float *tmp)
{
        if (!a->crop && !a->flip) return;
        int C = in->n == 3 ? in->d[0] : 1, H = in->d[in->n - 2], W = in->d[in->n - 1], p = a->crop;
        dt_data_rng r;
        dt_data_rng_seed(&r, seed ^ AUG_STREAM, ((uint64_t)epoch << 40) ^ (uint64_t)index);
        int dy = p ? (int)dt_data_rng_below(&r, (uint64_t)(2 * p + 1)) : p;
        int dx = p ? (int)dt_data_rng_below(&r, (uint64_t)(2 * p + 1)) : p;
        int flip = a->flip ? (int)(dt_data_rng_next(&r) >> 63) : 0;
        if (dy == p && dx == p && !flip) return;        /* the identity draw */
        size_t plane = (size_t)H * (size_t)W;
        memcpy(tmp, x, (size_t)C * plane * sizeof *x);
        for (int c = 0; c < C; c++) {
                const float *s = tmp + (size_t)c * plane;
                float *d = x + (size_t)c * plane;
                for (int yy = 0; yy < H; yy++) {
                        int sy = yy + dy - p;
                        for (int xx = 0; xx < W; xx++) {
                                int sx = (flip ? W - 1 - xx : xx) + dx - p;
                                d[(size_t)yy * W + xx] = sy >= 0 && sy < H && sx >= 0 && sx < W
                                                                 ? s[(size_t)sy * W + sx] : fill[c];
                        }
                }
        }
}
