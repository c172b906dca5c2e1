#!/bin/bash
# Session 35: instructions per call under callgrind, from host_collective's inclusive count
# / 20100 (fxperf -n 10000 -w 100: 10,100 out-of-place and 10,100 in-place calls), one
# number per rank. usage: BIN=… CASES="deferred broadcast 1,deferred broadcast 2" callgrind.sh
cd "$(git rev-parse --show-toplevel)"
B=${BIN:-target/release/fxperf}
IFS=,; for case in ${CASES:-deferred broadcast 2}; do IFS=" "
  set -- $case
  d=${TMPDIR:-/tmp}/cg.$1.$2.$3; rm -rf $d; mkdir -p $d
  FERROCX_CHECK_CALLS=$1 FERROCX_TIMEOUT=120 valgrind --tool=callgrind --trace-children=yes --callgrind-out-file=$d/cg.%p $B --np $3 -b 8 -e 8 -n 10000 -w 100 -c 0 $2 >/dev/null 2>&1
  out="$case:"
  for f in $d/cg.*; do
    n=$(callgrind_annotate --inclusive=yes $f 2>/dev/null | grep -E "^ *[0-9,]+ .*host_collective \[" | head -1 | awk '{n=$1; gsub(",","",n); print n}')
    [ -n "$n" ] && out="$out $(( n / 20100 ))"
  done
  echo "$out"
done
