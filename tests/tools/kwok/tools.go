//go:build tools

// Package tools pins kwok, which plays the kubelets of the workload cluster's nodes in tests/e2e
// (see the Makefile): it marks the nodes Ready and drives their pods to Running and Ready.
package tools

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
