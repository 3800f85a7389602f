/* tests/unit/test_shard.c - Check tests of sharded data parallelism's parts that need no second rank
 * (parallel/shard.c): who owns which part of each bucket for any rank count, the moments' compact
 * layout and its cut from the whole, and the gradient norm's block order giving the same bits at
 * stage 0 and 1 whatever the rank count. MPI is never started. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "parallel/dp.h"
#include "parallel/shard.h"

/* fc 100 -> 700 -> 300 -> 9, each with a bias: 70700, 210300 and 2709 floats of gradients */
static const char *LAYERS = "  - {type: fc, name: a, units: 700}\n  - {type: fc, name: b, units: 300}\n"
                            "  - {type: fc, name: c, units: 9}\n";

static dt_model_spec spec;
static dt_graph g;
static dt_bucket bk[8];
static int nb;

static void setup(void)
{
        char path[64];
        snprintf(path, sizeof path, "/tmp/dtrain-test-shard-XXXXXX.yaml");
        int fd = mkstemps(path, 5);
        ck_assert_int_ge(fd, 0);
        FILE *f = fdopen(fd, "w");
        fprintf(f, "name: sh\ninput: [100]\nlayers:\n%sloss: mse\ndata:\n  train: {format: synthetic, n: 8}\n", LAYERS);
        fclose(f);
        dt_diag d = { 0 };
        ck_assert_int_eq(dt_model_spec_load(&spec, path, &d), 0);
        unlink(path);
        ck_assert_int_eq(dt_graph_build(&g, &spec, &d), 0);
        nb = dt_dp_buckets(&g, 0.2, bk);        /* 52428 floats: layer a alone, b alone, c */
        ck_assert_int_ge(nb, 2);
        g.be = dt_backend_cpu_new(1);
        g.grads = dt_falloc(g.nparams);
        g.params = dt_falloc(g.nparams);
        srand(7);
        for (size_t i = 0; i < g.nparams; i++) g.grads[i] = (float)rand() / RAND_MAX - 0.5f;
}

static void teardown(void)
{
        free(g.grads);
        free(g.params);
        g.grads = g.params = NULL;
        g.be->ops->destroy(g.be);
        g.be = NULL;
        dt_graph_free(&g);
        dt_model_spec_free(&spec);
}

static void shard_on(dt_shard *sh, int stage, int D, int r, dt_comm *c)
{
        memset(c, 0, sizeof *c);
        c->size = D;
        c->rank = r;
        dt_shard_init(sh, stage, c, &g, bk, nb);
}

/* Every bucket's parts, in rank order, cover it without gaps, cut on the 1024-float grid from its
 * start; each rank's compact offsets follow its parts; the ranks' parts add up to the model. */
START_TEST(ownership)
{
        for (int D = 1; D <= 7; D++) {
                size_t total = 0;
                for (int r = 0; r < D; r++) {
                        dt_shard sh;
                        dt_comm c;
                        shard_on(&sh, 2, D, r, &c);
                        ck_assert_int_eq(sh.stage, D > 1 ? 2 : 0);
                        ck_assert_int_eq(sh.nb, nb);
                        size_t coff = 0;
                        for (int j = 0; j < sh.nb; j++) {
                                if (j) ck_assert_uint_eq(sh.off[j], sh.off[j - 1] + sh.len[j - 1]);
                                size_t at = 0;
                                for (int q = 0; q < D && D > 1; q++) {
                                        size_t a = (size_t)sh.dsp[(size_t)j * D + q], n = (size_t)sh.cnt[(size_t)j * D + q];
                                        ck_assert_uint_eq(a, at);
                                        ck_assert(a % DT_SHARD_BLOCK == 0 || n == 0);
                                        at = a + n;
                                }
                                if (D > 1) ck_assert_uint_eq(at, sh.len[j]);
                                ck_assert_uint_eq(sh.coff[j], coff);
                                coff += D > 1 ? (size_t)sh.cnt[(size_t)j * D + r] : sh.len[j];
                        }
                        ck_assert_uint_eq(sh.off[0], 0);
                        ck_assert_uint_eq(sh.n, coff);
                        total += sh.n;
                        dt_shard_free(&sh);
                }
                ck_assert_uint_eq(total, g.nparams);
        }
}
END_TEST

/* The moments' cut: each rank's parts of a whole buffer, put back by their offsets, are the whole. */
START_TEST(take_roundtrip)
{
        float *whole = dt_falloc(g.nparams), *back = dt_falloc(g.nparams);
        for (size_t i = 0; i < g.nparams; i++) whole[i] = (float)i;
        for (int D = 2; D <= 5; D++) {
                memset(back, 0, g.nparams * sizeof *back);
                for (int r = 0; r < D; r++) {
                        dt_shard sh;
                        dt_comm c;
                        shard_on(&sh, 1, D, r, &c);
                        float *mine = dt_falloc(sh.n);
                        dt_shard_take(&sh, whole, mine);
                        for (int j = 0; j < sh.nb; j++)
                                memcpy(back + sh.off[j] + sh.dsp[(size_t)j * D + r], mine + sh.coff[j],
                                       (size_t)sh.cnt[(size_t)j * D + r] * sizeof *back);
                        free(mine);
                        dt_shard_free(&sh);
                }
                ck_assert_int_eq(memcmp(whole, back, g.nparams * sizeof *back), 0);
        }
        free(whole);
        free(back);
}
END_TEST

/* dt_shard_parts: the runs of any range are in order, inside one owner's part each, and the owner's
 * compact offset is where dt_shard_take put the value. */
typedef struct runs { size_t at; int D, r; const float *mine; int n; } runs;
static void one_run(void *ud, int owner, size_t lo, size_t hi, size_t cpos)
{
        runs *x = ud;
        ck_assert_uint_eq(lo, x->at);
        ck_assert_uint_gt(hi, lo);
        ck_assert(owner >= 0 && owner < x->D);
        if (owner == x->r) {
                for (size_t i = lo; i < hi; i++) ck_assert_float_eq(x->mine[cpos + (i - lo)], (float)i);
        } else {
                ck_assert_uint_eq(cpos, SIZE_MAX);
        }
        x->at = hi;
        x->n++;
}

START_TEST(parts_runs)
{
        float *whole = dt_falloc(g.nparams);
        for (size_t i = 0; i < g.nparams; i++) whole[i] = (float)i;
        for (int D = 2; D <= 5; D++)
                for (int r = 0; r < D; r++) {
                        dt_shard sh;
                        dt_comm c;
                        shard_on(&sh, 1, D, r, &c);
                        float *mine = dt_falloc(sh.n);
                        dt_shard_take(&sh, whole, mine);
                        size_t cuts[][2] = { { 0, g.nparams }, { 5, 70705 }, { 70000, 71000 }, { 123456, 123457 } };
                        for (int k = 0; k < 4; k++) {
                                runs x = { cuts[k][0], D, r, mine, 0 };
                                dt_shard_parts(&sh, cuts[k][0], cuts[k][1], one_run, &x);
                                ck_assert_uint_eq(x.at, cuts[k][1]);
                                ck_assert_int_ge(x.n, 1);
                        }
                        free(mine);
                        dt_shard_free(&sh);
                }
        free(whole);
}
END_TEST

/* The norm's blocks: stage 0 on one rank and stage 1 on any rank count give the same bits, and
 * they are the per-block sums (each bucket from its start) added in order. */
START_TEST(norm_blocks)
{
        dt_shard sh;
        dt_comm c;
        shard_on(&sh, 0, 1, 0, &c);
        double ref = dt_shard_sumsq(&sh, g.grads, NULL, NULL);
        double want = 0;
        for (int j = 0; j < sh.nb; j++)
                for (size_t p = 0; p < sh.len[j]; p += DT_SHARD_BLOCK) {
                        size_t n = sh.len[j] - p < DT_SHARD_BLOCK ? sh.len[j] - p : DT_SHARD_BLOCK;
                        want += g.be->ops->sumsq(g.be, g.grads + sh.off[j] + p, n);
                }
        ck_assert(ref == want);
        dt_shard_free(&sh);
        double plain = g.be->ops->sumsq(g.be, g.grads, g.nparams);
        ck_assert(fabs(ref - plain) <= 1e-12 * plain);  /* the same sum, in another order */
        for (int D = 2; D <= 5; D++)
                for (int r = 0; r < D; r++) {
                        shard_on(&sh, 1, D, r, &c);
                        ck_assert(dt_shard_sumsq(&sh, g.grads, NULL, NULL) == ref);
                        dt_shard_free(&sh);
                }
}
END_TEST

static int skip_b(void *ud, int layer, int k)
{
        (void)ud;
        (void)k;
        return layer != 1;
}

/* A counted tensor left out (tensor parallelism's replicated ones) leaves its blocks' sums out. */
START_TEST(norm_counted)
{
        dt_shard sh;
        dt_comm c;
        shard_on(&sh, 1, 3, 1, &c);
        const dt_layer *b = &g.layers[1];
        double all = dt_shard_sumsq(&sh, g.grads, NULL, NULL);
        double some = dt_shard_sumsq(&sh, g.grads, skip_b, NULL);
        double lb = g.be->ops->sumsq(g.be, g.grads + b->off[0], b->len[0] + b->len[1]);
        ck_assert(some < all);
        ck_assert(fabs(all - some - lb) <= 1e-9 * all);
        dt_shard_free(&sh);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("shard");
        TCase *tc = tcase_create("core");
        tcase_set_timeout(tc, 60);     /* the loops over every part take ~10 s under ASan on 2 busy cores */
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, ownership);
        tcase_add_test(tc, take_roundtrip);
        tcase_add_test(tc, parts_runs);
        tcase_add_test(tc, norm_blocks);
        tcase_add_test(tc, norm_counted);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(suite());
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
