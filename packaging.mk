# Release packaging, included by the Makefile (which defines BIN, GO, VERSION and LDFLAGS):
# `make dist` cross-builds the krew archives and renders the krew manifest, `make image` writes the
# agent's OCI image, `make install` copies the plugin into PREFIX. Nothing here needs Docker or the
# network beyond the Go module proxy.

DIST ?= $(CURDIR)/dist
PREFIX ?= /usr/local
IMAGE_REPO ?= ghcr.io/etcdmember/kubectl-etcdmember
# Archive entries and the image carry the commit's time instead of the build's, so two builds of
# one commit are byte-identical (https://reproducible-builds.org/specs/source-date-epoch/).
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)

##@ Packaging

# Always runs: go build's cache makes a repeat cheap (five links), and a rule keyed on file times
# could not see a change of VERSION.
DIST_CMD = $(GO) run ./hack/dist -go '$(GO)' -version '$(VERSION)' -ldflags '$(LDFLAGS)' \
	-mtime '$(SOURCE_DATE_EPOCH)' -manifest krew-manifest.yaml -out '$(DIST)'

.PHONY: dist
dist: ## Cross-build kubectl-etcdmember (linux, darwin, windows) into reproducible archives and dist/etcdmember.yaml (krew).
	@$(STEP) dist 'the release archives for every platform (cold: about 4½ min per platform not built yet; seconds after)' -- $(DIST_CMD)

# The image needs only the linux archives; make test runs its tests on the image while the rest
# of make dist builds (the linux builds are cached by then, and reproducible, so the same bytes).
.PHONY: dist-linux
dist-linux:
	@$(STEP) dist-linux 'the linux release archives (about 5 min cold, seconds after)' -- $(DIST_CMD) -os linux

.PHONY: image
image: dist-linux $(BIN)/imagebuild ## Write the agent image (linux/amd64+arm64, entrypoint serve, non-root) as dist/image (OCI) and dist/image_linux_<arch>.tar (docker load).
	$(BIN)/imagebuild build -dist '$(DIST)' -version '$(VERSION)' -mtime '$(SOURCE_DATE_EPOCH)' -repo '$(IMAGE_REPO)'

.PHONY: install
install: $(PLUGIN) ## Copy kubectl-etcdmember and its completion script into PREFIX/bin (default /usr/local).
	install -d '$(DESTDIR)$(PREFIX)/bin'
	install -m 0755 $(BIN)/kubectl-etcdmember $(BIN)/kubectl_complete-etcdmember '$(DESTDIR)$(PREFIX)/bin/'

# The real krew and its manifest validator, which test/packaging runs against dist/.
.PHONY: krew
krew: $(BIN)/krew $(BIN)/validate-krew-manifest ## Build bin/krew and bin/validate-krew-manifest (krew v0.4.3).

# krew v0.4.3 requires k8s.io/client-go v11.0.0+incompatible, so it builds in a module of its own.
$(BIN)/krew $(BIN)/validate-krew-manifest &: hack/tools/krew/go.mod hack/tools/krew/go.sum
	@cd hack/tools/krew && $(STEP) krew 'krew v0.4.3 from Go modules (first run only, seconds)' -- \
		$(GO) build -trimpath -o $(BIN)/ sigs.k8s.io/krew/cmd/krew sigs.k8s.io/krew/cmd/validate-krew-manifest
	@touch $(BIN)/krew $(BIN)/validate-krew-manifest

$(BIN)/imagebuild: $(wildcard hack/tools/image/*.go) hack/tools/image/go.mod hack/tools/image/go.sum
	@cd hack/tools/image && $(STEP) imagebuild 'imagebuild, the image writer (seconds)' -- $(GO) build -trimpath -o $@ .
