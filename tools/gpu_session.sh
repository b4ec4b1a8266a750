#!/usr/bin/env bash
# A short GPU visit in phases of under 10 minutes each (docs/gpu-session.md says why this order).
# A 15-minute visit: the next one runs `noise` first (at most 4 minutes), then `matrix` with
# what is left, at once on the warm machine (docs/gpu-session.md, "A 15-minute visit").
#
#   tools/gpu_session.sh noise        # why launch-bound blocks scatter: one factor at a time (< 4 min)
#   tools/gpu_session.sh proof        # the paired costs and their A/A check (under 5 min)
#   tools/gpu_session.sh check        # host facts, the plan's estimate, make gpu-check, make test-cuda
#   tools/gpu_session.sh matrix SECS  # the core suites at full size, all modes, 3 replicates, resumable
#   tools/gpu_session.sh experiments  # the decoder, locate and one distributed rank on CUDA
#   tools/gpu_session.sh cudnnlog     # run --cudnn-log on two convs (~3 min)
#
# Everything lands in $DETBENCH_GPU_DIR (default .gpu/, ignored by git): run directories and logs.
# With $OUT set (the device tool's folder), its small files are also packed into $OUT/gpu.tgz
# after every phase: the device machine may not keep .gpu/ between calls (it did not on
# 2026-11-24), so fetch the archive after each call.
set -uo pipefail
cd "$(dirname "$0")/.."
dir=${DETBENCH_GPU_DIR:-.gpu}
mkdir -p "$dir"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
py=$(tools/python)
phase=${1:?usage: tools/gpu_session.sh noise|proof|check|matrix SECONDS|experiments|cudnnlog}
log=$dir/$phase.log
SUITES=(--suite conv --suite rnn --suite batchnorm --suite bmm --suite training)
# The proof's small matrix (the paired design, checked): 5 workloads x 4 modes x 3
# replicates, the verdicts first, then 15 groups of 5 timing workers side by side (4 modes and
# the A/A copy of the baseline). 186 s on paper (`--dry-run`: 25 s of verdict records, 55 s of
# paired costs, 85 s of verdict workers' start-up that 5 short workloads cannot hide), stopped
# at 200 s. Its workloads: the one whose first timing drifted on the H200
# (batchnorm1d_train_simclr_head), bmm, the cuDNN RNN steps that scatter 5-30% from sample to
# sample (lstm_2layer, gru_2layer) and a training step.
PROOF=(--suite batchnorm --suite bmm --suite rnn --suite training
    --only batchnorm/batchnorm1d_train_simclr_head --only bmm/bmm_moe_experts_fp32
    --only rnn/lstm_2layer --only rnn/gru_2layer --only training/resnet18_cifar
    --mode default --mode det-algos --mode bench --mode cudnn-det --replicates 3)

pack() {
    if [ -n "${OUT:-}" ]; then
        # Records, env.json, logs and reports only: the .reference/ arrays of a full matrix are
        # gigabytes, over what comes back from a device machine (16 MiB a file).
        (cd "$dir" && find . -type f -size -8M -not -path '*/.reference/*' -print0 |
            tar czf "$OUT/gpu.tgz" --null -T -) && ls -la "$OUT"
    fi
}
trap pack EXIT

case $phase in
noise)
    # tools/launch_noise.py: one launch-bound workload and one cuDNN RNN timed by eleven paired
    # workers, each suspect varied alone. It starts no configuration that would end past 195 s
    # and prints the rows it has on SIGINT, sent at 225 s: the call stays under 4 minutes.
    {
        echo "== host ($SECONDS s)"; date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,power.limit --format=csv
        rm -rf "$dir/noise"
        echo "== the launch-noise experiment ($SECONDS s)"; time timeout -k 10 -s INT 225 "$py" \
            tools/launch_noise.py --device cuda --deadline 195 --out "$dir/noise" \
            --json "$dir/noise/noise.json"
        echo "== noise done ($SECONDS s)"
    } 2>&1 | tee "$log"
    ;;
proof)
    {
        echo "== host ($SECONDS s)"; date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,power.limit --format=csv
        rm -rf "$dir/proof"
        echo "== the proof's matrix ($SECONDS s)"; time timeout -k 15 -s INT 200 "$py" -m detbench run \
            "${PROOF[@]}" --device cuda --profile full --timeout 60 --out "$dir/proof" --no-report
        echo "== the A/A check and the costs' intervals ($SECONDS s)"; timeout 30 "$py" tools/aa_check.py "$dir/proof"
        echo "== proof done ($SECONDS s)"
    } 2>&1 | tee "$log"
    ;;
check)
    {
        echo "== host"; date -u; nvidia-smi; "$py" -c 'import torch; print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version(), torch.cuda.get_device_name(0))'
        echo "== plan: every suite"; timeout 120 "$py" -m detbench run --suite all --dry-run --json
        echo "== plan: the core suites"; timeout 120 "$py" -m detbench run "${SUITES[@]}" --dry-run --json
        echo "== make gpu-check"; time timeout -s INT 150 "$py" -m detbench gpu-check --out "$dir/gpu-check"
        echo "== make test-cuda"; time timeout -s INT 240 "$py" -m pytest -q tests --cuda-only -p no:cacheprovider --junitxml="$dir/test-cuda.xml"
    } 2>&1 | tee "$log"
    ;;
matrix)
    secs=${2:-500}
    {
        if [ -f "$dir/matrix/env.json" ]; then
            time timeout -k 30 -s INT "$secs" "$py" -m detbench run --resume "$dir/matrix"
        else
            time timeout -k 30 -s INT "$secs" "$py" -m detbench run "${SUITES[@]}" --device cuda \
                --profile full --timeout 120 --out "$dir/matrix"
        fi
        echo "exit $?"
    } 2>&1 | tee -a "$log"
    ;;
experiments)
    {
        echo "== decoder"; time timeout -s INT 120 "$py" -m detbench run --suite invariance \
            --only invariance/decoder_greedy_invariant --mode default --replicates 2 \
            --device cuda --profile full --out "$dir/decoder" --no-report
        echo "== locate"; time timeout -s INT 90 "$py" -m detbench locate \
            tests/workloads/locate_me.py:gather_backward --device cuda --profile quick
        echo "== distributed, one rank"; time timeout -s INT 90 "$py" -m detbench run \
            --suite distributed --set world_size=1 --mode default --mode det-algos \
            --replicates 2 --device cuda --out "$dir/distributed" --no-report
    } 2>&1 | tee "$log"
    ;;
cudnnlog)
    {
        time timeout -s INT 180 "$py" -m detbench run --cudnn-log --suite conv \
            --only conv/conv3d_r3d18_stage1 --only conv/conv2d_resnet50_stage3_1x1 \
            --mode bench --mode default --replicates 4 --device cuda --out "$dir/cudnnlog" \
            --no-report
    } 2>&1 | tee "$log"
    ;;
*)
    echo "tools/gpu_session.sh: unknown phase $phase (noise, proof, check, matrix SECONDS, experiments, cudnnlog)" >&2
    exit 2
    ;;
esac
