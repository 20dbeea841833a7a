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
