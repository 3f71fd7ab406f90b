/* The source-line test's program (tests/tests/symbols.rs): built with -O0 -g, so that
 * every function keeps its frame pointer. cg_lines_leaf is a function of its own;
 * cg_lines_inner is inlined into cg_lines_outer (always_inline). The tests find the lines
 * by the LINE: markers, so that editing this file keeps them true. Argument: milliseconds
 * of work for each of the two (default 400). */
#include <stdlib.h>
#include <time.h>

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

volatile unsigned long sink;

__attribute__((noinline)) unsigned long cg_lines_leaf(unsigned long n) {
    unsigned long acc = 1;
    for (unsigned long i = 0; i < n; i++) acc = acc * 2862933555777941757ul + i; /* LINE:leaf */
    return acc;
}

static inline __attribute__((always_inline)) unsigned long cg_lines_inner(unsigned long n) {
    unsigned long acc = 3;
    for (unsigned long i = 0; i < n; i++) acc = acc * 3202034522624059733ul + i; /* LINE:inner */
    return acc;
}

__attribute__((noinline)) unsigned long cg_lines_outer(unsigned long n) {
    unsigned long r = cg_lines_inner(n); /* LINE:outer */
    sink = r;
    return r;
}

int main(int argc, char **argv) {
    double each_ms = argc > 1 ? atof(argv[1]) : 400;
    double start = now_ms();
    while (now_ms() - start < each_ms) sink = cg_lines_leaf(1000000); /* LINE:main-leaf */
    start = now_ms();
    while (now_ms() - start < each_ms) sink = cg_lines_outer(1000000); /* LINE:main-outer */
    return 0;
}
