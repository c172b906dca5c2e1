/*
 * colls.c - Open MPI collectives with fxperf's (= nccl-tests') sizes, timing
 * and table, so `fxperf --np N <coll>` and `mpirun -np N colls <coll>` can be
 * compared line by line.
 *
 *   colls [-b MIN] [-e MAX] [-f F] [-n ITERS] [-w WARMUP] [-c 0|1] [-r ROOT] COLL
 *
 * COLL: all_reduce (MPI_Allreduce), all_gather (MPI_Allgather),
 * reduce_scatter (MPI_Reduce_scatter_block), alltoall (MPI_Alltoall),
 * broadcast (MPI_Bcast), reduce (MPI_Reduce), gather (MPI_Gather),
 * scatter (MPI_Scatter).  Always MPI_FLOAT and MPI_SUM (float/sum are also
 * fxperf's defaults).  Out-of-place only: the in-place columns print N/A.
 *
 * For each size (from MIN, times F, the last one clamped to MAX, as fxperf):
 *   - count from the size as nccl-tests derives it: all_reduce, broadcast,
 *     reduce: size/4; the others: (size/4/nranks) rounded down to a multiple
 *     of 16 bytes (4 floats), which is the per-rank block;
 *   - `warmup` untimed calls, MPI_Barrier, `iters` timed calls (MPI_Wtime),
 *     time = elapsed/iters, MAX over ranks;
 *   - algbw = bytes/time with bytes = count*4 (all_reduce, broadcast, reduce)
 *     or count*4*nranks (the others); busbw = algbw * 2(n-1)/n (all_reduce),
 *     (n-1)/n (all_gather, reduce_scatter, alltoall, gather, scatter),
 *     1 (broadcast, reduce);
 *   - one more, untimed call on fresh inputs into a poisoned receive buffer,
 *     checked element by element on every rank (inputs are small integers, so
 *     sums are exact); #wrong = wrong elements summed over ranks.
 * Before the sweep, 64 untimed calls at the first size with a non-zero count
 * let vader set up its fast boxes (it does so after 16 messages per peer),
 * as bench/mpi/sendrecv.c does.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CONNECT_WARMUP 64

enum coll { ALLREDUCE, ALLGATHER, REDUCESCATTER, ALLTOALL, BCAST, REDUCE, GATHER, SCATTER };
static const char *names[] = {"all_reduce", "all_gather", "reduce_scatter", "alltoall",
                              "broadcast",  "reduce",     "gather",         "scatter"};
static const char *mpi_names[] = {"MPI_Allreduce", "MPI_Allgather", "MPI_Reduce_scatter_block",
                                  "MPI_Alltoall",  "MPI_Bcast",     "MPI_Reduce",
                                  "MPI_Gather",    "MPI_Scatter"};
#define NCOLLS 8

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
        default:
            fprintf(stderr, "bad size suffix in '%s'\n", s);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    if (v < 0) {
        fprintf(stderr, "negative size '%s'\n", s);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return (size_t)(v * (double)mult);
}

/* Element i of rank r's input in round `seed`: a small integer (0..255). */
static inline float value(unsigned seed, int r, size_t i)
{
    uint32_t x = (uint32_t)i * 2654435761u + (uint32_t)(r + 1) * 40503u + seed * 0x9e3779b9u;
    x ^= x >> 15;
    x *= 0x85ebca6bu;
    x ^= x >> 13;
    return (float)(x >> 24);
}

struct shape { size_t count, send, recv; };

static struct shape shape_of(enum coll c, size_t size, int n)
{
    size_t cnt = size / sizeof(float);
    size_t base = (cnt / (size_t)n) & ~(size_t)3; /* 16-byte blocks of floats */
    struct shape s;
    switch (c) {
    case ALLREDUCE: case BCAST: case REDUCE: s.count = s.send = s.recv = cnt; break;
    case ALLGATHER: case GATHER: s.count = base; s.send = base; s.recv = base * n; break;
    case REDUCESCATTER: case SCATTER: s.count = base; s.send = base * n; s.recv = base; break;
    default: s.count = base; s.send = s.recv = base * n; break; /* ALLTOALL */
    }
    return s;
}

static void call(enum coll c, float *sb, float *rb, size_t count, int root)
{
    int k = (int)count;
    switch (c) {
    case ALLREDUCE: MPI_Allreduce(sb, rb, k, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
    case ALLGATHER: MPI_Allgather(sb, k, MPI_FLOAT, rb, k, MPI_FLOAT, MPI_COMM_WORLD); break;
    case REDUCESCATTER:
        MPI_Reduce_scatter_block(sb, rb, k, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        break;
    case ALLTOALL: MPI_Alltoall(sb, k, MPI_FLOAT, rb, k, MPI_FLOAT, MPI_COMM_WORLD); break;
    case BCAST: MPI_Bcast(rb, k, MPI_FLOAT, root, MPI_COMM_WORLD); break;
    case REDUCE: MPI_Reduce(sb, rb, k, MPI_FLOAT, MPI_SUM, root, MPI_COMM_WORLD); break;
    case GATHER: MPI_Gather(sb, k, MPI_FLOAT, rb, k, MPI_FLOAT, root, MPI_COMM_WORLD); break;
    case SCATTER: MPI_Scatter(sb, k, MPI_FLOAT, rb, k, MPI_FLOAT, root, MPI_COMM_WORLD); break;
    }
}

/* Fill this rank's input; MPI_Bcast is in place by nature: the root's
 * receive buffer is its input. */
static void fill_input(enum coll c, float *sb, float *rb, struct shape s, int rank, int root,
                       unsigned seed)
{
    if (c == BCAST) {
        if (rank == root)
            for (size_t i = 0; i < s.count; i++) rb[i] = value(seed, rank, i);
        return;
    }
    for (size_t i = 0; i < s.send; i++) sb[i] = value(seed, rank, i);
}

static long long check_output(enum coll c, const float *rb, struct shape s, int rank, int n,
                              int root, unsigned seed)
{
    long long wrong = 0;
    size_t cnt = s.count;
    switch (c) {
    case ALLREDUCE: case REDUCE:
        if (c == REDUCE && rank != root) break;
        for (size_t i = 0; i < cnt; i++) {
            float want = 0;
            for (int q = 0; q < n; q++) want += value(seed, q, i);
            wrong += rb[i] != want;
        }
        break;
    case REDUCESCATTER:
        for (size_t j = 0; j < cnt; j++) {
            float want = 0;
            for (int q = 0; q < n; q++) want += value(seed, q, (size_t)rank * cnt + j);
            wrong += rb[j] != want;
        }
        break;
    case ALLGATHER: case GATHER:
        if (c == GATHER && rank != root) break;
        for (int q = 0; q < n; q++)
            for (size_t j = 0; j < cnt; j++) wrong += rb[(size_t)q * cnt + j] != value(seed, q, j);
        break;
    case ALLTOALL:
        for (int q = 0; q < n; q++)
            for (size_t j = 0; j < cnt; j++)
                wrong += rb[(size_t)q * cnt + j] != value(seed, q, (size_t)rank * cnt + j);
        break;
    case BCAST:
        for (size_t j = 0; j < cnt; j++) wrong += rb[j] != value(seed, root, j);
        break;
    case SCATTER:
        for (size_t j = 0; j < cnt; j++) wrong += rb[j] != value(seed, root, (size_t)rank * cnt + j);
        break;
    }
    return wrong;
}

static void fmt_time(char *buf, size_t len, double us)
{
    if (us >= 10000.0)
        snprintf(buf, len, "%9.0f", us);
    else if (us >= 100.0)
        snprintf(buf, len, "%9.1f", us);
    else
        snprintf(buf, len, "%9.2f", us);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);

    size_t min_bytes = 8, max_bytes = 256ULL * 1024 * 1024;
    int factor = 2, iters = 20, warmup = 5, check = 1, root = 0;
    int opt;
    while ((opt = getopt(argc, argv, "b:e:f:n:w:c:r:h")) != -1) {
        switch (opt) {
        case 'b': min_bytes = parse_size(optarg); break;
        case 'e': max_bytes = parse_size(optarg); break;
        case 'f': factor = atoi(optarg); break;
        case 'n': iters = atoi(optarg); break;
        case 'w': warmup = atoi(optarg); break;
        case 'c': check = atoi(optarg); break;
        case 'r': root = atoi(optarg); break;
        default: goto usage;
        }
    }
    int coll = -1;
    if (optind == argc - 1)
        for (int i = 0; i < NCOLLS; i++)
            if (strcmp(argv[optind], names[i]) == 0) coll = i;
    if (coll < 0) {
    usage:
        if (rank == 0)
            fprintf(stderr,
                    "usage: %s [-b min] [-e max] [-f factor] [-n iters] [-w warmup] [-c 0|1] "
                    "[-r root] all_reduce|all_gather|reduce_scatter|alltoall|broadcast|reduce|"
                    "gather|scatter\n",
                    argv[0]);
        MPI_Finalize();
        return opt == 'h' ? 0 : 2;
    }
    enum coll c = (enum coll)coll;
    if (factor < 2) factor = 2;
    if (iters < 1) iters = 1;
    if (warmup < 0) warmup = 0;
    if (max_bytes < min_bytes) max_bytes = min_bytes;
    if (root < 0 || root >= n) root = 0;
    if (max_bytes / sizeof(float) > (size_t)INT32_MAX) {
        if (rank == 0) fprintf(stderr, "max size %zu exceeds the MPI int count limit\n", max_bytes);
        MPI_Finalize();
        return 2;
    }
    int rooted = c == BCAST || c == REDUCE || c == GATHER || c == SCATTER;
    int reduces = c == ALLREDUCE || c == REDUCESCATTER || c == REDUCE;
    double alg_mult = (c == ALLREDUCE || c == BCAST || c == REDUCE) ? 1.0 : (double)n;
    double bus = c == ALLREDUCE ? 2.0 * (n - 1) / n
                 : (c == BCAST || c == REDUCE) ? 1.0
                                               : (double)(n - 1) / n;

    size_t cap = max_bytes / sizeof(float) + 4;
    float *sb = malloc(cap * sizeof(float));
    float *rb = malloc(cap * sizeof(float));
    if (!sb || !rb) {
        fprintf(stderr, "rank %d: cannot allocate 2 x %zu bytes\n", rank, cap * sizeof(float));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (size_t i = 0; i < cap; i++) sb[i] = value(0, rank, i), rb[i] = 0;

    if (rank == 0) {
        char ver[MPI_MAX_LIBRARY_VERSION_STRING];
        int len = 0;
        MPI_Get_library_version(ver, &len);
        char *nl = strchr(ver, '\n');
        if (nl) *nl = '\0';
        printf("# peer: %s %s (MPI_FLOAT%s), out-of-place only\n", ver, mpi_names[c],
               reduces ? ", MPI_SUM" : "");
        printf("# nRanks %d minBytes %zu maxBytes %zu step: %d(factor) warmup iters: %d "
               "iters: %d validation: %d root: %d\n",
               n, min_bytes, max_bytes, factor, warmup, iters, check, rooted ? root : -1);
        printf("# time: mean per call over iters after a barrier, max over ranks\n");
        printf("#\n");
        printf("#%12s %12s %8s %7s %6s  %9s %8s %8s %6s  %9s %8s %8s %6s\n", "size", "count",
               "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
               "busbw", "#wrong");
        printf("#%12s %12s %8s %7s %6s  %9s %8s %8s %6s  %9s %8s %8s %6s\n", "(B)",
               "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
               "(GB/s)", "");
        fflush(stdout);
    }

    /* Connection warm-up at the first size with a non-zero count. */
    for (size_t size = min_bytes;; size *= (size_t)factor) {
        struct shape s = shape_of(c, size > max_bytes ? max_bytes : size, n);
        if (s.count > 0 || size >= max_bytes) {
            for (int i = 0; i < CONNECT_WARMUP; i++) call(c, sb, rb, s.count, root);
            break;
        }
        if (size == 0) break;
    }

    double bw_sum = 0.0;
    int bw_count = 0;
    long long total_wrong = 0;
    unsigned seed = 1;
    for (size_t size = min_bytes;;) {
        struct shape s = shape_of(c, size, n);
        fill_input(c, sb, rb, s, rank, root, seed);
        for (int i = 0; i < warmup; i++) call(c, sb, rb, s.count, root);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < iters; i++) call(c, sb, rb, s.count, root);
        double t = (MPI_Wtime() - t0) / iters, tmax = 0.0;
        MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);

        long long wrong = 0, wrong_sum = 0;
        if (check) {
            seed++;
            memset(rb, 0xA5, s.recv * sizeof(float));
            fill_input(c, sb, rb, s, rank, root, seed);
            call(c, sb, rb, s.count, root);
            wrong = check_output(c, rb, s, rank, n, root, seed);
        }
        MPI_Reduce(&wrong, &wrong_sum, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
        seed++;

        if (rank == 0) {
            double algbw = tmax > 0 ? (double)s.count * sizeof(float) * alg_mult / tmax / 1e9 : 0;
            double busbw = algbw * bus;
            char ts[32], ws[32];
            fmt_time(ts, sizeof ts, tmax * 1e6);
            if (check)
                snprintf(ws, sizeof ws, "%6lld", wrong_sum);
            else
                snprintf(ws, sizeof ws, "%6s", "N/A");
            printf(" %12zu %12zu %8s %7s %6d  %s %8.2f %8.2f %s  %9s %8s %8s %6s\n",
                   (s.send > s.recv ? s.send : s.recv) * sizeof(float), s.count, "float",
                   reduces ? "sum" : "none", rooted ? root : -1, ts, algbw, busbw, ws, "N/A",
                   "N/A", "N/A", "N/A");
            fflush(stdout);
            bw_sum += busbw;
            bw_count++;
            total_wrong += wrong_sum;
        }
        if (size >= max_bytes) break;
        size = size * (size_t)factor > max_bytes ? max_bytes : size * (size_t)factor;
        if (size == 0) size = 1;
    }

    if (rank == 0) {
        printf("# Out of bounds values : %lld %s\n", total_wrong, total_wrong ? "FAILED" : "OK");
        printf("# Avg bus bandwidth    : %.4f\n", bw_count ? bw_sum / bw_count : 0.0);
        printf("#\n");
        fflush(stdout);
    }
    free(sb);
    free(rb);
    MPI_Bcast(&total_wrong, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return total_wrong ? 1 : 0;
}
