/* layers/tensor.c - shape helpers. */
#include "layers/tensor.h"

#include <stdio.h>
#include <string.h>

size_t dt_shape_size(const dt_shape *s)
{
        size_t n = 1;
        for (int i = 0; i < s->n; i++) {
                if (s->d[i] <= 0 || __builtin_mul_overflow(n, (size_t)s->d[i], &n)) return 0;
        }
        return n;
}

const char *dt_shape_str(const dt_shape *s, char *buf, size_t len)
{
        size_t k = 0;
        k += (size_t)snprintf(buf + k, len - k, "(");
        for (int i = 0; i < s->n && k < len; i++)
                k += (size_t)snprintf(buf + k, len - k, i ? ",%d" : "%d", s->d[i]);
        if (k < len) snprintf(buf + k, len - k, ")");
        return buf;
}

int dt_shape_eq(const dt_shape *a, const dt_shape *b)
{
        if (a->n != b->n) return 0;
        for (int i = 0; i < a->n; i++)
                if (a->d[i] != b->d[i]) return 0;
        return 1;
}
