//! The dependency rules of docs/ARCHITECTURE.md, held against the code:
//! every `crate::` path a module of `src/` names must be of a module its
//! row of the table lists under "depends on" (or of itself). The table is
//! read from the document, so the rule and its record cannot drift apart.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The module a source file belongs to: `src/<area>.rs` and
/// `src/<area>/…` are `<area>`; a runner's files are `runners/<type>`.
/// `None` for the crate's roots and the list of runners.
fn module_of(relative: &Path) -> Option<String> {
    let parts: Vec<String> = relative
        .iter()
        .map(|part| part.to_string_lossy().trim_end_matches(".rs").to_owned())
        .collect();
    match parts.as_slice() {
        [single] if matches!(single.as_str(), "lib" | "main" | "runners") => None,
        [runners, runner, ..] if runners == "runners" => Some(format!("runners/{runner}")),
        [area, ..] => Some(area.clone()),
        [] => None,
    }
}

/// The module a `crate::` path names: `crate::runners::ssh::…` is
/// `runners/ssh`, `crate::store::…` is `store`.
fn module_named(path: &str) -> Option<String> {
    let mut segments = path.split("::").map(str::trim);
    let first = segments.next()?;
    if first == "runners" {
        return segments
            .next()
            .filter(|runner| !runner.is_empty() && !runner.starts_with('{'))
            .map(|runner| format!("runners/{runner}"));
    }
    Some(first.to_owned())
}

/// Every module `text` names through `crate::` (grouped imports too:
/// `use crate::{a::X, b}`), with the line it is on; comment lines skipped.
fn named_modules(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let code = line.trim_start();
        if code.starts_with("//") {
            continue;
        }
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let before = rest[..at].chars().last();
            rest = &rest[at + "crate::".len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
                continue;
            }
            if let Some(group) = rest.strip_prefix('{') {
                // Names at the group's top level; a group over several
                // lines is read to its end.
                let whole: String = text.lines().skip(index).collect::<Vec<_>>().join("\n");
                let start = whole.find("crate::{").map(|at| at + 8).unwrap_or(0);
                let mut depth = 0;
                let mut item = String::new();
                for c in whole[start..].chars() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => break,
                        '}' => depth -= 1,
                        ',' if depth == 0 => {
                            found.extend(module_named(&item).map(|module| (index + 1, module)));
                            item.clear();
                            continue;
                        }
                        _ => {}
                    }
                    item.push(c);
                }
                found.extend(module_named(&item).map(|module| (index + 1, module)));
                rest = group;
                continue;
            }
            let path: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            found.extend(module_named(&path).map(|module| (index + 1, module)));
        }
    }
    found.retain(|(_, module)| !module.is_empty() && module != "self");
    found
}

/// The table of docs/ARCHITECTURE.md: each module and the modules it may
/// depend on. A parenthesis qualifies the module before it (ignored);
/// "— never" ends the list; "all of the above" is every module before it,
/// and "and each other" the row's modules.
fn rules(document: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut rules: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut seen: Vec<String> = Vec::new();
    let rows = document
        .lines()
        .skip_while(|line| !line.starts_with("| module |"))
        .skip(2)
        .take_while(|line| line.starts_with('|'));
    for row in rows {
        let cells: Vec<&str> = row.trim_matches('|').split(" | ").collect();
        assert_eq!(cells.len(), 3, "a row of three cells: {row}");
        let modules = ticked(cells[0], false);
        let mut allowed = BTreeSet::new();
        if cells[2].starts_with("all of the above") {
            allowed.extend(seen.iter().cloned());
            if cells[2].starts_with("all of the above, and each other") {
                allowed.extend(modules.iter().cloned());
            }
        } else {
            let list = cells[2].split("— never").next().unwrap_or_default();
            allowed.extend(ticked(list, true));
        }
        for module in &modules {
            rules.insert(module.clone(), allowed.clone());
        }
        seen.extend(modules);
    }
    rules
}

/// The backticked names in `text`, outside parentheses when `top_level`.
fn ticked(text: &str, top_level: bool) -> Vec<String> {
    let mut names = Vec::new();
    let (mut depth, mut inside, mut name) = (0, false, String::new());
    for c in text.chars() {
        match c {
            '(' if !inside => depth += 1,
            ')' if !inside => depth -= 1,
            '`' if inside => {
                if !top_level || depth == 0 {
                    names.push(std::mem::take(&mut name));
                }
                name.clear();
                inside = false;
            }
            '`' => inside = true,
            _ if inside => name.push(c),
            _ => {}
        }
    }
    names
}

fn sources(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, found);
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            found.push(path);
        }
    }
}

/// Every edge of the `crate::` graph that no rule allows, as
/// `file:line: module -> module`.
fn violations(src: &Path, rules: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut files = Vec::new();
    sources(src, &mut files);
    files.sort();
    let mut found = Vec::new();
    for file in files {
        let relative = file.strip_prefix(src).unwrap();
        let Some(module) = module_of(relative) else {
            continue;
        };
        let allowed = rules
            .get(&module)
            .unwrap_or_else(|| panic!("{module} has no row in docs/ARCHITECTURE.md"));
        let text = std::fs::read_to_string(&file).unwrap();
        for (line, named) in named_modules(&text) {
            if named != module && !allowed.contains(&named) {
                found.push(format!(
                    "src/{}:{line}: {module} -> {named}",
                    relative.display()
                ));
            }
        }
    }
    found
}

#[test]
fn every_module_depends_only_on_what_the_architecture_allows() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let document = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).unwrap();
    let rules = rules(&document);
    assert!(rules.len() >= 20, "the table was read: {rules:?}");
    // No runner names another, and none reaches the store.
    for (module, allowed) in &rules {
        if module.starts_with("runners/") {
            assert!(
                !allowed.iter().any(|other| other.starts_with("runners/")),
                "{module} may depend on another runner: {allowed:?}"
            );
            assert!(!allowed.contains("store"), "{module} may reach the store");
        }
    }
    let found = violations(&root.join("src"), &rules);
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn the_reader_sees_every_way_a_path_is_named() {
    let text = "use crate::contract::Target;\n\
                use crate::{policy::X, runners::ssh::Y,\n    store};\n\
                // crate::dispatcher in a comment\n\
                let x = crate::runners::helm::run(); let y = other_crate::kafka::Z;\n";
    let named: Vec<String> = named_modules(text).into_iter().map(|(_, m)| m).collect();
    assert_eq!(
        named,
        ["contract", "policy", "runners/ssh", "store", "runners/helm"]
    );
    let rules = rules(
        "| module | what | depends on |\n|---|---|---|\n\
         | `a` | x (`b`) | `contract` (`tofu`), `policy` — never `store` |\n\
         | `b`, `c` | y | all of the above, and each other |\n",
    );
    assert_eq!(rules["a"], ["contract", "policy"].map(String::from).into());
    assert_eq!(rules["c"], ["a", "b", "c"].map(String::from).into());
}

/// The modules of `contract` another of them names: through `super::<m>`
/// (in a file directly under `src/contract/`), `crate::contract::<m>`, or
/// an item the root re-exports from `<m>` (`pub use events::{…}`). Test
/// code is left out.
fn contract_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let root = std::fs::read_to_string(src.join("contract.rs")).unwrap();
    let mut exported: BTreeMap<String, String> = BTreeMap::new();
    for statement in root.split(';') {
        let Some(rest) = statement.trim().strip_prefix("pub use ") else {
            continue;
        };
        let Some((module, items)) = rest.split_once("::") else {
            continue;
        };
        for item in items
            .trim_matches(|c: char| c == '{' || c == '}' || c.is_whitespace())
            .split(',')
        {
            let item = item.trim();
            if !item.is_empty() {
                exported.insert(item.to_owned(), module.trim().to_owned());
            }
        }
    }
    let dir = src.join("contract");
    let mut files = Vec::new();
    sources(&dir, &mut files);
    let module_of = |file: &Path| {
        let relative = file.strip_prefix(&dir).unwrap();
        let first = relative.iter().next().unwrap().to_string_lossy();
        first.trim_end_matches(".rs").to_owned()
    };
    let modules: BTreeSet<String> = files.iter().map(|file| module_of(file)).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let module = module_of(file);
        let top_level = file.parent() == Some(dir.as_path());
        let text = std::fs::read_to_string(file).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        let code: String = code
            .lines()
            .filter(|line| !line.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let mut prefixes = vec!["crate::contract::"];
        if top_level {
            prefixes.push("super::");
        }
        let mut names = Vec::new();
        for prefix in prefixes {
            for (at, _) in code.match_indices(prefix) {
                let rest = &code[at + prefix.len()..];
                // A group's items, each by its first segment; else the path's.
                let items: Vec<&str> = match rest.strip_prefix('{') {
                    Some(group) => group[..group.find('}').unwrap_or(group.len())]
                        .split(',')
                        .collect(),
                    None => vec![rest],
                };
                for item in items {
                    let name: String = item
                        .trim()
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    if !name.is_empty() {
                        names.push(name);
                    }
                }
            }
        }
        for name in names {
            let named = if modules.contains(&name) {
                Some(name)
            } else {
                exported.get(&name).cloned()
            };
            if let Some(named) = named.filter(|named| *named != module) {
                graph.entry(module.clone()).or_default().insert(named);
            }
        }
    }
    graph
}

/// A cycle of `graph`, as the modules on it in order, if it has one.
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|seen| seen == node) {
            let mut found = path[at..].to_vec();
            found.push(node.to_owned());
            return Some(found);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, graph, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

#[test]
fn the_contract_s_own_modules_form_no_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = contract_graph(&src);
    assert!(
        graph
            .get("validate")
            .is_some_and(|named| named.contains("ops")),
        "the graph was read: {graph:?}"
    );
    assert_eq!(cycle(&graph), None, "{graph:?}");
    // And the check sees one: limits naming events while events names
    // limits (the shape of the cycle that was there).
    let mut introduced = graph.clone();
    introduced
        .entry("limits".into())
        .or_default()
        .insert("events".into());
    assert!(cycle(&introduced).is_some());
}
