# etcdmember: `make demo` runs the local lab, `make test` runs every test.
SHELL := /usr/bin/env bash -o pipefail
.DEFAULT_GOAL := help

BIN := $(CURDIR)/bin
GO ?= go
export PATH := $(BIN):$(PATH)

KUBE_VERSION := v1.37.2
# The etcd kubeadm v1.37 deploys (its DefaultEtcdVersion is 3.7.0-0); the newest 3.7 patch served.
ETCD_VERSION := v3.7.3
# The compatibility set (test/e2e/compat_test.go runs the core scenarios on each): 3.6, the minor
# before, which clusters not yet upgraded run, and 3.5, which kubeadm up to 1.30 and k3s still run.
ETCD36_VERSION := v3.6.16
ETCD35_VERSION := v3.5.35
# Below the floor, to prove the agent refuses to lead it. The proxy serves 3.4 (no /v3 module path)
# only as the pseudo-version v0.5.0-alpha.5.0.20200910180754-dd1b699fc489, the commit tagged v3.4.13.
ETCD34_VERSION := v3.4.13
# The staging modules carry no version of their own; hack/lib/version.sh upstream stamps these.
KUBE_LDFLAGS := -s -w \
	-X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 \
	-X k8s.io/component-base/version.gitMinor=37 \
	-X k8s.io/component-base/version.gitTreeState=clean \
	-X k8s.io/component-base/version.buildDate=1970-01-01T00:00:00Z \
	-X k8s.io/client-go/pkg/version.gitVersion=$(KUBE_VERSION) \
	-X k8s.io/client-go/pkg/version.gitMajor=1 \
	-X k8s.io/client-go/pkg/version.gitMinor=37 \
	-X k8s.io/client-go/pkg/version.gitTreeState=clean

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# -s -w: no symbol table and no DWARF, half the download of every krew install and image pull; the
# build info stays (go version -m), and test/packaging reads the build tags from it.
LDFLAGS := -s -w -X github.com/etcdmember/kubectl-etcdmember/internal/version.Version=$(VERSION)
# Every build and test here is pure Go. With one CGO_ENABLED and -trimpath for all of them, go test
# reuses the packages that make build compiled instead of compiling them again (a cold run's minutes).
export CGO_ENABLED := 0
GOTEST := $(GO) test -trimpath
PLUGIN := $(BIN)/kubectl-etcdmember $(BIN)/kubectl_complete-etcdmember
# The agent the tests and the demo run: the plugin built with the failpoints tag (internal/failpoint).
# It sits in a directory of its own, off PATH, so that kubectl never takes it for a plugin, and its
# name stays kubectl-etcdmember. Nothing shipped (dist, image, install) is built from it.
FAILPOINTS_BIN := $(BIN)/failpoints/kubectl-etcdmember
# hack/step prints one line as a build starts and one as it ends, and keeps the build's own output
# (module downloads and all) in bin/logs, shown when it fails. The "about" figures are a cold run's
# on the 2-core CI machine (docs/testing.md, "Where the time goes").
STEP := $(CURDIR)/hack/step
export STEP_LOGS := $(BIN)/logs
include packaging.mk

# What the demo and the lab run, and nothing else.
DEMOBIN := $(BIN)/kube-apiserver $(BIN)/kubectl $(BIN)/etcd $(BIN)/etcdctl
TESTBIN := $(DEMOBIN) $(BIN)/etcd-3.6 $(BIN)/etcd-3.5 $(BIN)/etcd-3.4 $(BIN)/prometheus $(BIN)/promtool
TOOLS := $(BIN)/controller-gen $(BIN)/golangci-lint
# The node tier (test/node): the image of `make image` under a real kubelet and containerd, with the
# control plane around them, all built here; runc, the CNI plugins and nft come from Debian.
CONTAINERD_VERSION := v2.3.4
NODEBIN := $(BIN)/kubelet $(BIN)/kube-controller-manager $(BIN)/kube-scheduler $(BIN)/kube-proxy \
	$(BIN)/containerd $(BIN)/containerd-shim-runc-v2 $(BIN)/ctr $(BIN)/pause.tar
NODE_PACKAGES := runc containernetworking-plugins nftables conntrack systemd
# The kubeadm tier (test/kubeadm): kubeadm itself, and the images its static pod manifests name,
# built from bin/'s binaries under kubeadm's own names, since no registry is reachable.
# Two etcd images: the tier starts on 3.6 and upgrades to 3.7, as `kubeadm upgrade` does.
KUBEADM_IMAGES := $(addprefix $(BIN)/kubeadm-images/,kube-apiserver.tar kube-controller-manager.tar kube-scheduler.tar etcd.tar etcd-3.6.tar pause.tar)
KUBEADMBIN := $(BIN)/kubeadm $(KUBEADM_IMAGES)
# kubeadm's form of an etcd image tag: the version without its "v", and the image's own revision.
ETCD_IMAGE_TAG = $(patsubst v%,%,$(ETCD_VERSION))-0
ETCD36_IMAGE_TAG = $(patsubst v%,%,$(ETCD36_VERSION))-0
GO_SOURCES := main.go $(shell find cmd api internal -name '*.go' 2>/dev/null)

.PHONY: help
help: ## Show the targets.
	@awk 'BEGIN {FS = ":.*##"} /^[a-z-]+:.*##/ {printf "  %-10s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

##@ The two commands

.PHONY: demo
demo: build $(DEMOBIN) $(BIN)/demo ## Run the local lab: 3 etcd members, kube-apiserver, 3 agents; leave and re-join a member.
	$(BIN)/demo

# Not one of the two commands, but the next one a newcomer wants: the demo's lab, kept running.
.PHONY: lab
lab: build $(DEMOBIN) $(BIN)/demo ## Start the local lab and keep it running to type into (kubectl etcdmember, etcdctl) until Ctrl-C.
	$(BIN)/demo -lab

# What runs beside what (docs/testing.md, "What runs beside what"). The tests assert how fast
# etcdmember reacts, so a verdict must not depend on what else the machine does: every build, the
# cross-builds of make dist and the code tools included, ends before the first test; the test
# binaries are compiled before any runs (TEST_BUILD); then each tier runs on its own:
#  - the packages without real processes and the self-tests of the test bed, `go test`'s
#    default of one package per core;
#  - test/e2e alone, its scenarios scenariosPerCore per core (test/e2e/env_test.go);
#  - test/node alone: three kubelets, their containerds and etcd members fill two cores;
#  - test/kubeadm alone: three control-plane nodes kubeadm builds, each a kubelet, a containerd
#    and kubeadm's static pods;
#  - test/packaging, which reads every platform's archive, last.
E2E_PACKAGE := ./test/e2e
NODE_PACKAGE := ./test/node
KUBEADM_PACKAGE := ./test/kubeadm
PACKAGING_PACKAGE := ./test/packaging
OTHER_PACKAGES = $(shell $(GO) list ./... | grep -v -e /test/e2e -e /test/node -e /test/kubeadm -e /test/packaging)
# Each package that runs etcd members appends the slowest request they logged here (go test shows
# a passing package's own output only with -v); make test prints the file after the tests.
export ETCDMEMBER_SLOWEST_LOG := $(BIN)/logs/slowest-etcd-requests.txt
# Compiling every test binary warms the build cache, so that go test only links each one before it runs.
TEST_BUILD = $(GOTEST) -count=1 -run '^$$' -exec /bin/true ./...

# go test as it prints without -json, then each failure again in the test's own lines only, without
# the logs the framework dumps after it: CI shows a run's last lines, and the reason must be there.
# Every line of every test goes to bin/logs/test-NAME.log. $(call gotest,NAME,TIMEOUT,PACKAGES)
gotest = @mkdir -p $(STEP_LOGS) && echo "go test: $(1) (every line in $(STEP_LOGS)/test-$(1).log)" && $(GOTEST) -json -count=1 -timeout $(2) $(3) | $(BIN)/testreport $(STEP_LOGS)/test-$(1).log

$(BIN)/testreport: hack/testreport/main.go
	@$(STEP) testreport 'the test report (seconds)' -- $(GO) build -trimpath -o $@ ./hack/testreport

# What only the tests import (the Prometheus operator's types, ...) is downloaded here, quietly,
# rather than by go test in the middle of its output.
$(BIN)/.test-modules: go.mod go.sum
	@STEP_VERB=downloading $(STEP) test-modules 'the Go modules only the tests import (first run only, seconds)' -- $(GO) mod download
	@touch $@

.PHONY: test
test: build testbin nodebin kubeadmbin krew image dist $(TOOLS) $(BIN)/.test-modules $(BIN)/testreport ## Run every test: unit, integration (test/framework), e2e, the node tier, the kubeadm tier and packaging, a short fuzz run, then make verify.
	@$(STEP) test-binaries 'the test binaries of every package (cold: about 2½ min; seconds after)' -- $(TEST_BUILD)
	@rm -f $(ETCDMEMBER_SLOWEST_LOG)
	$(call gotest,other,15m,$(OTHER_PACKAGES))
	$(call gotest,e2e,20m,$(E2E_PACKAGE))
	$(call gotest,node,20m,$(NODE_PACKAGE))
	$(call gotest,kubeadm,20m,$(KUBEADM_PACKAGE))
	@cat $(ETCDMEMBER_SLOWEST_LOG)
	$(call gotest,packaging,10m,$(PACKAGING_PACKAGE))
	$(MAKE) --no-print-directory fuzz
	$(MAKE) --no-print-directory verify

# Every parser of outside input has a fuzz target, run for a number of inputs each (package:target:
# count, about 5 s each on the 2-core CI machine). A count, not a duration: with a duration, Go
# before 1.27 can fail a target with a bare "context deadline exceeded" when the time is up
# (golang/go#75804; FuzzObjectName in a CI run of 1b2a1ac). `make fuzz FUZZTIME=10m` runs every
# target for that long instead.
FUZZTIME ?=
FUZZ_TARGETS := ./internal/etcd:FuzzParseID:3000x ./internal/naming:FuzzObjectName:100000x ./internal/peerurl:FuzzNormalize:150000x ./internal/join:FuzzSettings:2000x

.PHONY: fuzz
fuzz: ## Fuzz every parser of outside input (FUZZTIME=10m: that long each).
	@for target in $(FUZZ_TARGETS); do \
		pkg=$${target%%:*}; rest=$${target#*:}; name=$${rest%%:*}; count=$${rest#*:}; fuzztime="$(FUZZTIME)"; \
		$(GOTEST) -run=NONE -fuzz="^$$name$$" -fuzztime=$${fuzztime:-$$count} $$pkg || exit 1; \
	done

# Seeded chaos (test/chaos): random fault sequences with invariants checked after every step.
# `make test` runs a short fixed-seed run; this is the long one. An empty CHAOS_SEED picks a random
# seed, printed at the start and in the summary; CHAOS_SEED=<seed> CHAOS_ONLY=<n> replays scenario n.
CHAOS_SCENARIOS ?= 200
CHAOS_SEED ?=

.PHONY: chaos
chaos: build $(DEMOBIN) ## Seeded chaos: CHAOS_SCENARIOS random fault scenarios (CHAOS_SEED replays a run); see docs/testing.md.
	CHAOS_SCENARIOS=$(CHAOS_SCENARIOS) CHAOS_SEED=$(CHAOS_SEED) \
		$(GOTEST) -count=1 -v -timeout $$(( $(CHAOS_SCENARIOS) * 60 + 600 ))s -run '^TestChaos$$' ./test/chaos/

##@ Building

.PHONY: build
build: $(PLUGIN) $(FAILPOINTS_BIN) ## Build the plugin (bin/kubectl-etcdmember), its completion script, and the tests' agent (bin/failpoints/).

$(BIN)/kubectl-etcdmember: $(GO_SOURCES) go.mod go.sum
	@$(STEP) kubectl-etcdmember 'kubectl-etcdmember (about 4½ min cold, seconds after)' -- \
		$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $@ .
	@touch $@

$(FAILPOINTS_BIN): $(GO_SOURCES) go.mod go.sum
	@$(STEP) failpoints 'the agent the tests run, with failpoints (seconds)' -- \
		$(GO) build -tags failpoints -trimpath -ldflags "$(LDFLAGS)" -o $@ .
	@touch $@

$(BIN)/kubectl_complete-etcdmember: kubectl_complete-etcdmember
	@install -m 0755 $< $@

$(BIN)/demo: $(GO_SOURCES) $(shell find hack/demo test/framework -name '*.go' ! -name '*_test.go' 2>/dev/null) go.mod go.sum
	@$(STEP) demo 'the demo (seconds)' -- $(GO) build -trimpath -o $@ ./hack/demo
	@touch $@

.PHONY: testbin
testbin: $(TESTBIN) ## Build what the tests run besides the plugin: kube-apiserver, kubectl, etcd, etcdctl, etcd 3.6, 3.5 and 3.4 (compatibility tests), prometheus and promtool, into bin/ from Go modules.

.PHONY: tools
tools: $(TOOLS) ## Build the code tools make verify and make generate run: controller-gen, golangci-lint.

# Each tool lives in its own module under hack/tools so that its dependencies never touch ours.
$(BIN)/kube-apiserver $(BIN)/kubectl &: hack/tools/kube/go.mod hack/tools/kube/go.sum
	@cd hack/tools/kube && $(STEP) kube-apiserver 'kube-apiserver and kubectl $(KUBE_VERSION) from Go modules (first run only, about 7½ min)' -- \
		$(GO) build -trimpath -ldflags "$(KUBE_LDFLAGS)" -o $(BIN)/ \
		k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl
	@touch $(BIN)/kube-apiserver $(BIN)/kubectl

.PHONY: nodebin
nodebin: $(NODEBIN) node-packages ## Build what the node tier runs (kubelet, kube-controller-manager, kube-scheduler, kube-proxy, containerd, the pause image) and install runc, the CNI plugins and nft.

$(BIN)/kubelet $(BIN)/kube-controller-manager $(BIN)/kube-scheduler $(BIN)/kube-proxy &: hack/tools/kube/go.mod hack/tools/kube/go.sum
	@cd hack/tools/kube && $(STEP) kubelet 'kubelet, kube-controller-manager, kube-scheduler and kube-proxy $(KUBE_VERSION) from Go modules (first run only, about 3½ min)' -- \
		$(GO) build -trimpath -ldflags "$(KUBE_LDFLAGS)" -o $(BIN)/ \
		k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-controller-manager \
		k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-proxy
	@touch $(BIN)/kubelet $(BIN)/kube-controller-manager $(BIN)/kube-scheduler $(BIN)/kube-proxy

.PHONY: kubeadmbin
kubeadmbin: $(KUBEADMBIN) nodebin ## Build what the kubeadm tier runs besides the node tier's binaries: kubeadm and the control plane's images.

$(BIN)/kubeadm: hack/tools/kube/go.mod hack/tools/kube/go.sum
	@cd hack/tools/kube && $(STEP) kubeadm 'kubeadm $(KUBE_VERSION) from Go modules (first run only, about ½ min after the kubelet)' -- \
		$(GO) build -trimpath -ldflags "$(KUBE_LDFLAGS)" -o $@ k8s.io/kubernetes/cmd/kubeadm
	@touch $@

# One image per component, each the binary under /usr/local/bin (imagebuild component).
$(BIN)/kubeadm-images/%.tar: $(BIN)/% $(BIN)/imagebuild
	@mkdir -p $(@D)
	@$(STEP) image-$* 'the $* image of the kubeadm tier (seconds)' -- \
		$(BIN)/imagebuild component -bin $< -name registry.k8s.io/$*:$(KUBE_VERSION) -out $@

$(BIN)/kubeadm-images/etcd.tar: $(BIN)/etcd $(BIN)/imagebuild
	@mkdir -p $(@D)
	@$(STEP) image-etcd 'the etcd image of the kubeadm tier (seconds)' -- \
		$(BIN)/imagebuild component -bin $< -name registry.k8s.io/etcd:$(ETCD_IMAGE_TAG) -out $@

$(BIN)/kubeadm-images/etcd-3.6.tar: $(BIN)/etcd-3.6 $(BIN)/imagebuild
	@mkdir -p $(@D)
	@$(STEP) image-etcd-3.6 'the etcd 3.6 image of the kubeadm tier, which it upgrades from (seconds)' -- \
		$(BIN)/imagebuild component -bin $< -command etcd -name registry.k8s.io/etcd:$(ETCD36_IMAGE_TAG) -out $@

# kubeadm checks the sandbox image containerd runs against the one it names.
$(BIN)/kubeadm-images/pause.tar: $(BIN)/pause.tar
	@mkdir -p $(@D)
	@$(STEP) image-pause 'the pause image, named as kubeadm names it (seconds)' -- \
		$(BIN)/imagebuild pause -bin $(BIN)/pause -name registry.k8s.io/pause:3.10.2 -out $@

# No btrfs, devmapper or zfs snapshotters (they need cgo); the tier uses overlayfs.
$(BIN)/containerd $(BIN)/containerd-shim-runc-v2 $(BIN)/ctr &: hack/tools/containerd/go.mod hack/tools/containerd/go.sum
	@cd hack/tools/containerd && $(STEP) containerd 'containerd $(CONTAINERD_VERSION) from Go modules (first run only, about 2 min)' -- \
		$(GO) build -trimpath -ldflags "-s -w" -tags "no_btrfs no_devmapper no_zfs urfave_cli_no_docs" \
		-o $(BIN)/ github.com/containerd/containerd/v2/cmd/containerd \
		github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 github.com/containerd/containerd/v2/cmd/ctr
	@touch $(BIN)/containerd $(BIN)/containerd-shim-runc-v2 $(BIN)/ctr

# No registry is reachable: the pods' sandbox image is built here and imported into containerd.
$(BIN)/pause.tar: hack/tools/image/pause/main.go $(BIN)/imagebuild
	@cd hack/tools/image && $(STEP) pause 'the pause image the pods run (seconds)' -- \
		sh -c '$(GO) build -trimpath -ldflags "-s -w" -o $(BIN)/pause ./pause && $(BIN)/imagebuild pause -bin $(BIN)/pause -out $@'

# A node tier run restores the host when it ends, and the next run restores what a killed one left;
# this does the latter now.
.PHONY: node-clean
node-clean: ## Put the host back after a node tier run (test/node) that was killed: its containers, cgroups and sysctls.
	$(GO) run ./hack/nodeclean

# Debian's packages, installed only when missing (apt-get needs root, as CI and the sessions are).
.PHONY: node-packages
node-packages:
	@missing=$$(for p in $(NODE_PACKAGES); do \
		dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages for the node tier:" $$missing; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

$(BIN)/etcd $(BIN)/etcdctl &: hack/tools/etcd/go.mod hack/tools/etcd/go.sum
	@cd hack/tools/etcd && $(STEP) etcd 'etcd and etcdctl $(ETCD_VERSION) from Go modules (first run only, about 1 min)' -- \
		sh -c '$(GO) build -trimpath -o $(BIN)/etcd go.etcd.io/etcd/server/v3 && \
		$(GO) build -trimpath -o $(BIN)/etcdctl go.etcd.io/etcd/etcdctl/v3'
	@touch $(BIN)/etcd $(BIN)/etcdctl

$(BIN)/etcd-3.6: hack/tools/etcd36/go.mod hack/tools/etcd36/go.sum
	@cd hack/tools/etcd36 && $(STEP) etcd-3.6 'etcd $(ETCD36_VERSION) from Go modules (first run only, about 40 s)' -- \
		$(GO) build -trimpath -o $@ go.etcd.io/etcd/server/v3
	@touch $@

$(BIN)/etcd-3.5: hack/tools/etcd35/go.mod hack/tools/etcd35/go.sum
	@cd hack/tools/etcd35 && $(STEP) etcd-3.5 'etcd $(ETCD35_VERSION) from Go modules (first run only, about 40 s)' -- \
		$(GO) build -trimpath -o $@ go.etcd.io/etcd/server/v3
	@touch $@

$(BIN)/etcd-3.4: hack/tools/etcd34/go.mod hack/tools/etcd34/go.sum
	@cd hack/tools/etcd34 && $(STEP) etcd-3.4 'etcd $(ETCD34_VERSION) from Go modules (first run only, about 40 s)' -- \
		$(GO) build -trimpath -o $@ go.etcd.io/etcd
	@touch $@

# The alerts' tests (test/alerts, test/e2e) run promtool and a real Prometheus. Scrape targets are
# static in those tests, so no service discovery is built in (remove_all_sd), nor the web UI.
$(BIN)/prometheus $(BIN)/promtool &: hack/tools/prometheus/go.mod hack/tools/prometheus/go.sum
	@cd hack/tools/prometheus && $(STEP) prometheus 'prometheus and promtool from Go modules (first run only, about 4 min)' -- \
		$(GO) build -trimpath -tags remove_all_sd -o $(BIN)/ \
		github.com/prometheus/prometheus/cmd/prometheus github.com/prometheus/prometheus/cmd/promtool
	@touch $(BIN)/prometheus $(BIN)/promtool

$(BIN)/controller-gen: hack/tools/gen/go.mod hack/tools/gen/go.sum
	@cd hack/tools/gen && $(STEP) controller-gen 'controller-gen from Go modules (first run only, about 1 min)' -- \
		$(GO) build -o $@ sigs.k8s.io/controller-tools/cmd/controller-gen

$(BIN)/golangci-lint: hack/tools/lint/go.mod hack/tools/lint/go.sum
	@cd hack/tools/lint && $(STEP) golangci-lint 'golangci-lint from Go modules (first run only, about 2 min)' -- \
		$(GO) build -o $@ github.com/golangci/golangci-lint/v2/cmd/golangci-lint

##@ Generated code and checks

.PHONY: generate
generate: $(BIN)/controller-gen ## Regenerate deepcopy code, the CRD and the agent's RBAC from the Go markers, and the PrometheusRule from the rules file.
	$(BIN)/controller-gen object paths=./api/...
	$(BIN)/controller-gen crd rbac:roleName=etcdmember-agent paths=./api/... paths=./internal/... \
		output:crd:artifacts:config=config/crd output:rbac:artifacts:config=config/rbac
	$(GO) run ./hack/prometheusrule config/prometheus/rules.yaml config/prometheus/prometheusrule.yaml

.PHONY: verify
verify: verify-generated verify-fmt vet lint verify-no-skips ## Fail on stale generated files, gofmt, go vet, lint findings or skipped tests.

# Regenerates in a scratch copy of the tree and diffs, so it works on uncommitted changes too.
.PHONY: verify-generated
verify-generated: $(BIN)/controller-gen
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	git ls-files -z --cached --others --exclude-standard | \
		xargs -0 tar --ignore-failed-read -cf - 2>/dev/null | tar -xf - -C "$$tmp"; \
	$(MAKE) -s -C "$$tmp" generate BIN=$(BIN) >/dev/null; \
	diff -r api "$$tmp/api" && diff -r config "$$tmp/config" || \
		{ echo "generated files are stale: run 'make generate' and commit the result"; exit 1; }

.PHONY: verify-fmt
verify-fmt:
	@out=$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# The bench package builds only with its tag, and internal/failpoint's real implementation only
# with failpoints; without these runs nothing would vet or lint them.
.PHONY: vet
vet:
	$(GO) vet ./...
	$(GO) vet -tags bench ./test/bench/... ./test/node/...
	$(GO) vet -tags failpoints ./...

.PHONY: lint
lint: $(BIN)/golangci-lint
	$(BIN)/golangci-lint run ./...
	$(BIN)/golangci-lint run --build-tags bench ./test/bench/... ./test/node/...
	$(BIN)/golangci-lint run --build-tags failpoints ./internal/failpoint/...

# Integration tests must fail, not skip, when something they need is missing.
.PHONY: verify-no-skips
verify-no-skips:
	@if git grep -nE '\bt\.Skip(f|Now)?\(' -- '*_test.go'; then echo "tests must not skip"; exit 1; fi

.PHONY: clean
clean: ## Remove bin/ (the next make test builds every tool again; with cold Go caches that is about 48 min on 2 cores).
	rm -rf $(BIN)

##@ Measuring

# The bench build tag keeps these out of `make test`; BENCHMARKS.md says what each figure means.
.PHONY: bench
bench: build testbin nodebin image ## Measure leave latency, failover, quiet cost, a 10-minute outage, resync, Node deletion, the leader's own member failing and etcd's leader removed under load on the real test bed (~64 min), then the agent pod's memory and CPU under a real kubelet (~5 min); writes docs/BENCHMARKS.md and docs/BENCHMARKS-node.md.
	$(GOTEST) -tags bench -count=1 -timeout 80m -v -run '^TestBench$$' ./test/bench/
	BENCH_NODE_REPORT=$(CURDIR)/docs/BENCHMARKS-node.md $(GOTEST) -tags bench -count=1 -timeout 20m -v -run '^TestBenchAgentPod$$' ./test/node/
