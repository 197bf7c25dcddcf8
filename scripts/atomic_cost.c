/* Cost of an uncontended atomic read-modify-write (lock xadd) on this machine, against a plain
 * read-modify-write of the same variable. Build and run:
 *   gcc -O2 scripts/atomic_cost.c -o /tmp/atomic_cost && /tmp/atomic_cost
 * (BENCHMARKS.md, eleventh session: 2.5-2.9 ns per lock xadd on the project VM.) */
#include <stdio.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(void) {
    volatile long x = 0;
    const long n = 100000000;
    for (int rep = 0; rep < 3; rep++) {
        double t = now();
        for (long i = 0; i < n; i++) __atomic_fetch_add(&x, 1, __ATOMIC_RELAXED);
        double locked = now() - t;
        t = now();
        for (long i = 0; i < n; i++) x = x + 1;
        double plain = now() - t;
        printf("lock xadd %.2f ns, plain read-modify-write %.2f ns\n", locked / n * 1e9, plain / n * 1e9);
    }
    return 0;
}
