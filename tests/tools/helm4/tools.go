//go:build tools

// Package tools pins Helm v4.2.3 (helm.sh/helm/v4), the version provider-helm v1.4.0 links: the chart
// tests render every Release with it too, next to Helm v3.21.1 (tests/tools/helm, what the e2e's
// provider-helm v1.3.0 links), so what the e2e proves with one holds for the other.
package tools

import _ "helm.sh/helm/v4/cmd/helm"
