/* layers/tensor.h - per-sample shapes. Activations are row-major float arrays of (B, shape...). */
#ifndef DT_TENSOR_H
#define DT_TENSOR_H

#include <stddef.h>

#define DT_MAX_DIMS 4

/* Shape of one sample (batch dimension excluded): (C,H,W) images, (T,F) sequences, (F) flat. */
typedef struct dt_shape {
        int n;
        int d[DT_MAX_DIMS];
} dt_shape;

/* Product of dims; 0 on overflow (shapes are validated before use, so 0 means refused). */
size_t dt_shape_size(const dt_shape *s);
/* "(1,28,28)" into buf. */
const char *dt_shape_str(const dt_shape *s, char *buf, size_t len);
int dt_shape_eq(const dt_shape *a, const dt_shape *b);

#endif
