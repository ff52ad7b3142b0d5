#!/usr/bin/env bash
# Runs every scenario of gorxe sim with DCQCN on (the paper's parameters)
# and off, and writes what the README shows: each run's figures into
# docs/sim/results.txt and its plot into docs/sim/SCENARIO[-none].png.
# The CSV stays in $GORXE_SIM_OUT (default a temporary directory). A run
# is a function of its flags: the same binary writes the same figures and
# plots, but the wall-time line, which is this machine's.
set -euo pipefail
cd "$(dirname "$0")/../.."
go build -o bin/gorxe ./cmd/gorxe
out=${GORXE_SIM_OUT:-$(mktemp -d)}
mkdir -p docs/sim
results=docs/sim/results.txt
: > "$results"
run() { # NAME FILE FLAGS...
	local name=$1 file=$2
	shift 2
	echo "\$ gorxe sim ${*:+$* }$name" | tee -a "$results"
	bin/gorxe sim --out "$out/$file" "$@" "$name" | tee -a "$results"
	cp "$out/$file/plot.png" "docs/sim/$file.png"
	echo | tee -a "$results"
}
for s in two-flows incast join-leave parking-lot parking-lot-loss; do
	run $s $s
	run $s $s-none --cc none
done
run incast-sweep incast-sweep
run incast incast16-100g --n 16 --rate 100G --duration 100ms --settle 30ms
echo "CSV in $out"
