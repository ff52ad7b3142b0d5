# gorxe's build and test entry points. `make test` is what CI runs (.ci/run).

GO        ?= go
# FUZZTIME is a count of executions per fuzz target, not a duration: with a
# duration, Go's fuzz coordinator (up to Go 1.26) can report "context deadline
# exceeded" as a failure when the time runs out while a worker is mid-call
# (golang/go#75804), with no failing input behind it. A count has no deadline.
# 1000000x is about 50 s a target on a 2-core machine.
FUZZTIME  ?= 1000000x
FUZZ_TARGETS := ./wire:FuzzParseIP ./wire:FuzzParseUDPPayload ./wire:FuzzParseFrame ./wire/rocelayer:FuzzDecode ./wire/cm:FuzzCM ./cm:FuzzLiveQP1 ./rnic:FuzzResponder ./rnic:FuzzResponderSRQ ./rnic:FuzzUnreliable ./explain:FuzzExplain ./pingpong:FuzzParseMessage ./link/tap:FuzzInput ./link/tap:FuzzCut ./rsocket:FuzzDatagramUDP ./qperf:FuzzMessages ./internal/perfkey:FuzzParse

.PHONY: all build test deps check vet fmt race router-test fuzz interop interop-full interop-flags router bench bench-gbn bench-net bench-fairness bench-scale bench-vm bench-stall bench-instr bench-cc sim-figures

all: build

build:
	$(GO) build -o bin/gorxe ./cmd/gorxe

# test: formatting, vet, and every test with the race detector, then each
# fuzz target briefly (200000 executions, about 10 s each), then the quick interop matrix against kernel rxe. As
# root it first installs what the integration tests under test/ run (they
# build hosts from network namespaces and need root); the interop harness
# installs qemu and debootstrap itself.
test: deps check race router-test
	$(MAKE) fuzz FUZZTIME=200000x
	$(MAKE) interop

# interop runs the quick interop matrix against kernel rxe in a qemu VM
# (test/interop/interop.sh, which installs qemu and debootstrap and builds
# the VM images on first use), twice: with Debian bookworm's perftest
# (6.06) and trixie's (6.24). It needs root; without it, it says so and
# does nothing. interop-full runs the whole matrix against both, about
# 35 minutes.
interop:
	@if [ "$$(id -u)" = 0 ]; then test/interop/interop.sh && test/interop/interop.sh --suite trixie; \
	else echo "interop: not run: it needs root (qemu, TAP, network namespaces); run: sudo make interop"; fi

interop-full:
	test/interop/interop.sh --full && test/interop/interop.sh --full --suite trixie

# interop-flags runs perftest's flags that change a run (-D,
# --run_infinitely, -q, -b, --report_gbits, options after the server's
# name, -s 4K, -o, --write_with_imm) both ways, against both perftest
# versions.
interop-flags:
	test/interop/interop.sh --flags && test/interop/interop.sh --flags --suite trixie

# router runs DCQCN through a real congestion point
# (test/router/router.sh, about 2 minutes): two gorxe senders and a
# receiver in network namespaces, routed through Debian's kernel in a qemu
# VM (the interop image) whose egress toward the receiver is htb with RED
# marking ECN under it, once with --cc dcqcn and once with --cc none; it
# prints each flow's goodput, the router's drops and marks, the CNPs in a
# capture and gorxe's counters, and fails unless DCQCN keeps the router
# from dropping and the flows within 20% of each other. It needs root;
# without it, it says so and does nothing. test/router/results/ keeps a
# run's output.
router:
	@if [ "$$(id -u)" = 0 ]; then test/router/router.sh; \
	else echo "router: not run: it needs root (qemu, TAP, network namespaces); run: sudo make router"; fi

# deps installs, when root and missing, the tools the integration tests
# call: ip (iproute2), ping (iputils-ping), tshark, and chromium, which
# TestLadderHTML drives headless to check explain's ladder diagram.
deps:
	@if [ "$$(id -u)" = 0 ]; then \
		missing=""; \
		command -v ip >/dev/null || missing="$$missing iproute2"; \
		command -v ping >/dev/null || missing="$$missing iputils-ping"; \
		command -v tshark >/dev/null || missing="$$missing tshark"; \
		command -v chromium >/dev/null || missing="$$missing chromium"; \
		if [ -n "$$missing" ]; then \
			echo "installing$$missing"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
		fi; \
	fi

check: fmt vet

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

# race runs every test but TestRouter, which router-test runs after it on
# an otherwise idle machine: its router is a VM under qemu's emulation,
# which forwards below its 30 Mbit/s when the race-detected tests of
# other packages hold the CPUs, and then its queue overflows whatever the
# senders do (CI35 on 2026-12-02: DCQCN's drops 1.5% of --cc none's, the
# limit then being 1%; it is 3% since a CI run of TestRouter alone met a
# 34 ms pause of the router and 1.2%). TestRouter builds the VM image first on a fresh clone:
# more than go test's default 10 minutes may pass.
race:
	$(GO) test -race -count=1 -timeout 30m -skip '^TestRouter$$' ./...

router-test:
	$(GO) test -count=1 -timeout 30m -run '^TestRouter$$' ./test

# fuzz runs every fuzz target for FUZZTIME (default 1000000 executions each).
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$pkg $$name for $(FUZZTIME)"; \
		$(GO) test $$pkg -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME); \
	done

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# bench-net measures gorxe against raw UDP between two network namespaces
# (root): throughput, round trip and allocations per packet; and raw AF_XDP
# (test/bench/xskraw) and, when the build has the xdp link, gorxe over xdp
# against it and against the udp link. About 3 minutes.
bench-net:
	test/bench/bench.sh

# bench-cc prints what DCQCN costs an unmarked flow: write_bw over the
# in-memory fabric with --cc dcqcn and with --cc none, alternating runs,
# their medians and the ratio (test/bench/cc.sh; no root).
bench-cc:
	test/bench/cc.sh

# sim-figures runs every gorxe sim scenario with DCQCN on and off and
# rewrites docs/sim/ (results.txt and the plots the README shows), in
# about a minute (test/sim/figures.sh).
sim-figures:
	test/sim/figures.sh

# bench-vm runs perftest's tests between two 1-vCPU VMs (the interop
# image under qemu's emulation), over kernel rxe and then over gorxe, and
# prints gorxe/rxe ratios and each run's retransmissions, then a UDP
# ping-pong between two Go programs in the same VMs, the floor under a
# user-space transport's latency there, and each latency run's two
# turnarounds from a capture on the bridge (test/bench/vm.sh, about 6
# minutes). It needs root; without it, it says
# so and does nothing.
bench-vm:
	@if [ "$$(id -u)" = 0 ]; then test/bench/vm.sh; \
	else echo "bench-vm: not run: it needs root (qemu, TAP, network namespaces); run: sudo make bench-vm"; fi

# bench-stall runs write_lat over the udp link between two processes while
# one of them is stopped 20 ms in every 100, and prints each side's tail
# probes, go-backs and the batches its timers caught up on: a stopped
# side reads what came before it runs the timers it missed
# (test/bench/stall.sh, about a minute, root).
bench-stall:
	@if [ "$$(id -u)" = 0 ]; then test/bench/stall.sh; \
	else echo "bench-stall: not run: it needs root (a network namespace); run: sudo make bench-stall"; fi

# bench-instr prints the instructions gorxe's own code spends per
# write_lat round trip and per send_bw -s 64 message, counted by
# callgrind: a figure the machine's load does not move, to compare two
# builds (GORXE_BIN) with one run each. It installs valgrind when missing.
bench-instr:
	@if [ "$$(id -u)" = 0 ]; then test/bench/instr.sh; \
	else echo "bench-instr: not run: it needs root (a network namespace); run: sudo make bench-instr"; fi

# bench-gbn prints how much of go-back-N's ideal efficiency a WRITE stream
# keeps under random loss 1/256.
bench-gbn:
	$(GO) test ./rnic -run '^$$' -bench GoBackN -benchtime 1x -v | grep -E 'window|ok'

# bench-fairness prints the round trip of 64-byte WRITEs on one QP of a
# device, alone and while another QP of it serves 256 MiB READs, and how
# long one READ takes.
bench-fairness:
	$(GO) test ./rnic -run '^$$' -bench ReadFairness -benchtime 1x -v | grep -E 'alone|ok'

# bench-scale prints the aggregate WRITE throughput of 1, 64, 1024 and 4096
# connected QPs on one device over the in-memory fabric, its ratio to one
# QP's, and the heap each QP costs with perftest's default capabilities.
SCALE_MSGS ?= 1000000x
bench-scale:
	$(GO) test ./rnic -run '^$$' -bench '^BenchmarkScale$$' -benchtime $(SCALE_MSGS) -v | sed -n '/^ *scale: /,/^ *$$/{s/^        //;p}'
