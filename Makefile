# One entry point for people and CI. `make demo` on a fresh machine installs the wasm target,
# builds the example operators and runs the sample pipeline; `make test` runs every test.

EXAMPLES := tumbling-count-sum count-sum-v2 sliding-average session-summary distinct-count enrich-customers \
	top-keys nexmark-q0 nexmark-q1 nexmark-q2 nexmark-q5 nexmark-q7 nexmark-q8 nexmark-q11

.PHONY: demo test setup components host bench ci fuzz-smoke toolchains sdk-tests polyglot book

# The Python and JavaScript toolchains, pinned, installed under target/ by `make toolchains`;
# `weir build` finds them through WEIR_TOOLCHAINS.
TOOLCHAINS := $(CURDIR)/target/toolchains
export WEIR_TOOLCHAINS := $(TOOLCHAINS)
COMPONENTIZE_PY := 0.25.1

# Installs Debian packages $(2) (for $(3)) unless the check $(1) passes; as root or with sudo.
SUDO = $$(command -v sudo >/dev/null && [ "$$(id -u)" != 0 ] && echo sudo)
define apt_install
	@{ $(1); } || { echo "installing $(2) ($(3))"; \
		$(SUDO) apt-get install -y $(2) || { $(SUDO) apt-get update && $(SUDO) apt-get install -y $(2); }; }
endef

setup:
	rustup target add wasm32-wasip2
	$(call apt_install,command -v nats-server >/dev/null || [ -x /usr/sbin/nats-server ],nats-server,the NATS tests run a real one)
	$(call apt_install,[ -x /usr/bin/chromedriver ] && [ -x /usr/bin/chromium ] && [ -x /usr/bin/firefox-esr ],chromium chromium-driver firefox-esr,the console tests drive real browsers)
	$(call apt_install,command -v faketime >/dev/null,faketime,a cluster test runs workers on skewed clocks)

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

test: components host toolchains
	$(MAKE) fuzz-smoke
	$(MAKE) sdk-tests
	$(MAKE) book
	cargo test --workspace

# The user guide (docs/, see book.toml) with mdbook, installed once under target/tools.
MDBOOK_VERSION := 0.5.4
MDBOOK := $(CURDIR)/target/tools/bin/mdbook
$(MDBOOK):
	cargo install mdbook --version $(MDBOOK_VERSION) --locked --no-default-features --features search --root $(CURDIR)/target/tools

book: $(MDBOOK)
	$(MDBOOK) build

toolchains: $(TOOLCHAINS)/python/.installed-$(COMPONENTIZE_PY) $(TOOLCHAINS)/js/.installed

$(TOOLCHAINS)/python/.installed-$(COMPONENTIZE_PY):
	python3 -m venv $(TOOLCHAINS)/python
	$(TOOLCHAINS)/python/bin/pip install --quiet --disable-pip-version-check componentize-py==$(COMPONENTIZE_PY)
	touch $@

$(TOOLCHAINS)/js/.installed: guest-sdk/js/package.json guest-sdk/js/package-lock.json
	mkdir -p $(TOOLCHAINS)/js
	cp guest-sdk/js/package.json guest-sdk/js/package-lock.json $(TOOLCHAINS)/js/
	cd $(TOOLCHAINS)/js && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# The Python and JavaScript SDKs' and examples' own unit tests (no Wasm), and the check of the
# TypeScript declarations against wit/.
sdk-tests: toolchains
	cd guest-sdk/python && python3 -m unittest discover -s tests -t . -q
	for dir in examples/*/python; do (cd $$dir && PYTHONPATH=$(CURDIR)/guest-sdk/python python3 -m unittest -q) || exit 1; done
	node --test guest-sdk/js/test/ examples/*/js/
	node guest-sdk/js/check-types.mjs --toolchain $(TOOLCHAINS)/js

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

# The Python and JavaScript examples and test guests as components (the end-to-end tests build
# them too): target/weir-components/<example>-<language>.wasm.
POLYGLOT := tumbling-count-sum session-summary enrich-customers
polyglot: toolchains host
	for example in $(POLYGLOT); do for language in python js; do \
		target/debug/weir build examples/$$example/$$language --out target/weir-components/$$example-$$language.wasm || exit 1; \
	done; done

bench: components polyglot
	cargo run --release -p weir-host -- bench

ci:
	bash .ci/run
