/* Allocation torture for farmem-preload: threads allocating at once, large
 * malloc and mmap blocks, many small ones, realloc up and down, calloc
 * zeros, munmap, fork+exec. Prints checksums on stdout; exits non-zero on
 * any mismatch. Output must be the same with and without farmem.
 * Usage: alloc_test [blocks] [MiB per block] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static int failures;

static void fail(const char *what, size_t i) {
    fprintf(stderr, "alloc_test: MISMATCH in %s at %zu\n", what, i);
    failures++;
}

static uint64_t mix(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33;
    return x;
}

static void fill(uint64_t *p, size_t words, uint64_t seed) {
    for (size_t i = 0; i < words; i++) p[i] = mix(seed * 1000003 + i);
}

static uint64_t check(const uint64_t *p, size_t words, uint64_t seed, const char *what) {
    uint64_t sum = 0;
    for (size_t i = 0; i < words; i++) {
        if (p[i] != mix(seed * 1000003 + i)) { fail(what, i); return sum; }
        sum += p[i];
    }
    return sum;
}

/* Threads allocating, filling, checking and freeing large blocks at once
 * (the first of them races the runtime's start). */
static void *worker(void *arg) {
    uint64_t id = (uintptr_t)arg, sum = 0;
    size_t words = (3 << 20) / 8;
    for (int round = 0; round < 6; round++) {
        uint64_t *p = round % 2 ? calloc(words, 8) : malloc(words * 8);
        if (!p) { fail("thread alloc", id); return 0; }
        fill(p, words, 1000 * id + round);
        sum += check(p, words, 1000 * id + round, "thread block");
        free(p);
    }
    return (void *)(uintptr_t)sum;
}

static uint64_t threads_phase(void) {
    enum { T = 4 };
    pthread_t th[T];
    uint64_t total = 0;
    for (uintptr_t i = 0; i < T; i++) pthread_create(&th[i], 0, worker, (void *)i);
    for (int i = 0; i < T; i++) { void *r; pthread_join(th[i], &r); total += (uintptr_t)r; }
    return total;
}

int main(int argc, char **argv) {
    size_t blocks = argc > 1 ? strtoul(argv[1], 0, 10) : 8;
    size_t mib = argc > 2 ? strtoul(argv[2], 0, 10) : 32;
    size_t bytes = mib << 20, words = bytes / 8;
    uint64_t total = 0;

    printf("threads checksum %016llx\n", (unsigned long long)threads_phase());

    /* large malloc and mmap blocks, alternating */
    uint64_t **big = calloc(blocks, sizeof *big);
    for (size_t b = 0; b < blocks; b++) {
        if (b % 2 == 0) big[b] = malloc(bytes);
        else {
            big[b] = mmap(0, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (big[b] == MAP_FAILED) big[b] = 0;
            else for (size_t i = 0; i < words; i += 512) if (big[b][i]) { fail("mmap zero", i); break; }
        }
        if (!big[b]) { fprintf(stderr, "alloc_test: allocation failed\n"); return 2; }
        fill(big[b], words, b + 1);
    }
    /* many small ones in between */
    enum { SMALL = 20000 };
    uint64_t **small = malloc(SMALL * sizeof *small);
    for (size_t i = 0; i < SMALL; i++) {
        size_t n = 1 + i % 61;
        small[i] = malloc(n * 8);
        fill(small[i], n, 100000 + i);
    }
    for (size_t b = 0; b < blocks; b++) total += check(big[b], words, b + 1, "big block");
    for (size_t i = 0; i < SMALL; i++) {
        total += check(small[i], 1 + i % 61, 100000 + i, "small block");
        free(small[i]);
    }
    free(small);
    printf("big+small checksum %016llx\n", (unsigned long long)total);

    /* realloc bigger, then smaller, keeping contents */
    uint64_t *r = realloc(big[0], 2 * bytes);
    if (!r) return 2;
    total = check(r, words, 1, "realloc grow");
    fill(r + words, words, 77);
    total += check(r + words, words, 77, "realloc grown tail");
    r = realloc(r, bytes / 4);
    if (!r) return 2;
    total += check(r, words / 4, 1, "realloc shrink");
    big[0] = r;
    /* a small block grown past any threshold */
    uint64_t *g = malloc(4096);
    fill(g, 512, 55);
    g = realloc(g, 3 * bytes / 2);
    total += check(g, 512, 55, "realloc small to large");
    free(g);
    printf("realloc checksum %016llx\n", (unsigned long long)total);

    /* free and munmap half, calloc/mmap into reused space must read zero */
    for (size_t b = 1; b < blocks; b += 2) { munmap(big[b], bytes); big[b] = 0; }
    for (size_t b = 2; b < blocks; b += 2) { free(big[b]); big[b] = 0; }
    for (int round = 0; round < 2; round++) {
        uint64_t *z = calloc(words, 8);
        uint64_t *m = mmap(0, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (!z || m == MAP_FAILED) return 2;
        for (size_t i = 0; i < words; i++) if (z[i] || m[i]) { fail("calloc/mmap zero", i); break; }
        fill(z, words, 300 + round);
        fill(m, words, 400 + round);
        total += check(z, words, 300 + round, "calloc fill") + check(m, words, 400 + round, "mmap fill");
        free(z);
        munmap(m, bytes);
    }
    printf("zero checksum %016llx\n", (unsigned long long)total);

    /* fork: the child execs (true), the parent's data is untouched */
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) { execlp("true", "true", (char *)0); _exit(127); }
    int st = 0;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) fail("fork+exec child", 0);
    total = check(big[0], words / 4, 1, "after fork");
    printf("after fork checksum %016llx\n", (unsigned long long)total);
    free(big[0]);
    free(big);
    printf("%s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
