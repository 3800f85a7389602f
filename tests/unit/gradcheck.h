/* tests/unit/gradcheck.h - finite-difference gradient check of one layer built from YAML. */
#ifndef DT_GRADCHECK_H
#define DT_GRADCHECK_H

#include <stddef.h>

/* Builds a model with input shape 'input' (YAML flow list, e.g. "[2, 5, 5]") and the single
 * layer 'layer' (YAML flow mapping), fills parameters and B inputs with random values, and
 * compares backward's input and parameter gradients of L = sum(y * r) against central
 * differences. Returns the worst error |a - n| / max(1, |a|, |n|) scaled so that 1.0 is the
 * tolerance edge (pass when <= 1). 'training' selects the training forward (dropout masks
 * stay fixed: they are a function of the step, which does not change). */
double dt_gradcheck(const char *input, const char *layer, int B, int training);

/* A whole model spec text with a synthetic source, for tests that need one. */
int dt_test_spec_file(char *path, size_t len, const char *input, const char *layers_yaml, const char *extra);

#endif
