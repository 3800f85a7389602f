/* tests/unit/gradcheck.h - finite-difference gradient check of one layer built from YAML. */
#ifndef DT_GRADCHECK_H
#define DT_GRADCHECK_H

#include <stddef.h>

/* The cpu backend's 'conv' (dt_conv_algo) for the models these functions build; auto unless a
 * test of the convolution paths sets it. */
extern int dt_test_conv;

/* Builds a model with input shape 'input' (YAML flow list, e.g. "[2, 5, 5]") and the single
 * layer 'layer' (YAML flow mapping), fills parameters and B inputs with random values, and
 * compares backward's input and parameter gradients of L = sum(y * r) against central
 * differences. Returns the worst error |a - n| / max(1, |a|, |n|) scaled so that 1.0 is the
 * tolerance edge (pass when <= 1). 'training' selects the training forward (dropout masks
 * stay fixed: they are a function of the step, which does not change). */
double dt_gradcheck(const char *input, const char *layer, int B, int training);
/* The same through the layer's split backward (backward_input, then backward_weight from the dy
 * it rewrote); INFINITY when the layer has none. */
double dt_gradcheck_split(const char *input, const char *layer, int B, int training);

/* Runs the layer's combined backward and its two halves on the same forward (threads CPU threads,
 * random values; dx wanted or not) and counts the floats of dx, the rewritten dy and the parameter
 * gradients that differ in any bit (printing the first). -1 when the layer cannot be built or has
 * no split. */
long dt_split_mismatch(const char *input, const char *layer, int B, int threads, int want_dx);

/* Asserts dt_split_mismatch is 0 with and without dx (check.h's ck_assert_msg). */
#define DT_SPLIT_SAME(input, layer, B, threads) do { \
        for (int want_dx_ = 0; want_dx_ < 2; want_dx_++) { \
                long n_ = dt_split_mismatch(input, layer, B, threads, want_dx_); \
                ck_assert_msg(n_ == 0, "%s, %d thread(s), dx %s: %ld floats differ from the combined backward", \
                              layer, threads, want_dx_ ? "wanted" : "not wanted", n_); \
        } } while (0)

/* The same for a whole graph (layers_yaml: the spec's layer list, "  - {...}" lines): backward
 * through every layer, gradients summed where a tensor has several readers, against central
 * differences of L = sum(y * r) over the last layer's output; dx is the graph input's gradient. */
double dt_gradcheck_graph(const char *input, const char *layers_yaml, int B);

/* A whole model spec text with a synthetic source, for tests that need one. */
int dt_test_spec_file(char *path, size_t len, const char *input, const char *layers_yaml, const char *extra);

#endif
