//go:build tools

// Package tools pins provider-kubernetes v1.3.1 (its cmd/provider main package, built by
// `make e2e-tools` for tests/e2e/providers.py) so the build resolves nothing beyond go.sum.
package tools

import _ "github.com/crossplane-contrib/provider-kubernetes/cmd/provider"
