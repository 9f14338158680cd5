//go:build tools

// Package tools pins Crossplane core built from this module (see the Makefile).
package tools

import _ "github.com/crossplane/crossplane/v2/cmd/crossplane"
