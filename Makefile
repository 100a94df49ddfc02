# onceq: the two set-up commands are `make run` and `make test`.
GO          ?= go
BIN         := $(CURDIR)/.bin
STATICCHECK := $(BIN)/staticcheck
STATICCHECK_VERSION := v0.7.0
# every package of every module in go.work (./... would stop at the root module)
PKGS        := github.com/onceq/onceq/...

.PHONY: run test test-short lint unit bench fuzz chaos servers-start servers-stop

## run: the example order worker on the embedded default (no AWS needed)
run:
	@mkdir -p $(BIN)
	@echo "make run: building the example order worker (the first build downloads and compiles its modules: a few minutes)..."
	@t0=$$(date +%s); $(GO) build -o $(BIN)/order-worker ./examples/order-worker && \
	  echo "make run: built in $$(( $$(date +%s) - t0 )) s; running 10,000 order deliveries through it in memory..."
	$(BIN)/order-worker -demo 10000

## test: lint, then every test against real servers it starts and stops,
## each stage and each group of packages timed as it ends
test:
	bash integration/run-tests.sh

# test-short starts its two longest packages first (go test starts them in
# the order named), four at once: they wait on in-process brokers, not the CPU
SHORT_FIRST := github.com/onceq/onceq/integration/kafkaboth github.com/onceq/onceq/sources/franzsource/sharesource

## test-short: every test that needs no server, with -short (a minute or
## two); the tests that need one skip, CI or not, servers or not
test-short:
	@t0=$$(date +%s); \
	env -u ONCEQ_DYNAMODB_ENDPOINT -u ONCEQ_DYNAMODB2_ENDPOINT -u ONCEQ_SQS_ENDPOINT -u ONCEQ_POSTGRES_URL \
	  -u ONCEQ_REDIS_ADDR -u ONCEQ_KAFKA_BROKERS -u ONCEQ_LAMBDA_RIE -u ONCEQ_PROMTOOL CI= \
	  $(GO) test -short -count=1 -p 4 $(SHORT_FIRST) $(PKGS) && \
	echo "make test-short: passed in $$(( $$(date +%s) - t0 )) s"

## unit: the tests that need no server, with -race (the rest skip outside CI)
unit:
	$(GO) test -race -count=1 $(PKGS)

lint: $(STATICCHECK)
	bash integration/hygiene.sh
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(STATICCHECK) $(PKGS)

$(STATICCHECK):
	GOBIN=$(BIN) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

## bench: one table of onceq beside the raw clients, medians of several
## runs against real servers it starts and stops; writes BENCHMARKS.md
bench:
	bash integration/bench.sh

## fuzz: each fuzz target for FUZZTIME (default 20s)
FUZZTIME ?= 20s
FUZZ_TARGETS := ./dedup:FuzzKey ./dedup/dynamostore:FuzzStoredKey ./dedup/cache:FuzzCacheKey ./dedup/dynamostore:FuzzDecodeRecord ./dedup/redisstore:FuzzRecordDecode ./examples/order-worker:FuzzParseOrder ./idempotency/httpidem:FuzzFingerprint ./cmd/onceq:FuzzPrintedLines
fuzz:
	@for t in $(FUZZ_TARGETS); do pkg=$${t%%:*}; fn=$${t##*:}; \
	  echo "fuzz $$fn in $$pkg for $(FUZZTIME)"; \
	  $(GO) test -run '^$$' -fuzz "^$$fn$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; done

## chaos: worker processes killed and restarted under DynamoDB faults, then
## every order checked exactly once; on SQS, then on Kafka
## (CHAOS_FLAGS="-orders 5000 -workers 4"; "-source kafka" runs one mode)
## ("-pipeline": order workers, relays and shipping workers, every order shipped once;
##  "-redrive": the pipeline, with dead letters and DEAD outbox entries sent back by
##  onceq redrive, two runs at once and a third, every order still reserved and shipped once;
##  "-batch": Kafka batch mode, each partition's offsets committed once, in order;
##  "-txn": Kafka transactions, each input's outputs visible once read_committed)
## Each run prints a "chaos: history: ... verdict: linearizable" line
chaos:
	bash integration/chaos.sh $(CHAOS_FLAGS)

servers-start:
	bash integration/servers.sh start

servers-stop:
	bash integration/servers.sh stop
