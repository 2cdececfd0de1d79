#!/usr/bin/env bash
# Runs each example with its Rust operator and with its JavaScript operator (examples/*/js) and
# compares the outputs (all but the fields naming the operator must be identical). Run from
# anywhere, after building the Rust components (target/wasm32-wasip2/release) and the
# JavaScript ones (target/weir-components/*-js.wasm, see README.md):
#
#   bash guest-sdk/js/compare-examples.sh [path/to/weir]
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
weir="${1:-$root/target/debug/weir}"
out="$root/target/weir-out"
status=0

# The results of enrich-customers go to standard output: keep them in a file.
run() { "$weir" run --fresh "$1" > "$2"; }

for example in tumbling-count-sum session-summary enrich-customers; do
  echo "== $example"
  run "$root/examples/$example/pipeline.toml" "$out/$example.stdout.jsonl"
  run "$root/examples/$example/js/pipeline.toml" "$out/$example-js.stdout.jsonl"
  node "$root/guest-sdk/js/compare-outputs.mjs" \
    "$out/$example.stdout.jsonl" "$out/$example-js.stdout.jsonl" \
    "$out/$example" "$out/$example-js" || status=1
done
exit "$status"
