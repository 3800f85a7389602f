/* tests/gpu/emu/fake/cudnn.h - the cuDNN names cuda_priv.h mentions, for the host emulation. */
#ifndef FAKE_CUDNN
#define FAKE_CUDNN
typedef void *cudnnHandle_t;
typedef int cudnnStatus_t;
#define CUDNN_STATUS_SUCCESS 0
static inline const char *cudnnGetErrorString(cudnnStatus_t s) { (void)s; return "fake"; }
#endif
