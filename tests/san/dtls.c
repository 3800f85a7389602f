/* tests/san/dtls.c - LeakSanitizer against a dlopen'd module's dynamic TLS, for tests/cli/san-dtls.sh.
 * `dtls MODULE hold` loads MODULE (tests/san/dtls_mod.c), has glibc put this thread's block of its
 * TLS at a page offset of 16, where the runtimes of GCC 12-13 and LLVM 14-16 take it for a glibc 2.19
 * block and read the 16 bytes before it (AddressSanitizer's chunk header) as its range, and stores
 * in it the only pointer to a 64-byte heap block; `dtls MODULE leak` also loses 77 bytes. Exit: 0
 * when LeakSanitizer finds nothing, its own status when it reports or fails; 77 without
 * AddressSanitizer; 99 when the block could not be placed. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#define HAVE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HAVE_ASAN 1
#endif
#endif

#define BLOCK 32        /* the module's TLS size: glibc mallocs exactly this for a thread's block */
#define TRIES 100000

#ifndef HAVE_ASAN
int main(void)
{
        puts("not built with AddressSanitizer (configure --enable-sanitizers)");
        return 77;
}
#else
const char *__asan_default_options(void);
/* no quarantine (neither the process's nor the thread's): a freed chunk is the next one malloc
 * returns for its size, so the chunk this program picks is the one glibc gets for the block; the
 * environment's ASAN_OPTIONS still apply on top */
const char *__asan_default_options(void)
{
        return "quarantine_size_mb=0:thread_local_quarantine_size_kb=0";
}

/* 77 bytes that nothing points to once the thread has ended: a leak LeakSanitizer must report.
 * A thread of its own: a stale copy of the pointer on main's stack or in a register would hide it,
 * and an ended thread's stack and registers are not scanned. */
static void *dt_dtls_lose_block(void *arg)
{
        (void)arg;
        void *volatile p = malloc(77);
        memset(p, 1, 77);
        p = NULL;
        return NULL;
}

int main(int argc, char **argv)
{
        if (argc != 3 || (strcmp(argv[2], "hold") && strcmp(argv[2], "leak"))) {
                fprintf(stderr, "usage: %s MODULE hold|leak\n", argv[0]);
                return 99;
        }
        void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
        void **(*get)(void) = h ? (void **(*)(void))dlsym(h, "dt_dtls_get") : NULL;
        if (!get) {
                fprintf(stderr, "dtls: %s\n", dlerror());
                return 99;
        }
        /* walk the size class up to a chunk at page offset 16, then free it for glibc to take */
        void **kept = malloc(TRIES * sizeof *kept);
        int n = 0;
        if (!kept)
                return 99;
        void *pick = malloc(BLOCK);
        while (((uintptr_t)pick & 4095) != 16 && n < TRIES) {
                kept[n++] = pick;
                pick = malloc(BLOCK);
        }
        uintptr_t want = (uintptr_t)pick;
        free(pick);
        void **slot = get();    /* this thread's first use: ld.so mallocs the block */
        for (int i = 0; i < n; i++)
                free(kept[i]);
        free(kept);
        if ((uintptr_t)slot != want) {
                fprintf(stderr, "dtls: the TLS block is at %p, not in the chunk at %#lx\n", (void *)slot,
                        (unsigned long)want);
                return 99;
        }
        printf("the module's TLS block is at page offset %u\n", (unsigned)((uintptr_t)slot & 4095));
        fflush(stdout);         /* a crash in LeakSanitizer leaves without flushing */
        slot[0] = malloc(64);   /* reachable only through the module's TLS */
        memset(slot[0], 2, 64);
        pthread_t t;
        if (!strcmp(argv[2], "leak") && (pthread_create(&t, NULL, dt_dtls_lose_block, NULL) || pthread_join(t, NULL))) {
                fprintf(stderr, "dtls: cannot start a thread\n");
                return 99;
        }
        return 0;       /* LeakSanitizer runs at exit */
}
#endif
