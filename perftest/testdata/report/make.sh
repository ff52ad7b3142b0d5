#!/bin/sh
# Regenerates the golden *.txt files from golden.c (needs a C compiler).
set -e
cd "$(dirname "$0")"
cc -Wall -Wno-format-security -o /tmp/perftest-golden golden.c
/tmp/perftest-golden
rm -f /tmp/perftest-golden
