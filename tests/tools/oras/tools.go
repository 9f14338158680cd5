//go:build tools

// Package tools pins the oras CLI (oras.land/oras), the registry client the CRD Job's fetch
// container runs (IMAGES["oras"] in function/versions.py, the same version), so
// tests/e2e/test_crd_job.py runs that step with the same client against its local registry (see
// the Makefile).
package tools

import (
	_ "oras.land/oras/cmd/oras"
)
