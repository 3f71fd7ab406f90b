/* A shared library of the cg-funcs workload (libcgfuncs_lib.so): the same unit of work as
 * cg_burn, so its cost is in known proportion to the executable's functions. */
#include <stdint.h>

volatile uint64_t cglib_sink;

__attribute__((noinline)) uint64_t cglib_work(uint64_t units) {
    uint64_t x = units + 1;
    for (uint64_t u = 0; u < units; u++) {
        for (uint64_t i = 0; i < 10000; i++) {
            x = x * 6364136223846793005ULL + i;
        }
        cglib_sink = x;
    }
    return x;
}
