#!/usr/bin/env bash
# GPU discovery script for Spark (spark.{driver,executor,worker}.resource.gpu.discoveryScript).
#
# Prints the JSON Spark expects on stdout, one object for the resource "gpu":
#     {"name": "gpu", "addresses": ["0", "1"]}
# The addresses are the indices nvidia-smi reports. If CUDA_VISIBLE_DEVICES is set (YARN or
# Kubernetes isolation), only those indices are printed, so that a task's address is a device the
# process can see. Exits non-zero with a message on stderr when nvidia-smi fails or finds no
# GPU, so that an executor asked for GPUs it does not have fails at start, not at training time.
set -euo pipefail

if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "getGpusResources.sh: nvidia-smi not found on PATH (no NVIDIA driver on $(hostname))" >&2
  exit 1
fi
if ! out=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>&1); then
  echo "getGpusResources.sh: nvidia-smi failed: ${out}" >&2
  exit 1
fi
addrs=()
while IFS= read -r line; do
  idx="${line//[[:space:]]/}"
  [[ -z "$idx" ]] && continue
  if [[ -n "${CUDA_VISIBLE_DEVICES:-}" ]]; then
    [[ ",${CUDA_VISIBLE_DEVICES}," == *",${idx},"* ]] || continue
  fi
  addrs+=("\"${idx}\"")
done <<<"$out"
if [[ ${#addrs[@]} -eq 0 ]]; then
  echo "getGpusResources.sh: nvidia-smi lists no GPU on $(hostname)" >&2
  exit 1
fi
joined=$(IFS=, ; echo "${addrs[*]}")
echo "{\"name\": \"gpu\", \"addresses\": [${joined//,/, }]}"
