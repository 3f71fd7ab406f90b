/* Built with -fcf-protection: the function starts with `endbr64`, which the kernel must
 * single-step for a uprobe (the expensive case the benchmark measures). */
#include <stdint.h>

extern volatile uint64_t cg_sink;

__attribute__((noinline)) uint64_t cg_tiny_endbr(uint64_t x) {
    cg_sink = x;
    return x * 3 + 1;
}
