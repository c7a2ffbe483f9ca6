//! Tests of the crate's shape, read from its sources (tests only).
//!
//! - No module imports "back up": between the top-level modules, and between the children of
//!   every module (`graphql`'s files, `worker`'s, …), the `crate::`, `super::` and `self::`
//!   paths of the code form a graph without cycles. Comments, strings and `#[cfg(test)]`
//!   modules do not count; a parent module's own file (its `mod.rs`) is the place its children
//!   share, so their paths to it are not edges. A failure prints each cycle with the line that
//!   makes each of its edges.
//! - The module map at the top of `lib.rs` is the one map: it names every module under `src/`,
//!   and every module, path and file it names exists.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module's path from the crate root: `["graphql", "types", "post"]`.
type ModPath = Vec<String>;

/// Why an edge exists: the first place that makes it.
#[derive(Clone, Debug)]
struct Evidence {
    file: String,
    line: usize,
    path: String,
}

/// Every module of the crate (`lib.rs` and `bin/` aside) with its file.
fn modules(src: &Path) -> BTreeMap<ModPath, PathBuf> {
    fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
        let mut entries: Vec<PathBuf> =
            std::fs::read_dir(dir).expect("read src/").map(|e| e.expect("entry").path()).collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(&path, files);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(src, &mut files);
    let mut modules = BTreeMap::new();
    for file in files {
        let relative = file.strip_prefix(src).expect("under src/");
        let mut path: ModPath = relative.with_extension("").iter().map(|s| s.to_string_lossy().into_owned()).collect();
        if path[0] == "bin" || path == ["lib"] || path == ["main"] {
            continue;
        }
        if path.last().is_some_and(|last| last == "mod") {
            path.pop();
        }
        modules.insert(path, file);
    }
    modules
}

/// The code without comments, strings and character literals (each replaced by spaces, so
/// that line numbers stay), as bytes.
fn code_only(text: &str) -> Vec<u8> {
    let src = text.as_bytes();
    let mut out = src.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for byte in &mut out[from..to.min(src.len())] {
            if *byte != b'\n' {
                *byte = b' ';
            }
        }
    };
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut i = 0;
    while i < src.len() {
        let rest = &src[i..];
        if rest.starts_with(b"//") {
            let end = rest.iter().position(|&b| b == b'\n').map_or(src.len(), |p| i + p);
            blank(&mut out, i, end);
            i = end;
        } else if rest.starts_with(b"/*") {
            let (mut depth, mut j) = (0usize, i);
            while j < src.len() {
                if src[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if src[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if (i == 0 || !ident(src[i - 1]))
            && let Some(start) = raw_string_start(rest)
        {
            let hashes = start - 2 - usize::from(rest[0] == b'b');
            let mut close = vec![b'"'];
            close.extend(std::iter::repeat_n(b'#', hashes));
            let body = i + start;
            let end =
                src[body..].windows(close.len()).position(|w| w == close).map_or(src.len(), |p| body + p + close.len());
            blank(&mut out, i, end);
            i = end;
        } else if src[i] == b'"' {
            let mut j = i + 1;
            while j < src.len() && src[j] != b'"' {
                j += if src[j] == b'\\' { 2 } else { 1 };
            }
            blank(&mut out, i, j + 1);
            i = j + 1;
        } else if src[i] == b'\'' {
            // A character literal ('x', '\n', '\'', '\u{feff}'), or a lifetime (left alone).
            let len = if rest.get(1) == Some(&b'\\') {
                rest.iter().skip(3).position(|&b| b == b'\'').map(|p| p + 4)
            } else {
                let width = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                (rest.get(1 + width) == Some(&b'\'')).then_some(width + 2)
            };
            match len {
                Some(len) => {
                    blank(&mut out, i, i + len);
                    i += len;
                }
                None => i += 1,
            }
        } else {
            i += 1;
        }
    }
    out
}

/// The length of `r"`, `r#"`, `br##"` … when `rest` starts a raw string.
fn raw_string_start(rest: &[u8]) -> Option<usize> {
    let after_b = usize::from(rest.first() == Some(&b'b'));
    if rest.get(after_b) != Some(&b'r') {
        return None;
    }
    let hashes = rest[after_b + 1..].iter().take_while(|&&b| b == b'#').count();
    (rest.get(after_b + 1 + hashes) == Some(&b'"')).then_some(after_b + 2 + hashes)
}

/// Reads a use tree at `i` (`a::b`, `a::{b, c::d}`, `*`): every path it names, and where it
/// ends.
fn use_tree(code: &[u8], mut i: usize) -> (Vec<Vec<String>>, usize) {
    let skip_space = |mut i: usize| {
        while i < code.len() && code[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    };
    i = skip_space(i);
    if code.get(i) == Some(&b'{') {
        let mut paths = Vec::new();
        i += 1;
        loop {
            i = skip_space(i);
            match code.get(i) {
                None => return (paths, i),
                Some(b'}') => return (paths, i + 1),
                Some(b',') => i += 1,
                Some(_) => {
                    let (inner, end) = use_tree(code, i);
                    if end == i {
                        return (paths, i);
                    }
                    paths.extend(inner);
                    i = end;
                }
            }
        }
    }
    let start = i;
    while i < code.len() && (code[i].is_ascii_alphanumeric() || code[i] == b'_' || code[i] == b'*') {
        i += 1;
    }
    if i == start {
        return (vec![Vec::new()], i);
    }
    let segment = String::from_utf8_lossy(&code[start..i]).into_owned();
    let after = skip_space(i);
    if code[after..].starts_with(b"::") {
        let (inner, end) = use_tree(code, after + 2);
        let paths = inner
            .into_iter()
            .map(|mut rest| {
                rest.insert(0, segment.clone());
                rest
            })
            .collect();
        return (paths, end);
    }
    (vec![vec![segment]], i)
}

/// Every `crate::`, `super::` and `self::` path in a module's code, resolved from the crate
/// root, with its line. Inline modules are followed (`super` inside one means its parent);
/// `#[cfg(test)]` modules are skipped.
fn references(module: &ModPath, text: &str) -> Vec<(ModPath, usize, String)> {
    let code = code_only(text);
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let line_of = |at: usize| code[..at].iter().filter(|&&b| b == b'\n').count() + 1;
    let mut found = Vec::new();
    // Inline modules we are in: (name, the brace depth inside them).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < code.len() {
        let at_word = i == 0 || !(ident(code[i - 1]) || code[i - 1] == b':');
        match code[i] {
            b'{' => {
                depth += 1;
                i += 1;
                continue;
            }
            b'}' => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
                i += 1;
                continue;
            }
            b'#' if code[i..].starts_with(b"#[cfg(test)]") => {
                // Skip the test module (or item) that follows: up to its matching brace.
                if let Some(open) = code[i..].iter().position(|&b| b == b'{' || b == b';').map(|p| i + p) {
                    if code[open] == b'{' {
                        let mut level = 0usize;
                        let mut j = open;
                        while j < code.len() {
                            match code[j] {
                                b'{' => level += 1,
                                b'}' => {
                                    level -= 1;
                                    if level == 0 {
                                        break;
                                    }
                                }
                                _ => {}
                            }
                            j += 1;
                        }
                        i = j + 1;
                    } else {
                        i = open + 1;
                    }
                    continue;
                }
            }
            _ => {}
        }
        if at_word && code[i..].starts_with(b"mod ") {
            let start = i + 4;
            let end = start + code[start..].iter().take_while(|&&b| ident(b)).count();
            let after = start + code[start..].iter().take_while(|&&b| b.is_ascii_whitespace() || ident(b)).count();
            if code.get(after) == Some(&b'{') {
                depth += 1;
                inline.push((String::from_utf8_lossy(&code[start..end]).into_owned(), depth));
                i = after + 1;
                continue;
            }
        }
        let word = ["crate", "super", "self"].into_iter().find(|w| {
            at_word
                && code[i..].starts_with(w.as_bytes())
                && code[i + w.len()..].iter().skip_while(|b| b.is_ascii_whitespace()).take(2).eq(b"::")
        });
        let Some(word) = word else {
            i += 1;
            continue;
        };
        let mut here: ModPath = module.clone();
        here.extend(inline.iter().map(|(name, _)| name.clone()));
        let (paths, end) = use_tree(&code, i);
        for path in paths {
            let mut resolved: ModPath = match word {
                "crate" => Vec::new(),
                "super" => here[..here.len().saturating_sub(1)].to_vec(),
                _ => here.clone(),
            };
            for segment in &path[1..] {
                match segment.as_str() {
                    "super" => {
                        resolved.pop();
                    }
                    "self" => {}
                    _ => resolved.push(segment.clone()),
                }
            }
            let written: Vec<&str> =
                path.iter().map(String::as_str).filter(|s| *s != "self" || path.len() == 1).collect();
            found.push((resolved, line_of(i), written.join("::")));
        }
        i = end.max(i + word.len());
    }
    found
}

/// For every module with children: the edges between its children, each with its evidence.
type Graphs = BTreeMap<ModPath, BTreeMap<String, BTreeMap<String, Evidence>>>;

fn dependency_graphs(src: &Path) -> Graphs {
    let modules = modules(src);
    let mut children: BTreeMap<ModPath, BTreeSet<String>> = BTreeMap::new();
    for path in modules.keys() {
        if let Some((last, parent)) = path.split_last() {
            children.entry(parent.to_vec()).or_default().insert(last.clone());
        }
    }
    let mut graphs = Graphs::new();
    for (module, file) in &modules {
        let text = std::fs::read_to_string(file).expect("read a source file");
        for (target, line, written) in references(module, &text) {
            // The first level where the two paths part: an edge between two children of the
            // module above it (the module's own file, or an item in it, is not one).
            let Some(level) = (0..module.len().min(target.len())).find(|&k| module[k] != target[k]) else { continue };
            let parent = module[..level].to_vec();
            let siblings = children.get(&parent);
            if !siblings.is_some_and(|s| s.contains(&module[level]) && s.contains(&target[level])) {
                continue;
            }
            let file = file.strip_prefix(src.parent().unwrap_or(src)).unwrap_or(file).display().to_string();
            graphs
                .entry(parent)
                .or_default()
                .entry(module[level].clone())
                .or_default()
                .entry(target[level].clone())
                .or_insert(Evidence { file, line, path: written });
        }
    }
    graphs
}

/// The cycles of a graph: for every strongly connected component of more than one node, the
/// shortest cycle through each of its nodes that no cycle found before passes through, so
/// every module of a circle appears in one. Each cycle leads back to its first node.
fn cycles(graph: &BTreeMap<String, BTreeMap<String, Evidence>>) -> Vec<Vec<String>> {
    let next = |node: &String| graph.get(node).into_iter().flat_map(|edges| edges.keys());
    let nodes: BTreeSet<&String> = graph.keys().chain(graph.values().flat_map(|e| e.keys())).collect();
    let reach = |from: &String| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.clone()];
        while let Some(node) = stack.pop() {
            for to in next(&node) {
                if seen.insert(to.clone()) {
                    stack.push(to.clone());
                }
            }
        }
        seen
    };
    let reach: BTreeMap<&String, BTreeSet<String>> = nodes.iter().map(|n| (*n, reach(n))).collect();
    let mut covered = BTreeSet::new();
    let mut found = Vec::new();
    for &start in &nodes {
        if covered.contains(start) || !reach[start].contains(start) {
            continue;
        }
        let circle: BTreeSet<&String> =
            nodes.iter().copied().filter(|n| reach[start].contains(*n) && reach[*n].contains(start)).collect();
        // Breadth first from `start` inside its circle, until an edge leads back to it.
        let mut previous: BTreeMap<String, String> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([start.clone()]);
        let mut last = None;
        'search: while let Some(node) = queue.pop_front() {
            for to in next(&node) {
                if to == start {
                    last = Some(node.clone());
                    break 'search;
                }
                if circle.contains(to) && !previous.contains_key(to) {
                    previous.insert(to.clone(), node.clone());
                    queue.push_back(to.clone());
                }
            }
        }
        let mut cycle = Vec::new();
        let mut at = last.expect("a node of a circle leads back to itself");
        while at != *start {
            cycle.push(at.clone());
            at = previous[&at].clone();
        }
        cycle.push(start.clone());
        cycle.reverse();
        covered.extend(cycle.iter().cloned());
        found.push(cycle);
    }
    found
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn no_module_imports_back_up() {
    let graphs = dependency_graphs(&src_dir());
    assert!(graphs.get(&Vec::new()).is_some_and(|crate_graph| crate_graph.len() > 15), "top-level edges: {graphs:?}");
    let mut report = Vec::new();
    for (parent, graph) in &graphs {
        let within = if parent.is_empty() { "the crate".to_owned() } else { format!("`{}`", parent.join("::")) };
        for cycle in cycles(graph) {
            let mut lines =
                vec![format!("a cycle among the modules of {within}: {} -> {}", cycle.join(" -> "), cycle[0])];
            for (k, from) in cycle.iter().enumerate() {
                let to = &cycle[(k + 1) % cycle.len()];
                let why = &graph[from][to];
                lines.push(format!("  {from} -> {to}: {}:{} `{}`", why.file, why.line, why.path));
            }
            report.push(lines.join("\n"));
        }
    }
    assert!(report.is_empty(), "modules import back up:\n{}", report.join("\n"));
}

#[test]
fn the_module_map_in_lib_rs_is_the_crate() {
    let src = src_dir();
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("lib.rs");
    let doc: Vec<&str> = lib.lines().filter_map(|line| line.strip_prefix("//!")).collect();
    let mapped: BTreeSet<String> = doc
        .iter()
        .filter_map(|line| line.strip_prefix(" - `"))
        .filter_map(|rest| rest.split('`').next())
        .map(str::to_owned)
        .collect();
    let declared: BTreeSet<String> = lib
        .lines()
        .filter_map(|line| line.trim().strip_prefix("pub mod ").or_else(|| line.trim().strip_prefix("mod ")))
        .filter_map(|rest| rest.strip_suffix(';'))
        .map(str::to_owned)
        .collect();
    let on_disk: BTreeSet<String> =
        modules(&src).keys().filter(|path| path.len() == 1).map(|path| path[0].clone()).collect();
    let mut problems = Vec::new();
    for name in on_disk.union(&declared) {
        if !mapped.contains(name) {
            problems.push(format!("`{name}` is a module but the map does not name it"));
        }
    }
    for name in &mapped {
        if !on_disk.contains(name) || !declared.contains(name) {
            problems.push(format!("the map names `{name}`, which is not a module of lib.rs with a file under src/"));
        }
    }
    // Paths the map mentions (`graphql::batch_gate`, `likes::Likes::set`): the longest prefix
    // that is a module file, then every other segment a word of that module's code.
    let all = modules(&src);
    for token in doc.iter().flat_map(|line| line.split('`').skip(1).step_by(2)) {
        let segments: Vec<&str> = token.split("::").collect();
        if segments.len() > 1
            && on_disk.contains(segments[0])
            && segments.iter().all(|s| !s.is_empty() && s.chars().all(|c| c.is_alphanumeric() || c == '_'))
        {
            let module_len = (1..=segments.len())
                .rev()
                .find(|&n| all.contains_key(&segments[..n].iter().map(|s| s.to_string()).collect::<ModPath>()))
                .unwrap_or(1);
            let prefix: ModPath = segments[..module_len].iter().map(|s| s.to_string()).collect();
            let code: String = all
                .iter()
                .filter(|(path, _)| path.starts_with(&prefix))
                .map(|(_, file)| {
                    String::from_utf8_lossy(&code_only(&std::fs::read_to_string(file).expect("read"))).into_owned()
                })
                .collect();
            for name in &segments[module_len..] {
                let word = code.match_indices(name).any(|(at, _)| {
                    let before = code[..at].chars().next_back().is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
                    let after =
                        code[at + name.len()..].chars().next().is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
                    before && after
                });
                if !word {
                    problems
                        .push(format!("the map mentions `{token}`, but `{name}` is not in `{}`", prefix.join("::")));
                }
            }
        } else if !token.starts_with('/') && token.contains('/') && !token.contains(' ') {
            // A file or directory of the repository (`lua/`, `lua/like_toggle.lua`).
            if !src.parent().unwrap_or(&src).join(token).exists() {
                problems.push(format!("the map mentions `{token}`, which does not exist"));
            }
        }
    }
    assert!(problems.is_empty(), "src/lib.rs's module map:\n{}", problems.join("\n"));
}
