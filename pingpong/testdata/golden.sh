#!/bin/sh
# Remakes golden.txt from golden.c with the host's C compiler and glibc.
set -e
cd "$(dirname "$0")"
cc -O0 -Wall -o /tmp/pingpong-golden golden.c
/tmp/pingpong-golden > golden.txt
rm -f /tmp/pingpong-golden
