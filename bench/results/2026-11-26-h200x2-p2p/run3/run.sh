#!/usr/bin/env bash
# Final tree: the size-mismatch test with its fixed assertion, and the point-to-point matrix again.
set -u
O=$OUT/r; mkdir -p $O
export NCCL_NVLS_ENABLE=0
FXTEST_WORKER=gpu-run/bin/fxtest-worker FERROCX_REQUIRE_GPU=1 timeout 200 gpu-run/bin/device-tests ce_names_a_send ce_runs_device_sends smoke_over_p2p_and_shm --nocapture --test-threads 1 > $O/device-p2p.log 2>&1; echo "device rc=$?" | tee $O/summary.txt
grep -E "^test |test result|PASS|MISMATCH" $O/device-p2p.log | cut -c1-220 | head -20
tar czf $OUT/logs.tgz -C $O .
