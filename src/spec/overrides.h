/* spec/overrides.h - `--set KEY=VALUE`: command-line overrides of any model or cluster spec key,
 * applied to the loaded YAML document before it is validated, so a value is checked by the same
 * readers with the same messages as in a file, reported at the argument ("--set KEY=VALUE: error:
 * ..."). KEY is a dotted path (train.optimizer.lr, layers.fc1.units, layers.0.units,
 * partition.micro_batches); VALUE is YAML (0.01, [0.5, 0.5], {type: cosine}). A key that exists
 * is replaced, one that does not is added (and then known or unknown to the readers as in a file). */
#ifndef DT_OVERRIDES_H
#define DT_OVERRIDES_H

#include "util/yaml_util.h"

typedef struct dt_sets {
        int n;
        char **kv;              /* "KEY=VALUE" as given */
        char **origin;          /* what messages name: "--set KEY=VALUE" (and where it was recorded) */
        int *line;              /* its nodes' mark line (dt_argpos_add) */
} dt_sets;

/* Appends one override; recorded: the file it was read from (for messages), NULL from the
 * command line. */
void dt_sets_add(dt_sets *s, const char *kv, const char *recorded);
/* Appends every override of b, each replacing an earlier one in s with the same KEY (the later
 * wins, as when applied in order). */
void dt_sets_merge(dt_sets *s, const dt_sets *b);
void dt_sets_free(dt_sets *s);
/* "KEY=VALUE, KEY=VALUE" (clipped to len) for a note. */
const char *dt_sets_str(const dt_sets *s, char *buf, size_t len);

/* Which overrides dt_sets_apply applies: the model spec's keys; the cluster spec's keys into the
 * model's 'parallel:' (no cluster file); the cluster spec's keys into a cluster file's root. The
 * KEY's own mistakes (no '=', a key neither spec has, one both have) are reported with MODEL. */
#define DT_SETS_MODEL 1
#define DT_SETS_PARALLEL 2
#define DT_SETS_CLUSTER 4
/* Applies, in order, the overrides that which selects to y. Errors go to d at the argument; a bad
 * one is skipped and the rest applied. Returns 0 or -1. */
int dt_sets_apply(const dt_sets *s, dt_ydoc *y, int which, dt_diag *d);

/* Whether KEY=VALUE overrides a key of the model spec (not the cluster spec's, not a mistake). */
int dt_sets_is_model(const char *kv);

/* ---- the record in a run directory: DIR/overrides.yaml ---- */

#define DT_SETS_FILE "overrides.yaml"
/* Reads DIR/overrides.yaml into s (appended, recorded): 1 when read, 0 when there is none, -1 when
 * it cannot be read (why printed when print is set). */
int dt_sets_read(dt_sets *s, const char *dir, int print);
/* Writes s as DIR/overrides.yaml atomically (temp file, fsync, rename); none: removes it. 0, or
 * -1 with errno. */
int dt_sets_write(const dt_sets *s, const char *dir);
/* The run directory a checkpoint path belongs to: DIR/checkpoints/X -> DIR, DIR/checkpoints ->
 * DIR, anything else itself. */
void dt_sets_run_dir(const char *path, char *out, size_t len);

#endif
