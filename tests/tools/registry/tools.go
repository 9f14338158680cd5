//go:build tools

// Package tools pins the CNCF Distribution registry (github.com/distribution/distribution/v3
// v3.1.2), the local OCI registry tests/e2e/test_crd_job.py pushes a chart of its own to with the
// real Helm and the CRD Job's registry client fetches it from, by digest (see the Makefile).
package tools

import (
	_ "github.com/distribution/distribution/v3/cmd/registry"
)
