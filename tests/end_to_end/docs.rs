//! The README and the user guide (`docs/`, built by mdbook) as a reader follows them: every
//! relative link leads to a file that exists, and every `#anchor` to a heading of that file;
//! every chapter is in the book's table of contents; the README stays a front door (at most
//! 250 lines).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The README and every Markdown file of the guide.
fn documents() -> Vec<PathBuf> {
    let docs = repository().join("docs");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&docs)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .collect();
    files.sort();
    files.push(repository().join("README.md"));
    files
}

/// The text outside fenced code blocks, line by line, with inline code spans blanked.
fn prose(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut out = String::with_capacity(line.len());
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
                out.push(' ');
            } else {
                out.push(if in_code { ' ' } else { c });
            }
        }
        lines.push(out);
    }
    lines
}

/// The targets of the inline links (`[text](target)`, images too) in `text`.
fn links(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in prose(text) {
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let end = after.find(')').unwrap_or(after.len());
            let target = after[..end].split_whitespace().next().unwrap_or("");
            found.push(target.trim_matches(['<', '>']).to_owned());
            rest = &after[end..];
        }
    }
    found
}

/// A heading's anchor as GitHub and mdbook make it: lower case, letters, digits, `-` and `_`
/// kept, spaces turned into `-`, the rest dropped (links and code reduced to their text).
fn slug(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading;
    // `[text](url)` -> `text`
    while let Some(open) = rest.find('[') {
        text.push_str(&rest[..open]);
        let inner = &rest[open + 1..];
        match (inner.find("]("), inner.find(')')) {
            (Some(close), Some(end)) if close < end => {
                text.push_str(&inner[..close]);
                rest = &inner[end + 1..];
            }
            _ => {
                text.push('[');
                rest = inner;
            }
        }
    }
    text.push_str(rest);
    text.to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of `text`'s headings (a repeated one gets `-1`, `-2`, ... as GitHub does).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let base = slug(line.trim_start_matches('#').trim());
        let mut anchor = base.clone();
        let mut n = 0;
        while seen.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        seen.insert(anchor);
    }
    seen
}

#[test]
fn every_link_of_the_readme_and_the_guide_leads_somewhere() {
    let mut broken = Vec::new();
    for document in documents() {
        let text = std::fs::read_to_string(&document).unwrap();
        let dir = document.parent().unwrap();
        for target in links(&text) {
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (target.as_str(), None),
            };
            let file = if path.is_empty() {
                document.clone()
            } else {
                dir.join(path)
            };
            let name = document.strip_prefix(repository()).unwrap().display();
            if !file.exists() {
                broken.push(format!("{name}: {target} (no such file)"));
                continue;
            }
            if let Some(anchor) = anchor
                && file.extension().is_some_and(|e| e == "md")
            {
                let headings = anchors(&std::fs::read_to_string(&file).unwrap());
                if !headings.contains(anchor) {
                    broken.push(format!("{name}: {target} (no such heading)"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn every_chapter_of_the_guide_is_in_its_table_of_contents() {
    let docs = repository().join("docs");
    let summary = std::fs::read_to_string(docs.join("SUMMARY.md")).unwrap();
    let listed: BTreeSet<String> = links(&summary).into_iter().collect();
    let missing: Vec<String> = documents()
        .iter()
        .filter(|path| path.parent() == Some(docs.as_path()))
        .map(|path| path.file_name().unwrap().to_string_lossy().into_owned())
        .filter(|name| name != "SUMMARY.md" && !listed.contains(name))
        .collect();
    assert!(missing.is_empty(), "not in docs/SUMMARY.md: {missing:?}");
}

#[test]
fn the_readme_is_a_front_door() {
    let readme = std::fs::read_to_string(repository().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= 250,
        "README.md has {lines} lines: move detail into docs/"
    );
}

#[test]
fn anchors_are_made_as_github_and_mdbook_make_them() {
    assert_eq!(slug("Quick start"), "quick-start");
    assert_eq!(
        slug("What `weir serve` promises, and on a bad day"),
        "what-weir-serve-promises-and-on-a-bad-day"
    );
    assert_eq!(slug("[Serving](serving.md) over HTTP"), "serving-over-http");
    let text = "# A\n## Tests\n```\n# not a heading\n```\n## Tests\n";
    let expected: BTreeSet<String> = ["a", "tests", "tests-1"].map(String::from).into();
    assert_eq!(anchors(text), expected);
    assert_eq!(
        links("see [a](a.md#x) and ![b](b.png), not `[c](c.md)`"),
        ["a.md#x", "b.png"]
    );
}
