//! What the `weir` binary carries for projects: the WIT contract, the Python and JavaScript
//! SDKs, and the tumbling count-sum example of each language as `weir new`'s template. All are
//! the repository's own files, embedded at compile time, so a project needs nothing else of
//! the repository (a test checks that every SDK file is embedded).
//!
//! Depends on nothing outside `project`.

use std::path::{Path, PathBuf};

use super::ProjectError;
use super::build::write_if_changed;

/// The esbuild version the JavaScript build bundles with.
pub const ESBUILD: &str = "0.25.0";

/// The WIT packages Python and JavaScript operators are built against: 0.3, which uses 0.2
/// and 0.1.
const WIT_V3: [(&str, &str); 3] = [
    (
        "operator.wit",
        include_str!("../../../wit/v0.3/operator.wit"),
    ),
    (
        "deps/weir-operator-0.2.0.wit",
        include_str!("../../../wit/v0.2/operator.wit"),
    ),
    (
        "deps/weir-operator-0.1.0.wit",
        include_str!("../../../wit/operator.wit"),
    ),
];

/// The Python SDK package `weir_sdk`, by file name.
pub const PYTHON_SDK: &[(&str, &str)] = &[
    (
        "__init__.py",
        include_str!("../../../guest-sdk/python/weir_sdk/__init__.py"),
    ),
    (
        "events.py",
        include_str!("../../../guest-sdk/python/weir_sdk/events.py"),
    ),
    (
        "export.py",
        include_str!("../../../guest-sdk/python/weir_sdk/export.py"),
    ),
    (
        "operator.py",
        include_str!("../../../guest-sdk/python/weir_sdk/operator.py"),
    ),
    (
        "py.typed",
        include_str!("../../../guest-sdk/python/weir_sdk/py.typed"),
    ),
    (
        "state.py",
        include_str!("../../../guest-sdk/python/weir_sdk/state.py"),
    ),
    (
        "testing.py",
        include_str!("../../../guest-sdk/python/weir_sdk/testing.py"),
    ),
    (
        "values.py",
        include_str!("../../../guest-sdk/python/weir_sdk/values.py"),
    ),
];

/// The JavaScript SDK and its build scripts, by file name (all in `guest-sdk/js`).
pub const JS_SDK: &[(&str, &str)] = &[
    (
        "weir-sdk.js",
        include_str!("../../../guest-sdk/js/weir-sdk.js"),
    ),
    (
        "weir-sdk.d.ts",
        include_str!("../../../guest-sdk/js/weir-sdk.d.ts"),
    ),
    (
        "testing.js",
        include_str!("../../../guest-sdk/js/testing.js"),
    ),
    (
        "testing.d.ts",
        include_str!("../../../guest-sdk/js/testing.d.ts"),
    ),
    ("build.mjs", include_str!("../../../guest-sdk/js/build.mjs")),
    (
        "toolchain.mjs",
        include_str!("../../../guest-sdk/js/toolchain.mjs"),
    ),
];

/// The SDK files a project's `node_modules/weir-sdk` holds (besides its package.json).
pub const JS_PACKAGE_FILES: [&str; 4] =
    ["weir-sdk.js", "weir-sdk.d.ts", "testing.js", "testing.d.ts"];

/// The package.json of a project's `node_modules/weir-sdk`.
pub const JS_PACKAGE_JSON: &str = r#"{
  "name": "weir-sdk",
  "version": "0.1.0",
  "private": true,
  "type": "module",
  "main": "./weir-sdk.js",
  "types": "./weir-sdk.d.ts",
  "exports": {
    ".": { "types": "./weir-sdk.d.ts", "default": "./weir-sdk.js" },
    "./testing": { "types": "./testing.d.ts", "default": "./testing.js" }
  }
}
"#;

/// The templates of `weir new`: each language's tumbling count-sum example and its test.
pub mod templates {
    /// The Rust example.
    pub const RUST_APP: &str = include_str!("../../../examples/tumbling-count-sum/src/lib.rs");
    /// The Python example.
    pub const PYTHON_APP: &str = include_str!("../../../examples/tumbling-count-sum/python/app.py");
    /// The Python example's test.
    pub const PYTHON_TEST: &str =
        include_str!("../../../examples/tumbling-count-sum/python/test_app.py");
    /// The JavaScript example.
    pub const JS_APP: &str = include_str!("../../../examples/tumbling-count-sum/js/app.js");
    /// The JavaScript example's test.
    pub const JS_TEST: &str = include_str!("../../../examples/tumbling-count-sum/js/app.test.mjs");
}

/// Writes the WIT package 0.3, with the packages it uses, under `support` and returns its
/// directory: the contract Python and JavaScript projects build against, aggregates (many
/// windows per call) and enrichers (a batch field after field) alike.
pub fn write_wit(support: &Path) -> Result<PathBuf, ProjectError> {
    let dir = support.join("wit-0.3");
    for (name, contents) in WIT_V3 {
        write_if_changed(&dir.join(name), contents.as_bytes())?;
    }
    Ok(dir)
}

/// Writes the Python SDK under `support` and returns the directory to put on the path.
pub fn write_python(support: &Path) -> Result<PathBuf, ProjectError> {
    let dir = support.join("python");
    for (name, contents) in PYTHON_SDK {
        write_if_changed(&dir.join("weir_sdk").join(name), contents.as_bytes())?;
    }
    Ok(dir)
}

/// Writes the JavaScript SDK and build script under `support` and returns the script's path.
pub fn write_js(support: &Path) -> Result<PathBuf, ProjectError> {
    let dir = support.join("js");
    for (name, contents) in JS_SDK {
        write_if_changed(&dir.join(name), contents.as_bytes())?;
    }
    Ok(dir.join("build.mjs"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files_in(dir: &str) -> Vec<String> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(dir);
        let mut names: Vec<String> = std::fs::read_dir(&root)
            .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
            .map(|entry| entry.unwrap())
            .filter(|entry| entry.file_type().unwrap().is_file())
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn every_sdk_file_is_embedded() {
        let embedded =
            |files: &[(&str, &str)]| files.iter().map(|(n, _)| n.to_string()).collect::<Vec<_>>();
        assert_eq!(embedded(PYTHON_SDK), files_in("guest-sdk/python/weir_sdk"));
        let js = files_in("guest-sdk/js");
        for (name, _) in JS_SDK {
            assert!(js.contains(&name.to_string()), "{name}");
        }
        for name in JS_PACKAGE_FILES {
            assert!(JS_SDK.iter().any(|(n, _)| *n == name), "{name}");
        }
    }
}
