# Sluice — see README.md and CONTRIBUTING.md. `make help` lists the targets.
GO          ?= go
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
CONFIG      ?= examples/policies.yaml
BENCHFLAGS  ?=

# Integration tests read these; `make test` also sets SLUICE_INTEGRATION=1 so
# that an unreachable Redis or PostgreSQL fails the run instead of skipping.
export SLUICE_TEST_REDIS_URL    ?= redis://127.0.0.1:6379
export SLUICE_TEST_POSTGRES_URL ?= postgres://postgres@127.0.0.1:5432/test?sslmode=disable
export GO STATICCHECK

.PHONY: help run build install test test-under-load vet lint services unit bench fuzz fmt example-ohlcv

## help: list the targets and what they do
help:
	@sed -n 's/^## //p' $(MAKEFILE_LIST) | awk -F': ' '{ t = $$1; sub(/^[^:]*: /, ""); printf "  %-16s %s\n", t, $$0 }'

## run: start `sluice serve` on the embedded defaults with the example policies
run:
	$(GO) run ./cmd/sluice serve --config $(CONFIG)

## build: build the sluice binary into bin/ (run it as bin/sluice)
build:
	$(GO) build -o bin/sluice ./cmd/sluice

## install: go install the sluice binary (into GOBIN, or GOPATH/bin: have it on your PATH)
install:
	$(GO) install ./cmd/sluice

## test: every suite even after a failure (services, gofmt, vet, staticcheck, go test -race, bench module), failing at the end if any failed
test:
	./scripts/test.sh

## test-under-load: make test 3 times with 4 busy processes, then twice at once (before landing a timing-sensitive test)
test-under-load:
	./scripts/test-under-load.sh

## vet: gofmt check and go vet on both modules (main and bench/)
vet:
	./scripts/test.sh gofmt vet

## lint: staticcheck at a pinned version (downloaded by go run) on both modules
lint:
	./scripts/test.sh staticcheck

## fmt: gofmt -w every Go file of both modules
fmt:
	gofmt -w $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')

## services: start Redis and PostgreSQL if they are installed but stopped
services:
	./scripts/services.sh

## unit: tests without the race detector or the services (quick loop)
unit:
	$(GO) test ./...

## example-ohlcv: seed 000's worked example: 2 worker processes ingest klines into SQLite under a simulated exchange's weight limit
example-ohlcv:
	$(GO) run ./examples/ohlcv

## bench: side-by-side benchmarks against the peers (bench/ module)
bench:
	cd bench && $(GO) run ./cmd/sluicebench $(BENCHFLAGS)

## fuzz: run each fuzz target for a while (seed corpora run in `make test`)
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzTake -fuzztime 60s ./gcra
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 60s ./limiter
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime 60s ./rls
	$(GO) test -run '^$$' -fuzz FuzzTakeRequest -fuzztime 60s ./server
	$(GO) test -run '^$$' -fuzz FuzzSlotRequest -fuzztime 60s ./server
	$(GO) test -run '^$$' -fuzz FuzzParseWindowSize -fuzztime 60s ./store
	$(GO) test -run '^$$' -fuzz FuzzLeaseRequest -fuzztime 60s ./server
	$(GO) test -run '^$$' -fuzz '^FuzzRetryAfter$$' -fuzztime 60s ./signal
	$(GO) test -run '^$$' -fuzz '^FuzzResetDelay$$' -fuzztime 60s ./signal
	$(GO) test -run '^$$' -fuzz '^FuzzSFList$$' -fuzztime 60s ./signal
	$(GO) test -run '^$$' -fuzz '^FuzzSFDictionary$$' -fuzztime 60s ./signal
	$(GO) test -run '^$$' -fuzz '^FuzzRateLimitHeaders$$' -fuzztime 60s ./signal
	$(GO) test -run '^$$' -fuzz '^FuzzShopifyCallLimit$$' -fuzztime 60s ./signal
	$(GO) test -run '^$$' -fuzz '^FuzzShopifyGraphQL$$' -fuzztime 60s ./signal
	$(GO) test -run '^$$' -fuzz '^FuzzBinanceHeaders$$' -fuzztime 60s ./signal
	$(GO) test -run '^$$' -fuzz '^FuzzObserve$$' -fuzztime 60s ./aimd
	$(GO) test -run '^$$' -fuzz '^FuzzDecide$$' -fuzztime 60s ./retry
	$(GO) test -run '^$$' -fuzz '^FuzzBreaker$$' -fuzztime 60s ./breaker
	$(GO) test -run '^$$' -fuzz '^FuzzParseScenario$$' -fuzztime 60s ./sim
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime 60s ./provider
	$(GO) test -run '^$$' -fuzz '^FuzzParseKlines$$' -fuzztime 60s ./examples/ohlcv
	$(GO) test -run '^$$' -fuzz '^FuzzNormalizeShop$$' -fuzztime 60s ./provider
	$(GO) test -run '^$$' -fuzz '^FuzzSettle$$' -fuzztime 60s ./provider
	$(GO) test -run '^$$' -fuzz '^FuzzLimits$$' -fuzztime 60s ./gcra
	$(GO) test -run '^$$' -fuzz '^FuzzWindow$$' -fuzztime 60s ./window
	$(GO) test -run '^$$' -fuzz '^FuzzConfig$$' -fuzztime 60s ./aimd
	$(GO) test -run '^$$' -fuzz '^FuzzConfig$$' -fuzztime 60s ./retry
	$(GO) test -run '^$$' -fuzz '^FuzzConfig$$' -fuzztime 60s ./breaker
	$(GO) test -run '^$$' -fuzz '^FuzzDifferential$$' -fuzztime 120s -fuzzminimizetime 5s ./store/sqlitestore
	SLUICE_INTEGRATION=1 $(GO) test -run '^$$' -fuzz '^FuzzDifferential$$' -fuzztime 120s -fuzzminimizetime 5s ./store/redisstore
	SLUICE_INTEGRATION=1 $(GO) test -run '^$$' -fuzz '^FuzzDifferential$$' -fuzztime 120s -fuzzminimizetime 5s ./store/pgstore
	$(GO) test -run '^$$' -fuzz '^FuzzLeaseDifferential$$' -fuzztime 60s ./store/sqlitestore
	SLUICE_INTEGRATION=1 $(GO) test -run '^$$' -fuzz '^FuzzLeaseDifferential$$' -fuzztime 60s ./store/redisstore
	SLUICE_INTEGRATION=1 $(GO) test -run '^$$' -fuzz '^FuzzLeaseDifferential$$' -fuzztime 60s ./store/pgstore
