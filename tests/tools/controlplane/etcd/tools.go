//go:build tools

// Package tools pins the etcd server built from this module (see the Makefile).
package tools

import _ "go.etcd.io/etcd/server/v3"
