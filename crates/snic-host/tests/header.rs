//! The C header declares every function the library exports, and nothing it does not.

use std::collections::BTreeSet;

fn exported() -> BTreeSet<String> {
    let src = include_str!("../src/ffi.rs");
    let mut names = BTreeSet::new();
    let mut lines = src.lines();
    while let Some(l) = lines.next() {
        if l.trim() != "#[unsafe(no_mangle)]" {
            continue;
        }
        // The fn line follows (after attributes).
        for l in lines.by_ref() {
            let t = l.trim();
            if let Some(rest) = t.split("extern \"C\" fn ").nth(1) {
                let name: String =
                    rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                names.insert(name);
                break;
            }
        }
    }
    names
}

fn declared() -> BTreeSet<String> {
    let h = include_str!("../include/snic.h");
    let mut names = BTreeSet::new();
    for l in h.lines() {
        let l = l.trim();
        if l.starts_with('#') || l.starts_with("/*") || l.starts_with('*') {
            continue;
        }
        if let Some(i) = l.find("snic_")
            && let Some(p) = l[i..].find('(')
        {
            let name = &l[i..i + p];
            if name.chars().all(|c| c.is_alphanumeric() || c == '_') {
                names.insert(name.to_string());
            }
        }
    }
    names
}

#[test]
fn header_matches_exports() {
    let e = exported();
    let d = declared();
    assert!(e.len() >= 20, "parsed exports: {e:?}");
    assert_eq!(e, d, "ffi.rs exports vs snic.h declarations");
}

/// The built shared library exports exactly those symbols (when `nm` is available).
#[test]
fn shared_library_symbols() {
    let Some(so) = find_so() else {
        eprintln!("libsnic_host.so not built yet; skipping the nm check");
        return;
    };
    let out =
        match std::process::Command::new("nm").args(["-D", "--defined-only"]).arg(&so).output() {
            Ok(o) if o.status.success() => o,
            _ => {
                eprintln!("nm not available; skipping");
                return;
            }
        };
    let text = String::from_utf8_lossy(&out.stdout);
    let syms: BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .filter(|s| s.starts_with("snic_"))
        .map(str::to_string)
        .collect();
    assert_eq!(syms, declared(), "{}", so.display());
}

fn find_so() -> Option<std::path::PathBuf> {
    let exe = std::env::current_exe().ok()?;
    exe.ancestors().skip(1).take(3).map(|d| d.join("libsnic_host.so")).find(|p| p.exists())
}
