"""Unit tests of the weir_sdk package (plain CPython, no Wasm)."""
