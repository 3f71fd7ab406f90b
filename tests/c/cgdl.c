/* A shared library that no workload links: cgdlopen loads it with dlopen() during the run,
 * from a directory outside the library search path, as programs load plugins (and Python its
 * extension modules). A `--func 'libcgdl*:cgdl_*'` can only be probed once it is mapped. */
#include <stdint.h>

volatile uint64_t cgdl_sink;

__attribute__((noinline)) uint64_t cgdl_work(uint64_t x) {
    for (uint64_t i = 0; i < 2000; i++) {
        x = x * 6364136223846793005ULL + i;
    }
    cgdl_sink = x;
    return x;
}
