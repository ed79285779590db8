/*
 * Far memory on the rack through UMap's API: umap with UMAP_ANONYMOUS and
 * fd -1 (farmem's store beside UMap's file store), larger than the
 * buffer; threads write their stripes, every word is checked back in a
 * scattered order, before and after umap_flush, and a second round of
 * writes over pages that went to the rack and back.
 */
#include <umap/umap.h>

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define THREADS 4
#define STRIDE 1000003ULL

static uint64_t *m;
static size_t words;

static uint64_t pattern(uint64_t i, uint64_t seed) {
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ULL ^ seed;
    x ^= x >> 29;
    return x * 0x94D049BB133111EBULL;
}

struct job {
    int t;
    uint64_t seed;
    int write;
};

/* Writers go in order; readers visit the pages in a scattered order
 * (each once) and check their stripe of each: a fault per page, not per
 * word. */
static void *worker(void *arg) {
    struct job *j = arg;
    size_t pages = words / 512;
    for (size_t k = 0; k < pages; k++) {
        size_t page = j->write ? k : (size_t)((k * STRIDE + 31ULL * j->t) % pages);
        for (size_t w = page * 512 + j->t; w < (page + 1) * 512; w += THREADS) {
            if (j->write) {
                m[w] = pattern(w, j->seed);
            } else if (m[w] != pattern(w, j->seed)) {
                fprintf(stderr, "FAIL word %zu is %llx, not %llx\n", w,
                        (unsigned long long)m[w], (unsigned long long)pattern(w, j->seed));
                exit(1);
            }
        }
    }
    return NULL;
}

static void round_trip(uint64_t seed, int write) {
    pthread_t th[THREADS];
    struct job jobs[THREADS];
    for (int t = 0; t < THREADS; t++) {
        jobs[t] = (struct job){t, seed, write};
        pthread_create(&th[t], NULL, worker, &jobs[t]);
    }
    for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s PAGES\n", argv[0]);
        return 2;
    }
    size_t bytes = strtoull(argv[1], NULL, 10) * 4096;
    words = bytes / 8;
    m = umap(NULL, bytes, PROT_READ | PROT_WRITE, UMAP_PRIVATE | UMAP_ANONYMOUS, -1, 0);
    if (m == UMAP_FAILED) {
        fprintf(stderr, "umap: %s\n", strerror(errno));
        return 1;
    }
    for (size_t w = 0; w < words; w += 4096)
        if (m[w] != 0) {
            fprintf(stderr, "FAIL fresh far memory is not zero at word %zu\n", w);
            return 1;
        }
    round_trip(1, 1);
    round_trip(1, 0);
    if (umap_flush() != 0) {
        fprintf(stderr, "umap_flush: %s\n", strerror(errno));
        return 1;
    }
    round_trip(1, 0);
    round_trip(2, 1);
    round_trip(2, 0);
    if (uunmap(m, bytes) != 0) {
        fprintf(stderr, "uunmap: %s\n", strerror(errno));
        return 1;
    }
    printf("far: %zu words verified\n", words);
    return 0;
}
