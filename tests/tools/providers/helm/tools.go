//go:build tools

// Package tools pins provider-helm v1.3.0 (its cmd/provider main package, built by `make e2e-tools` for
// tests/e2e/providers.py) so the build resolves nothing beyond go.sum. v1.3.0 is the newest release the
// Go module proxy serves whole; see the README's "Third-party artifacts" for what v1.4.0 changes.
package tools

import _ "github.com/crossplane-contrib/provider-helm/cmd/provider"
