#!/usr/bin/env bash
# What DCQCN costs a flow that no switch marks: write_bw over the in-memory
# fabric (64 KiB messages, path MTU 4096) with --cc dcqcn, the default, and
# with --cc none, in alternating runs of one process each, so that both see
# the same machine. It prints every figure, the medians and their ratio
# (the issue's bar: at least 0.97). Unmarked, no CNP comes, the reaction
# point stays at the line rate and paces nothing: what is left is the
# branch per packet that asks whether a CNP ever came, and the CE check on
# every packet received.
# Needs no privilege. Usage: test/bench/cc.sh [ITERS]   (ROUNDS=5 by default)
set -euo pipefail
cd "$(dirname "$0")/../.."
iters=${1:-20000}
rounds=${ROUNDS:-5}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/gorxe" ./cmd/gorxe

declare -A all
for _ in $(seq "$rounds"); do
	for cc in dcqcn none; do
		all[$cc]+=" $("$tmp/gorxe" write_bw --link mem -s 65536 -m 4096 -n "$iters" --cc "$cc" --output bandwidth)"
	done
done
med() { printf '%s\n' $1 | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
d=$(med "${all[dcqcn]}") n=$(med "${all[none]}")
echo "write_bw --link mem -s 65536 -m 4096 -n $iters, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg) at the end"
echo "  --cc dcqcn MB/s:${all[dcqcn]}"
echo "  --cc none  MB/s:${all[none]}"
awk -v d="$d" -v n="$n" 'BEGIN { printf "median: dcqcn %.0f MB/s, none %.0f MB/s, dcqcn / none %.3f\n", d, n, d / n }'
