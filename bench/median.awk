# Per-size median over several sendrecv runs concatenated in one file.
# Reads nccl-tests-style rows (size count type redop root time algbw busbw #wrong)
# and prints the same columns, with time/algbw/busbw the median over runs and
# #wrong the sum over runs, best = busbw of the fastest run, plus the Avg bus bandwidth of the median rows.
function median(arr, n,    i, j, t) {
    for (i = 2; i <= n; i++) { t = arr[i]; for (j = i - 1; j >= 1 && arr[j] > t; j--) arr[j + 1] = arr[j]; arr[j + 1] = t }
    return (n % 2) ? arr[(n + 1) / 2] : (arr[n / 2] + arr[n / 2 + 1]) / 2
}
/^ +[0-9]+ +[0-9]+ / {
    s = $1
    if (!(s in n)) { order[++ns] = s; cnt[s] = $2; typ[s] = $3; op[s] = $4; root[s] = $5 }
    k = ++n[s]; T[s, k] = $6; W[s] += $9
}
END {
    printf "# median over runs (time median; algbw = busbw = size / median time; best = busbw of the fastest run)\n"
    printf "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %4s  %6s\n", "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "runs", "best"
    sum = 0
    for (i = 1; i <= ns; i++) {
        s = order[i]; m = n[s]
        for (k = 1; k <= m; k++) a[k] = T[s, k]
        t = median(a, m); tb = a[1]; delete a
        bw = s / (t * 1e-6) / 1e9; sum += bw
        ts = (t >= 10000) ? sprintf("%7.0f", t) : (t >= 100) ? sprintf("%7.1f", t) : sprintf("%7.2f", t)
        printf "  %10d  %12d  %8s  %6s  %6d  %7s  %6.2f  %6.2f  %6d  %4d  %6.2f\n", s, cnt[s], typ[s], op[s], root[s], ts, bw, bw, W[s], m, s / (tb * 1e-6) / 1e9
    }
    printf "# Avg bus bandwidth (median rows) : %g\n", ns ? sum / ns : 0
}
