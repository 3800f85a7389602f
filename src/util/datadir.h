/* util/datadir.h - the files dtrain ships (the models, data/, examples/slurm/): found in the
 * current directory (a source tree), else beside the running binary (BINDIR/../share/dtrain, so an
 * installed tree works wherever it was copied, DESTDIR included), else in the configured
 * $(pkgdatadir). */
#ifndef DT_DATADIR_H
#define DT_DATADIR_H

#include <stddef.h>

/* Fills out with the first readable place of rel ("models/mlp.yaml"); returns out, or NULL when
 * none is readable. */
const char *dt_bundled(const char *rel, char *out, size_t n);

/* The model spec a command names: path itself when it exists (or is absolute, or names a directory
 * of the user's: "./x.yaml", "dir/x.yaml"); else a bundled model, NAME as models/NAME and
 * models/NAME as itself (dt_bundled), written to out as an absolute path, with a note on stderr
 * when note is set. Returns path or out. */
const char *dt_spec_path(const char *path, char *out, size_t n, int note);

#endif
