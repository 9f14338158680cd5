//go:build tools

// Package tools pins provider-helm v1.4.0 (its cmd/provider main package, built by `make e2e-tools`
// for tests/e2e/providers.py) so the build resolves nothing beyond go.sum.
package tools

import _ "github.com/crossplane-contrib/provider-helm/cmd/provider"
