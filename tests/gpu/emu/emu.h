/* tests/gpu/emu/emu.h - the CUDA kernel language on the host, for checking kernels without a GPU:
 * a launch runs one pthread per thread of the block and walks the blocks in turn, __syncthreads is a
 * barrier of the block's threads (a barrier not every thread reaches hangs, which run.sh times out),
 * __shared__ is one static array shared by the block. Launches are rewritten by run.sh. */
#include <pthread.h>
#include <math.h>
#include <stdint.h>
#include <functional>
struct dim3 { unsigned x, y, z; dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {} };
extern thread_local dim3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;
extern pthread_barrier_t emu_bar;
#define __global__
#define __device__
#define __shared__ static
static inline void __syncthreads(void) { pthread_barrier_wait(&emu_bar); }
void emu_launch(dim3 g, dim3 b, std::function<void()> f);
#define __CUDACC__ 1
