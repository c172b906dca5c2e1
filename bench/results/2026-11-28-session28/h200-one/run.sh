#!/usr/bin/env bash
# Session 28, one call on one H200 (16 cores): (A) host memory, no GPU visible, the
# tree before (51beba4) and after the PREFETCHW change (a7c4cee) and Open MPI in
# the same loop, alternated three rounds, 2 and 4 ranks bound to cores, 8 B-4 KiB:
# broadcast, reduce, gather with FERROCX_CHECK_CALLS=deferred, broadcast and
# all_reduce checked (the default); (B) ranks sharing the GPU under MPS: ce's Simple
# kernel with FERROCX_CE_SIMPLE_CHUNK 32K and 256K against auto, fxperf -c 1 at
# 16 MiB-256 MiB, 2 ranks (whole-slot rule, gather to 32 MiB blocks) and 4 ranks (the
# chain broadcast from every root), on windows and off.
set -u
O=$OUT/r; mkdir -p $O/host $O/gpu
A=gpu-run/abL; T0=$SECONDS; S=$O/summary.txt; : > $S
{ lscpu | grep -E "Model name|^CPU\(s\)"; mpirun --version | head -1; nvidia-smi -L; } > $O/machine.txt 2>&1
make -C bench BUILD=$O/mpibuild > $O/mpibuild.log 2>&1; echo "mpibuild rc=$?" >> $S
SZ="-b 8 -e 4K -f 8"; IT="-n 50000 -w 2000"
for r in 1 2 3; do for np in 2 4; do
  M=(mpirun --allow-run-as-root -np $np --bind-to core --mca pml ob1 --mca btl self,vader --mca btl_vader_single_copy_mechanism cma)
  for c in broadcast reduce gather; do
    for v in old new; do
      FERROCX_CHECK_CALLS=deferred CUDA_VISIBLE_DEVICES= timeout 60 $A/$v/fxperf --np $np --bind core $SZ $IT -c 1 $c > $O/host/def-$v.$c.np$np.$r 2>&1
    done
    CUDA_VISIBLE_DEVICES= timeout 60 "${M[@]}" $O/mpibuild/colls $SZ $IT -c 1 $c > $O/host/ompi.$c.np$np.$r 2>&1
  done
  for c in broadcast all_reduce; do for v in old new; do
    CUDA_VISIBLE_DEVICES= timeout 60 $A/$v/fxperf --np $np --bind core $SZ $IT -c 1 $c > $O/host/chk-$v.$c.np$np.$r 2>&1
  done; done
  CUDA_VISIBLE_DEVICES= timeout 60 "${M[@]}" $O/mpibuild/colls $SZ $IT -c 1 all_reduce > $O/host/ompi.all_reduce.np$np.$r 2>&1
done; done
echo "host done at $((SECONDS-T0))s" >> $S
rm -rf $O/mpibuild
# (B) GPU under MPS
export CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_TIMEOUT=60 NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER CUDA_VISIBLE_DEVICES=0
nvidia-cuda-mps-control -d; sleep 1
g() { # g NAME NP COLL SIZES REG ARGS/ENV...
  local name=$1 np=$2 coll=$3 sizes=$4 reg=$5; shift 5
  env "$@" timeout 100 $A/new/fxperf --np $np --mem cuda -R $reg $sizes -n 5 -w 2 -c 1 $coll > $O/gpu/$name.log 2>&1
  echo "$name rc=$? at $((SECONDS-T0))s" >> $S
}
L="-b 16M -e 256M -f 4"
for k in auto 32K 256K; do
  for c in all_reduce reduce_scatter all_gather alltoall gather; do
    [ $((SECONDS-T0)) -lt 470 ] && g n2-$c-$k 2 $c "$L" 1 FERROCX_CE_SIMPLE_CHUNK=$k
  done
  [ $((SECONDS-T0)) -lt 490 ] && g w2-broadcast-$k 2 "-r all broadcast" "$L" 2 FERROCX_CE_SIMPLE_CHUNK=$k
  [ $((SECONDS-T0)) -lt 510 ] && g n4-broadcast-$k 4 "-r all broadcast" "$L" 1 FERROCX_CE_SIMPLE_CHUNK=$k
done
echo quit | nvidia-cuda-mps-control
echo "total $((SECONDS-T0))s" >> $S
tar czf $OUT/logs.tgz -C $O .
cat $S
for np in 2 4; do for c in broadcast reduce gather; do for v in def-old def-new ompi; do
  printf "%-10s np%s %-8s" $c $np $v; for r in 1 2 3; do awk '/^ +[0-9]+ /{printf " %s", $6} END{printf " |"}' $O/host/$v.$c.np$np.$r; done; echo
done; done; for c in broadcast all_reduce; do for v in chk-old chk-new ompi; do
  printf "%-10s np%s %-8s" $c $np $v; for r in 1 2 3; do awk '/^ +[0-9]+ /{printf " %s", $6} END{printf " |"}' $O/host/$v.$c.np$np.$r; done; echo
done; done; done
awk '/^ +[0-9]+ /{w+=$9+$13} END{print "host fxperf wrong:", w+0}' $O/host/def-* $O/host/chk-*
for f in $O/gpu/*.log; do printf '%-26s' $(basename $f .log); grep -E "^ +[0-9]" $f | awk '{printf " %s:%s/%s%s", $1/1048576, $6, $10, ($9+$13>0?"!W":"")}'; grep -c -i 'error\|panick' $f | sed 's/^/ err=/'; grep -m1 -o "ran on [^;]*" $f; done
