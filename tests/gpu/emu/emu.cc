/* tests/gpu/emu/emu.cc - emu.h's launch: blockDim.x * blockDim.y threads, each walking every block
 * and meeting the others at a barrier after each. */
#include "emu.h"
#include "fake/cuda_runtime_api.h"
#include <vector>
thread_local dim3 threadIdx, blockIdx;
dim3 blockDim, gridDim;
pthread_barrier_t emu_bar;
struct arg { int tid; std::function<void()> *f; };
static void *worker(void *p)
{
        arg *a = (arg *)p;
        threadIdx = dim3(a->tid % blockDim.x, a->tid / blockDim.x);
        for (unsigned b = 0; b < gridDim.x; b++) {
                blockIdx = dim3(b);
                (*a->f)();
                pthread_barrier_wait(&emu_bar);
        }
        return NULL;
}
void emu_launch(dim3 g, dim3 b, std::function<void()> f)
{
        gridDim = g; blockDim = b;
        int n = b.x * b.y;
        pthread_barrier_init(&emu_bar, NULL, n);
        std::vector<pthread_t> t(n);
        std::vector<arg> a(n);
        for (int i = 0; i < n; i++) { a[i] = { i, &f }; pthread_create(&t[i], NULL, worker, &a[i]); }
        for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
        pthread_barrier_destroy(&emu_bar);
}
extern "C" cudaError_t cudaGetLastError(void) { return 0; }
