//go:build tools

// Package tools pins the real Helm CLI (helm.sh/helm/v3 v3.21.1, the version provider-helm v1.3.0
// links) so `go build helm.sh/helm/v3/cmd/helm` resolves nothing beyond go.sum.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
