#!/usr/bin/env bash
# GPU checks and benchmarks of ferrocx on one host with two GPUs (two ranks, one GPU
# each; NP=4 or 8 for more), next to NCCL on the same GPUs. Writes every log into OUT
# and a summary.
#
#   scripts/gpu-check.sh BIN OUT [STEP...]
#
# BIN holds release binaries built on another machine (no Rust toolchain needed here):
# fxrun, fxperf, fxtest-worker, and the test binaries sdk-tests, core-tests, p2p-tests
# (see scripts/gpu-build.sh). STEPs (default: all, in this order): info detect kernels
# p2p device perf perf-unreg nccl torch. `device` runs tests/tests/device.rs (smoke over p2p and
# shm, the collective matrix on device memory over p2p and staged over shm, the seed-000
# mix 1000 iterations, a rank killed mid-transfer); the single steps smoke smoke-shm
# matrix-p2p matrix-staged sendrecv mix kill run one piece each. `sweep` measures
# all_reduce over FERROCX_NCHANNELS × FERROCX_DEVICE_CHUNK (SWEEP_CHANNELS, SWEEP_CHUNKS).
# nccl builds nccl-tests from NCCL_TESTS_SRC (default gpu-run/nccl-tests, a fetched
# copy, never committed) with the host's CUDA and NCCL, then runs it with -g 2 (one
# process: the host has no MPI). `torch` measures NCCL with one process per GPU through
# torch.distributed (scripts/nccl-torch-bench.py, torch-<bench>.log).
# scripts/bench-compare.py OUT prints ferrocx / NCCL side by side from the logs;
# scripts/gpu-session.sh runs groups of these steps in one device call, under a budget.
# `ce` runs the ce collective plugin's device tests (matrix at 2 and 4 ranks, reductions,
# CUDA graph replays, window cycles, a killed rank); `perf-ce` times alltoall, all_gather,
# gather, scatter, broadcast, all_reduce and reduce_scatter (CE_COLLS) on symmetric
# windows (-R 2) through ce and through the core (FERROCX_COLLECTIVES=^ce) in one run;
# `perf-ce-shots` ce's all_reduce forced one-shot and forced two-shot; `perf-direct` ce's
# direct modes off and forced (FERROCX_CE_DIRECT_BYTES=0 / 1G) on symmetric windows, alternated
# DIRECT_ROUNDS times for DIRECT_COLLS (default all_reduce broadcast all_gather); `perf-win` the
# PERF_COLLS on symmetric windows (-R 2, fxperf-win-<bench>.log, beside `nccl-sym`). `dropin-torch` runs nccl/tests/torch_dropin.py
# under torchrun with ferrocx's libnccl.so.2 preloaded (DROPIN, default gpu-run/nccl, from
# scripts/install-nccl.sh); `dropin-graph` runs nccl/tests/torch_graph.py likewise (torch.cuda.graph
# in each of CAPTURE_MODES, default global thread_local relaxed); `dropin-tests` builds nccl-tests against it and runs each
# benchmark with DROPIN_GPUS ranks in one process (default 1). `nccl-sym` runs nccl-tests
# on symmetric windows (-R 2), `nccl-ce` NCCL's copy-engine collectives (-R 2 -x 2,
# NCCL >= 2.28), `mpi` nccl-tests built with MPI against the drop-in, one process per GPU
# (when the host has mpicc and mpirun). With one GPU shared by the ranks, run `mps`
# first and `mps-stop` last (nvidia-cuda-mps-control).
# Never enables NVLink multicast (NCCL_NVLS_ENABLE=0; ferrocx never calls cuMulticastCreate).
set -uo pipefail
BIN="$(cd "$1" && pwd)"; OUT="$2"; shift 2
STEPS="${*:-info detect kernels p2p device perf perf-unreg nccl torch}"
SIZES="${SIZES:--b 8 -e 1G -f 2}"
# Ranks, one GPU each (fxperf --np, nccl-tests -g, mpirun -np): NP GPUs on the host.
NP="${NP:-2}"
ITERS="${ITERS:--n 20 -w 5}"
export NCCL_NVLS_ENABLE=0 FERROCX_TIMEOUT="${FERROCX_TIMEOUT:-120}"
# Enough hardware queues that no copy waits behind a stream wait (docs/ENV.md;
# needed when ranks share one GPU under MPS).
export CUDA_DEVICE_MAX_CONNECTIONS="${CUDA_DEVICE_MAX_CONNECTIONS:-32}"
mkdir -p "$OUT"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"

run_step() {  # run_step NAME CMD...: log to OUT/NAME.log, result line in the summary
  local name="$1"; shift
  local t0=$SECONDS
  echo "== $name: $*" | tee -a "$SUMMARY"
  timeout "${STEP_TIMEOUT:-900}" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "   $name: rc=$rc ($((SECONDS - t0)) s)" | tee -a "$SUMMARY"
  tail -n 3 "$OUT/$name.log" | sed 's/^/   | /' | tee -a "$SUMMARY"
  return 0
}

for s in $STEPS; do
  case "$s" in
    info)
      { date -Is; hostname; nvidia-smi; nvidia-smi topo -m; nvcc --version 2>&1 | tail -2
        ls /usr/lib/x86_64-linux-gnu/libnccl* /usr/local/cuda/lib64/libnvrtc* 2>&1; } > "$OUT/info.txt" 2>&1 ;;
    detect) run_step detect "$BIN/sdk-tests" cuda --nocapture ;;
    smoke) FERROCX_DEBUG="${FERROCX_DEBUG:-info}" run_step smoke "$BIN/fxrun" -n 2 -- "$BIN/fxtest-worker" dev-smoke ;;
    smoke-shm) FERROCX_TRANSPORTS=shm FERROCX_DEBUG="${FERROCX_DEBUG:-info}" run_step smoke-shm "$BIN/fxrun" -n 2 -- "$BIN/fxtest-worker" dev-smoke ;;
    kernels) run_step kernels "$BIN/core-tests" device:: --nocapture --test-threads 1
             FERROCX_REQUIRE_GPU=1 run_step gpu-kernels "$BIN/gpu-kernels" --nocapture --test-threads 1 ;;
    p2p) [ -x "$BIN/p2p-tests" ] && run_step p2p "$BIN/p2p-tests" --nocapture --test-threads 1 ;;
    matrix-p2p) run_step matrix-p2p "$BIN/fxrun" -n 2 -- "$BIN/fxtest-worker" coll-matrix --mem cuda ;;
    matrix-staged) FERROCX_TRANSPORTS=shm run_step matrix-staged "$BIN/fxrun" -n 2 -- \
        "$BIN/fxtest-worker" coll-matrix --mem cuda --filter "${STAGED_FILTER:-count=1000}" ;;
    sendrecv) run_step sendrecv "$BIN/fxperf" --np "$NP" --mem cuda -b 0 -e 256M -f 4 -n 5 -w 1 -c 1 sendrecv ;;
    device) FXTEST_WORKER="$BIN/fxtest-worker" FERROCX_REQUIRE_GPU=1 \
        run_step device "$BIN/device-tests" --nocapture --test-threads 1 ;;
    mps) nvidia-cuda-mps-control -d; echo "   mps: started (rc $?)" | tee -a "$SUMMARY" ;;
    mps-stop) echo quit | nvidia-cuda-mps-control ;;
    ce) FXTEST_WORKER="$BIN/fxtest-worker" FERROCX_REQUIRE_GPU=1 \
        run_step ce "$BIN/device-tests" ce_ --nocapture --test-threads 1 ;;
    perf-ce)
      for b in ${CE_COLLS:-alltoall all_gather gather scatter broadcast all_reduce reduce_scatter}; do
        for impl in ce core; do
          # shellcheck disable=SC2086
          FERROCX_COLLECTIVES="$([ "$impl" = core ] && echo '^ce')" run_step "fxperf-$b-$impl" \
            "$BIN/fxperf" --np "$NP" --mem cuda -R 2 $SIZES $ITERS -c 1 "$b"
        done
      done ;;
    perf-ce-shots)  # ce's all_reduce forced one-shot (out of place) and two-shot: the crossover
      for v in one:1G two:0; do
        # shellcheck disable=SC2086
        FERROCX_CE_ONESHOT_BYTES="${v#*:}" run_step "fxperf-all_reduce-ce-${v%%:*}" \
          "$BIN/fxperf" --np "$NP" --mem cuda -R 2 $SIZES $ITERS -c 1 all_reduce
      done ;;
    perf-direct)  # ce's direct modes off and forced on symmetric windows (-R 2), alternated (DIRECT_ROUNDS)
      for round in $(seq "${DIRECT_ROUNDS:-2}"); do
        for b in ${DIRECT_COLLS:-all_reduce broadcast all_gather}; do
          for v in off:0 on:1G; do
            # shellcheck disable=SC2086
            FERROCX_CE_DIRECT_BYTES="${v#*:}" run_step "fxperf-$b-direct-${v%%:*}-$round" \
              "$BIN/fxperf" --np "$NP" --mem cuda -R 2 $SIZES $ITERS -c 1 "$b"
          done
        done
      done ;;
    mix) run_step mix "$BIN/fxrun" -n 2 -- "$BIN/fxtest-worker" coll-mix 0 1000 --mem cuda ;;
    kill) [ -n "$(grep -l ring-loop-dev "$BIN/fxtest-worker" 2>/dev/null)" ] && \
        run_step kill "$BIN/fxrun" -n 2 -- "$BIN/fxtest-worker" ring-loop-dev 8388608 --victim 1 --kill-after-ms 800 ;;
    perf)  # PERF_COLLS: which (default all six)
      # fxperf warms each process's first row for 200 ms (idle GPUs start slow:
      # sendrecv 8 B 38 us instead of 9-13, bench/results/2026-11-27-session11).
      for b in ${PERF_COLLS:-sendrecv alltoall all_gather all_reduce reduce_scatter broadcast}; do
        # shellcheck disable=SC2086
        run_step "fxperf-$b" "$BIN/fxperf" --np "$NP" --mem cuda $SIZES $ITERS -c 1 "$b"
      done ;;
    perf-win)  # fxperf on symmetric windows (-R 2): fxperf-win-<bench>.log, next to nccl-sym
      for b in ${PERF_COLLS:-sendrecv alltoall all_gather all_reduce reduce_scatter broadcast}; do
        # shellcheck disable=SC2086
        run_step "fxperf-win-$b" "$BIN/fxperf" --np "$NP" --mem cuda -R 2 $SIZES $ITERS -c 1 "$b"
      done ;;
    perf-unreg)  # fxperf registers its buffers by default (-R 1); these do not
      for b in ${PERF_COLLS:-sendrecv all_gather}; do
        # shellcheck disable=SC2086
        run_step "fxperf-$b-unreg" "$BIN/fxperf" --np "$NP" --mem cuda -R 0 $SIZES $ITERS -c 1 "$b"
      done ;;
    sweep)
      for ch in ${SWEEP_CHANNELS:-2 4 8}; do
        for ck in ${SWEEP_CHUNKS:-4194304 16777216}; do
          # shellcheck disable=SC2086
          FERROCX_NCHANNELS=$ch FERROCX_DEVICE_CHUNK=$ck run_step "sweep-${SWEEP_BENCH:-all_reduce}-ch$ch-chunk$ck" \
            "$BIN/fxperf" --np "$NP" --mem cuda ${SWEEP_SIZES:--b 16M -e 1G -f 4} $ITERS -c 0 "${SWEEP_BENCH:-all_reduce}"
        done
      done ;;
    nccl)
      SRC="${NCCL_TESTS_SRC:-gpu-run/nccl-tests}"
      if [ -d "$SRC" ]; then
        run_step nccl-build make -C "$SRC" -j 16 CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}" \
          NVCC_GENCODE="${NVCC_GENCODE:--gencode=arch=compute_90,code=sm_90}" ${NCCL_HOME:+NCCL_HOME=$NCCL_HOME}
        for b in ${PERF_COLLS:-sendrecv alltoall all_gather all_reduce reduce_scatter broadcast}; do
          # shellcheck disable=SC2086
          run_step "nccl-$b" "$SRC/build/${b}_perf" $SIZES $ITERS -c 1 -g "$NP"
        done
      else
        echo "   nccl: no nccl-tests source at $SRC" | tee -a "$SUMMARY"
      fi ;;
    nccl-sym)  # NCCL on symmetric windows (-R 2): its symmetric kernels, next to fxperf -R 2
      SRC="${NCCL_TESTS_SRC:-gpu-run/nccl-tests}"
      for b in ${PERF_COLLS:-sendrecv alltoall all_gather all_reduce reduce_scatter broadcast}; do
        # shellcheck disable=SC2086
        run_step "nccl-sym-$b" "$SRC/build/${b}_perf" $SIZES $ITERS -c 1 -g "$NP" -R 2
      done ;;
    nccl-ce)  # NCCL's copy-engine collectives: symmetric windows and the zero-CTA policy (NCCL >= 2.28)
      SRC="${NCCL_TESTS_SRC:-gpu-run/nccl-tests}"
      for b in alltoall all_gather gather scatter broadcast; do
        # shellcheck disable=SC2086
        run_step "nccl-ce-$b" "$SRC/build/${b}_perf" $SIZES $ITERS -c 1 -g "$NP" -R 2 -x 2
      done ;;
    mpi)  # nccl-tests with MPI (one process per GPU) against NCCL and the drop-in, when the host has MPI
      SRC="$(cd "${NCCL_TESTS_SRC:-gpu-run/nccl-tests}" && pwd)"; D="$(cd "${DROPIN:-gpu-run/nccl}" && pwd)"
      MPICC="$(command -v mpicc || true)"
      { command -v mpirun; [ -n "$MPICC" ] && "$MPICC" -showme:incdirs; } > "$OUT/mpi-probe.log" 2>&1
      if [ -n "$MPICC" ] && command -v mpirun > /dev/null; then
        # nccl-tests takes MPI_HOME/include and MPI_HOME/lib: Debian's Open MPI keeps
        # both under /usr/lib/<arch>/openmpi, which mpicc names.
        INC="$("$MPICC" -showme:incdirs 2>/dev/null | awk '{print $1}')"
        MH="$(dirname "${INC:-/usr/include/x}")"
        run_step mpi-build make -C "$SRC" -j 16 MPI=1 MPI_HOME="$MH" BUILDDIR="$SRC/build-mpi-ferrocx" \
          NCCL_HOME="$D" CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}" \
          NVCC_GENCODE="${NVCC_GENCODE:--gencode=arch=compute_90,code=sm_90}"
        for b in ${MPI_BENCHES:-all_reduce all_gather alltoall broadcast reduce_scatter sendrecv}; do
          # shellcheck disable=SC2086
          # --bind-to none: a rank bound to one core has its progress thread and the
          # thread waiting on its stream take turns (the drop-in warns of it).
          run_step "dropin-mpi-$b" mpirun --allow-run-as-root --bind-to none -np "$NP" -x LD_LIBRARY_PATH="$D/lib" \
            -x FERROCX_TIMEOUT -x NCCL_NVLS_ENABLE -x FERROCX_NCCL_BLOCKING="${FERROCX_NCCL_BLOCKING:-1}" \
            "$SRC/build-mpi-ferrocx/${b}_perf" $SIZES $ITERS -c 1 -g 1
        done
      else
        echo "   mpi: no mpicc/mpirun on this host" | tee -a "$SUMMARY"
      fi ;;
    torch)  # NCCL with one process per GPU (torch.distributed), for want of MPI for nccl-tests
      # shellcheck disable=SC2086
      run_step torch python3 "$(dirname "$0")/nccl-torch-bench.py" "$OUT" $SIZES $ITERS ;;
    dropin-torch)  # torch.distributed's nccl backend on ferrocx's libnccl.so.2 (DROPIN: its install prefix)
      D="$(cd "${DROPIN:-gpu-run/nccl}" && pwd)"
      FERROCX_NCCL_EXPECT="$D/lib/libnccl.so.2" LD_PRELOAD="$D/lib/libnccl.so.2" \
        run_step dropin-torch python3 -m torch.distributed.run --nproc-per-node "${DROPIN_RANKS:-3}" \
        "$(dirname "$0")/../nccl/tests/torch_dropin.py" ;;
    dropin-graph)  # torch.cuda.graph (global capture mode by default) on ferrocx's libnccl.so.2
      D="$(cd "${DROPIN:-gpu-run/nccl}" && pwd)"
      for m in ${CAPTURE_MODES:-global thread_local relaxed}; do
        FXT_CAPTURE_MODE="$m" LD_PRELOAD="$D/lib/libnccl.so.2" \
          run_step "dropin-graph-$m" python3 -m torch.distributed.run --nproc-per-node "${DROPIN_RANKS:-2}" \
          "$(dirname "$0")/../nccl/tests/torch_graph.py"
      done ;;
    dropin-tests)  # nccl-tests built against the drop-in, run with one rank (-g 1: more need MPI or GPUs)
      SRC="$(cd "${NCCL_TESTS_SRC:-gpu-run/nccl-tests}" && pwd)"; D="$(cd "${DROPIN:-gpu-run/nccl}" && pwd)"
      run_step dropin-build make -C "$SRC" -j 16 MPI=0 BUILDDIR="$SRC/build-ferrocx" NCCL_HOME="$D" \
        CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}" NVCC_GENCODE="${NVCC_GENCODE:--gencode=arch=compute_90,code=sm_90}"
      for b in all_reduce all_gather broadcast reduce_scatter reduce alltoall sendrecv; do
        LD_LIBRARY_PATH="$D/lib" run_step "dropin-$b" "$SRC/build-ferrocx/${b}_perf" \
          ${DROPIN_SIZES:--b 8 -e 64M -f 8} -n 20 -w 5 -c 1 -g "${DROPIN_GPUS:-1}"
      done ;;
    *) echo "unknown step $s" | tee -a "$SUMMARY" ;;
  esac
done
echo "logs in $OUT"
