#!/usr/bin/env bash
# The workload CRDs the function applies that a registry publishes as files, from the Go modules
# go.mod pins, checked by Go against go.sum's registry checksums: the InferencePool and
# InferenceObjective CRDs of sigs.k8s.io/gateway-api-inference-extension, and the CRDs of the
# charts whose crds/ the function applies itself. Written into OUT (default
# function/serving/crds, ignored by git), which the wheel, the image and the package carry. `make setup`, `make image` and `make package` run it.
#
#   hack/crds/fetch.sh [OUT]
#
# Bump: `go get <module>@vX.Y.Z` here, and the version in function/versions.py (WORKLOAD_CRDS,
# and the chart's own in CHARTS); tests/unit/test_workload_crds.py checks they agree.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/../../function/serving/crds}"
# module, folder in the module, file: each file is written into OUT under its own name.
sources=(
  "sigs.k8s.io/gateway-api-inference-extension config/crd/bases inference.networking.k8s.io_inferencepools.yaml"
  "sigs.k8s.io/gateway-api-inference-extension config/crd/bases inference.networking.x-k8s.io_inferenceobjectives.yaml"
  # The chart's own crds/ (node-feature-discovery 0.18.3 is cut from the v0.18.3 tag), which Helm
  # installs once and never upgrades: the function applies them itself, so they move with the chart.
  "sigs.k8s.io/node-feature-discovery deployment/helm/node-feature-discovery/crds nfd-api-crds.yaml"
)

mkdir -p "$out"
for source in "${sources[@]}"; do
  read -r module folder f <<<"$source"
  # -mod=readonly: a module or checksum go.sum does not name is an error, never resolved anew.
  dir="$(cd "$here" && GOFLAGS=-mod=readonly go mod download -json "$module" \
    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  [ -d "$dir" ] || { echo "fetch.sh: go mod download $module gave no folder" >&2; exit 1; }
  install -m 0644 "$dir/$folder/$f" "$out/$f.tmp"
  mv "$out/$f.tmp" "$out/$f"
done
