# Every target sets itself up from nothing: a venv with the function and its test deps, and the real
# crossplane CLI built from source with Go (cached in .tools/ and Go's module and build caches).
PYTHON     ?= python3
VENV       := .venv
BIN        := $(VENV)/bin
TOOLS_BIN  := $(CURDIR)/.tools/bin
CROSSPLANE := $(TOOLS_BIN)/crossplane
CELCOST    := $(TOOLS_BIN)/celcost
HELM       := $(TOOLS_BIN)/helm
HELM4      := $(TOOLS_BIN)/helm4
CHARTS_DIR ?= $(abspath $(CURDIR)/../shared/charts)
BENCHCLIENT := $(TOOLS_BIN)/benchclient
CRDS_DIR   ?= $(abspath $(CURDIR)/../shared/crds)
EXAMPLE    ?= existing
# The release: function/__version__.py is the one source of the function's, the image's and both
# packages' versions (CHANGELOG.md records each release's commit).
VERSION    := $(shell sed -n 's/^__version__ = "\(.*\)"/\1/p' function/__version__.py)

# The workload CRDs a registry publishes as files, fetched from the pinned Go module into the package
# (never into git); the ModelExpress CRDs are the project's own (function/serving/modelexpress_crds.py).
WORKLOAD_CRDS := function/serving/crds/inference.networking.k8s.io_inferencepools.yaml \
	function/serving/crds/inference.networking.x-k8s.io_inferenceobjectives.yaml \
	function/serving/crds/nfd-api-crds.yaml

export CRDS_DIR
export CROSSPLANE
export CELCOST
export HELM
export HELM4
export CHARTS_DIR

.PHONY: setup render validate test lint bench clean package e2e e2e-tools

setup: $(VENV)/.stamp $(CROSSPLANE) $(CELCOST) $(HELM) $(HELM4) $(WORKLOAD_CRDS)

$(WORKLOAD_CRDS) &: hack/crds/go.mod hack/crds/go.sum hack/crds/fetch.sh
	hack/crds/fetch.sh

$(VENV)/.stamp: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

# crank v2.2.1 built through a pinned wrapper module (tests/tools/crank/go.sum), so no module is resolved
# at build time beyond what go.sum names. Its version is stamped as Crossplane's release build does
# (internal/version.version at that tag): `crossplane version --client` prints it, and `crossplane
# beta validate` names its default Crossplane image by it (an empty one is an invalid reference).
$(CROSSPLANE): tests/tools/crank/go.mod tests/tools/crank/go.sum
	mkdir -p $(TOOLS_BIN)
	cd tests/tools/crank && go build -o $(CROSSPLANE) \
		-ldflags "-X github.com/crossplane/crossplane/v2/internal/version.version=$(call tool_version,crank,github.com/crossplane/crossplane/v2)" \
		github.com/crossplane/crossplane/v2/cmd/crank

# The real Helm CLI, pinned the same way, twice: v3.21.1 as provider-helm v1.3.0 (the provider the e2e
# builds and runs) links it, and v4.2.3 as provider-helm v1.4.0 (what the Configuration installs)
# links it. The tests render every Release the function composes from the real charts in
# ../shared/charts with both.
$(HELM): tests/tools/helm/go.mod tests/tools/helm/go.sum
	mkdir -p $(TOOLS_BIN)
	cd tests/tools/helm && go build -trimpath -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=v3.21.1" \
		-o $(HELM) helm.sh/helm/v3/cmd/helm

$(HELM4): tests/tools/helm4/go.mod tests/tools/helm4/go.sum | $(HELM)
	mkdir -p $(TOOLS_BIN)
	cd tests/tools/helm4 && go build -trimpath -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=v4.2.3" \
		-o $(HELM4) helm.sh/helm/v4/cmd/helm

# The CEL cost checker: an XRD through Crossplane's xcrd and the API server's CRD validation (pinned the same way).
$(CELCOST): tests/tools/celcost/go.mod tests/tools/celcost/go.sum tests/tools/celcost/main.go
	mkdir -p $(TOOLS_BIN)
	cd tests/tools/celcost && go build -o $(CELCOST) .

# The real control plane of tests/e2e (etcd, kube-apiserver, kube-controller-manager, Crossplane core), each
# built from a pinned wrapper module in tests/tools/controlplane, one after another (order-only prerequisites
# keep them serial even under -j). Versions come from the go.mod files; core is crossplane-core, next to the CLI.
CP_MODS         := tests/tools/controlplane
ETCD            := $(TOOLS_BIN)/etcd
KUBE_APISERVER  := $(TOOLS_BIN)/kube-apiserver
KUBE_CM         := $(TOOLS_BIN)/kube-controller-manager
KUBE_SCHEDULER  := $(TOOLS_BIN)/kube-scheduler
# kubectl runs the GPU health reporter's script against the workload cluster (function/serving/gpu_health.py).
KUBECTL         := $(TOOLS_BIN)/kubectl
CROSSPLANE_CORE := $(TOOLS_BIN)/crossplane-core
KWOK            := $(TOOLS_BIN)/kwok
E2E_TOOLS       := $(KUBE_APISERVER) $(KUBE_CM) $(KUBE_SCHEDULER) $(KUBECTL) $(CROSSPLANE_CORE) $(ETCD) $(KWOK)
# The real providers of tests/e2e/providers.py, each from a pinned wrapper module in tests/tools/providers
# (its cmd/provider main package), after the control plane's binaries (same serial chain).
PROV_MODS       := tests/tools/providers
PROVIDER_HELM   := $(TOOLS_BIN)/provider-helm
PROVIDER_K8S    := $(TOOLS_BIN)/provider-kubernetes
PROVIDERS       := $(PROVIDER_HELM) $(PROVIDER_K8S)
# The loopback stand-in of Nebius IAM's token exchange the providers' gosdk calls (tests/tools/nebiusiam).
NEBIUS_IAM      := $(TOOLS_BIN)/nebius-iam
# The local OCI registry (CNCF Distribution) and the CRD Job's registry client (oras, at the version
# the Job's image pins in function/versions.py) of tests/e2e/test_crd_job.py, each from a pinned
# wrapper module (tests/tools/registry, tests/tools/oras).
REGISTRY        := $(TOOLS_BIN)/registry
ORAS            := $(TOOLS_BIN)/oras
tool_version     = $(shell awk '$$1 == "require" && $$2 == "$(2)" {print $$3}' tests/tools/$(1)/go.mod)
provider_version = $(shell awk '$$1 == "require" && $$2 == "github.com/crossplane-contrib/$(1)" {print $$3}' $(PROV_MODS)/$(2)/go.mod)
required         = $(shell awk '$$1 == "require" && $$2 == "$(2)" {print $$3}' $(CP_MODS)/$(1)/go.mod)
K8S_VERSION     := $(call required,kubernetes,k8s.io/kubernetes)
XP_VERSION      := $(call required,crossplane,github.com/crossplane/crossplane/v2)
K8S_VERSION_PKG := k8s.io/component-base/version
K8S_LDFLAGS     := -s -w -X $(K8S_VERSION_PKG).gitVersion=$(K8S_VERSION) \
	-X $(K8S_VERSION_PKG).gitMajor=$(patsubst v%,%,$(word 1,$(subst ., ,$(K8S_VERSION)))) \
	-X $(K8S_VERSION_PKG).gitMinor=$(word 2,$(subst ., ,$(K8S_VERSION))) -X $(K8S_VERSION_PKG).gitTreeState=clean

e2e-tools: $(E2E_TOOLS) $(PROVIDERS) $(NEBIUS_IAM) $(REGISTRY) $(ORAS)

$(KUBE_APISERVER) $(KUBE_CM) $(KUBE_SCHEDULER) $(KUBECTL): $(CP_MODS)/kubernetes/go.mod $(CP_MODS)/kubernetes/go.sum
	mkdir -p $(TOOLS_BIN)
	cd $(CP_MODS)/kubernetes && go build -trimpath -ldflags "$(K8S_LDFLAGS)" -o $@ k8s.io/kubernetes/cmd/$(notdir $@)
$(KUBE_CM): | $(KUBE_APISERVER)
$(KUBE_SCHEDULER): | $(KUBE_CM)
$(KUBECTL): | $(KUBE_SCHEDULER)

$(CROSSPLANE_CORE): $(CP_MODS)/crossplane/go.mod $(CP_MODS)/crossplane/go.sum | $(KUBECTL)
	mkdir -p $(TOOLS_BIN)
	cd $(CP_MODS)/crossplane && go build -trimpath -o $@ \
		-ldflags "-s -w -X github.com/crossplane/crossplane/v2/internal/version.version=$(XP_VERSION)" \
		github.com/crossplane/crossplane/v2/cmd/crossplane

$(ETCD): $(CP_MODS)/etcd/go.mod $(CP_MODS)/etcd/go.sum | $(CROSSPLANE_CORE)
	mkdir -p $(TOOLS_BIN)
	cd $(CP_MODS)/etcd && go build -trimpath -ldflags "-s -w" -o $@ go.etcd.io/etcd/server/v3

# kwok v0.8.0 (tests/tools/kwok) plays the kubelets of the workload cluster's nodes in tests/e2e.
$(KWOK): tests/tools/kwok/go.mod tests/tools/kwok/go.sum | $(ETCD)
	mkdir -p $(TOOLS_BIN)
	cd tests/tools/kwok && go build -trimpath -ldflags "-s -w" -o $@ sigs.k8s.io/kwok/cmd/kwok

$(PROVIDER_HELM): $(PROV_MODS)/helm/go.mod $(PROV_MODS)/helm/go.sum | $(KWOK)
	mkdir -p $(TOOLS_BIN)
	cd $(PROV_MODS)/helm && go build -trimpath -o $@ \
		-ldflags "-s -w -X github.com/crossplane-contrib/provider-helm/pkg/version.Version=$(call provider_version,provider-helm,helm)" \
		github.com/crossplane-contrib/provider-helm/cmd/provider

$(PROVIDER_K8S): $(PROV_MODS)/kubernetes/go.mod $(PROV_MODS)/kubernetes/go.sum | $(PROVIDER_HELM)
	mkdir -p $(TOOLS_BIN)
	cd $(PROV_MODS)/kubernetes && go build -trimpath -o $@ \
		-ldflags "-s -w -X github.com/crossplane-contrib/provider-kubernetes/internal/version.Version=$(call provider_version,provider-kubernetes,kubernetes)" \
		github.com/crossplane-contrib/provider-kubernetes/cmd/provider

$(NEBIUS_IAM): tests/tools/nebiusiam/go.mod tests/tools/nebiusiam/go.sum tests/tools/nebiusiam/main.go | $(PROVIDER_K8S)
	mkdir -p $(TOOLS_BIN)
	cd tests/tools/nebiusiam && go build -trimpath -ldflags "-s -w" -o $@ .

$(REGISTRY): tests/tools/registry/go.mod tests/tools/registry/go.sum | $(NEBIUS_IAM)
	mkdir -p $(TOOLS_BIN)
	cd tests/tools/registry && go build -trimpath -o $@ \
		-ldflags "-s -w -X github.com/distribution/distribution/v3/version.version=$(call tool_version,registry,github.com/distribution/distribution/v3)" \
		github.com/distribution/distribution/v3/cmd/registry

$(ORAS): tests/tools/oras/go.mod tests/tools/oras/go.sum | $(REGISTRY)
	mkdir -p $(TOOLS_BIN)
	cd tests/tools/oras && go build -trimpath -o $@ \
		-ldflags "-s -w -X oras.land/oras/internal/version.BuildMetadata=" oras.land/oras/cmd/oras

## Render a bundled example (EXAMPLE=existing|gke|eks|aks|nebius|vultr) with the real crossplane CLI:
## the first reconcile, or with CONVERGED=1 the last one, the providers played by the project's
## simulator (tests/sim), so the whole composition shows.
render: setup
	$(BIN)/python -m tests.tools.$(if $(CONVERGED),converged,render) $(EXAMPLE)

## Validate a bundled example and what it renders (CONVERGED=1: the last reconcile) against the XRDs
## and the real CRDs in CRDS_DIR with `crossplane beta validate`, offline.
validate: setup
	$(BIN)/python -m tests.tools.validate $(EXAMPLE) $(if $(CONVERGED),--converged)

## Run the whole test suite: lint, unit, gRPC, crossplane render and beta validate end to end, real control plane.
test: setup e2e-tools lint
	PYTEST=$(BIN)/pytest hack/test

## Only the real control-plane tests (tests/e2e): Crossplane core and a real API server call the function.
e2e: setup e2e-tools
	$(BIN)/pytest tests/e2e

## Speed and memory of the running function against its targets (exits non-zero on a miss).
# Crossplane's side of the bench's gRPC calls, in Go as Crossplane is.
$(BENCHCLIENT): tests/tools/benchclient/go.mod tests/tools/benchclient/go.sum tests/tools/benchclient/main.go
	mkdir -p $(TOOLS_BIN)
	cd tests/tools/benchclient && go build -o $(BENCHCLIENT) .

bench: $(VENV)/.stamp $(BENCHCLIENT) $(WORKLOAD_CRDS)
	$(BIN)/python -m tests.tools.bench

lint: $(VENV)/.stamp
	$(BIN)/ruff check function tests
	$(BIN)/ruff format --check function tests

## Build both packages into _output/ with the real crossplane CLI (no Docker needed):
##   _output/configuration/modelplane-inference-cluster.xpkg  XRDs + Compositions (+ examples/)
##   _output/function/function-inference-cluster.xpkg         Function meta, and the runtime image
##                                                            when _output/image/runtime-amd64.tar exists
## The Configuration's root is staged (metadata + copies of apis/ and compositions/) because xpkg build
## takes one root directory. Run `make image` first for a runnable function package (without the
## tarball the package is valid but has no runtime image).
PKG_OUT := $(CURDIR)/_output
IMAGE_TAR = $(PKG_OUT)/image/runtime-amd64.tar
IMAGE_SRC ?= $(CURDIR)

## The function's runtime image, reproducibly and without Docker (root and mmdebstrap needed):
## hack/image/build-image.sh builds $(IMAGE_TAR) from IMAGE_SRC with SOURCE_DATE_EPOCH = last commit.
.PHONY: image
image: $(WORKLOAD_CRDS)
	SOURCE_DATE_EPOCH="$${SOURCE_DATE_EPOCH:-$$(git log -1 --format=%ct)}" \
		hack/image/build-image.sh $(IMAGE_SRC) $(IMAGE_TAR)

package: $(CROSSPLANE) $(WORKLOAD_CRDS)
	rm -rf $(PKG_OUT)/configuration $(PKG_OUT)/function
	mkdir -p $(PKG_OUT)/configuration $(PKG_OUT)/function
	cp package/configuration/crossplane.yaml package/configuration/activation-policy.yaml $(PKG_OUT)/configuration/
	sed -i 's|^\(      version: \)">=v0.0.0-0" # release$$|\1v$(VERSION)|' $(PKG_OUT)/configuration/crossplane.yaml
	grep -q '^      version: v$(VERSION)$$' $(PKG_OUT)/configuration/crossplane.yaml
	cp -R apis compositions $(PKG_OUT)/configuration/
	$(CROSSPLANE) xpkg build --package-root=$(PKG_OUT)/configuration --examples-root=$(CURDIR)/examples \
		--package-file=$(PKG_OUT)/configuration/modelplane-inference-cluster.xpkg
	$(CROSSPLANE) xpkg build --package-root=package --ignore='configuration/*' \
		--examples-root=$(PKG_OUT)/function/no-examples \
		$(if $(wildcard $(IMAGE_TAR)),--embed-runtime-image-tarball=$(IMAGE_TAR)) \
		--package-file=$(PKG_OUT)/function/function-inference-cluster.xpkg

## Before a release is tagged: every chart and image the CRD Job fetches is pinned by digest
## (function/versions.py CHART_DIGESTS, IMAGE_DIGESTS).
.PHONY: release-pins
release-pins: $(VENV)/.stamp
	@$(VENV)/bin/python -c 'import sys; from function.versions import unpinned; \
		left = unpinned(); print("not pinned by digest:", ", ".join(left) or "none"); sys.exit(bool(left))'

clean:
	rm -rf $(VENV) .tools _output
