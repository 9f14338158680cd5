// Pins the Go modules whose files the function ships (function/serving/crds/, built by fetch.sh):
// go.sum holds their registry checksums, so a download that differs fails.
module modelplane.ai/hack/crds

go 1.25.0

require (
	sigs.k8s.io/gateway-api-inference-extension v1.0.1
	sigs.k8s.io/node-feature-discovery v0.18.3
)
