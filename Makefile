# One entry point for people and CI. `make demo` on a fresh machine installs the wasm target,
# builds the example operators and runs the sample pipeline; `make test` runs every test.

EXAMPLES := tumbling-count-sum count-sum-v2 sliding-average session-summary distinct-count enrich-customers

.PHONY: demo test setup components bench ci

setup:
	rustup target add wasm32-wasip2

components: setup
	cargo build --release --target wasm32-wasip2 $(addprefix -p weir-example-,$(EXAMPLES))

demo: components
	cargo run -p weir-host -- run --fresh examples/tumbling-count-sum/pipeline.toml
	@echo "first results (all in target/weir-out/tumbling-count-sum/, with late.jsonl and dead-letters.jsonl):"
	@head -n 5 target/weir-out/tumbling-count-sum/results.jsonl

test: components
	cargo test --workspace

bench: components
	cargo run --release -p weir-host -- bench

ci:
	bash .ci/run
