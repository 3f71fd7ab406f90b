/* The unwinding tests' program: main -> cg_unwind_a -> cg_unwind_b -> cg_unwind_leaf, with
 * a known split of the work (each function's own part, in rounds of a multiply-add chain
 * whose time is proportional to its length): a 10 %, b 30 %, leaf 60 %; main's own part is
 * negligible. Each round's length varies (a pseudo-random 0.5x to 1.5x the unit, the split
 * kept), so a periodic sampler cannot lock onto one phase of a fixed-length round and see only
 * part of it. Built optimised without frame pointers, with frame pointers but a
 * frameless leaf, and with frame pointers everywhere (tests/build.rs). Usage: cg-unwind [ROUNDS] (default 2000). */
#include <stdio.h>
#include <stdlib.h>

#define UNIT 20000L
#define SPIN(acc, n)                                                                   \
    do {                                                                               \
        for (long i_ = 0; i_ < (n); i_++)                                              \
            acc = acc * 6364136223846793005UL + 1442695040888963407UL;                 \
    } while (0)

/* The volatile local gives the leaf a stack slot: GCC 12 keeps no frame in a function that
 * uses no stack, even with -mno-omit-leaf-frame-pointer, so without it the frame-pointer
 * reference build's leaf would be frameless too. (-momit-leaf-frame-pointer and
 * -fomit-frame-pointer still leave it frameless: the slot lies below the stack pointer.) */
__attribute__((noinline, noclone)) unsigned long cg_unwind_leaf(unsigned long acc, long n) {
    volatile unsigned long slot = 0;
    SPIN(acc, 6 * n);
    return acc + slot;
}

__attribute__((noinline, noclone)) unsigned long cg_unwind_b(unsigned long acc, long n) {
    SPIN(acc, 2 * n);
    acc = cg_unwind_leaf(acc, n);
    SPIN(acc, n);
    return acc;
}

__attribute__((noinline, noclone)) unsigned long cg_unwind_a(unsigned long acc, long n) {
    SPIN(acc, n);
    /* Work after the call: no tail call, so a stays on the stack. */
    return cg_unwind_b(acc, n) ^ 1;
}

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 2000;
    volatile long unit = UNIT;
    unsigned long acc = (unsigned long)argc;
    unsigned long jitter = 0x9e3779b97f4a7c15UL;
    for (long r = 0; r < rounds; r++) {
        jitter ^= jitter << 13, jitter ^= jitter >> 7, jitter ^= jitter << 17;
        acc = cg_unwind_a(acc, unit / 2 + (long)(jitter % (unsigned long)unit));
    }
    printf("%lu\n", acc);
    return 0;
}
