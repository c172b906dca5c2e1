FERROCX_NCCL_BLOCKING=0 NCCL_NVLS_ENABLE=0 NP=2 SIZES="-b 8 -e 64M -f 4" MPI_BENCHES="sendrecv alltoall" STEP_TIMEOUT=60 bash scripts/gpu-check.sh gpu-run/bin OUT mpi
