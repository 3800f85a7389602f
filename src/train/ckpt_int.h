/* train/ckpt_int.h - what the checkpoint files share (ckpt.c, ckpt_commit.c, ckpt_state.c,
 * ckpt_fs.c): file names, limits, the file-system helpers, state.json's writer and reader. Not
 * for other modules: they use ckpt.h. */
#ifndef DT_CKPT_INT_H
#define DT_CKPT_INT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include "train/ckpt.h"

#define CK_MODEL "model.safetensors"
#define CK_OPTIM "optim.safetensors"
#define CK_STATE "state.json"
/* 2^40 steps or samples: beyond any run, and epochs x steps per epoch stays inside a long */
#define DT_CKPT_MAX_COUNT (1L << 40)
#define TMP_PREFIX ".tmp-"


/* ---- ckpt_fs.c ---- */
/* out = dir/name; -1 when it does not fit */
int dt_ck_join(char *out, size_t len, const char *dir, const char *name);
int dt_ck_fsync_dir(const char *dir);
int dt_ck_mkdir_p(const char *path, char *err, size_t errlen);
int dt_ck_write_sync(const char *path, const void *data, size_t len, char *err, size_t errlen);
void dt_ck_split_path(const char *path, char *dir, size_t dirlen, const char **base);
int dt_ck_file_crc(const char *path, uint32_t *out);

/* ---- ckpt_state.c ---- */
int dt_ck_state_crc(json_t *o, uint32_t *out);
/* state.json's text (malloc'd, newline-terminated), NULL when it cannot be serialised */
char *dt_ck_state_json(const dt_train_state *st, int nmoments, uint32_t mcrc, uint32_t ocrc);
int dt_ck_read_state(const char *path, dt_train_state *st, int *nmoments, uint32_t *mcrc, uint32_t *ocrc,
                     uint32_t *scrc, uint32_t *want_scrc, char *err, size_t errlen);

/* ---- ckpt.c ---- */
enum { SET_MODEL, SET_OPTIM };
int dt_ck_collect(const dt_graph *g, const dt_moments *mo, int set, dt_st_tensor **out, int *nout,
                  char *err, size_t errlen);

#endif
