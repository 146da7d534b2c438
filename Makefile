# Sluice — see README.md and CONTRIBUTING.md.
GO          ?= go
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
CONFIG      ?= examples/policies.yaml
BENCHFLAGS  ?=

# Integration tests read these; `make test` also sets SLUICE_INTEGRATION=1 so
# that an unreachable Redis or PostgreSQL fails the run instead of skipping.
export SLUICE_TEST_REDIS_URL    ?= redis://127.0.0.1:6379
export SLUICE_TEST_POSTGRES_URL ?= postgres://postgres@127.0.0.1:5432/test?sslmode=disable

.PHONY: run build test vet lint services unit bench fuzz fmt

## run: start `sluice serve` on the embedded defaults with the example policies
run:
	$(GO) run ./cmd/sluice serve --config $(CONFIG)

## build: build the sluice binary into bin/
build:
	$(GO) build -o bin/sluice ./cmd/sluice

## test: vet, lint, start the services, and run every test with -race
test: vet lint services
	SLUICE_INTEGRATION=1 $(GO) test -race -count=1 -timeout 9m ./...
	cd bench && $(GO) vet ./... && $(GO) test -count=1 -run . ./...

## vet: go vet on both modules
vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { echo "gofmt needed:"; gofmt -l .; exit 1; }

## lint: staticcheck at a pinned version (downloaded by go run)
lint:
	$(GO) run $(STATICCHECK) ./...
	cd bench && $(GO) run $(STATICCHECK) ./...

## services: start Redis and PostgreSQL if they are installed but stopped
services:
	./scripts/services.sh

## unit: tests without the race detector or the services (quick loop)
unit:
	$(GO) test ./...

## bench: side-by-side benchmarks against the peers (bench/ module)
bench:
	cd bench && $(GO) run ./cmd/sluicebench $(BENCHFLAGS)

## fuzz: run each fuzz target for a while (seed corpora run in `make test`)
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzTake -fuzztime 60s ./gcra
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 60s ./limiter
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
