/* Workload of the late-attach tests: `cgdlopen LIBRARY DELAY_MS CALLS` sleeps DELAY_MS,
 * loads LIBRARY with dlopen(), then waits (up to 20 s) until cgdl_work's first byte is an
 * int3: the breakpoint a uprobe puts there, which shows that cg-trace has probed the library
 * it just mapped. The entry and the return probe are two attachments (with perf_event
 * uprobes, two perf events) and either puts the int3 there: it then waits 300 ms more, so
 * that the other one is in too (a loaded machine once ran all the calls between the two),
 * and only then makes CALLS calls, so that a test can demand the exact count. Prints `probed=1 calls=N` (probed=0 when no probe came: the calls are made anyway). */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: cgdlopen LIBRARY DELAY_MS CALLS\n");
        return 2;
    }
    long delay_ms = atol(argv[2]);
    long calls = atol(argv[3]);
    sleep_ms(delay_ms);
    void *lib = dlopen(argv[1], RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 1;
    }
    uint64_t (*work)(uint64_t) = (uint64_t (*)(uint64_t))dlsym(lib, "cgdl_work");
    if (!work) {
        fprintf(stderr, "dlsym: %s\n", dlerror());
        return 1;
    }
    int probed = 0;
    for (int i = 0; i < 2000 && !probed; i++) {
        probed = *(volatile unsigned char *)work == 0xcc;
        if (!probed) {
            sleep_ms(10);
        }
    }
    if (probed) {
        sleep_ms(300);
    }
    uint64_t x = 1;
    for (long i = 0; i < calls; i++) {
        x = work(x);
    }
    printf("probed=%d calls=%ld sum=%llu\n", probed, calls, (unsigned long long)x);
    return 0;
}
