//! The orchestrator's layers import only downwards (see the crate docs):
//! every `crate::` path in a module's file names its own layer or a lower
//! one.

/// Layers, lowest first: (module, rank).
const LAYERS: [(&str, u8); 7] =
    [("config", 1), ("placement", 2), ("observe", 3), ("deploy", 4), ("cluster", 5), ("experiment", 6), ("live", 7)];

fn rank(module: &str) -> Option<u8> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|(_, r)| *r)
}

/// Every `.rs` file under `dir`.
fn files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn layers_import_only_downwards() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    files(&src, &mut all);
    let mut checked = 0;
    let mut upward = Vec::new();
    for p in &all {
        let rel = p.strip_prefix(&src).unwrap_or(p);
        let top = rel.components().next().and_then(|c| c.as_os_str().to_str()).unwrap_or("").trim_end_matches(".rs");
        let Some(own) = rank(top) else { continue };
        checked += 1;
        let text = std::fs::read_to_string(p).unwrap_or_default();
        for (i, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for (at, _) in code.match_indices("crate::") {
                let used = code[at + 7..].split(|c: char| !(c.is_alphanumeric() || c == '_')).next().unwrap_or("");
                if let Some(r) = rank(used) {
                    if r > own {
                        upward.push(format!("{}:{}: {top} (layer {own}) uses {used} (layer {r})", rel.display(), i + 1));
                    }
                }
            }
        }
    }
    assert!(checked >= 20, "found only {checked} files of the layers under {}", src.display());
    assert!(upward.is_empty(), "upward imports:\n{}", upward.join("\n"));
}

/// The module path of a file under `src/` (`experiment/compare.rs` →
/// `experiment::compare`, `experiment/mod.rs` → `experiment`).
fn module_of(rel: &std::path::Path) -> String {
    let s = rel.to_string_lossy().trim_end_matches(".rs").replace('/', "::");
    s.strip_suffix("::mod").map(str::to_string).unwrap_or(s)
}

#[test]
fn no_two_files_import_each_other_even_through_others() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    files(&src, &mut all);
    let modules: std::collections::BTreeMap<String, String> = all
        .iter()
        .filter_map(|p| p.strip_prefix(&src).ok())
        .filter(|r| r.components().count() > 1 || rank(r.to_string_lossy().trim_end_matches(".rs")).is_some())
        .map(|r| (module_of(r), r.to_string_lossy().into_owned()))
        .collect();
    assert!(modules.len() >= 20, "{modules:?}");
    // Edges: a file uses the deepest module file a `crate::` path names.
    let mut edges: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> = Default::default();
    for (module, file) in &modules {
        let text = std::fs::read_to_string(src.join(file)).unwrap_or_default();
        for line in text.lines() {
            let code = line.split("//").next().unwrap_or("");
            for (at, _) in code.match_indices("crate::") {
                let path: String = code[at + 7..].chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':').collect();
                let parts: Vec<&str> = path.split("::").filter(|p| !p.is_empty()).collect();
                let used = (1..=parts.len()).rev().map(|n| parts[..n].join("::")).find(|m| modules.contains_key(m));
                if let Some(used) = used.filter(|u| u != module) {
                    edges.entry(module.clone()).or_default().insert(used);
                }
            }
        }
    }
    // Depth-first search for a circle.
    fn visit(
        m: &str,
        edges: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
        stack: &mut Vec<String>,
        done: &mut std::collections::BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = stack.iter().position(|s| s == m) {
            return Some(stack[i..].iter().cloned().chain([m.to_string()]).collect());
        }
        if done.contains(m) {
            return None;
        }
        stack.push(m.to_string());
        for n in edges.get(m).into_iter().flatten() {
            if let Some(c) = visit(n, edges, stack, done) {
                return Some(c);
            }
        }
        stack.pop();
        done.insert(m.to_string());
        None
    }
    let mut done = Default::default();
    for m in modules.keys() {
        if let Some(circle) = visit(m, &edges, &mut Vec::new(), &mut done) {
            panic!("import circle between files: {}", circle.join(" -> "));
        }
    }
}
