# Sourced by the device-session scripts after device_env.sh: the GPU's name and clocks in $OUT/gpu.txt, and
# step NAME SECONDS COMMAND... (the command's output in $OUT/NAME.txt, its exit status in $OUT/summary.txt;
# any failure makes `finish` print FAIL and exit 1).
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1
status=0
step() {
  local name=$1 limit=$2
  shift 2
  timeout "$limit" "$@" > "$OUT/$name.txt" 2>&1
  local rc=$?
  echo "$name: exit $rc ($(tail -1 "$OUT/$name.txt"))" | tee -a "$OUT/summary.txt"
  [ "$rc" -eq 0 ] || status=1
}
finish() {
  [ "$status" -eq 0 ] && echo PASS | tee -a "$OUT/summary.txt" || echo FAIL | tee -a "$OUT/summary.txt"
  exit "$status"
}
# Counters the mma.sync kernels' Nsight Compute runs add to the full set (instructions by pipe, ldmatrix and
# HMMA counts, active cycles and the clock), for ncu_configs below; SMEM_COUNTS: shared-memory wavefronts and
# bank conflicts of loads
MMA_SYNC_COUNTS=smsp__inst_executed.sum,smsp__inst_executed_pipe_alu.sum,smsp__inst_executed_pipe_fma.sum
MMA_SYNC_COUNTS+=,smsp__inst_executed_pipe_lsu.sum,smsp__inst_executed_op_ldsm.sum
MMA_SYNC_COUNTS+=,sm__inst_executed_pipe_tensor_op_hmma.sum
MMA_SYNC_COUNTS+=,smsp__cycles_active.avg,sm__cycles_active.max,sm__cycles_elapsed.avg.per_second
SMEM_LD_COUNTS=l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum
SMEM_LD_COUNTS+=,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum
# ... and the wgmma kernels' (instructions by pipe, the special-function pipe's among them, HGMMA counts,
# active cycles and the clock)
WGMMA_COUNTS=smsp__inst_executed.sum,smsp__inst_executed_pipe_alu.sum,smsp__inst_executed_pipe_fma.sum
WGMMA_COUNTS+=,smsp__inst_executed_pipe_xu.sum,smsp__inst_executed_pipe_lsu.sum,sm__inst_executed_pipe_tensor_op_gmma.sum
WGMMA_COUNTS+=,smsp__cycles_active.avg,sm__cycles_active.max,sm__cycles_elapsed.avg.per_second
# ncu_configs KERNEL_REGEX COUNTS "IMPL D N CAUSAL B H [NAME]" ...: for each configuration, Nsight Compute's full
# set with COUNTS, its details page and its per-SASS source page (CSV) as ncu-NAME{,-details,-sass}.txt (NAME
# IMPL-dD-nN-cC unless given)
ncu_configs() {
  local kernels=$1 counts=$2 cfg name
  shift 2
  local cfgs=("$@")
  for cfg in "${cfgs[@]}"; do
    set -- $cfg
    name=${7:-"$1-d$2-n$3-c$4"}
    step "ncu-$name" 150 ncu --clock-control none --set full --import-source no --metrics "$counts" \
      --kernel-name "regex:$kernels" --launch-skip 1 --launch-count 1 -f -o "$OUT/$name" \
      python3 -m flashsim.experiments.bench_kernels --profile-target "$1,$2,$3,$4,$5,$6"
    step "ncu-$name-details" 30 ncu -i "$OUT/$name.ncu-rep" --print-details all
    step "ncu-$name-sass" 40 ncu -i "$OUT/$name.ncu-rep" --page source --csv --print-source sass
    rm -f "$OUT/$name.ncu-rep"
  done
}
# ncu_microbench BENCHMARK KERNEL...: Nsight Compute's full set of each named kernel of a `flashsim calibrate`
# microbenchmark (its first launch in a --quick run), with its details page and per-SASS source page (CSV)
# as ncu-KERNEL{,-details,-sass}.txt
ncu_microbench() {
  local bench=$1 k
  shift
  for k in "$@"; do
    step "ncu-$k" 150 ncu --clock-control none --set full --import-source no --kernel-name "$k" --launch-count 1 \
      -f -o "$OUT/$k" python3 -m flashsim.cli calibrate --only "$bench" --quick --out-dir "$OUT/cal-$k"
    step "ncu-$k-details" 30 ncu -i "$OUT/$k.ncu-rep" --print-details all
    step "ncu-$k-sass" 40 ncu -i "$OUT/$k.ncu-rep" --page source --csv --print-source sass
    rm -rf "$OUT/$k.ncu-rep" "$OUT/cal-$k"
  done
}
# pack_results 'GLOB'...: the Nsight Compute pages under $OUT gzipped, then the files the globs name in $OUT (quote
# them: they are matched there) into $OUT/results.tgz; only the archive and summary.txt stay (the machine returns
# a handful of files)
pack_results() {
  gzip -f "$OUT"/ncu-*-sass.txt "$OUT"/ncu-*-details.txt 2>/dev/null
  (cd "$OUT" && tar czf results.tgz --ignore-failed-read $* \
    && find . -mindepth 1 -maxdepth 1 ! -name results.tgz ! -name summary.txt -exec rm -rf {} +)
}
