/* spec/cluster_int.h - internal to the cluster spec's reader (cluster_spec.c) and its checks
 * (cluster_check.c): errors at the key that caused them. */
#ifndef DT_CLUSTER_INT_H
#define DT_CLUSTER_INT_H

#include "spec/cluster_spec.h"

/* An error at 'at' in the file that set bit's key (the cluster spec or the model's parallel:). */
void dt_cs_err_at(dt_diag *d, const dt_cluster_spec *c, dt_cs_bits bit, dt_pos at, const char *fmt, ...)
        __attribute__((format(printf, 5, 6)));
/* Where bit's key was written (0:0 when it was not). */
dt_pos dt_cs_kpos(const dt_cluster_spec *c, dt_cs_bits bit);
/* The name of bit's key ("micro_batches"). */
const char *dt_cs_key_name(dt_cs_bits bit);
/* Keys whose mode was set in the other file, or left at its default. */
void dt_cs_check_modes_merged(const dt_cluster_spec *c, dt_diag *d);
/* partition.recompute's value v (none | all | auto | a list of layer names or patterns) into out:
 * 1 read, -1 bad (reported at v). */
int dt_cs_read_recompute(dt_ydoc *y, const yaml_node_t *v, dt_recompute_rules *out, dt_diag *d);
/* The recompute key against the model (every pattern names a layer) and the grid (pipeline stages
 * under zb-h1, zb-v or v-half cannot recompute); errors at the key or the pattern. */
void dt_cs_check_recompute(const dt_cluster_spec *c, const struct dt_model_spec *m, int pipeline, dt_diag *d);

#endif
