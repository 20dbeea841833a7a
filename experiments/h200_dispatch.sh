#!/usr/bin/env bash
# Thread-block dispatch onto one SM (bash experiments/h200_dispatch.sh; under a minute, at most 3): flashsim
# calibrate --only launch, whose cta_stamp runs now include one wave of two blocks per SM. Per SM, the second
# block's start minus the first's (dispatch_pair_gap_cycles, with its 10th and 90th percentiles) says whether
# an SM starts the blocks it takes at once together (about 0) or one after another (about cta_launch_cycles,
# the end-to-next-start gap beside it). Measured on the H200 (results/h200/dispatch/): 28 cycles, so the
# simulator starts an SM's blocks of one wave together. Run
# from the repository root with simpy's wheel in .whl/. Writes $OUT/dispatch.json (the calibration report),
# dispatch.txt (the numbers), gpu.txt, summary.txt, and all of it in results.tgz.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
source experiments/device_env.sh
source experiments/device_steps.sh
step dispatch-log 180 python3 -m flashsim.cli calibrate --only launch --out-dir "$OUT/cal" --json
cp "$OUT/cal/calibration.json" "$OUT/dispatch.json" 2>/dev/null
python3 - "$OUT/dispatch.json" <<'PY' | tee "$OUT/dispatch.txt"
import json, sys
la = json.load(open(sys.argv[1]))["results"].get("launch", {})
for key in ("cta_launch_cycles", "dispatch_pair_gap_cycles", "dispatch_pair_gap_p10_p90", "dispatch_pair_sms",
            "dispatch_pair_sms_with_two", "dispatch_pair_how"):
    print(f"{key}: {la.get(key)}")
PY
tar czf "$OUT/results.tgz" -C "$OUT" --ignore-failed-read dispatch.json dispatch.txt dispatch-log.txt gpu.txt summary.txt
finish
