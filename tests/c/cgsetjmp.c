/* Workload of the probe-safety tests, linked statically so that probing its setjmp and
 * longjmp touches no other process: jumps back to a setjmp three times and says so. A
 * return probe on setjmp makes it save the kernel's trampoline as the place to jump back
 * to, and the first longjmp kills the program (SIGILL). */
#include <setjmp.h>
#include <stdio.h>

static jmp_buf env;

__attribute__((noinline)) static void jump(int value) { longjmp(env, value); }

int main(void) {
    volatile int jumps = 0;
    int value = setjmp(env);
    if (value < 3) {
        jumps++;
        jump(value + 1);
    }
    printf("setjmp returned %d after %d jumps\n", value, jumps);
    return 0;
}
