/* Workload of the probe-safety tests: prints its argument count and exits with it minus
 * one. A return probe on the entry point (_start) overwrites argc on the stack, which shows
 * in both. */
#include <stdio.h>

int main(int argc, char **argv) {
    (void)argv;
    printf("argc=%d\n", argc);
    return argc - 1;
}
