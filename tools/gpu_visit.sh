#!/usr/bin/env bash
# The 2026-11-26 H100 visit in one command (issues 28 and 29; docs/gpu-session.md): host facts,
# cuDNN's API log of the convs whose bits cudnn.benchmark changed, a GEMM and a memory-bound
# kernel held for 12 s, then the core matrix (tools/gpu_session.sh matrix) with a watcher that
# notes every process on the GPU, until $BUDGET seconds of this command are spent. Everything
# under .gpu/; packed into $OUT/gpu.tgz (records, logs, experiments) and $OUT/cudnn.tgz.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 DETBENCH_GPU_DIR=.gpu
BUDGET=${BUDGET:-540}
py=$(tools/python)
v=.gpu/visit
mkdir -p $v
{ date -u; nvidia-smi; "$py" -c 'import torch; print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version(), torch.cuda.get_device_name(0))'; } 2>&1 | tee $v/host.txt
echo "== cudnnlog ($SECONDS s)"; timeout 150 "$py" tools/gpu_visit.py cudnnlog $v/cudnn 2>&1 | tee $v/cudnnlog.txt
echo "== sustained ($SECONDS s)"; timeout 90 "$py" tools/gpu_visit.py sustained $v/sustained.json 2>&1 | tee $v/sustained.txt
"$py" tools/gpu_visit.py watch $v/watch.jsonl 2>$v/watch.err & w=$!
left=$((BUDGET - SECONDS - 40))
echo "== matrix for $left s ($SECONDS s)"
OUT= tools/gpu_session.sh matrix $left
kill $w; wait $w
echo "== pack ($SECONDS s)"
if [ -n "${OUT:-}" ]; then
    (cd .gpu && find . -type f -size -8M -not -path '*/.reference/*' -not -path './visit/cudnn/*' -print0 |
        tar czf "$OUT/gpu.tgz" --null -T -)
    tar czf "$OUT/cudnn.tgz" -C $v cudnn
    ls -la "$OUT"
    if [ "$(stat -c %s "$OUT/cudnn.tgz")" -gt 15000000 ]; then
        (cd $v/cudnn && for f in *.log; do head -c 4000000 "$f" > "$f.head"; done &&
            tar czf "$OUT/cudnn.tgz" runs.json *.head); ls -la "$OUT"
    fi
fi
echo "done ($SECONDS s)"
