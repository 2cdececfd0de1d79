//! Operator projects: a directory with an operator's source in one language, its project file
//! `weir.toml`, a pipeline spec, sample events and a test. [`new`] makes one (`weir new`),
//! [`build`] turns one into a component with the language's toolchain (`weir build`), and
//! [`deploy`] uploads the component to a running `weir serve` (`weir deploy`).
//!
//! [`check_examples`] runs the project's own examples through what was built (`weir build`).
//!
//! A leaf of the crate: it depends on `names`, `client` (`weir deploy`'s upload), and
//! `spec` and `pipeline` (the examples' runs); nothing in the runtime depends on it.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub mod build;
pub mod deploy;
pub mod examples;
pub mod new;
mod sdk;

pub use build::{Toolchains, build};
pub use deploy::deploy;
pub use examples::{
    Embedded, check_embedded, embed as embed_examples, embedded as embedded_examples,
};
pub use examples::{Example, check_examples};
pub use new::new;

/// The project file's name.
pub const PROJECT_FILE: &str = "weir.toml";

/// A language an operator can be written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    /// Rust, with the `weir-sdk` crate and `cargo`.
    Rust,
    /// Python, with `weir_sdk` and componentize-py.
    Python,
    /// JavaScript, with `weir-sdk.js` and componentize-js.
    Js,
}

impl Language {
    /// The language's name as people write it (`Rust`, `Python`, `JavaScript`).
    pub fn display_name(self) -> &'static str {
        match self {
            Language::Rust => "Rust",
            Language::Python => "Python",
            Language::Js => "JavaScript",
        }
    }
}

impl std::fmt::Display for Language {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Language::Rust => "rust",
            Language::Python => "python",
            Language::Js => "js",
        })
    }
}

/// Which WIT world an operator implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// An aggregate (`aggregator` world).
    Aggregate,
    /// An enricher (`enricher` world).
    Enrich,
}

impl Kind {
    /// The WIT world's name.
    pub fn world(self) -> &'static str {
        match self {
            Kind::Aggregate => "aggregator",
            Kind::Enrich => "enricher",
        }
    }
}

/// The project file `weir.toml`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProjectFile {
    /// The operator's name: the component is `build/<name>.wasm`.
    pub name: String,
    /// The source language.
    pub language: Language,
    /// Aggregate or enricher.
    pub kind: Kind,
    /// The source file (Python: the module file, JavaScript: the entry module), relative to the
    /// project; Rust projects build their crate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Input events and the results the operator must give for them, checked by `weir build`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub examples: Vec<Example>,
}

/// A project on disk.
#[derive(Debug, Clone)]
pub struct Project {
    /// Its directory.
    pub dir: PathBuf,
    /// Its project file.
    pub file: ProjectFile,
}

impl Project {
    /// Reads the project in `dir`.
    pub fn open(dir: &Path) -> Result<Project, ProjectError> {
        let path = dir.join(PROJECT_FILE);
        let text = std::fs::read_to_string(&path).map_err(|source| ProjectError::NoProject {
            path: path.clone(),
            source,
        })?;
        let file: ProjectFile = toml::from_str(&text).map_err(|e| ProjectError::BadProject {
            path: path.clone(),
            message: e.to_string(),
        })?;
        crate::names::check("operator name", &file.name).map_err(|e| ProjectError::BadProject {
            path,
            message: e.to_string(),
        })?;
        Ok(Project {
            dir: dir.to_owned(),
            file,
        })
    }

    /// Where `weir build` puts the component unless told otherwise.
    pub fn default_output(&self) -> PathBuf {
        self.dir
            .join("build")
            .join(format!("{}.wasm", self.file.name))
    }

    /// The source file of a Python or JavaScript project.
    pub fn source(&self) -> PathBuf {
        let default = match self.file.language {
            Language::Python => "app.py",
            Language::Js => "app.js",
            Language::Rust => "src/lib.rs",
        };
        self.dir
            .join(self.file.source.as_deref().unwrap_or(default))
    }
}

/// Why a project could not be made, built or deployed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProjectError {
    /// The directory has no readable project file.
    #[error("no operator project here: cannot read {path}: {source} (make one with `weir new`)")]
    NoProject {
        /// The project file's path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The project file is malformed.
    #[error("bad project file {path}: {message}")]
    BadProject {
        /// The project file's path.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A name given on the command line breaks the name rule.
    #[error(transparent)]
    Name(#[from] crate::names::NameError),
    /// `weir new` would overwrite something.
    #[error("{0} already exists: choose another name or directory")]
    Exists(PathBuf),
    /// A toolchain the language needs is not installed.
    #[error("{tool} not found, which {language} operators need to build: {install}")]
    ToolchainMissing {
        /// The language.
        language: Language,
        /// The missing tool.
        tool: &'static str,
        /// How to install it.
        install: String,
    },
    /// The toolchain ran and failed.
    #[error("{tool} failed ({status}):\n{output}")]
    BuildFailed {
        /// The tool.
        tool: &'static str,
        /// Its exit status.
        status: String,
        /// The end of what it printed.
        output: String,
    },
    /// The server could not be reached, or its answer not read.
    #[error("deploy to {} failed: {}", .source.server, .source.problem)]
    Client {
        /// The client's error, naming the server.
        source: crate::client::ClientError,
    },
    /// Uploading the component failed.
    #[error("example {example} does not hold: {problem}")]
    Example {
        /// The example's input file.
        example: String,
        /// What went wrong.
        problem: String,
    },
    #[error("deploy to {server} failed: {message}")]
    Deploy {
        /// The server's address.
        server: String,
        /// What went wrong.
        message: String,
    },
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// Attaches a path to an I/O error.
fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ProjectError + '_ {
    move |source| ProjectError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Writes a file, creating its directory.
fn write_file(path: &Path, contents: &[u8]) -> Result<(), ProjectError> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(io(parent))?;
    }
    std::fs::write(path, contents).map_err(io(path))
}
