/*
 * sendrecv.c - MPI_Sendrecv ring benchmark, output modelled on the
 * nccl-tests sendrecv_perf table so the two can be compared line by line.
 *
 * Every rank sends `size` bytes to (rank+1)%n and receives `size` bytes from
 * (rank-1+n)%n in a single MPI_Sendrecv.  For each size:
 *   - `warmup` untimed iterations,
 *   - MPI_Barrier, then `iters` timed iterations (MPI_Wtime),
 *   - time = elapsed / iters, reduced with MAX across ranks,
 *   - algbw = size / time (GB/s, 1e9 bytes), busbw = algbw (factor 1),
 *   - one extra, untimed exchange into a poisoned receive buffer whose
 *     content is checked element by element (uint8 elements); the number of
 *     wrong elements, summed over ranks, is the #wrong column.
 *
 * Options (K/M/G suffixes are powers of 1024):
 *   -b MIN   smallest size in bytes          (default 8)
 *   -e MAX   largest size in bytes           (default 256M)
 *   -f F     multiplication factor           (default 2)
 *   -n N     timed iterations per size       (default 20)
 *   -w W     warmup iterations per size      (default 5)
 *   -c 0|1   check data                      (default 1)
 *   -L BYTES sizes >= BYTES use -l iterations (default 16M)
 *   -l N     timed iterations for sizes >= -L (default: same as -n)
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Untimed exchanges at the smallest size before the sweep. */
#define CONNECT_WARMUP 64

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

/* Byte expected at index i of a buffer sent by rank r.  Mixes both so that a
 * wrong peer, a shifted offset or a stale buffer all show up as errors. */
static inline uint8_t pattern(int r, size_t i)
{
    uint32_t x = (uint32_t)i * 2654435761u + (uint32_t)(r + 1) * 40503u;
    x ^= x >> 15;
    x ^= (uint32_t)(i >> 16) * 0x9e3779b9u;
    return (uint8_t)(x >> 24);
}

static void fmt_time(char *buf, size_t len, double us)
{
    if (us >= 10000.0)
        snprintf(buf, len, "%7.0f", us);
    else if (us >= 100.0)
        snprintf(buf, len, "%7.1f", us);
    else
        snprintf(buf, len, "%7.2f", us);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, nranks;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);

    size_t min_bytes = 8, max_bytes = 256ULL * 1024 * 1024;
    size_t large_thresh = 16ULL * 1024 * 1024;
    int factor = 2, iters = 20, warmup = 5, check = 1, large_iters = -1;

    int opt;
    while ((opt = getopt(argc, argv, "b:e:f:n:w:c:L:l:h")) != -1) {
        switch (opt) {
        case 'b': min_bytes = parse_size(optarg); break;
        case 'e': max_bytes = parse_size(optarg); break;
        case 'f': factor = atoi(optarg); break;
        case 'n': iters = atoi(optarg); break;
        case 'w': warmup = atoi(optarg); break;
        case 'c': check = atoi(optarg); break;
        case 'L': large_thresh = parse_size(optarg); break;
        case 'l': large_iters = atoi(optarg); break;
        default:
            if (rank == 0)
                fprintf(stderr,
                        "usage: %s [-b min] [-e max] [-f factor] [-n iters] "
                        "[-w warmup] [-c 0|1] [-L large_bytes] [-l large_iters]\n",
                        argv[0]);
            MPI_Finalize();
            return opt == 'h' ? 0 : 2;
        }
    }
    if (factor < 2) factor = 2;
    if (iters < 1) iters = 1;
    if (warmup < 0) warmup = 0;
    if (large_iters < 1) large_iters = iters;
    if (min_bytes < 1) min_bytes = 1;
    if (max_bytes < min_bytes) max_bytes = min_bytes;
    if (max_bytes > (size_t)INT32_MAX) {
        if (rank == 0)
            fprintf(stderr, "max size %zu exceeds the MPI int count limit\n", max_bytes);
        MPI_Finalize();
        return 2;
    }

    int next = (rank + 1) % nranks;
    int prev = (rank - 1 + nranks) % nranks;

    uint8_t *sendbuf = malloc(max_bytes);
    uint8_t *recvbuf = malloc(max_bytes);
    if (!sendbuf || !recvbuf) {
        fprintf(stderr, "rank %d: cannot allocate 2 x %zu bytes\n", rank, max_bytes);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    /* Fill (and thereby pre-touch) both buffers. */
    for (size_t i = 0; i < max_bytes; i++)
        sendbuf[i] = pattern(rank, i);
    memset(recvbuf, 0, max_bytes);

    if (rank == 0) {
        char ver[MPI_MAX_LIBRARY_VERSION_STRING];
        int len = 0;
        MPI_Get_library_version(ver, &len);
        char *nl = strchr(ver, '\n');
        if (nl) *nl = '\0';
        /* Open MPI's string reads "Open MPI v4.1.4, package: ..."; keep it whole. */
        printf("# peer: %s MPI_Sendrecv\n", ver);
        printf("# nThread 1 nRanks %d minBytes %zu maxBytes %zu step: %d(factor) "
               "warmup iters: %d iters: %d validation: %d\n",
               nranks, min_bytes, max_bytes, factor, warmup, iters, check);
        printf("# connection warm-up: %d untimed exchanges of %zu bytes before the sweep\n",
               CONNECT_WARMUP, min_bytes);
        if (large_iters != iters)
            printf("# iters for sizes >= %zu bytes: %d\n", large_thresh, large_iters);
        printf("#\n");
        printf("# Using ranks\n");
        fflush(stdout);
    }
    /* Rank listing in rank order, like nccl-tests' device listing. */
    {
        char host[256] = {0};
        gethostname(host, sizeof host - 1);
        char line[512];
        snprintf(line, sizeof line, "#  Rank %2d Pid %6d on %s peer-send %d peer-recv %d\n",
                 rank, (int)getpid(), host, next, prev);
        char *all = NULL;
        if (rank == 0)
            all = calloc((size_t)nranks, sizeof line);
        MPI_Gather(line, sizeof line, MPI_CHAR, all, sizeof line, MPI_CHAR, 0,
                   MPI_COMM_WORLD);
        if (rank == 0) {
            for (int r = 0; r < nranks; r++)
                fputs(all + (size_t)r * sizeof line, stdout);
            free(all);
        }
    }
    if (rank == 0) {
        printf("#\n");
        printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s\n",
               "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong");
        printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s\n",
               "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "");
        fflush(stdout);
    }

    /* Connection warm-up, untimed: Open MPI's vader BTL only sets up its
     * per-peer fast boxes after 16 messages to a peer, so without this the
     * first size measured pays for that setup (~5 us at 8 B instead of
     * ~0.3 us).  nccl-tests likewise warms up once before the sweep. */
    for (int i = 0; i < CONNECT_WARMUP; i++)
        MPI_Sendrecv(sendbuf, (int)min_bytes, MPI_BYTE, next, 0, recvbuf, (int)min_bytes,
                     MPI_BYTE, prev, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);

    double bw_sum = 0.0;
    int bw_count = 0;
    long long total_wrong = 0;

    for (size_t size = min_bytes; size <= max_bytes;) {
        int n = size >= large_thresh ? large_iters : iters;

        for (int i = 0; i < warmup; i++)
            MPI_Sendrecv(sendbuf, (int)size, MPI_BYTE, next, 0, recvbuf, (int)size,
                         MPI_BYTE, prev, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);

        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < n; i++)
            MPI_Sendrecv(sendbuf, (int)size, MPI_BYTE, next, 0, recvbuf, (int)size,
                         MPI_BYTE, prev, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        double t = (MPI_Wtime() - t0) / n;
        double tmax = 0.0;
        MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);

        long long wrong = 0, wrong_sum = 0;
        if (check) {
            memset(recvbuf, 0xA5, size);
            MPI_Sendrecv(sendbuf, (int)size, MPI_BYTE, next, 0, recvbuf, (int)size,
                         MPI_BYTE, prev, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (size_t i = 0; i < size; i++)
                wrong += recvbuf[i] != pattern(prev, i);
        }
        MPI_Reduce(&wrong, &wrong_sum, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);

        if (rank == 0) {
            double us = tmax * 1e6;
            double algbw = (double)size / tmax / 1e9;
            double busbw = algbw * 1.0;
            char ts[32];
            fmt_time(ts, sizeof ts, us);
            char ws[32];
            if (check)
                snprintf(ws, sizeof ws, "%6lld", wrong_sum);
            else
                snprintf(ws, sizeof ws, "%6s", "N/A");
            printf("  %10zu  %12zu  %8s  %6s  %6d  %7s  %6.2f  %6.2f  %6s\n", size, size,
                   "uint8", "none", -1, ts, algbw, busbw, ws);
            fflush(stdout);
            bw_sum += busbw;
            bw_count++;
            total_wrong += wrong_sum;
        }

        if (size > max_bytes / (size_t)factor)
            break;
        size *= (size_t)factor;
    }

    if (rank == 0) {
        printf("# Wrong elements total : %lld %s\n", total_wrong, total_wrong ? "FAILED" : "OK");
        printf("# Avg bus bandwidth    : %g \n", bw_count ? bw_sum / bw_count : 0.0);
        printf("#\n");
        fflush(stdout);
    }

    free(sendbuf);
    free(recvbuf);
    MPI_Bcast(&total_wrong, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return total_wrong ? 1 : 0;
}
