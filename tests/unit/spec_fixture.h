/* tests/unit/spec_fixture.h - loads a whole model spec text and builds its graph, failing the test on any error. */
#ifndef DT_SPEC_FIXTURE_H
#define DT_SPEC_FIXTURE_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "spec/model_spec.h"
#include "graph/graph.h"

/* The loader reads files only (diagnostics name file:line:col), so the text goes through a
 * temporary file that is removed before the graph is built. */
static inline void dt_fixture_load(dt_model_spec *s, dt_graph *g, const char *body)
{
        char path[64];
        snprintf(path, sizeof path, "/tmp/dtrain-test-spec-XXXXXX.yaml");
        int fd = mkstemps(path, 5);
        ck_assert_int_ge(fd, 0);
        FILE *f = fdopen(fd, "w");
        ck_assert_ptr_nonnull(f);
        fputs(body, f);
        fclose(f);
        dt_diag d = { 0 };
        int rc = dt_model_spec_load(s, path, &d);
        unlink(path);
        if (rc != 0 && d.n) dt_diag_print(&d, stderr);
        ck_assert_int_eq(rc, 0);
        ck_assert_int_eq(dt_graph_build(g, s, &d), 0);
        dt_diag_free(&d);
}

/* A file cache of its own for one test (XDG_CACHE_HOME, a fresh directory from the template dir),
 * removed with its contents by dt_fixture_drop_cache. */
static inline void dt_fixture_temp_cache(char *dir)
{
        ck_assert_ptr_nonnull(mkdtemp(dir));
        setenv("XDG_CACHE_HOME", dir, 1);
}

static inline void dt_fixture_drop_cache(const char *dir)
{
        char cmd[160];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        ck_assert_int_eq(system(cmd), 0);
        unsetenv("XDG_CACHE_HOME");
}

#endif
