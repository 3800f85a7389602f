/* tests/gpu/emu/fake/cuda_runtime_api.h - the few CUDA runtime names that attn.c and kernels_attn.cu
 * use, for their host emulation (tests/gpu/emu/run.sh); nothing here touches a device. */
#ifndef FAKE_CUDA_RT
#define FAKE_CUDA_RT
#include <stddef.h>
typedef int cudaError_t;
#define cudaSuccess 0
static inline const char *cudaGetErrorString(cudaError_t e) { (void)e; return "fake"; }
#ifdef __cplusplus
extern "C" {
#endif
cudaError_t cudaGetLastError(void);
#ifdef __cplusplus
}
#endif
#endif
