/* data/synthetic.c - gaussian-blob classification data: 'classes' centres drawn from src->seed,
 * samples = centre + noise * N(0,1), labels balanced (round-robin) then shuffled. Deterministic in
 * (seed, n, shape, classes, noise, stream); learnable by a small MLP, so tests and CI use it. */
#include "data/data.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Independent streams of one seed: adding draws to one never shifts another. */
enum { STREAM_CENTRES = 1, STREAM_LABELS = 2, STREAM_NOISE = 3 };

void dt_dataset_synthetic_stream(dt_dataset *ds, const dt_source_spec *src, const dt_shape *input,
                                 int classes, uint64_t stream)
{
        memset(ds, 0, sizeof *ds);
        if (classes < 1) classes = 1;
        long n = src->n > 0 ? src->n : 0;
        size_t dim = dt_shape_size(input);
        size_t total, cbytes;
        /* the spec validates n and the input shape; reaching here with overflow is our bug */
        DT_ASSERT(dim > 0 && dt_mul_ok((size_t)n, dim, &total) && dt_mul_ok((size_t)classes, dim, &cbytes));

        ds->n = n;
        ds->shape = *input;
        ds->dim = dim;
        ds->classes = classes;
        ds->x = dt_falloc(total);
        ds->label = dt_malloc((size_t)(n ? n : 1) * sizeof *ds->label);

        /* Centre components ~ N(0, s^2). Random centres in d dimensions sit about s*sqrt(2d)
         * apart; s grows when few dimensions must hold many classes, so blobs at noise 1 stay
         * mostly separate. */
        double s = 2.0 * sqrt((double)classes / (double)dim);
        if (s < 1.0) s = 1.0;
        float *centre = dt_falloc(cbytes);
        dt_data_rng r;
        dt_data_rng_seed(&r, src->seed, STREAM_CENTRES);
        for (size_t i = 0; i < (size_t)classes * dim; i++)
                centre[i] = (float)(s * dt_data_rng_normal(&r));

        /* balanced labels, then a Fisher-Yates shuffle so classes are interleaved */
        for (long i = 0; i < n; i++)
                ds->label[i] = (int32_t)(i % classes);
        dt_data_rng_seed(&r, src->seed ^ (stream * 0x9e3779b97f4a7c15ULL), STREAM_LABELS);
        for (long i = n - 1; i > 0; i--) {
                long j = (long)dt_data_rng_below(&r, (uint64_t)i + 1);
                int32_t t = ds->label[i];
                ds->label[i] = ds->label[j];
                ds->label[j] = t;
        }

        dt_data_rng_seed(&r, src->seed ^ (stream * 0x9e3779b97f4a7c15ULL), STREAM_NOISE);
        double noise = src->noise > 0 ? src->noise : 0.0;
        for (long i = 0; i < n; i++) {
                const float *c = centre + (size_t)ds->label[i] * dim;
                float *x = ds->x + (size_t)i * dim;
                for (size_t k = 0; k < dim; k++)
                        x[k] = (float)(c[k] + noise * dt_data_rng_normal(&r));
        }
        free(centre);
}
