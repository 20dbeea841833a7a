#!/usr/bin/env bash
# Which clock the SM, the L2 and the DRAM run at while attention kernels and memory-bound kernels run, and each
# launch's L2 bytes (bash experiments/h200_clock_domains.sh; under a minute on an H200): Nsight Compute with
# unmodified clocks over our v3 and v2, SDPA's cuDNN and flash on development shapes (the FA2 grid's batch 16 x
# 16 heads at N = 1024 and batch 4 at N = 4096, d128; LLM-shaped d256 and d128 causal GQA shapes), and the
# input generation between them (memory-bound). Read by `python3 -m flashsim.experiments.clock_domains
# summarize`. Run from the repository root with simpy's wheel in .whl/ and the cubins built where nvcc is.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
source experiments/device_env.sh
source experiments/device_steps.sh
METRICS=$(python3 -c "from flashsim.experiments.clock_domains import METRICS; print(','.join(METRICS))")
SPECS="v3,16,16,16,1024,1024,128,0 sdpa-cudnn,16,16,16,1024,1024,128,0 v2,16,16,16,1024,1024,128,0"
SPECS+=" sdpa-flash,16,16,16,1024,1024,128,0 v3,4,16,16,4096,4096,128,0 sdpa-cudnn,4,16,16,4096,4096,128,0"
SPECS+=" v3,64,32,8,171,460,256,1 sdpa-cudnn,64,32,8,171,460,256,1 v3,64,8,2,658,2560,128,1 v3,8,16,16,2048,2048,128,1"
# shellcheck disable=SC2086  # SPECS is a list of words
step ncu-clocks 420 ncu --clock-control none --metrics "$METRICS" --csv --print-units base -f \
  python3 -m flashsim.experiments.clock_domains target $SPECS
gzip -9 -f "$OUT/ncu-clocks.txt"
step summarize 60 python3 -m flashsim.experiments.clock_domains summarize "$OUT/ncu-clocks.txt.gz" \
  --out "$OUT/clock-domains.json"
finish
