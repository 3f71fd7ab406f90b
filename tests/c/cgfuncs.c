/* Compute kernels of the cg-funcs workload. Built with frame pointers (sampled stacks
 * unwind through them) and without CET, so each function starts with `push %rbp`, which
 * the kernel emulates for uprobes. Every unit of work is the same loop, so costs are in
 * known proportions: cg_work_b does twice cg_work_a's work. */
#include <stdint.h>

volatile uint64_t cg_sink;

__attribute__((noinline)) uint64_t cg_burn(uint64_t units) {
    uint64_t x = units + 1;
    for (uint64_t u = 0; u < units; u++) {
        for (uint64_t i = 0; i < 10000; i++) {
            x = x * 6364136223846793005ULL + i;
        }
        cg_sink = x;
    }
    return x;
}

__attribute__((noinline)) uint64_t cg_work_a(uint64_t units) { return cg_burn(units) + 1; }

__attribute__((noinline)) uint64_t cg_work_b(uint64_t units) { return cg_burn(2 * units) + 1; }

/* depth calls of itself, each doing `units` of work. */
__attribute__((noinline)) uint64_t cg_recurse(uint32_t depth, uint64_t units) {
    uint64_t x = cg_burn(units);
    if (depth > 1) {
        x += cg_recurse(depth - 1, units);
    }
    return x + 1;
}

__attribute__((noinline)) uint64_t cg_thread_work(uint64_t units) { return cg_burn(units) + 1; }

/* Never returns: the process exits while a thread is inside (a partial call). */
__attribute__((noinline)) uint64_t cg_forever(uint64_t units) {
    uint64_t x = 0;
    for (;;) {
        x += cg_burn(units);
    }
    return x;
}

/* Almost no work: for measuring what the probes themselves cost per call. */
__attribute__((noinline)) uint64_t cg_tiny(uint64_t x) {
    cg_sink = x;
    return x * 3 + 1;
}
