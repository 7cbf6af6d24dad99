#!/usr/bin/env bash
# The gpu backend as an operator runs it (part of benchmarks/gpu_check.sh): `halyard controlplane` under SRTF
# and one `halyard agent --backend gpu` on this machine, both in insecure mode on loopback, and two PyTorch
# jobs (examples/train_torch.py) submitted with the CLI: the short one preempts the long one, which
# checkpoints, resumes from its checkpoint and completes.
#
#   benchmarks/gpu_check_daemons.sh WORK_DIR [PYTHON]
#
# HALYARD_CHECK_BACKEND=process runs the same journey without a GPU (on the CPU, a V100 in name only), and
# HALYARD_CHECK_TRAIN_ARGS adds arguments to the training script (say "--image 16 --batch 8" on a CPU).
set -uo pipefail
work=${1:?usage: benchmarks/gpu_check_daemons.sh WORK_DIR [PYTHON]}
py=${2:-python3}
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$work"
export HALYARD_CONTROL_PLANE=127.0.0.1:50071 HALYARD_INSECURE=1
halyard() { "$py" -m halyard.cli "$@"; }

# This machine as a one-node cluster: its GPUs from NVML, its cores and memory.
backend=${HALYARD_CHECK_BACKEND:-gpu}
"$py" - "$work/cluster.toml" "$backend" <<'EOF'
import os, sys
from halyard.testing.cluster import small_cluster_toml
if sys.argv[2] == "gpu":
    from halyard.agent.gpu import local_gpus
    gpu_type, gpus = local_gpus()
else:
    gpu_type, gpus = "V100", 1
memory_gb = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 10**9
open(sys.argv[1], "w").write(small_cluster_toml(1, gpus, gpu_type=gpu_type, cpus=len(os.sched_getaffinity(0)),
                                                memory_gb=memory_gb))
EOF
cat "$work/cluster.toml"

halyard controlplane --cluster "$work/cluster.toml" --db "$work/state.db" --insecure --policy srtf \
  --listen 127.0.0.1:50071 --http 127.0.0.1:8091 > "$work/controlplane.log" 2>&1 &
cp_pid=$!
halyard agent --control-plane 127.0.0.1:50071 --node r0-n0 --insecure --backend "$backend" --work-dir "$work/agent" \
  > "$work/agent.log" 2>&1 &
agent_pid=$!
finish() {
  status=$?
  kill $agent_pid $cp_pid 2>/dev/null; wait 2>/dev/null
  if [ $status -ne 0 ]; then  # say why: the daemons' last words
    echo "== failed ($status); the last lines of the daemons' logs in $work"
    tail -15 "$work/controlplane.log" "$work/agent.log"
  fi
  exit $status
}
trap finish EXIT

for _ in $(seq 100); do halyard cluster 2>/dev/null | grep -q r0-n0 && break; sleep 0.3; done
state() { halyard job "$1" 2>/dev/null | grep -m1 -oE 'PENDING|RUNNING|COMPLETED|FAILED|CANCELLED'; }
wait_state() {  # JOB STATE SECONDS
  for _ in $(seq $(($3 * 2))); do [ "$(state "$1")" = "$2" ] && return 0; sleep 0.5; done
  echo "timed out waiting for $1 to be $2"; return 1
}

train="$py $here/examples/train_torch.py --checkpoint-every 20 ${HALYARD_CHECK_TRAIN_ARGS:-}"
echo "== submit long (1 GPU, 600 iterations)"
halyard submit --id long --model resnet18 --gpus 1 --iterations 600 --command "$train --min-iteration-s 0.02"
wait_state long RUNNING 60 || exit 1
sleep 8
echo "== cluster while long runs (NVML utilisation and health from the agent's heartbeats)"
halyard cluster
halyard job long
echo "== submit short (40 iterations): SRTF preempts long for it"
halyard submit --id short --model resnet18 --gpus 1 --iterations 40 --command "$train"
wait_state short COMPLETED 120 || exit 1
wait_state long COMPLETED 240 || exit 1
echo "== both completed"
halyard jobs
halyard job long
echo "== long's output, both attempts"
halyard logs long --attempt 1 | tail -3
halyard logs long --attempt 2 | tail -2
summary="$work/agent/checkpoints/long/summary.json"
cat "$summary"; echo
"$py" - "$summary" "$backend" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
assert s["attempt"] == 2 and 0 < s["started_at"] < 600, s  # resumed from a checkpoint, not from 0
if sys.argv[2] == "gpu":
    assert s["cuda_visible_devices"] == "0" and s["device"] != "cpu", s
print(f"long: attempt {s['attempt']} resumed at iteration {s['started_at']} on {s['device']} "
      f"(CUDA_VISIBLE_DEVICES={s['cuda_visible_devices']}), final loss {s['final_loss']:.3f}")
EOF
