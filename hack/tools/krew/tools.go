//go:build tools

// Package tools pins krew and its manifest validator. They live in this module of their own
// because krew v0.4.3 requires k8s.io/client-go v11.0.0+incompatible, which would drag every
// Kubernetes module of the root go.mod back years.
package tools

import (
	_ "sigs.k8s.io/krew/cmd/krew"
	_ "sigs.k8s.io/krew/cmd/validate-krew-manifest"
)
