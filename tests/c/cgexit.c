/* cg-exit: short processes that exit right after heavy sampling, for the symbol tests.
 *
 * `cg-exit CHILDREN MS`: starts CHILDREN children, two at a time, and reaps them only at the
 * end, so that each one stays an exited but unreaped process (whose memory map reads empty)
 * for half a second or more. Each child works for MS milliseconds in `exit_spin`, reached
 * through a path of 12 calls that changes every millisecond or so (so that new stacks keep
 * coming until it exits) and then through a trampoline in anonymous executable memory, as
 * a JIT's code would be: every stack has an anonymous frame, so each new stack makes
 * cg-trace look at the memory map again. The trampoline's frame also carries a bogus
 * return address into this program's data, as a frame-pointer walk through code without
 * frame pointers picks up: no function's name belongs there. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Initialised: in .data, after every function of the program. */
long cg_exit_data[4] = {1, 2, 3, 4};

typedef long (*work_fn)(long);
typedef long (*trampoline_fn)(long, work_fn, void *);
static trampoline_fn trampoline;

/* push %rdx; push %rbp; mov %rsp,%rbp; sub $8,%rsp; call *%rsi; add $8,%rsp; pop %rbp;
 * pop %rdx; ret: calls its second argument with its first, with its third argument where
 * the unwinder looks for the caller's return address. */
static const unsigned char CODE[] = {0x52, 0x55, 0x48, 0x89, 0xe5, 0x48, 0x83, 0xec, 0x08,
                                     0xff, 0xd6, 0x48, 0x83, 0xc4, 0x08, 0x5d, 0x5a, 0xc3};

__attribute__((noinline)) long exit_spin(long n) {
    volatile long x = 0;
    for (long i = 0; i < n; i++)
        x += i;
    return x;
}

static long exit_path(unsigned bits, int left, long n);

__attribute__((noinline)) long exit_left(unsigned bits, int left, long n) {
    return exit_path(bits, left, n) + 1;
}

__attribute__((noinline)) long exit_right(unsigned bits, int left, long n) {
    return exit_path(bits, left, n) + 2;
}

__attribute__((noinline)) static long exit_path(unsigned bits, int left, long n) {
    if (left == 0)
        return trampoline(n, exit_spin, &cg_exit_data[1]);
    return (bits & 1) ? exit_left(bits >> 1, left - 1, n) : exit_right(bits >> 1, left - 1, n);
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void child(long ms) {
    double until = now_ms() + ms;
    unsigned bits = (unsigned)getpid() * 2654435761u;
    long sum = 0;
    while (now_ms() < until)
        sum += exit_path(bits++, 12, 200000);
    _exit(sum == 42 ? 1 : 0);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: cg-exit CHILDREN MS\n");
        return 2;
    }
    int children = atoi(argv[1]);
    long ms = atol(argv[2]);
    if (children < 1 || children > 256 || ms < 1) {
        fprintf(stderr, "cg-exit: 1-256 children, MS >= 1\n");
        return 2;
    }
    void *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED)
        return 3;
    memcpy(page, CODE, sizeof CODE);
    if (mprotect(page, 4096, PROT_READ | PROT_EXEC) != 0)
        return 3;
    trampoline = (trampoline_fn)page;
    pid_t pids[256];
    for (int i = 0; i < children; i++) {
        pid_t pid = fork();
        if (pid < 0)
            return 4;
        if (pid == 0)
            child(ms);
        pids[i] = pid;
        /* Two at a time: wait for this pair to finish working (not to be reaped). */
        if (i % 2 == 1 || i == children - 1)
            usleep(ms * 1000 + 50000);
    }
    usleep(500000);
    int failed = 0;
    for (int i = 0; i < children; i++) {
        int status = 0;
        if (waitpid(pids[i], &status, 0) != pids[i] || !WIFEXITED(status) ||
            WEXITSTATUS(status) != 0)
            failed++;
    }
    printf("%d children, %d failed\n", children, failed);
    return failed ? 1 : 0;
}
