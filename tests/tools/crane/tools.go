//go:build tools

// Package tools pins crane (github.com/google/go-containerregistry/cmd/crane), the registry client
// the CRD Job's image carries (function/versions.py), so tests/e2e/test_crd_job.py runs the Job's
// fetch step with the same client against its local registry (see the Makefile).
package tools

import (
	_ "github.com/google/go-containerregistry/cmd/crane"
)
