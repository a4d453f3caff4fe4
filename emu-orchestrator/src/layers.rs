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
