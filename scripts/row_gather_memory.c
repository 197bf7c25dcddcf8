// Where the time of (c)'s forward row gather goes on this machine: three small experiments on
// the tutorial's layout (a 1,000,000 x 128 f32 weight on 2 MiB pages, rows of 512 bytes read
// at random, 100 rows per step, prefetched 4 rows ahead as `csr_rows_f32_avx2` does).
//
//   gcc -O2 -mavx2 -mfma -pthread scripts/row_gather_memory.c -o /tmp/rgm
//   /tmp/rgm retention 10000 GAP_MS   ns per row re-reading one fixed set of rows (an epoch's
//                                     10K rows = 5 MB) with GAP_MS of idle time between passes
//   /tmp/rgm lookahead MODE           100-row gathers separated by ~15 us of L1-resident FMA
//                                     work; MODE 0: no look-ahead, 1: prefetch the next
//                                     gather's 800 lines in one burst before the work,
//                                     2: spread those prefetches through the work
//   /tmp/rgm crosscore MODE           the same with a second thread on CPU 1 that, while CPU 0
//                                     works, reads (MODE 1) or prefetches (MODE 2) the rows of
//                                     CPU 0's next gather; MODE 0: no helper
//
// Prints ns per row (retention) or microseconds per gather and per pass. The twelfth session's
// results are in BENCHMARKS.md.
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

enum { ROWS = 1000000, N = 128, SET = 100, PASSES = 20000, AHEAD = 4 };

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void prefetch_row(const float *r) {
    for (int l = 0; l < N * 4; l += 64) _mm_prefetch((const char *)r + l, _MM_HINT_T0);
}

static float *weight(void) {
    size_t bytes = (size_t)ROWS * N * 4;
    float *w = aligned_alloc(2 << 20, bytes);
    madvise(w, bytes, MADV_HUGEPAGE);
    for (size_t i = 0; i < (size_t)ROWS * N; i++) w[i] = 1e-9f * (float)(i % 1000);
    return w;
}

static long *random_ids(size_t n) {
    long *ids = malloc(n * sizeof *ids);
    srand(1);
    for (size_t i = 0; i < n; i++) ids[i] = ((long)rand() * 7919 + rand()) % ROWS;
    return ids;
}

/* Sum `set` rows into 16 accumulators, prefetching AHEAD rows ahead (the kernel's pattern). */
static void gather(const float *w, const long *id, size_t set, __m256 *acc) {
    for (size_t i = 0; i < set; i++) {
        if (i + AHEAD < set) prefetch_row(w + id[i + AHEAD] * N);
        const float *r = w + id[i] * N;
        for (int j = 0; j < 16; j++)
            acc[j] = _mm256_fmadd_ps(acc[16], _mm256_loadu_ps(r + 8 * j), acc[j]);
    }
}

static float scratch[4096];

/* ~15 us of FMA work on L1-resident data, in 25 chunks; `between(c)` runs after chunk c. */
static void work(__m256 *acc, void (*between)(int, void *), void *ctx) {
    for (int c = 0; c < 25; c++) {
        for (int k = 0; k < 64; k++)
            for (int j = 0; j < 8; j++)
                acc[j] = _mm256_fmadd_ps(_mm256_loadu_ps(scratch + 8 * j + 8 * k), acc[16], acc[j]);
        if (between) between(c, ctx);
    }
}

struct spread { const float *w; const long *next; };

static void prefetch_slice(int c, void *p) {
    struct spread *s = p;
    for (int i = c * 4; i < c * 4 + 4 && i < SET; i++) prefetch_row(s->w + s->next[i] * N);
}

static void report(const char *what, int mode, double gather_ms, double total_ms, __m256 *acc) {
    float o[8];
    _mm256_storeu_ps(o, acc[3]);
    printf("%s mode %d: gather %.2f us, pass %.2f us (checksum %g)\n", what, mode,
           gather_ms / PASSES * 1e3, total_ms / PASSES * 1e3, o[0]);
}

static int retention(size_t set, double gap_ms) {
    float *w = weight();
    long *ids = random_ids(set);
    __m256 acc[17];
    for (int j = 0; j < 17; j++) acc[j] = _mm256_set1_ps(j == 16 ? 0.5f : 0.0f);
    double tot = 0;
    for (int pass = 0; pass < 40; pass++) {
        double t0 = now_ms();
        gather(w, ids, set, acc);
        if (pass >= 10) tot += now_ms() - t0;
        double g0 = now_ms();
        while (now_ms() - g0 < gap_ms) {
        }
    }
    float o[8];
    _mm256_storeu_ps(o, acc[3]);
    printf("retention: %zu rows, gap %.2f ms: %.1f ns per row (checksum %g)\n", set, gap_ms,
           tot / 30 * 1e6 / set, o[0]);
    return 0;
}

static int lookahead(int mode) {
    float *w = weight();
    long *ids = random_ids((size_t)SET * (PASSES + 1));
    __m256 acc[17];
    for (int j = 0; j < 17; j++) acc[j] = _mm256_setzero_ps();
    double tg = 0, t00 = now_ms();
    for (int p = 0; p < PASSES; p++) {
        const long *id = ids + (size_t)p * SET, *next = id + SET;
        double t0 = now_ms();
        gather(w, id, SET, acc);
        tg += now_ms() - t0;
        struct spread s = { w, next };
        if (mode == 1)
            for (int i = 0; i < SET; i++) prefetch_row(w + next[i] * N);
        work(acc, mode == 2 ? prefetch_slice : NULL, &s);
    }
    report("lookahead", mode, tg, now_ms() - t00, acc);
    return 0;
}

static const float *g_w;
static const long *g_ids;
static int g_mode;
static atomic_int g_ready = -1, g_started = -1;

static void pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

/* Warms gather p's rows once CPU 0 has started gather p - 1, then publishes p. */
static void *helper(void *unused) {
    (void)unused;
    pin(1);
    volatile float sink = 0;
    for (int p = 0; p < PASSES; p++) {
        while (p > 0 && atomic_load(&g_started) < p - 1) _mm_pause();
        const long *id = g_ids + (size_t)p * SET;
        for (int i = 0; i < SET; i++) {
            const float *r = g_w + id[i] * N;
            if (g_mode == 1)
                for (int l = 0; l < N; l += 16) sink += r[l];
            else
                prefetch_row(r);
        }
        atomic_store(&g_ready, p);
    }
    return NULL;
}

static int crosscore(int mode) {
    pin(0);
    float *w = weight();
    long *ids = random_ids((size_t)SET * PASSES);
    g_w = w;
    g_ids = ids;
    g_mode = mode;
    pthread_t th;
    if (mode) pthread_create(&th, NULL, helper, NULL);
    __m256 acc[17];
    for (int j = 0; j < 17; j++) acc[j] = _mm256_setzero_ps();
    double tg = 0, t00 = now_ms();
    for (int p = 0; p < PASSES; p++) {
        if (mode) {
            while (atomic_load(&g_ready) < p) _mm_pause();
            atomic_store(&g_started, p);
        }
        double t0 = now_ms();
        gather(w, ids + (size_t)p * SET, SET, acc);
        tg += now_ms() - t0;
        work(acc, NULL, NULL);
    }
    if (mode) pthread_join(th, NULL);
    report("crosscore", mode, tg, now_ms() - t00, acc);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 4 && !strcmp(argv[1], "retention")) return retention(atol(argv[2]), atof(argv[3]));
    if (argc >= 3 && !strcmp(argv[1], "lookahead")) return lookahead(atoi(argv[2]));
    if (argc >= 3 && !strcmp(argv[1], "crosscore")) return crosscore(atoi(argv[2]));
    fprintf(stderr, "usage: %s retention ROWS GAP_MS | lookahead 0|1|2 | crosscore 0|1|2\n", argv[0]);
    return 2;
}
