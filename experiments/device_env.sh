# Sourced by the device-session scripts: $OUT (the folder whose files come back; `out` where unset) made and
# absolute, the carried wheels (simpy, ...) into /tmp/site, and the checkout importable as the `flashsim`
# package without installing it (the device image has no network).
OUT=${OUT:-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
ln -sfn "$PWD" /tmp/site/flashsim
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 FLASHSIM_KERNEL_DIR=$PWD/build/kernels
