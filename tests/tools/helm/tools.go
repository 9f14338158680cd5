//go:build tools

// Package tools pins the real Helm CLI (helm.sh/helm/v4 v4.2.3, the version provider-helm v1.4.0
// links) so `go build helm.sh/helm/v4/cmd/helm` resolves nothing beyond go.sum.
package tools

import _ "helm.sh/helm/v4/cmd/helm"
