/* tests/san/dtls_mod.c - a module with one TLS variable (32 bytes, 8-aligned) for tests/san/dtls.c:
 * loaded with dlopen, so glibc gives each thread its block on first use, from malloc (dynamic TLS),
 * as it does for libdnnl.so.2 and Open MPI's components. */

/* default visibility in a -fPIC module: the general-dynamic model, through __tls_get_addr */
__thread void *dt_dtls_slot[4];

void **dt_dtls_get(void);

void **dt_dtls_get(void)
{
        return dt_dtls_slot;
}
