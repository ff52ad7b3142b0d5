# gorxe's build and test entry points. `make test` is what CI runs (.ci/run).

GO        ?= go
FUZZTIME  ?= 60s
FUZZ_TARGETS := ./wire:FuzzParseIP ./wire:FuzzParseUDPPayload ./wire:FuzzParseFrame ./wire/rocelayer:FuzzDecode

.PHONY: all build test check vet fmt race fuzz bench bench-gbn

all: build

build:
	$(GO) build -o bin/gorxe ./cmd/gorxe

# test: formatting, vet, and every test with the race detector, then each
# fuzz target briefly.
test: check race
	$(MAKE) fuzz FUZZTIME=10s

check: fmt vet

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

race:
	$(GO) test -race -count=1 ./...

# fuzz runs every fuzz target for FUZZTIME (default 60s each).
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$pkg $$name for $(FUZZTIME)"; \
		$(GO) test $$pkg -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME); \
	done

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# bench-gbn prints how much of go-back-N's ideal efficiency a WRITE stream
# keeps under random loss 1/256.
bench-gbn:
	$(GO) test ./rnic -run '^$$' -bench GoBackN -benchtime 1x -v | grep -E 'window|ok'
