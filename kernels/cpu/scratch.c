/* scratch.c: the per-thread GEMM scratch of scratch.h. */
#include "kernels/cpu/scratch.h"

#include <pthread.h>
#include <stdlib.h>

typedef struct {
    char *p;
    size_t cap;
} tls_buf;

static pthread_key_t key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static int key_ok;

static void tls_free(void *v)
{
    tls_buf *t = v;
    free(t->p);
    free(t);
}

static void key_make(void)
{
    key_ok = pthread_key_create(&key, tls_free) == 0;
}

char *kc_scratch(size_t bytes)
{
    pthread_once(&key_once, key_make);
    if (!key_ok)
        return NULL;
    tls_buf *t = pthread_getspecific(key);
    if (!t) {
        if (!(t = calloc(1, sizeof *t)))
            return NULL;
        if (pthread_setspecific(key, t) != 0) {
            free(t);
            return NULL;
        }
    }
    if (t->cap < bytes) {
        const size_t cap = (bytes + 4095) & ~(size_t)4095;
        char *p = aligned_alloc(64, cap);
        if (!p)
            return NULL;
        free(t->p);
        t->p = p;
        t->cap = cap;
    }
    return t->p;
}
