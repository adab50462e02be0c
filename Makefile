# gamesession-controller. `make help` lists the targets.
SHELL := /usr/bin/env bash
.DEFAULT_GOAL := help

GO ?= go
BIN_DIR := bin
CONTROLPLANE_DIR := $(BIN_DIR)/controlplane
# VERSION names images and releases: the nearest v* tag as git describes it,
# else v0.0.0-<commits>-g<commit>; -dirty when the tree has changes. Both
# forms are SemVer, as a Helm chart version must be.
VERSION ?= $(shell git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null || \
  echo "v0.0.0-$$(git rev-list --count HEAD)-g$$(git rev-parse --short HEAD)$$(git diff --quiet HEAD || echo -dirty)")
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
IMAGE_REPOSITORY ?= gamesession-controller
IMAGE ?= $(IMAGE_REPOSITORY):dev
RELEASE_DIR ?= _output/release/$(VERSION)

# VERSION_LDFLAGS stamp VERSION into the controller, and into make run's
# local runner, which runs the same code in its own process.
VERSION_LDFLAGS = -X github.com/example/gamesession-controller/cmd/gamesession-controller/app.Version=$(VERSION)

.PHONY: help
help: ## List the targets.
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  %-14s %s\n", $$1, $$2}'

.PHONY: build
build: ## Build the controller binary into bin/.
	$(GO) build -ldflags "$(VERSION_LDFLAGS)" -o $(BIN_DIR)/gamesession-controller ./cmd/gamesession-controller

.PHONY: codegen
codegen: ## Regenerate clientset, listers, informers, deepcopy and the CRD.
	hack/update-codegen.sh

.PHONY: controlplane
controlplane: ## Build etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok into bin/controlplane (minutes the first time).
	hack/build-controlplane.sh

.PHONY: verify
verify: ## Check generated code is current, gofmt, go vet, doc comments (hack/godoclint), and that controller-runtime stays out of the module graph.
	hack/verify-codegen.sh
	@unformatted=$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go')); \
	  if [[ -n "$$unformatted" ]]; then echo "gofmt needed: $$unformatted" >&2; exit 1; fi
	$(GO) vet ./...
	$(GO) run ./hack/godoclint $$($(GO) list -f '{{.Dir}}' ./...)
	@# The modules beside the controller's: vetted, and their go.mod tidy.
	@for m in test/deploy hack/tools/image hack/tools/release hack/tools/dashshot cmd/kubectl-gamesession; do \
	  (cd $$m && $(GO) vet ./... && $(GO) mod tidy -diff) || { echo "module $$m: go vet or go mod tidy -diff failed" >&2; exit 1; }; \
	done
	@# hack/tools/prometheus has no package of its own (go vet would refuse
	@# it), only the tools it pins: promtool and the Prometheus server.
	@(cd hack/tools/prometheus && $(GO) mod tidy -diff) || { echo "module hack/tools/prometheus: go mod tidy -diff failed" >&2; exit 1; }
	@if $(GO) list -m all | grep -q sigs.k8s.io/controller-runtime; then \
	  echo "sigs.k8s.io/controller-runtime must not be in the module graph" >&2; exit 1; fi

.PHONY: verify-alerts
verify-alerts: ## Check the alerting rules and run their promtool unit tests in test/alerts (builds promtool into bin/tools on first use).
	hack/verify-alerts.sh

.PHONY: test
test: verify verify-alerts controlplane ## Verify, check the alerts, then run all unit, integration, image and chart tests (builds the control plane and promtool on first use).
	@# -timeout 20m: the 4,000 sequences of pkg/controller take about 8 minutes
	@# with -race on 2 cores, too near go test's default of 10.
	$(GO) test -race -count=1 -parallel 8 -timeout 20m $$($(GO) list ./... | grep -v -e /test/faults -e /test/image -e /test/tenancy)
	@# The fault tests stop and restart a control plane of their own, and the
	@# tenancy tests run cluster-wide controllers on one of their own: run
	@# them after the rest, one package at a time, so that no two slow each
	@# other's timing checks.
	$(GO) test -race -count=1 -parallel 8 ./test/faults/
	$(GO) test -race -count=1 ./test/tenancy/
	@# The image test cross-compiles the controller twice (seconds with a warm
	@# build cache, minutes without): alone, and with room.
	$(GO) test -race -count=1 -timeout 40m ./test/image/
	$(MAKE) test-deploy
	$(MAKE) test-plugin

.PHONY: test-deploy
test-deploy: controlplane ## The Helm chart (lint, render vs artifacts/, dry run, helm install, the controller on the chart's RBAC), GitOps health and the release bundle: the test/deploy module.
	@# Its own module keeps Helm, kustomize and cli-utils (which requires
	@# controller-runtime) out of the controller's graph. No -race: the
	@# controller runs as a process of its own there, and a race build of
	@# Helm's dependencies costs minutes.
	cd test/deploy && $(GO) test -count=1 -timeout 30m ./...

.PHONY: test-plugin
test-plugin: controlplane ## The kubectl plugin (cmd/kubectl-gamesession, a module of its own): unit tests, and its commands against the controller on a local control plane.
	cd cmd/kubectl-gamesession && $(GO) test -count=1 -timeout 20m ./...

.PHONY: plugin
plugin: ## Install the kubectl plugin kubectl-gamesession into $GOBIN (kubectl finds it on the PATH as `kubectl gamesession`).
	cd cmd/kubectl-gamesession && $(GO) install .

.PHONY: helm-lint
helm-lint: ## helm lint --strict the chart in both RBAC modes (the Helm CLI pinned in hack/tools/release).
	cd hack/tools/release && $(GO) tool helm lint --strict ../../../charts/gamesession-controller
	cd hack/tools/release && $(GO) tool helm lint --strict --set rbac.scope=namespace ../../../charts/gamesession-controller

.PHONY: unit
unit: ## Run unit tests only (no control plane).
	$(GO) test -count=1 ./pkg/... ./cmd/...

# SEQUENCES and FIRST_SEED size the long run of the randomised sequence tests.
SEQUENCES ?= 100000
FIRST_SEED ?= 1

.PHONY: test-sequences
test-sequences: ## The randomised event-sequence tests at length: SEQUENCES (100,000) seeds from FIRST_SEED (make test runs 4,000).
	$(GO) test -count=1 -timeout 2h -run 'TestSequences$$' ./pkg/controller/ -args -sequence.count=$(SEQUENCES) -sequence.first=$(FIRST_SEED)

.PHONY: test-faults
test-faults: controlplane ## Fault injection at full size: 1,000 sessions, a 30s API server outage, 5 leader failovers (~16 min).
	$(GO) test -race -count=1 -parallel 1 -timeout 45m ./test/faults/ -args -faults.full

# Controller flags for `make run`, e.g. make run ARGS='-v=2 --workers=4'.
ARGS ?=

# A cluster is used only when named on the command line (make run
# KUBECONFIG=path): a KUBECONFIG merely exported in the shell may point at a
# production cluster, and make run must never go there by accident.
RUN_KUBECONFIG := $(if $(filter command line,$(origin KUBECONFIG)),$(KUBECONFIG))

.PHONY: run
run: build ## Run the controller (its flags in ARGS='-v=2 ...'): on a local control plane with the examples applied, or on the cluster of `make run KUBECONFIG=path`.
	@if [[ -n "$(RUN_KUBECONFIG)" ]]; then \
	  echo "make run: the cluster of KUBECONFIG=$(RUN_KUBECONFIG)"; \
	  $(BIN_DIR)/gamesession-controller --kubeconfig "$(RUN_KUBECONFIG)" $(ARGS); \
	else \
	  if [[ -n "$${KUBECONFIG:-}" ]]; then \
	    echo "make run: ignoring the KUBECONFIG exported in this shell; to run against that cluster: make run KUBECONFIG=\$$KUBECONFIG"; \
	  fi; \
	  hack/build-controlplane.sh && $(GO) build -ldflags "$(VERSION_LDFLAGS)" -o $(BIN_DIR)/run-local ./hack/run-local && \
	  KUBECONFIG= exec $(BIN_DIR)/run-local $(ARGS); \
	fi

.PHONY: bench
bench: controlplane ## Benchmarks on the local control plane, quick size (~4 min): table in docs/bench/quick.md.
	$(GO) run ./test/bench

.PHONY: bench-full
bench-full: controlplane ## The 7,340-session scenario (about an hour on 2 cores): table in docs/bench/full.md.
	$(GO) run ./test/bench -preset=full

.PHONY: image
image: ## Build the image for linux/amd64 and linux/arm64 into bin/image/ (OCI layout and tar; no Docker needed); IMAGE=name:tag names it.
	IMAGE=$(IMAGE) VERSION=$(VERSION) REVISION=$(REVISION) hack/build-image.sh

.PHONY: release
release: ## Write a release bundle into _output/release/VERSION: CRD, install.yaml, Helm chart package, alerts, Argo CD check, image (IMAGE_REPOSITORY=registry/name).
	$(MAKE) image IMAGE=$(IMAGE_REPOSITORY):$(VERSION)
	rm -rf $(RELEASE_DIR)
	cd hack/tools/release && $(GO) run . -root ../../.. -out $(abspath $(RELEASE_DIR)) -version $(VERSION) \
	  -image-repository $(IMAGE_REPOSITORY) -image-archive $(abspath $(BIN_DIR)/image/gamesession-controller.tar)

.PHONY: diagrams
diagrams: ## Render every Mermaid diagram of README.md and docs/ into bin/docs (needs Debian's chromium; installs mermaid-cli with npm).
	hack/render-mermaid.sh

.PHONY: dashboard-picture
dashboard-picture: controlplane ## Redraw docs/images/dashboard.svg, the Grafana dashboard over a real run: local control plane, controller, Prometheus (built into bin/tools on first use) and traffic (~8 min).
	hack/dashboard-picture.sh

.PHONY: clean
clean: ## Remove build outputs (keeps the control plane build).
	rm -rf $(BIN_DIR)/gamesession-controller $(BIN_DIR)/run-local $(BIN_DIR)/codegen $(BIN_DIR)/image $(BIN_DIR)/docs _output
