/*
 * memcpy.c - single-core memcpy bandwidth, the ceiling of a single-copy
 * transfer (e.g. a CMA / process_vm_readv or a mapped-peer copy).
 *
 * For sizes 8 B .. 256 MiB (factor 2), copies `size` bytes between two
 * separately malloc'd, pre-touched buffers of 256 MiB each (always from the
 * start of each buffer).  Each sample times a batch of `reps` back-to-back
 * memcpy calls (reps chosen so a batch moves >= 4 MiB and at least one copy),
 * and `samples` such batches are taken; the best and the median per-copy time
 * are reported.  GB/s = size / time, 1e9 bytes (bytes copied, not bytes of
 * memory traffic).  Small sizes stay cache resident across repetitions, as
 * they do when a benchmark reuses the same buffers.
 *
 * With -j N, N threads (each with its own pair of buffers, no pinning) copy
 * at the same time; every sample starts on a barrier and its time is the
 * slowest thread's, so GB/s is per copier and N x GB/s is the aggregate.
 * -j 2 is the ceiling for a 2-rank ring where both ranks copy at once.
 *
 * Options: -b MIN -e MAX (K/M/G suffixes, powers of 1024), -s SAMPLES,
 *          -j COPIERS (default 1).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static size_t parse_size(const char *s)
{
    char *end = NULL;
    double v = strtod(s, &end);
    size_t mult = 1;
    if (end && *end) {
        switch (*end) {
        case 'k': case 'K': mult = 1024ULL; break;
        case 'm': case 'M': mult = 1024ULL * 1024; break;
        case 'g': case 'G': mult = 1024ULL * 1024 * 1024; break;
        default: fprintf(stderr, "bad size '%s'\n", s); exit(2);
        }
    }
    return (size_t)(v * (double)mult);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

struct copier {
    int id;
    uint8_t *src, *dst;
    double *times; /* [samples] per-copy seconds of this thread, current size */
};

static size_t g_max_bytes, g_size, g_reps;
static int g_samples, g_ncopiers, g_done;
static pthread_barrier_t g_bar;

static void copy_batch(struct copier *c, size_t size, size_t reps)
{
    for (size_t r = 0; r < reps; r++) {
        memcpy(c->dst, c->src, size);
        /* Compiler barrier: keeps every copy, stops hoisting/merging. */
        __asm__ __volatile__("" ::: "memory");
    }
}

/* Worker loop for copiers 1..N-1; copier 0 runs the same steps in main(). */
static void copier_step(struct copier *c)
{
    size_t size = g_size, reps = g_reps;
    copy_batch(c, size, reps); /* untimed: warm caches / TLB */
    for (int s = 0; s < g_samples; s++) {
        pthread_barrier_wait(&g_bar);
        double t0 = now_s();
        copy_batch(c, size, reps);
        c->times[s] = (now_s() - t0) / (double)reps;
    }
    pthread_barrier_wait(&g_bar);
}

static void *copier_main(void *arg)
{
    struct copier *c = arg;
    /* Allocate and pre-touch in the thread that uses the buffers. */
    c->src = malloc(g_max_bytes);
    c->dst = malloc(g_max_bytes);
    if (!c->src || !c->dst) {
        fprintf(stderr, "cannot allocate 2 x %zu bytes\n", g_max_bytes);
        exit(1);
    }
    for (size_t i = 0; i < g_max_bytes; i++)
        c->src[i] = (uint8_t)(i * 7 + 1 + c->id);
    memset(c->dst, 0, g_max_bytes);
    pthread_barrier_wait(&g_bar); /* buffers ready */
    if (c->id == 0)
        return NULL;
    for (;;) {
        pthread_barrier_wait(&g_bar); /* next size published (or done) */
        if (g_done)
            return NULL;
        copier_step(c);
    }
}

int main(int argc, char **argv)
{
    size_t min_bytes = 8, max_bytes = 256ULL << 20;
    int samples = 21, ncopiers = 1;
    int opt;
    while ((opt = getopt(argc, argv, "b:e:s:j:h")) != -1) {
        switch (opt) {
        case 'b': min_bytes = parse_size(optarg); break;
        case 'e': max_bytes = parse_size(optarg); break;
        case 's': samples = atoi(optarg); break;
        case 'j': ncopiers = atoi(optarg); break;
        default:
            fprintf(stderr, "usage: %s [-b min] [-e max] [-s samples] [-j copiers]\n", argv[0]);
            return opt == 'h' ? 0 : 2;
        }
    }
    if (min_bytes < 1) min_bytes = 1;
    if (max_bytes < min_bytes) max_bytes = min_bytes;
    if (samples < 1) samples = 1;
    if (ncopiers < 1) ncopiers = 1;
    g_max_bytes = max_bytes;
    g_samples = samples;
    g_ncopiers = ncopiers;

    pthread_barrier_init(&g_bar, NULL, (unsigned)ncopiers);
    struct copier *cs = calloc((size_t)ncopiers, sizeof *cs);
    pthread_t *th = calloc((size_t)ncopiers, sizeof *th);
    for (int i = 0; i < ncopiers; i++) {
        cs[i].id = i;
        cs[i].times = malloc(sizeof(double) * (size_t)samples);
    }
    for (int i = 1; i < ncopiers; i++)
        pthread_create(&th[i], NULL, copier_main, &cs[i]);
    copier_main(&cs[0]);

    double *t = malloc(sizeof(double) * (size_t)samples);
    const size_t batch_bytes = 4ULL << 20;
    const size_t summary_min = 16ULL << 20;
    double summary[64];
    int nsummary = 0;

    printf("# memcpy bandwidth, glibc memcpy, %d concurrent copier(s), %d samples per size\n",
           ncopiers, samples);
    printf("# buffers: 2 x %zu bytes per copier, malloc'd separately, pre-touched\n", max_bytes);
    if (ncopiers > 1)
        printf("# time = slowest copier per sample; GB/s is per copier (aggregate = %d x)\n",
               ncopiers);
    printf("# %10s  %10s  %11s  %11s  %9s  %9s\n", "size", "reps/batch", "best(us)",
           "median(us)", "GB/s-best", "GB/s-med");

    for (size_t size = min_bytes; size <= max_bytes; size *= 2) {
        g_size = size;
        g_reps = size >= batch_bytes ? 1 : batch_bytes / size;
        if (ncopiers > 1)
            pthread_barrier_wait(&g_bar); /* publish size to the workers */
        copier_step(&cs[0]);
        for (int s = 0; s < samples; s++) {
            t[s] = 0.0;
            for (int i = 0; i < ncopiers; i++)
                if (cs[i].times[s] > t[s])
                    t[s] = cs[i].times[s];
        }
        for (int i = 0; i < ncopiers; i++)
            if (memcmp(cs[i].dst, cs[i].src, size) != 0) {
                fprintf(stderr, "memcpy verification failed at size %zu\n", size);
                return 1;
            }
        qsort(t, (size_t)samples, sizeof(double), cmp_double);
        double best = t[0];
        double med = (samples & 1) ? t[samples / 2]
                                   : 0.5 * (t[samples / 2 - 1] + t[samples / 2]);
        double gbs_best = (double)size / best / 1e9;
        double gbs_med = (double)size / med / 1e9;
        printf("  %10zu  %10zu  %11.4f  %11.4f  %9.2f  %9.2f\n", size, g_reps, best * 1e6,
               med * 1e6, gbs_best, gbs_med);
        fflush(stdout);
        if (size >= summary_min && nsummary < 64)
            summary[nsummary++] = gbs_med;
        if (size > max_bytes / 2)
            break;
    }
    g_done = 1;
    if (ncopiers > 1)
        pthread_barrier_wait(&g_bar);
    for (int i = 1; i < ncopiers; i++)
        pthread_join(th[i], NULL);

    if (nsummary > 0) {
        qsort(summary, (size_t)nsummary, sizeof(double), cmp_double);
        double m = (nsummary & 1) ? summary[nsummary / 2]
                                  : 0.5 * (summary[nsummary / 2 - 1] + summary[nsummary / 2]);
        if (ncopiers > 1)
            printf("# memcpy ceiling at >=16MiB: %.2f GB/s per copier, %d copiers (aggregate %.2f GB/s)\n",
                   m, ncopiers, m * ncopiers);
        else
            printf("# memcpy ceiling at >=16MiB: %.2f GB/s\n", m);
    } else {
        printf("# memcpy ceiling at >=16MiB: n/a (no size >= 16 MiB measured)\n");
    }
    return 0;
}
