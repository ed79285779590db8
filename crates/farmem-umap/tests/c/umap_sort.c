/*
 * A program written against UMap's API, as its users write them: umap a
 * file of random 64-bit keys, sort it in place through the map, uunmap,
 * then check from the file itself that it is sorted and holds the same
 * keys (sum and xor). Builds with `cc umap_sort.c $(pkg-config --cflags
 * --libs farmem)`.
 */
#include <umap/umap.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int cmp(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s FILE KEYS\n", argv[0]);
        return 2;
    }
    size_t n = strtoull(argv[2], NULL, 10);
    size_t bytes = n * sizeof(uint64_t);
    int fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
        perror("open");
        return 1;
    }
    uint64_t sum = 0, xor = 0, x = 88172645463325252ULL;
    uint64_t chunk[512];
    for (size_t i = 0; i < n; i += 512) {
        size_t m = n - i < 512 ? n - i : 512;
        for (size_t k = 0; k < m; k++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            chunk[k] = x;
            sum += x;
            xor ^= x;
        }
        if (pwrite(fd, chunk, m * 8, (off_t)(i * 8)) != (ssize_t)(m * 8)) {
            perror("pwrite");
            return 1;
        }
    }

    uint64_t *keys = umap(NULL, bytes, PROT_READ | PROT_WRITE, UMAP_PRIVATE, fd, 0);
    if (keys == UMAP_FAILED) {
        fprintf(stderr, "umap: %s\n", strerror(errno));
        return 1;
    }
    qsort(keys, n, sizeof(uint64_t), cmp);
    if (uunmap(keys, bytes) != 0) {
        fprintf(stderr, "uunmap: %s\n", strerror(errno));
        return 1;
    }

    uint64_t prev = 0, sum2 = 0, xor2 = 0;
    for (size_t i = 0; i < n; i += 512) {
        size_t m = n - i < 512 ? n - i : 512;
        if (pread(fd, chunk, m * 8, (off_t)(i * 8)) != (ssize_t)(m * 8)) {
            perror("pread");
            return 1;
        }
        for (size_t k = 0; k < m; k++) {
            if (chunk[k] < prev) {
                fprintf(stderr, "not sorted at key %zu\n", i + k);
                return 1;
            }
            prev = chunk[k];
            sum2 += chunk[k];
            xor2 ^= chunk[k];
        }
    }
    close(fd);
    if (sum != sum2 || xor != xor2) {
        fprintf(stderr, "keys changed: sum %llx/%llx xor %llx/%llx\n", (unsigned long long)sum,
                (unsigned long long)sum2, (unsigned long long)xor, (unsigned long long)xor2);
        return 1;
    }
    printf("sorted %zu keys in place, checksum %016llx\n", n, (unsigned long long)(sum ^ xor));
    return 0;
}
