/*
 * libfarmem's C suite: UMap's API used only through <umap/umap.h>.
 *
 * Readers and writers, sequential and random, on several threads, over a
 * file larger than the buffer (the test sets UMAP_BUFSIZE), each checked
 * against the pattern it must see; flushes and unmaps checked by reading
 * the file itself, then the map again. Prints "PASS name" per test and
 * exits non-zero at the first wrong word, naming it.
 */
#include <umap/umap.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define PAGE 4096UL
#define THREADS 4

static char path[4096];
static size_t file_pages;
static size_t words;

static uint64_t pattern(uint64_t i, uint64_t seed) {
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ULL ^ seed;
    x ^= x >> 31;
    return x * 0xBF58476D1CE4E5B9ULL;
}

#define CHECK(cond, ...)                                                  \
    do {                                                                  \
        if (!(cond)) {                                                    \
            fprintf(stderr, "FAIL %s:%d: ", __func__, __LINE__);          \
            fprintf(stderr, __VA_ARGS__);                                 \
            fprintf(stderr, "\n");                                        \
            exit(1);                                                      \
        }                                                                 \
    } while (0)

static int open_file(int flags) {
    int fd = open(path, flags);
    CHECK(fd >= 0, "open %s: %s", path, strerror(errno));
    return fd;
}

/* The file's words, read with pread: what reached the store. */
static void check_file(uint64_t seed, size_t first, size_t count) {
    int fd = open_file(O_RDONLY);
    uint64_t *buf = malloc(PAGE);
    for (size_t w = first; w < first + count; w += PAGE / 8) {
        size_t n = PAGE / 8;
        if (w + n > first + count) n = first + count - w;
        ssize_t got = pread(fd, buf, n * 8, (off_t)(w * 8));
        CHECK(got == (ssize_t)(n * 8), "pread at word %zu: %zd", w, got);
        for (size_t k = 0; k < n; k++)
            CHECK(buf[k] == pattern(w + k, seed), "file word %zu is %llx, not %llx", w + k,
                  (unsigned long long)buf[k], (unsigned long long)pattern(w + k, seed));
    }
    free(buf);
    close(fd);
}

static void write_file(uint64_t seed) {
    int fd = open_file(O_RDWR | O_CREAT | O_TRUNC);
    uint64_t *buf = malloc(PAGE);
    for (size_t w = 0; w < words; w += PAGE / 8) {
        for (size_t k = 0; k < PAGE / 8; k++) buf[k] = pattern(w + k, seed);
        CHECK(pwrite(fd, buf, PAGE, (off_t)(w * 8)) == (ssize_t)PAGE, "pwrite");
    }
    free(buf);
    close(fd);
}

static uint64_t *map_file(int prot, int *fd_out) {
    int fd = open_file(prot & PROT_WRITE ? O_RDWR : O_RDONLY);
    uint64_t *m = umap(NULL, words * 8, prot, UMAP_PRIVATE, fd, 0);
    CHECK(m != UMAP_FAILED, "umap: %s", strerror(errno));
    *fd_out = fd;
    return m;
}

static void unmap_file(uint64_t *m, int fd) {
    CHECK(uunmap(m, words * 8) == 0, "uunmap: %s", strerror(errno));
    close(fd);
}

struct job {
    uint64_t *m;
    int t;
    uint64_t seed;
    int write;
    int random;
};

/* A prime stride: k -> k * STRIDE mod n visits every one of n < STRIDE
 * words once, in a scattered order. */
#define STRIDE 1000003ULL

/* Thread t's words are those with w % THREADS == t; visited in order or
 * in a scattered permutation of the stripe, each once. */
static void *worker(void *arg) {
    struct job *j = arg;
    size_t mine = (words - j->t + THREADS - 1) / THREADS;
    CHECK(mine < STRIDE, "a stripe of %zu words is too long for the stride", mine);
    for (size_t k = 0; k < mine; k++) {
        size_t idx = j->random ? (size_t)((k * STRIDE + 7919ULL * j->t) % mine) : k;
        size_t w = idx * THREADS + j->t;
        if (j->write)
            j->m[w] = pattern(w, j->seed);
        else
            CHECK(j->m[w] == pattern(w, j->seed), "thread %d: word %zu is %llx", j->t, w,
                  (unsigned long long)j->m[w]);
    }
    return NULL;
}

static void run_threads(uint64_t *m, uint64_t seed, int write, int random) {
    pthread_t th[THREADS];
    struct job jobs[THREADS];
    for (int t = 0; t < THREADS; t++) {
        jobs[t] = (struct job){m, t, seed, write, random};
        CHECK(pthread_create(&th[t], NULL, worker, &jobs[t]) == 0, "pthread_create");
    }
    for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
}

static void test_config(void) {
    const char *buf = getenv("UMAP_BUFSIZE");
    CHECK(buf != NULL, "the suite runs with UMAP_BUFSIZE set");
    CHECK(umapcfg_get_max_pages_in_buffer() == strtoull(buf, NULL, 10), "buffer %llu pages",
          (unsigned long long)umapcfg_get_max_pages_in_buffer());
    CHECK(umapcfg_get_umap_page_size() == PAGE, "page size");
    CHECK(umapcfg_get_system_page_size() == (long)PAGE, "system page size");
    CHECK(umapcfg_get_num_fillers() >= 1, "fillers");
    CHECK(umapcfg_get_evict_low_water_threshold() < umapcfg_get_evict_high_water_threshold(),
          "watermarks");
    printf("PASS config\n");
}

static void test_sequential_read(void) {
    int fd;
    uint64_t *m = map_file(PROT_READ, &fd);
    for (size_t w = 0; w < words; w++)
        CHECK(m[w] == pattern(w, 1), "word %zu is %llx", w, (unsigned long long)m[w]);
    unmap_file(m, fd);
    printf("PASS sequential_read\n");
}

static void test_random_read_threads(void) {
    int fd;
    uint64_t *m = map_file(PROT_READ, &fd);
    run_threads(m, 1, 0, 1);
    unmap_file(m, fd);
    printf("PASS random_read_threads\n");
}

/* Writers fill the map; umap_flush must put every word in the file while
 * the region stays mapped and readable. */
static void test_sequential_write_flush_reread(void) {
    int fd;
    uint64_t *m = map_file(PROT_READ | PROT_WRITE, &fd);
    run_threads(m, 2, 1, 0);
    CHECK(umap_flush() == 0, "umap_flush: %s", strerror(errno));
    check_file(2, 0, words);
    run_threads(m, 2, 0, 1);
    unmap_file(m, fd);
    printf("PASS sequential_write_flush_reread\n");
}

/* Random writers, then uunmap alone (no flush) must write back. */
static void test_random_write_unmap_remap(void) {
    int fd;
    uint64_t *m = map_file(PROT_READ | PROT_WRITE, &fd);
    run_threads(m, 3, 1, 1);
    unmap_file(m, fd);
    check_file(3, 0, words);
    m = map_file(PROT_READ, &fd);
    run_threads(m, 3, 0, 0);
    unmap_file(m, fd);
    printf("PASS random_write_unmap_remap\n");
}

/* A window from page 3 of a length that ends mid-page: it sees the file
 * from there, its writes land there, and the file neither grows nor
 * changes past the window's end. */
static void test_offset_window(void) {
    write_file(4);
    struct stat before;
    CHECK(stat(path, &before) == 0, "stat");
    int fd = open_file(O_RDWR);
    size_t first = 3 * PAGE / 8, count = 1000;
    uint64_t *m = umap(NULL, count * 8, PROT_READ | PROT_WRITE, UMAP_PRIVATE, fd, 3 * PAGE);
    CHECK(m != UMAP_FAILED, "umap at an offset: %s", strerror(errno));
    for (size_t k = 0; k < count; k++)
        CHECK(m[k] == pattern(first + k, 4), "window word %zu", k);
    for (size_t k = 0; k < count; k++) m[k] = ~m[k];
    CHECK(uunmap(m, count * 8) == 0, "uunmap");
    close(fd);
    fd = open_file(O_RDONLY);
    uint64_t w;
    CHECK(pread(fd, &w, 8, (off_t)((first + 5) * 8)) == 8, "pread");
    CHECK(w == ~pattern(first + 5, 4), "a window write reached the file");
    CHECK(pread(fd, &w, 8, (off_t)((first + count) * 8)) == 8, "pread");
    CHECK(w == pattern(first + count, 4), "the word after the window is untouched");
    close(fd);
    struct stat after;
    CHECK(stat(path, &after) == 0 && after.st_size == before.st_size, "the file kept its size");
    printf("PASS offset_window\n");
}

/* Two regions at once, of two files: no word of one shows in the other. */
static void test_two_files(void) {
    char other[4200];
    snprintf(other, sizeof other, "%s.b", path);
    int fa = open_file(O_RDWR);
    int fb = open(other, O_RDWR | O_CREAT | O_TRUNC, 0600);
    CHECK(fb >= 0 && ftruncate(fb, (off_t)(words * 8)) == 0, "second file");
    uint64_t *a = umap(NULL, words * 8, PROT_READ | PROT_WRITE, UMAP_PRIVATE, fa, 0);
    uint64_t *b = umap(NULL, words * 8, PROT_READ | PROT_WRITE, UMAP_PRIVATE, fb, 0);
    CHECK(a != UMAP_FAILED && b != UMAP_FAILED, "umap two files");
    for (size_t w = 0; w < words; w++) {
        a[w] = pattern(w, 5);
        b[w] = pattern(w, 6);
    }
    for (size_t w = 0; w < words; w += 7) {
        CHECK(a[w] == pattern(w, 5), "file a word %zu", w);
        CHECK(b[w] == pattern(w, 6), "file b word %zu", w);
    }
    CHECK(uunmap(a, words * 8) == 0 && uunmap(b, words * 8) == 0, "uunmap");
    close(fa);
    close(fb);
    check_file(5, 0, words);
    unlink(other);
    printf("PASS two_files\n");
}

static void test_prefetch(void) {
    write_file(7);
    int fd;
    uint64_t *m = map_file(PROT_READ, &fd);
    struct umap_prefetch_item items[64];
    for (int i = 0; i < 64; i++)
        items[i].page_base_addr = (char *)m + (size_t)i * 3 % file_pages * PAGE;
    umap_prefetch(64, items);
    for (int i = 0; i < 64; i++) {
        size_t w = (size_t)i * 3 % file_pages * PAGE / 8;
        CHECK(m[w] == pattern(w, 7), "prefetched page %d", i);
    }
    unmap_file(m, fd);
    printf("PASS prefetch\n");
}

/* A forked child does not inherit a region: its touch is a SIGSEGV, never
 * a page of zeros for data still in the file. */
static void test_fork(void) {
    int fd;
    uint64_t *m = map_file(PROT_READ, &fd);
    pid_t child = fork();
    CHECK(child >= 0, "fork");
    if (child == 0) {
        volatile uint64_t x = m[words - 1];
        (void)x;
        _exit(0);
    }
    int status;
    CHECK(waitpid(child, &status, 0) == child, "waitpid");
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV, "the child's touch: status %#x",
          status);
    CHECK(m[words - 1] == pattern(words - 1, 7), "the parent's region is intact");
    unmap_file(m, fd);
    printf("PASS fork\n");
}

static void test_refusals(void) {
    int fd = open_file(O_RDWR);
    errno = 0;
    CHECK(umap(NULL, PAGE, PROT_READ, UMAP_PRIVATE, fd, 100) == UMAP_FAILED && errno == EINVAL,
          "an unaligned offset is refused");
    errno = 0;
    CHECK(umap((void *)0x10000000, PAGE, PROT_READ, UMAP_PRIVATE | UMAP_FIXED, fd, 0) ==
                  UMAP_FAILED &&
              errno == EINVAL,
          "UMAP_FIXED is refused");
    errno = 0;
    CHECK(umap(NULL, PAGE, PROT_READ, MAP_SHARED, fd, 0) == UMAP_FAILED && errno == EINVAL,
          "MAP_SHARED is refused");
    errno = 0;
    CHECK(umap(NULL, PAGE, PROT_READ, UMAP_PRIVATE, 9999, 0) == UMAP_FAILED && errno == EBADF,
          "a closed descriptor is refused");
    uint64_t pages = umapcfg_get_max_pages_in_buffer();
    umapcfg_set_max_pages_in_buffer(pages * 2);
    CHECK(umapcfg_get_max_pages_in_buffer() == pages,
          "a setter after the buffer started changes nothing");
    int x;
    errno = 0;
    CHECK(uunmap(&x, PAGE) == -1 && errno == EINVAL, "uunmap of no region is refused");
    close(fd);
    printf("PASS refusals\n");
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    CHECK(argc == 3, "usage: %s FILE PAGES", argv[0]);
    snprintf(path, sizeof path, "%s", argv[1]);
    file_pages = strtoull(argv[2], NULL, 10);
    words = file_pages * PAGE / 8;
    write_file(1);
    test_config();
    test_sequential_read();
    test_random_read_threads();
    test_sequential_write_flush_reread();
    test_random_write_unmap_remap();
    test_offset_window();
    test_two_files();
    test_prefetch();
    test_fork();
    test_refusals();
    unlink(path);
    printf("all passed\n");
    return 0;
}
