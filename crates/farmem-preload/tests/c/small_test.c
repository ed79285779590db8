/* Small blocks for farmem-preload: hundreds of thousands of blocks of 1 to
 * 300 bytes (and some of 4-6 KiB) from two threads at once, written,
 * checked after the rest were written, freed in part and replaced by
 * calloc (which must read zero, also where a freed block was), grown and
 * shrunk by realloc within and across size classes, and aligned blocks.
 * Prints checksums on stdout and "ok"; exits non-zero on any mismatch.
 * Output must be the same with and without farmem.
 * Usage: small_test [blocks per thread] */
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

static void fail(const char *what, size_t i) {
    fprintf(stderr, "small_test: MISMATCH in %s at %zu\n", what, i);
    __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
}

static uint8_t byte_of(uint64_t seed, size_t i) {
    uint64_t x = seed * 0x9e3779b97f4a7c15ULL + i;
    x ^= x >> 31; x *= 0xbf58476d1ce4e5b9ULL; x ^= x >> 29;
    return (uint8_t)x;
}

static void fill(uint8_t *p, size_t n, uint64_t seed) {
    for (size_t i = 0; i < n; i++) p[i] = byte_of(seed, i);
}

static uint64_t check(const uint8_t *p, size_t n, uint64_t seed, const char *what, size_t at) {
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] != byte_of(seed, i)) { fail(what, at); return sum; }
        sum = sum * 31 + p[i];
    }
    return sum;
}

/* A block's size: mostly small, one in 64 a few KiB (sqlite's page-cache
 * entries are a page and a header). */
static size_t size_of_block(size_t i) {
    return i % 64 == 63 ? 4096 + (i * 37) % 2048 : 1 + (i * 7919) % 300;
}

struct job { size_t blocks; uint64_t id; uint64_t sum; };

static void *worker(void *arg) {
    struct job *j = arg;
    size_t n = j->blocks;
    uint8_t **b = malloc(n * sizeof *b);
    size_t *len = malloc(n * sizeof *len);
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
        len[i] = size_of_block(i);
        b[i] = malloc(len[i]);
        if (!b[i]) { fail("malloc", i); return 0; }
        if (malloc_usable_size(b[i]) < len[i]) fail("usable size", i);
        if ((uintptr_t)b[i] % 16) fail("alignment", i);
        fill(b[i], len[i], j->id * n + i);
    }
    for (size_t i = 0; i < n; i++) sum += check(b[i], len[i], j->id * n + i, "first pass", i);
    /* Every third block freed; calloc takes its place and must read zero. */
    for (size_t i = 0; i < n; i += 3) free(b[i]);
    for (size_t i = 0; i < n; i += 3) {
        b[i] = calloc(1, len[i]);
        if (!b[i]) { fail("calloc", i); return 0; }
        for (size_t k = 0; k < len[i]; k++) if (b[i][k]) { fail("calloc zero", i); break; }
        fill(b[i], len[i], 7 * n + j->id * n + i);
    }
    /* realloc: a few bytes more (often the same class), twice the size
     * (another class), and back to a third (a smaller one). */
    for (size_t i = 1; i < n; i += 3) {
        size_t want[3] = {len[i] + 3, 2 * len[i] + 1, len[i] / 3 + 1};
        for (int k = 0; k < 3; k++) {
            size_t keep = want[k] < len[i] ? want[k] : len[i];
            uint8_t *q = realloc(b[i], want[k]);
            if (!q) { fail("realloc", i); return 0; }
            check(q, keep, j->id * n + i, "realloc kept", i);
            fill(q, keep, j->id * n + i);
            b[i] = q;
            len[i] = keep;
        }
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t seed = i % 3 == 0 ? 7 * n + j->id * n + i : j->id * n + i;
        sum += check(b[i], len[i], seed, "second pass", i);
        free(b[i]);
    }
    free(b);
    free(len);
    j->sum = sum;
    return 0;
}

int main(int argc, char **argv) {
    size_t blocks = argc > 1 ? strtoul(argv[1], 0, 10) : 100000;
    enum { T = 2 };
    pthread_t th[T];
    struct job jobs[T];
    for (int t = 0; t < T; t++) {
        jobs[t] = (struct job){blocks, (uint64_t)t + 1, 0};
        pthread_create(&th[t], 0, worker, &jobs[t]);
    }
    for (int t = 0; t < T; t++) {
        pthread_join(th[t], 0);
        printf("thread %d checksum %016llx\n", t, (unsigned long long)jobs[t].sum);
    }
    /* Aligned small blocks: posix_memalign and aligned_alloc keep theirs. */
    for (size_t a = 32; a <= 4096; a *= 2) {
        void *p = 0;
        if (posix_memalign(&p, a, 40) || (uintptr_t)p % a) fail("posix_memalign", a);
        uint8_t *q = aligned_alloc(a, a);
        if (!q || (uintptr_t)q % a) fail("aligned_alloc", a);
        memset(p, 1, 40);
        if (q) memset(q, 2, a);
        free(p);
        free(q);
    }
    printf("%s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
