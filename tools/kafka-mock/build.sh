#!/usr/bin/env bash
# Builds the Kafka mock cluster launcher (needs Debian's librdkafka-dev) into
# dist/tools/kafka-mock/mock-cluster. Usage: bash tools/kafka-mock/build.sh [OUT]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/../../dist/tools/kafka-mock/mock-cluster}"
mkdir -p "$(dirname "$out")"
gcc -O2 -Wall -Wextra -o "$out" "$here/mock-cluster.c" -lrdkafka
echo "$out"
