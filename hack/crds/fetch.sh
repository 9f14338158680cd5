#!/usr/bin/env bash
# The workload CRDs the function applies that a registry publishes as files: the InferencePool and
# InferenceObjective CRDs of the Go module sigs.k8s.io/gateway-api-inference-extension
# (config/crd/bases/), at the version go.mod pins, checked by Go against go.sum's registry
# checksum. Written into OUT (default function/serving/crds, ignored by git), which the wheel, the
# image and the package carry. `make setup`, `make image` and `make package` run it.
#
#   hack/crds/fetch.sh [OUT]
#
# Bump: `go get sigs.k8s.io/gateway-api-inference-extension@vX.Y.Z` here, and the version in
# function/versions.py (WORKLOAD_CRDS); tests/unit/test_workload_crds.py checks they agree.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/../../function/serving/crds}"
module=sigs.k8s.io/gateway-api-inference-extension
files=(
  inference.networking.k8s.io_inferencepools.yaml
  inference.networking.x-k8s.io_inferenceobjectives.yaml
)

# -mod=readonly: a module or checksum go.sum does not name is an error, never resolved anew.
dir="$(cd "$here" && GOFLAGS=-mod=readonly go mod download -json "$module" \
  | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
[ -d "$dir" ] || { echo "fetch.sh: go mod download $module gave no folder" >&2; exit 1; }
mkdir -p "$out"
for f in "${files[@]}"; do
  install -m 0644 "$dir/config/crd/bases/$f" "$out/$f.tmp"
  mv "$out/$f.tmp" "$out/$f"
done
