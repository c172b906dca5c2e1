#!/usr/bin/env bash
# Session 11, call 3 (2 GPUs): where the drop-in's alltoall (nccl-tests: 2n grouped sends
# and receives) loses 5-6 us against its sendrecv: fxperf alltoall_sends (the same group
# through the Rust API) next to sendrecv and the alltoall collective, LL lines on and off;
# the drop-in under MPI with FERROCX_NCCL_BLOCKING 1 and 0; a perf profile of the drop-in's
# alltoall on rank 0 if the host has perf.
set -u
O=$OUT/r; mkdir -p $O/p $O/m
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1
T0=$SECONDS
nvidia-smi -L > $O/gpus.txt 2>&1
{ command -v perf gdb ltrace valgrind nsys; ls /usr/local/cuda/bin | head -50; } > $O/tools.txt 2>&1
S="-b 32 -e 4M -f 4"
for b in alltoall_sends sendrecv alltoall; do
  for ll in 0 512K; do
    FERROCX_CE_P2P_LL_BYTES=$ll timeout 60 $B/fxperf --np 2 --mem cuda $S -n 500 -w 50 -c 1 $b > $O/p/fxperf-$b-ll$ll.log 2>&1
    echo "fxperf $b ll=$ll rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
  done
done
NP=2 SIZES="$S" ITERS="-n 500 -w 50" MPI_BENCHES="alltoall sendrecv" STEP_TIMEOUT=60 bash scripts/gpu-check.sh $B $O/m mpi > $O/console-m.txt 2>&1; echo "mpi rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
SRC=gpu-run/nccl-tests/build-mpi-ferrocx; D=$(cd gpu-run/nccl && pwd)
FERROCX_NCCL_BLOCKING=0 timeout 60 mpirun --allow-run-as-root --bind-to none -np 2 -x LD_LIBRARY_PATH=$D/lib -x NCCL_NVLS_ENABLE -x FERROCX_NCCL_BLOCKING $SRC/alltoall_perf $S -n 500 -w 50 -c 1 -g 1 > $O/m/dropin-alltoall-nonblocking.log 2>&1; echo "nonblocking rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
if command -v perf > /dev/null; then
  cat > $O/rank.sh <<EOS
#!/usr/bin/env bash
if [ "\$OMPI_COMM_WORLD_RANK" = 0 ]; then exec perf record -F 20000 -g -o $O/perf.data "\$@"; else exec "\$@"; fi
EOS
  chmod +x $O/rank.sh
  timeout 90 mpirun --allow-run-as-root --bind-to none -np 2 -x LD_LIBRARY_PATH=$D/lib -x NCCL_NVLS_ENABLE $O/rank.sh $SRC/alltoall_perf -b 32 -e 32 -n 20000 -w 100 -c 0 -g 1 > $O/m/perf-run.log 2>&1; echo "perf rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
  perf report -i $O/perf.data --stdio --no-children --percent-limit 0.7 2>/dev/null | grep -v "^$" | head -400 > $O/perf-flat.txt
  perf report -i $O/perf.data --stdio --children --percent-limit 2 -g none 2>/dev/null | grep -v "^$" | head -200 > $O/perf-children.txt
  rm -f $O/perf.data
fi
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; head -2 $O/gpus.txt; head -5 $O/tools.txt
for f in $O/p/*.log $O/m/dropin-mpi-*.log $O/m/dropin-alltoall-nonblocking.log; do echo "== $(basename $f)"; grep -E "^ +[0-9]" $f | awk '{printf "%s:%s/%s ", $1, $6, $9}'; echo; done
head -60 $O/perf-flat.txt 2>/dev/null | cut -c1-160
