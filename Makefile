# database-operator. `make help` lists the targets.
SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

# The operator's release: the bundle's version and the time written into its CSV.
VERSION ?= 0.2.0
CREATED_AT ?= 2026-12-03T12:00:00Z
# Cluster binaries and controller-gen are built once per version into this
# cache, outside the work tree (see hack/build-tools.sh).
export DBOP_CACHE ?= $(HOME)/.cache/database-operator
LOCAL := $(CURDIR)/.local
GOTEST_FLAGS ?= -p 2
# Every build and test here is static and path-free, as the release's
# binaries are (make build-platforms): one build cache then serves the unit
# tests, the e2e tests' manager and the images, which a cold CI run would
# otherwise compile twice.
export CGO_ENABLED ?= 0
export GOFLAGS ?= -buildvcs=false -trimpath
# Go 1.27.3: the go command fetches it through the module proxy (a machine
# starts on its own Go, and go.env says GOTOOLCHAIN=local). go.mod's go line
# says 1.27.3 too, so a fall-back to an older Go fails instead of building.
export GOTOOLCHAIN := go1.27.3
# The release module (release/: catalog, images, the OLM and image tests) links
# operator-registry and so containers/image, which needs this tag to build
# without the gpgme C library. The main module builds without it.
RELEASE_GO := GOFLAGS="$(GOFLAGS) -tags=containers_image_openpgp" go -C release

.PHONY: help
help: ## Show the targets.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*##/ {printf "  %-18s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

##@ Development

.PHONY: tools
tools: ## Build controller-gen, the local cluster's binaries and operator-sdk (cold: ~15 min, once per version).
	@hack/build-tools.sh >/dev/null
	@hack/build-tools.sh olm >/dev/null

.PHONY: generate
generate: ## Generate deepcopy code, the typed client in pkg/client (clientset, fake clientset, listers, informers) and docs/api-reference.md from the API's Go types (hack/apidocs).
	@CG=$$(hack/build-tools.sh controller-gen)/controller-gen; \
	$$CG object:headerFile=hack/boilerplate.go.txt paths=./api/...
	@hack/generate-client.sh
	@go run ./hack/apidocs -out docs/api-reference.md ./api/v1 ./api/v1alpha1

.PHONY: parameters
parameters: ## Rewrite internal/parameters/*.tsv (every setting the servers know, and whether it takes a reload or a restart) from real PostgreSQL and MariaDB servers; the engine tests fail when they are stale.
	go test -count=1 -run TestParameterTables ./tests/engine/ -update

.PHONY: manifests
manifests: ## Generate the CRD, RBAC and webhook configurations into config/.
	@CG=$$(hack/build-tools.sh controller-gen)/controller-gen; \
	$$CG rbac:roleName=manager-role crd webhook paths=./api/... paths=./internal/controller/... paths=./internal/webhook/... \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac output:webhook:artifacts:config=config/webhook
	go run ./hack/allnamespaces config/rbac/role.yaml config/rbac/all-namespaces

.PHONY: bundle
bundle: manifests ## Generate bundle/ for VERSION with operator-sdk and validate it (no warning allowed).
	@VERSION=$(VERSION) CREATED_AT=$(CREATED_AT) hack/bundle.sh

.PHONY: catalog
catalog: ## Render catalog/ from config/catalog/template.yaml (bundle/ is VERSION) and validate it with opm.
	@mkdir -p $(LOCAL)/bin && $(RELEASE_GO) build -o $(LOCAL)/bin/catalog ./cmd/catalog
	@$(LOCAL)/bin/catalog -version $(VERSION)
	@OPM=$$(hack/build-tools.sh olm)/opm; $$OPM validate catalog && echo "opm validate catalog: ok"

.PHONY: scorecard
scorecard: ## Run the bundle's scorecard tests (basic, olm and the project's own) locally: no cluster, no container runtime (needs root).
	@mkdir -p $(LOCAL)/bin && go build -o $(LOCAL)/bin/database-scorecard ./scorecard/cmd/database-scorecard
	@SDK=$$(hack/build-tools.sh olm); go run ./scorecard/cmd/scorecard-local -bundle bundle -path "$$SDK:$(LOCAL)/bin"

# The manager image's platforms (linux): release/images.Platforms.
MANAGER_ARCHS = amd64 arm64

.PHONY: build-platforms
build-platforms: ## The manager for each platform of its image, bin/manager-linux-<arch> (static, reproducible: -trimpath, no VCS stamp).
	@for a in $(MANAGER_ARCHS); do CGO_ENABLED=0 GOOS=linux GOARCH=$$a go build -trimpath -buildvcs=false -ldflags "-s -w" -o bin/manager-linux-$$a ./cmd || exit 1; done

.PHONY: images
images: build-platforms ## Build the operator, bundle and catalog (each an index of linux/amd64 and linux/arm64) and scorecard images in Go into an OCI layout in .local/images (PUSH=host:port pushes them too).
	@mkdir -p $(LOCAL)/bin && CGO_ENABLED=0 go build -o $(LOCAL)/bin/database-scorecard ./scorecard/cmd/database-scorecard
	@$(RELEASE_GO) build -o $(LOCAL)/bin/images ./cmd/images
	@hack/build-tools.sh olm >/dev/null; SDK=$$(hack/build-tools.sh olm-arm64); $(LOCAL)/bin/images -version $(VERSION) -manager "$$(for a in $(MANAGER_ARCHS); do printf '%s=bin/manager-linux-%s,' $$a $$a; done | sed 's/,$$//')" \
		-opm amd64=$$SDK/opm,arm64=$$SDK/linux-arm64/opm -grpc-health-probe amd64=$$SDK/grpc_health_probe,arm64=$$SDK/linux-arm64/grpc_health_probe -scorecard-test $$SDK/scorecard-test -database-scorecard $(LOCAL)/bin/database-scorecard \
		-out $(LOCAL)/images $(if $(PUSH),-push $(PUSH))

.PHONY: test-images
test-images: ## Build this machine's platform of the images (the manager as make build-platforms builds it), push them to an in-process registry and opm-render the bundle image (make test-images-full: every platform).
	SDK_BIN=$$(hack/build-tools.sh olm) $(RELEASE_GO) test $(GOTEST_FLAGS) -count=1 ./tests/images/...

.PHONY: test-images-full
test-images-full: ## test-images for every platform of release/images.Platforms (cross-compiles the manager, opm and grpc_health_probe for linux/arm64: about 7 minutes cold).
	@hack/build-tools.sh olm >/dev/null; SDK_BIN=$$(hack/build-tools.sh olm-arm64) IMAGES_ALL_PLATFORMS=1 $(RELEASE_GO) test $(GOTEST_FLAGS) -count=1 ./tests/images/...

.PHONY: test-olm
test-olm: ## Subscribe through OLM to the catalog's older release and upgrade along the channel, on the local cluster (root: runs in a private network namespace).
	@KUBE=$$(hack/build-tools.sh cluster); OLMB=$$(hack/build-tools.sh olm); \
	mkdir -p $(LOCAL) && $(RELEASE_GO) test -c -o $(LOCAL)/olm.test ./tests/olm && \
	cd release/tests/olm && LOCAL_CLUSTER_BIN=$$KUBE OLM_BIN=$$OLMB \
		unshare -n sh -c 'ip link set lo up && exec "$$0" -test.v -test.timeout 15m' $(LOCAL)/olm.test

KUSTOMIZE_LAYERS := config/default config/crd config/rbac config/manager config/webhook config/certmanager config/olm config/samples config/prometheus config/grafana config/manifests config/overlays/production config/overlays/namespaced

.PHONY: verify-kustomize
verify-kustomize: ## Build every kustomize layer under config/ (what `kubectl apply -k` would read).
	@K=$$(hack/build-tools.sh cluster)/kubectl; for l in $(KUSTOMIZE_LAYERS); do \
		n=$$($$K kustomize $$l | grep -c '^kind:') || { echo "kustomize $$l failed"; exit 1; }; \
		printf '%-28s %2d objects\n' $$l $$n; done; \
	out=$$(IMG=registry.example/team/manager:v9 hack/deploy.sh render) && \
	[[ $$(grep -c 'registry.example/team/manager:v9' <<<"$$out") -eq 2 && $$out != *controller:latest* ]] || \
		{ echo "make deploy's overlay does not put IMG in the manager's image and RELATED_IMAGE_MANAGER"; exit 1; }; \
	echo "make deploy overlay          IMG in image and RELATED_IMAGE_MANAGER"; \
	app=$$(awk '$$1 == "path:" {print $$2}' config/argocd/application.yaml) && [[ -n "$$app" ]] && \
		$$K kustomize "$$app" >/dev/null || { echo "config/argocd/application.yaml: its path $$app does not build"; exit 1; }; \
	echo "Argo CD Application          $$app builds"

GENERATED := api pkg/client config bundle bundle.Dockerfile catalog docs/api-reference.md

.PHONY: verify-generated
verify-generated: ## Fail when a generated file (code, CRD, RBAC, bundle, catalog, docs/api-reference.md) is stale (works on a dirty tree too).
	@snap() { git status --porcelain -- $(GENERATED); git --no-pager diff -- $(GENERATED); }; \
	before=$$(snap | sha256sum); \
	$(MAKE) -s generate manifests bundle catalog >/dev/null; \
	if [[ "$$(snap | sha256sum)" != "$$before" ]]; then \
		echo "generated files were stale and have been regenerated; review and commit:"; \
		git status --porcelain -- $(GENERATED); exit 1; fi

.PHONY: fmt
fmt: ## gofmt the code.
	gofmt -l -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## go vet, and fail on unformatted code.
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [[ -n "$$unformatted" ]]; then echo "not gofmt'ed: $$unformatted"; exit 1; fi
	go vet ./...
	$(RELEASE_GO) vet ./...

.PHONY: vuln
vuln: ## The vulnerability gate: govulncheck on the shipped binaries' code (the manager, the scorecard test image), against the pinned offline database (hack/tools/vuln); a reachable vulnerability fails.
	@V=$$(hack/build-tools.sh vuln); go version; \
	"$$V/govulncheck" -db "file://$$V/vulndb" ./cmd/... ./scorecard/cmd/database-scorecard

.PHONY: lint
lint: ## golangci-lint (built from hack/tools/lint, pinned) with .golangci.yml over the main module and the release module; in make test.
	@L=$$(hack/build-tools.sh lint); "$$L/golangci-lint" run ./... && \
	(cd release && GOFLAGS=-tags=containers_image_openpgp "$$L/golangci-lint" run -c ../.golangci.yml ./...)

.PHONY: actionlint
actionlint: ## Check the GitHub Actions workflow (.github/workflows) with actionlint, built from hack/tools/actionlint; in make test.
	@A=$$(hack/build-tools.sh actionlint); "$$A/actionlint" -color=false && echo "actionlint: $$(ls .github/workflows | wc -l) workflow(s) clean"

.PHONY: build
build: ## Build the operator binary and the kubectl plugin (bin/kubectl-database: put it on PATH, then `kubectl database`) into bin/.
	CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o bin/manager ./cmd
	CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o bin/kubectl-database ./cmd/kubectl-database

PLUGIN_BASE_URL ?= https://example.com/database-operator/releases/v$(VERSION)

.PHONY: plugin-release
plugin-release: ## Build kubectl-database for linux and darwin (amd64, arm64) into reproducible archives and write their krew manifest (.local/plugin; PLUGIN_BASE_URL is where they are published).
	@VERSION=$(VERSION) BASE_URL=$(PLUGIN_BASE_URL) hack/plugin-release.sh

##@ Local cluster

.PHONY: cluster
cluster: ## Start the local control plane in the background; kubeconfig in .local/kubeconfig, binaries in .local/bin.
	@BIN=$$(hack/build-tools.sh cluster); \
	go build -o $(LOCAL)/localcluster ./hack/localcluster && \
	$(LOCAL)/localcluster up --bin-dir "$$BIN" --dir $(LOCAL) --crds config/crd/bases

.PHONY: cluster-down
cluster-down: ## Stop the local control plane.
	@if [[ -x $(LOCAL)/localcluster ]]; then $(LOCAL)/localcluster down --dir $(LOCAL); else echo "local cluster not running"; fi

.PHONY: install
install: ## Apply the CRDs to the cluster in KUBECONFIG (default: the local one).
	@KC=$${KUBECONFIG:-$(LOCAL)/kubeconfig}; KUBECTL=$$(command -v $(LOCAL)/bin/kubectl || command -v kubectl); \
	$$KUBECTL --kubeconfig "$$KC" apply --server-side --force-conflicts -f config/crd/bases && \
	$$KUBECTL --kubeconfig "$$KC" wait --for=condition=Established --timeout=60s crd/databases.example.com

.PHONY: run
run: cluster install build ## Start the local cluster, install the CRDs, run the operator and apply the sample; prints the status as it changes.
	@hack/run.sh

##@ Deployment

.PHONY: deploy
deploy: ## Install the operator on the cluster in KUBECONFIG with kustomize (config/default; cert-manager must run there): IMG=<registry>/<repository>:<tag> is the manager image you pushed.
	@IMG="$(IMG)" hack/deploy.sh apply

.PHONY: undeploy
undeploy: ## Remove what `make deploy` installed (the CRDs too, and with them every Database and Backup).
	@hack/deploy.sh delete

##@ Tests

.PHONY: test
# What CI runs, in this order (hack/steps.sh prints each step's time).
TEST_STEPS = verify-generated verify-kustomize vet lint actionlint test-rules vuln test-unit scorecard test-images test-integration test-olm
test: ## Everything CI runs (TEST_STEPS, one after another, each step's time printed at the end).
	@MAKE="$(MAKE)" hack/steps.sh $(TEST_STEPS)

.PHONY: test-rules
# test-rules builds its test as hack/build-tools.sh builds promtool (no cgo,
# -trimpath), so that most of the Prometheus packages it imports come from
# the build cache (measured: 13 s cold instead of 68).
test-rules: ## The alerts and the dashboard: promtool (hack/tools/promtool, pinned) checks the PrometheusRule's rules and runs their unit tests (config/prometheus/tests), and every metric an alert or a panel uses must be in the metric contract.
	@P=$$(hack/build-tools.sh promtool); cd hack/tools/promtool && \
		GOWORK=off CGO_ENABLED=0 GOFLAGS=-trimpath PROMTOOL=$$P/promtool go test -count=1 -v ./monitoring/ 2>&1 | grep -v '^=== RUN'

.PHONY: test-unit
test-unit: ## Unit tests (no cluster).
	go test $(GOTEST_FLAGS) ./api/... ./pkg/... ./internal/... ./helm-charts/... ./scorecard/... ./hack/apidocs/... ./tests/layout/...
	$(RELEASE_GO) test $(GOTEST_FLAGS) ./catalog/... ./images/... ./ociimage/...

.PHONY: test-integration
test-integration: ## Integration tests on a real local control plane.
	@BIN=$$(hack/build-tools.sh cluster); S3=$$(hack/build-tools.sh s3); CRDS=$$(hack/build-tools.sh monitoring-crds); \
	LOCAL_CLUSTER_BIN="$$BIN" VERSITYGW_BIN="$$S3" MONITORING_CRDS="$$CRDS" go test $(GOTEST_FLAGS) -parallel 3 -count=1 -timeout 45m ./tests/e2e/... ./tests/engine/... ./tests/metrics/... ./tests/storage/... ./tests/backup/... ./tests/integration/... ./tests/rbac/... ./tests/localcluster/... ./tests/processnode/... ./tests/utils/processnode/... -v 2>&1 | \
		grep -v '^=== \(RUN\|PAUSE\|CONT\)' | tee /tmp/dbop-integration.log

# The API tests: schema, CEL, conversion, the webhooks, and the release
# checks (tests/integration/compat_test.go).
API_TESTS = TestInvalidCreatesAreRejected|TestInvalidUpdatesAreRejected|TestNameLengthIsBounded|TestInvalidBackupsAreRejected|TestConversionBothWays|TestWebhookDefaults|TestWebhookRefusals|TestWarningsAndAudit|TestStoredBeforeStorageSwitch|TestWebhookCertificateReload|TestV1alpha1WritesKeepV1Rules|TestBackupTargetsNeedSecretAccess|TestBackupTargetSecretsAreChecked|TestTheRequestedRelease|TestCELNewerThanTheServerIsRefused|TestBadSpecsRefusedThroughBothVersions|TestEveryUnsafeSettingRefused
FLOOR_VERSION = $(shell cd hack/tools/kube-floor && GOWORK=off GOFLAGS=-mod=mod go list -m -f '{{.Version}}' k8s.io/kubernetes)

.PHONY: test-floor
test-floor: ## The API tests on the oldest supported Kubernetes (hack/tools/kube-floor, the CSV's minKubeVersion; full tier: building that release is 8 minutes of a cold CI run).
	@BIN=$$(hack/build-tools.sh floor); \
	KUBE_FLOOR=1 WANT_KUBE_VERSION=$(FLOOR_VERSION:v%=%) LOCAL_CLUSTER_BIN="$$BIN" go test $(GOTEST_FLAGS) -count=1 -timeout 20m -v -run '^($(API_TESTS))$$' ./tests/integration/ 2>&1 | \
		grep -v '^=== \(RUN\|PAUSE\|CONT\)' | tee /tmp/dbop-floor.log

.PHONY: test-floor-full
test-floor-full: ## The whole integration suite (tests/integration) on the oldest supported Kubernetes.
	@BIN=$$(hack/build-tools.sh floor); \
	KUBE_FLOOR=1 WANT_KUBE_VERSION=$(FLOOR_VERSION:v%=%) LOCAL_CLUSTER_BIN="$$BIN" go test $(GOTEST_FLAGS) -count=1 -timeout 45m -v ./tests/integration/ 2>&1 | \
		grep -v '^=== \(RUN\|PAUSE\|CONT\)' | tee /tmp/dbop-floor-full.log

FAILOVER_RUNS ?= 5
.PHONY: bench-failover
bench-failover: ## Per engine, FAILOVER_RUNS times: time to a writable -rw after the primary's machine is lost, after its server hangs (the agent's own detection), after it is cut off (with two-writer time and lost writes); p50/p95 (real pods; root).
	@BIN=$$(hack/build-tools.sh cluster); \
	LOCAL_CLUSTER_BIN="$$BIN" go test -run '^$$' -bench 'Benchmark(Failover|HungServer|Partition|FailoverBesideHungDatabase)' -benchtime=$(FAILOVER_RUNS)x -timeout 60m ./tests/e2e/

.PHONY: test-faults
test-faults: ## The fault scenarios once per engine on real pods (root): machine lost, primary cut off (two-writer check), former primary back, the operator killed at each step of a failover and of a switchover (24 kills), the API server restarted during a failover, control-plane outage, switchover and rolling change under writes, spec.parameters (reload and rolling restart), synchronous replication (partition; primary and a synchronous replica lost together), a lost replication slot, a replica that stops replicating, a failover beside a hung Database, an operator upgrade rolling Databases one at a time; and the routine operations: the primary's pod deleted (and force-deleted), evicted, its node drained, scale-downs past the primary, a Database re-created over kept volumes, an interrupted failover undone, a stuck rollout, a full connection table, a crash under writes; and a real Prometheus scraping the agents and the operator with the shipped alerts (replication and backup alerts fire and resolve); crash causes diagnosed from real failing servers (corrupt data directories, an unknown setting).
	@BIN=$$(hack/build-tools.sh cluster); PROM=$$(hack/build-tools.sh prometheus); \
	E2E_FULL=1 LOCAL_CLUSTER_BIN="$$BIN" PROMETHEUS_BIN="$$PROM" go test -count=1 -parallel 3 -v -timeout 120m ./tests/e2e/ \
		-run 'TestFailover$$|TestFormerPrimaryReturns|TestOperatorKilled|TestAPIServerRestartedDuringFailover|TestPartitionedPrimaryStopsTakingWrites|TestControlPlaneOutageKeepsThePrimary|TestSwitchoverUnderWrites|TestRollingChange|TestParameters|TestSynchronous|TestLostSlotRebuildsReplica|TestStoppedReplicaLeavesReadOnly|TestFailoverBesideHungDatabase|TestUpgradeRollsAFewDatabasesAtATime|TestPrimaryPod|TestPrimaryEvicted|TestScaleDown|TestRecreatedOverKeptVolumes|TestInterruptedFailoverUndone|TestStuckRollout|TestConnectionTableFull|TestCrashDurability|TestPrometheusAlerts|TestCrashCausesDiagnosed'

.PHONY: test-pitr-full
test-pitr-full: ## Point-in-time recovery on real pods (root): the recover program on real servers (a target outside the window, a corrupt segment, a drill, archive retention, the archive across a failover; MariaDB's binary log archived and replayed to a time, a GTID and the end, a corrupt file; a MariaDB physical copy recovered to a time), a recovery to T into a new Database with a restore drill (and a MariaDB one), and one across a switchover's timeline change with a corrupt segment that leaves the recovered Database Failed with no pod and the drill failed.
	@BIN=$$(hack/build-tools.sh cluster); S3=$$(hack/build-tools.sh s3); \
	go test -count=1 -v -timeout 10m -run 'TestPostgresPointInTimeRecovery|TestArchiveAcrossFailover|TestMariaDBPointInTimeRecovery|TestMariaDBPhysicalPointInTimeRecovery' ./tests/backup/ && \
	E2E_FULL=1 LOCAL_CLUSTER_BIN="$$BIN" VERSITYGW_BIN="$$S3" go test -count=1 -parallel 2 -v -timeout 30m ./tests/e2e/ \
		-run 'TestPointInTimeRecovery|TestContinuousArchiving|TestMariaDBPointInTimeRecovery'

PITR_RUNS ?= 5
.PHONY: bench-pitr
bench-pitr: ## The recovery point of PostgreSQL and of MariaDB, PITR_RUNS times each: a Database archiving with a 10 s timeout loses its primary's machine under writes and is deleted with its volumes; the latest moment is recovered into a new Database; acknowledged writes lost and the recovery point per run, p50 and max, and the replay's rate (real pods; root).
	@BIN=$$(hack/build-tools.sh cluster); \
	LOCAL_CLUSTER_BIN="$$BIN" go test -run '^$$' -bench 'BenchmarkRecoveryPoint|BenchmarkMariaDBRecoveryPoint' -benchtime=$(PITR_RUNS)x -timeout 90m ./tests/e2e/

.PHONY: test-full
test-full: test test-faults test-pitr-full test-floor-full test-images-full ## What CI runs, then the full tier: every fault scenario (make test-faults), point-in-time recovery (make test-pitr-full), the integration suite (the API tests among it) on the oldest supported Kubernetes, the images for every platform.

FAULT_RUNS ?= 5
.PHONY: bench-faults
bench-faults: ## Every fault scenario FAULT_RUNS times per engine (real pods; root; hours): prints the table docs/figures.md keeps (runs, acknowledged writes lost and set aside, longest two-writer time, p50/p95 time to a writable -rw).
	@BIN=$$(hack/build-tools.sh cluster); \
	E2E_FULL=1 LOCAL_CLUSTER_BIN="$$BIN" go test -run '^$$' -bench 'Benchmark(Failover|HungServer|Partition|FailoverBesideHungDatabase|OperatorKilledDuring(Failover|Switchover)|APIServerRestartedDuringFailover|ControlPlaneOutage|RollingChange|SynchronousPartition|PrimaryPodDeleted|ScaleDown)$$' \
		-benchtime=$(FAULT_RUNS)x -timeout 600m ./tests/e2e/ | tee /tmp/dbop-bench-faults.log

.PHONY: bench-backup
bench-backup: ## Backup and restore throughput (MB/s) of 1M rows per engine, to a directory (real servers).
	@S3=$$(hack/build-tools.sh s3); \
	VERSITYGW_BIN="$$S3" go test -run '^$$' -bench BenchmarkBackupRestore -benchtime=1x -timeout 30m ./tests/backup/

METRICS_SCRAPES ?= 20
.PHONY: bench-metrics
bench-metrics: ## The cost of one scrape of the agent's database metrics per engine (real PostgreSQL and MariaDB primaries): time (ms/scrape) and size (bytes/scrape, series/scrape), over METRICS_SCRAPES scrapes.
	go test -run '^$$' -bench BenchmarkScrape -benchtime=$(METRICS_SCRAPES)x -timeout 10m ./tests/metrics/

.PHONY: bench
bench: ## Benchmarks (render, apply decision); prints figures.
	go test -run '^$$' -bench . -benchmem ./internal/controller/... ./internal/chart/...
