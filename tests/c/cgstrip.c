/* cg-strip: a program whose functions a profile must name after it is stripped of its
 * symbol table (built, stripped and given separate debug information three ways by
 * tests/build.rs: a build-id debug file, a .gnu_debuglink, MiniDebugInfo).
 *
 * `cg-strip MS`: works for MS milliseconds, about three quarters of its time in
 * `strip_heavy` and a quarter in `strip_light`, both static (so no dynamic symbol names
 * them), called from `strip_driver`. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

__attribute__((noinline)) static long strip_heavy(long n) {
    volatile long x = 0;
    for (long i = 0; i < 3 * n; i++)
        x += i ^ (x >> 3);
    return x;
}

__attribute__((noinline)) static long strip_light(long n) {
    volatile long x = 0;
    for (long i = 0; i < n; i++)
        x += i ^ (x >> 3);
    return x;
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

__attribute__((noinline)) static long strip_driver(long ms) {
    double until = now_ms() + ms;
    long sum = 0;
    while (now_ms() < until)
        sum += strip_heavy(100000) + strip_light(100000);
    return sum;
}

int main(int argc, char **argv) {
    long ms = argc > 1 ? atol(argv[1]) : 1000;
    long sum = strip_driver(ms);
    printf("done %ld\n", sum & 1);
    return 0;
}
