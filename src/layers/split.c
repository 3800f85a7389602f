/* layers/split.c - what split layers share (layer.h's tensor-parallel part): the split names and
 * moving a shard's columns in and out of a whole row-major matrix. */
#include "layers/layer.h"

#include <string.h>

const char *const dt_split_names[] = { "none", "column", "row", "channel", "hidden", "pass", "heads", NULL };

void dt_cols_take(float *dst, const float *src, size_t rows, size_t W, size_t off, size_t w)
{
        for (size_t r = 0; r < rows; r++) memcpy(dst + r * w, src + r * W + off, w * sizeof *dst);
}

void dt_cols_put(float *dst, const float *src, size_t rows, size_t W, size_t off, size_t w)
{
        for (size_t r = 0; r < rows; r++) memcpy(dst + r * W + off, src + r * w, w * sizeof *dst);
}
