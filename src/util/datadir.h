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

#endif
