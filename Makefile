# One entry point for people and CI. `make demo` on a fresh machine installs the wasm target,
# builds the example operators and runs the sample pipeline; `make test` runs every test.

EXAMPLES := tumbling-count-sum count-sum-v2 sliding-average session-summary distinct-count enrich-customers

.PHONY: demo test setup components host bench ci fuzz-smoke

setup:
	rustup target add wasm32-wasip2

components: setup
	cargo build --release --target wasm32-wasip2 $(addprefix -p weir-example-,$(EXAMPLES))

# One build of the host serves the demo and the tests: the test build of the workspace (which
# includes the `weir` binary) unifies dependency features exactly as `cargo test --workspace`
# does, so wasmtime and Cranelift are compiled once (a plain `cargo run -p weir-host` built them a
# second time with other features). `--all-targets` would also link the guests as host cdylibs,
# which fails on their component export names.
host:
	cargo test --workspace --no-run

demo: components host
	target/debug/weir run --fresh examples/tumbling-count-sum/pipeline.toml
	@echo "first results (all in target/weir-out/tumbling-count-sum/, with late.jsonl and dead-letters.jsonl):"
	@head -n 5 target/weir-out/tumbling-count-sum/results.jsonl

test: components host
	$(MAKE) fuzz-smoke
	cargo test --workspace

# A short, bounded cargo-fuzz run of each target (fuzz/README.md has the long run). cargo-fuzz
# needs a nightly toolchain; without one this says so and skips.
fuzz-smoke:
	@if ! rustup toolchain list | grep -q '^nightly'; then \
		echo "fuzz-smoke: skipped: no nightly toolchain on this machine (cargo-fuzz needs one)"; exit 0; fi; \
	command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked; \
	cd fuzz && for target in decode spec; do \
		mkdir -p target; \
		cargo +nightly fuzz run $$target -- -max_total_time=20 -max_len=4096 > target/fuzz-$$target.log 2>&1 \
			|| { tail -n 40 target/fuzz-$$target.log; echo "fuzz-smoke: $$target found a crash"; exit 1; }; \
		echo "fuzz-smoke: $$target: $$(tail -n 1 target/fuzz-$$target.log)"; \
	done

bench: components
	cargo run --release -p weir-host -- bench

ci:
	bash .ci/run
