/* The _FORTIFY_SOURCE forms of the I/O calls (__read_chk, __pread_chk,
 * __fread_chk, __recv_chk: what distributions build with, used when the
 * compiler knows a buffer's size but not the length read into it) on far
 * buffers pushed out of the local cache. Prints "ok"; exits with the
 * failing step's number. Usage: fortify_test (an argument overrides the
 * length, which keeps it unknown to the compiler). */
#undef _FORTIFY_SOURCE
#define _FORTIFY_SOURCE 3
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#define N (24 << 20)
static char *src;
static void *sender(void *arg) {
    int fd = *(int *)arg;
    for (size_t off = 0; off < N;) {
        ssize_t s = send(fd, src + off, N - off, 0);
        if (s <= 0) exit(20);
        off += (size_t)s;
    }
    return 0;
}
static void push_out(char *c) { for (size_t i = 0; i < (48 << 20); i += 4096) c[i]++; }
int main(int argc, char **argv) {

    size_t len = argc > 1 ? (size_t)atol(argv[1]) : N; /* unknown to the compiler: the _chk calls */
    char *a = malloc(N), *b = malloc(N), *c = malloc(48 << 20);
    if (!a || !b || !c) return 90;
    for (size_t i = 0; i < N; i++) a[i] = (char)(i * 2654435761u >> 11);
    memset(b, 0, N);
    memset(c, 0, 48 << 20);
    char path[] = "/tmp/farmem-fortify-XXXXXX";
    int fd = mkstemp(path);
    unlink(path);
    if (write(fd, a, N) != N) return 1;
    push_out(c);
    if (pread(fd, b, len, 0) != N || memcmp(a, b, N)) return 2;
    memset(b, 0, N); push_out(c);
    lseek(fd, 0, SEEK_SET);
    if (read(fd, b, len) != N || memcmp(a, b, N)) return 3;
    memset(b, 0, N); push_out(c);
    FILE *f = fdopen(dup(fd), "r");
    rewind(f);
    if (fread(b, 1, len, f) != N || memcmp(a, b, N)) return 4;
    memset(b, 0, N); push_out(c);
    int sv[2];
    socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
    src = a;
    pthread_t t;
    pthread_create(&t, 0, sender, &sv[0]);
    if (recv(sv[1], b, len, MSG_WAITALL) != N || memcmp(a, b, N)) return 5;
    pthread_join(t, 0);
    printf("ok\n");
    return 0;
}
