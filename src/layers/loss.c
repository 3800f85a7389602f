/* layers/loss.c - softmax cross-entropy (log-sum-exp stable) and mean squared error. */
#include "layers/loss.h"

#include <math.h>
#include <stddef.h>

static int argmax(const float *z, int C)
{
        int k = 0;
        for (int c = 1; c < C; c++)
                if (z[c] > z[k]) k = c;
        return k;
}

double dt_loss_softmax_xent(const float *z, const int32_t *labels, int R, int C, float scale,
                            float *dz, long *correct)
{
        double total = 0;
        for (int r = 0; r < R; r++) {
                const float *zr = z + (size_t)r * C;
                int y = labels[r];
                float mx = zr[0];
                for (int c = 1; c < C; c++) mx = zr[c] > mx ? zr[c] : mx;
                double s = 0;
                for (int c = 0; c < C; c++) s += exp((double)(zr[c] - mx));
                double lse = log(s) + mx;
                total += lse - zr[y];
                if (correct && argmax(zr, C) == y) (*correct)++;
                if (dz) {
                        float *d = dz + (size_t)r * C;
                        for (int c = 0; c < C; c++)
                                d[c] = scale * (float)exp((double)zr[c] - lse);
                        d[y] -= scale;
                }
        }
        return total;
}

double dt_loss_mse(const float *y, const float *t, const int32_t *labels, int R, int C, float scale,
                   float *dy, long *correct)
{
        double total = 0;
        for (int r = 0; r < R; r++) {
                const float *yr = y + (size_t)r * C;
                double s = 0;
                for (int c = 0; c < C; c++) {
                        float tc = t ? t[(size_t)r * C + c] : (labels[r] == c ? 1.0f : 0.0f);
                        float e = yr[c] - tc;
                        s += (double)e * e;
                        if (dy) dy[(size_t)r * C + c] = scale * 2.0f * e / (float)C;
                }
                total += s / C;
                if (correct && labels && argmax(yr, C) == labels[r]) (*correct)++;
        }
        return total;
}
