#!/usr/bin/env bash
# Head sampling against --full on the whole FA2 grid (120 points: h100 and h200 v2/v3, a100 v2), on the GPU
# machine's CPUs (bash experiments/h200_sampling.sh; about 5 minutes on 16 cores, at most LIMIT seconds,
# default 420). Every point runs on the whole chip, with the default sample and with the samples asked from
# 16 and 33 SMs up (what a larger sample would buy: experiments/results/sampling-sizes.json), in a pool of
# one process per core, the longest first (experiments/sampling_exactness.py measure); SMS="" leaves the larger
# samples out (then about 4 minutes: the whole chip and the default only). Needs no GPU; run
# from the repository root with simpy's wheel in .whl/. Writes under $OUT: full.jsonl, default.jsonl,
# sms16.jsonl, sms33.jsonl (one run a line, as they finished: a run cut off by the limit is missing, and a
# second call with the same $OUT resumes), table.json (default against full:
# experiments/results/sampling-exactness.json's form), table-sms*.json, sampling.txt (the log and the
# summary lines), summary.txt, and all of it in results.tgz.
set -uo pipefail
OUT=${OUT:-out}
LIMIT=${LIMIT:-420}
SMS=${SMS-16 33}
mkdir -p "$OUT"
source experiments/device_env.sh
source experiments/device_steps.sh
git rev-parse HEAD > "$OUT/commit.txt" 2>/dev/null || true
step sampling $((LIMIT + 40)) python3 -m flashsim.experiments.sampling_exactness measure "$OUT" \
  --jobs "$(nproc)" ${SMS:+--sms $SMS} --limit "$LIMIT"
tar czf "$OUT/results.tgz" -C "$OUT" --ignore-failed-read full.jsonl default.jsonl sms16.jsonl sms33.jsonl \
  table.json table-sms16.json table-sms33.json sampling.txt summary.txt commit.txt
finish
