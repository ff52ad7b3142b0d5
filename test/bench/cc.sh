#!/usr/bin/env bash
# What DCQCN costs a flow that no switch marks: write_bw over the in-memory
# fabric (64 KiB messages, path MTU 4096) with --cc dcqcn, the default, and
# with --cc none, in back-to-back pairs of runs of one process each, so that
# both of a pair see the same machine. It prints every figure, the medians,
# and the median of the pairs' ratios (the issue's bar: at least 0.97),
# which the machine's weather moves less than the ratio of the medians. Unmarked, no CNP comes, the reaction
# point stays at the line rate and paces nothing: what is left is the
# branch per packet that asks whether a CNP ever came, and the CE check on
# every packet received.
# Needs no privilege. Usage: test/bench/cc.sh [ITERS]   (ROUNDS=9 by default)
set -euo pipefail
cd "$(dirname "$0")/../.."
iters=${1:-20000}
rounds=${ROUNDS:-9}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/gorxe" ./cmd/gorxe

declare -A all
bw() { "$tmp/gorxe" write_bw --link mem -s 65536 -m 4096 -n "$iters" --cc "$1" --output bandwidth; }
for r in $(seq "$rounds"); do
	# Which goes first alternates, so that neither always follows the other.
	if [ $((r % 2)) = 1 ]; then d=$(bw dcqcn) n=$(bw none); else n=$(bw none) d=$(bw dcqcn); fi
	all[dcqcn]+=" $d" all[none]+=" $n"
	all[ratio]+=" $(awk -v d="$d" -v n="$n" 'BEGIN { printf "%.3f", d / n }')"
done
med() { printf '%s\n' $1 | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
echo "write_bw --link mem -s 65536 -m 4096 -n $iters, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg) at the end"
echo "  --cc dcqcn MB/s:${all[dcqcn]}"
echo "  --cc none  MB/s:${all[none]}"
echo "  dcqcn / none:   ${all[ratio]}"
printf 'median: dcqcn %.0f MB/s, none %.0f MB/s; median of the pairs'"'"' ratios, dcqcn / none: %s\n' \
	"$(med "${all[dcqcn]}")" "$(med "${all[none]}")" "$(med "${all[ratio]}")"
