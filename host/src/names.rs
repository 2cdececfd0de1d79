//! Names that become paths, and paths built from them. Every name a caller chooses (pipeline,
//! operator, version, savepoint, token and sink names) is checked here against one grammar, and
//! every path built from a caller's input is checked here to stay inside its root before anything
//! is opened, created or removed. Depends on nothing else in Weir.
//!
//! The grammar: 1 to [`MAX_NAME_LEN`] ASCII characters; letters, digits, `-`, `_` and `.`;
//! starting with a letter or digit; never containing `..`. So a name is never empty, `.`, `..`,
//! hidden, absolute, a path with separators, or anything a terminal or a file system treats
//! specially.

use std::path::{Component, Path, PathBuf};

/// The longest name.
pub const MAX_NAME_LEN: usize = 64;

/// The grammar, as told to a caller whose name was refused.
pub const NAME_RULE: &str = "1-64 ASCII letters, digits, '-', '_' or '.', starting with a letter \
                             or digit, without \"..\"";

/// A name or path was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NameError {
    /// A name breaks the grammar.
    #[error("{what} {value:?} is not a valid name: use {NAME_RULE}")]
    Invalid {
        /// What the name names ("pipeline name", "operator version", ...).
        what: &'static str,
        /// The name as given (shown escaped).
        value: String,
    },
    /// A path leaves the directory it must stay in.
    #[error("{what} {path:?} must be a relative path inside {root}, made of names ({NAME_RULE})")]
    Escapes {
        /// What the path is for.
        what: &'static str,
        /// The path as given.
        path: String,
        /// The directory it must stay in, as the caller knows it.
        root: &'static str,
    },
}

/// Checks a name against the grammar.
pub fn check(what: &'static str, value: &str) -> Result<(), NameError> {
    let bytes = value.as_bytes();
    let ok = !bytes.is_empty()
        && bytes.len() <= MAX_NAME_LEN
        && bytes[0].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && !value.contains("..");
    if ok {
        Ok(())
    } else {
        Err(NameError::Invalid {
            what,
            value: value.chars().take(2 * MAX_NAME_LEN).collect(),
        })
    }
}

/// Joins a caller's relative path (`out/results.jsonl`) to `root`, refusing anything but names
/// separated by `/`: no absolute paths, no `..`, no `.`, no empty parts, at most 8 parts.
/// `root_shown` is how the caller knows the root ("the pipeline's directory").
pub fn join_relative(
    what: &'static str,
    root: &Path,
    relative: &str,
    root_shown: &'static str,
) -> Result<PathBuf, NameError> {
    let escapes = || NameError::Escapes {
        what,
        path: relative.chars().take(256).collect(),
        root: root_shown,
    };
    let parts: Vec<&str> = relative.split('/').collect();
    if parts.len() > 8 || parts.iter().any(|part| check(what, part).is_err()) {
        return Err(escapes());
    }
    let joined = parts
        .iter()
        .fold(root.to_owned(), |path, part| path.join(part));
    if !is_inside(root, &joined) {
        return Err(escapes());
    }
    Ok(joined)
}

/// Whether `path` lies strictly inside `root`, judged on the words of both (no `..` after the
/// root), and, where `path` or its ancestors exist, on the real file system too (a symbolic link
/// cannot lead out).
pub fn is_inside(root: &Path, path: &Path) -> bool {
    let Ok(rest) = path.strip_prefix(root) else {
        return false;
    };
    let lexical = rest.components().count() > 0
        && rest
            .components()
            .all(|component| matches!(component, Component::Normal(_)));
    if !lexical {
        return false;
    }
    // The deepest ancestor that exists must resolve inside the resolved root.
    let Ok(real_root) = root.canonicalize() else {
        return true; // nothing exists yet: nothing can lead out
    };
    let mut existing = path;
    loop {
        if let Ok(real) = existing.canonicalize() {
            return real.starts_with(&real_root) && (existing == root || real != real_root);
        }
        match existing.parent() {
            Some(parent) => existing = parent,
            None => return false,
        }
    }
}

/// Joins a checked name to `root`: the one way a caller's name becomes a directory or file.
pub fn child(what: &'static str, root: &Path, name: &str) -> Result<PathBuf, NameError> {
    check(what, name)?;
    let path = root.join(name);
    if is_inside(root, &path) {
        Ok(path)
    } else {
        Err(NameError::Invalid {
            what,
            value: name.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn accepts_ordinary_names() {
        for name in [
            "clicks",
            "count-sum",
            "1.0.0",
            "v2_beta",
            "a",
            &"x".repeat(64),
        ] {
            assert_eq!(check("name", name), Ok(()), "{name}");
        }
    }

    #[test]
    fn refuses_names_that_are_paths_or_tricks() {
        let long = "x".repeat(65);
        for name in [
            "", ".", "..", "...", ".hidden", "a/b", "a\\b", "/etc", "a..b", "-rf", "_x", "é",
            "a b", "a\nb", "a\0b", "%2e%2e", &long, "CON:", "a*",
        ] {
            assert!(check("name", name).is_err(), "{name:?} was accepted");
        }
    }

    #[test]
    fn relative_paths_stay_inside_their_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        assert_eq!(
            join_relative("sink", root, "out/results.jsonl", "the pipeline"),
            Ok(root.join("out").join("results.jsonl"))
        );
        for bad in [
            "/etc/passwd",
            "../x",
            "out/../../x",
            "./x",
            "",
            "out//x",
            "a/b/c/d/e/f/g/h/i",
        ] {
            assert!(
                join_relative("sink", root, bad, "the pipeline").is_err(),
                "{bad:?} was accepted"
            );
        }
    }

    #[test]
    fn a_symbolic_link_cannot_lead_out() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("link")).unwrap();
        assert!(!is_inside(&root, &root.join("link").join("x")));
        assert!(is_inside(&root, &root.join("plain").join("x")));
        assert!(!is_inside(&root, &root));
        assert!(child("pipeline name", &root, "link").is_err());
    }

    proptest! {
        #[test]
        fn an_accepted_name_is_one_normal_path_part(name in "[ -~]{0,70}") {
            if check("name", &name).is_ok() {
                let components: Vec<_> = Path::new(&name).components().collect();
                prop_assert_eq!(components.len(), 1);
                prop_assert!(matches!(components[0], Component::Normal(_)));
            }
        }
    }
}
