/* spec/data_keys.h - readers of the data keys that take lists or sections (spec/data_keys.c):
 * each returns 1 (given), 0 (absent) or -1 (reported at file:line:col). */
#ifndef DT_DATA_KEYS_H
#define DT_DATA_KEYS_H

#include "data/data.h"
#include "util/yaml_util.h"

/* key: one path (a glob too), or a list of paths forming one dataset (*list malloc'd, each entry
 * resolved against dir when found); *first is the path, or the list's first entry. */
int dt_ykey_paths(dt_ymap *m, const char *key, const char *dir, const char **first, char ***list, int *n);
/* mean / std: a number, or a list of one per channel of a (C,H,W) input. */
int dt_ykey_normalisation(dt_ymap *m, dt_data_spec *ds, const dt_shape *input);
/* prefetch, cache, augment {crop, flip} (checked against the input shape; refused for text). */
int dt_ykey_loader(dt_ymap *m, dt_data_spec *ds, const dt_shape *input, int text);
/* frees what dt_ykey_paths stored in a source */
void dt_ykey_free_paths(dt_source_spec *src);

#endif
