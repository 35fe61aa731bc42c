//! Turns `data/profiles.json` (written by `tools/fit_profiles.py`) into constants, so a
//! malformed data file fails the build instead of a request.

use std::{env, fs, path::Path};

fn main() {
    let src = Path::new("data/profiles.json");
    println!("cargo:rerun-if-changed={}", src.display());
    let text = fs::read_to_string(src).expect("read data/profiles.json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("data/profiles.json is JSON");
    let scale = v["scale"].as_i64().expect("scale: integer");
    let features = v["features"].as_array().expect("features: array");
    let names: Vec<String> = features
        .iter()
        .map(|f| format!("{:?}", f.as_str().expect("feature name: string")))
        .collect();
    let mut weights = Vec::new();
    let mut overheads = Vec::new();
    let mut runs = Vec::new();
    let mut pair_chars = Vec::new();
    // the two families, then the conservative profile's own vocabulary (no overheads:
    // it takes the larger of the families')
    for (key, fam) in [
        ("families", "cl100k"),
        ("families", "tekken"),
        ("conservative", ""),
    ] {
        let f = if fam.is_empty() {
            &v[key]
        } else {
            &v[key][fam]
        };
        let at = if fam.is_empty() {
            key.to_string()
        } else {
            format!("{key}.{fam}")
        };
        let w: Vec<String> = f["weights"]
            .as_array()
            .unwrap_or_else(|| panic!("{at}.weights: array"))
            .iter()
            .map(|x| x.as_i64().expect("weight: integer").to_string())
            .collect();
        assert_eq!(w.len(), names.len(), "{at}.weights: one per feature");
        weights.push(format!("[{}]", w.join(", ")));
        if !fam.is_empty() {
            let o = |k: &str| {
                f[k].as_u64()
                    .unwrap_or_else(|| panic!("{at}.{k}: non-negative integer"))
            };
            overheads.push(format!(
                "({}, {}, {}, {})",
                o("message_overhead"),
                o("tool_call_overhead"),
                o("tool_overhead"),
                o("name_overhead")
            ));
        }
        let hex = f["run_chars"]
            .as_str()
            .unwrap_or_else(|| panic!("{at}.run_chars: hex string"));
        assert_eq!(hex.len(), 256, "{at}.run_chars: 128 bytes in hex");
        let bytes: Vec<String> = (0..128)
            .map(|i| {
                let b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("run_chars: hex");
                assert!(b >= 1, "{at}.run_chars: at least 1 character a token");
                b.to_string()
            })
            .collect();
        runs.push(format!("[{}]", bytes.join(", ")));
        // the characters of the n-gram tokens (`char_table`), as strings of them
        let lists: Vec<String> = ["first", "second", "triple", "spaced"]
            .iter()
            .map(|k| {
                let s = f["pair_chars"][k]
                    .as_str()
                    .unwrap_or_else(|| panic!("{at}.pair_chars.{k}: string"));
                let cps: Vec<String> = s
                    .chars()
                    .map(|c| {
                        let cp = c as u32;
                        assert!(
                            (0x800..0x10000).contains(&cp),
                            "{at}.pair_chars.{k}: U+{cp:04X} is not a 3-byte character"
                        );
                        cp.to_string()
                    })
                    .collect();
                format!("&[{}]", cps.join(", "))
            })
            .collect();
        pair_chars.push(format!("[{}]", lists.join(", ")));
    }
    let rare = v["rare_bigrams"]
        .as_str()
        .expect("rare_bigrams: hex string");
    assert_eq!(rare.len(), 170, "rare_bigrams: 85 bytes in hex");
    let rare: Vec<String> = (0..85)
        .map(|i| {
            u8::from_str_radix(&rare[2 * i..2 * i + 2], 16)
                .expect("rare_bigrams: hex")
                .to_string()
        })
        .collect();
    let margin = v["conservative"]["margin_percent"]
        .as_i64()
        .expect("conservative.margin_percent: integer");
    let out = format!(
        "pub const SCALE: i64 = {scale};\n\
         pub const FEATURES: [&str; {n}] = [{names}];\n\
         pub static WEIGHTS: [[i64; crate::features::N_FEATURES]; 3] = [{weights}];\n\
         pub const OVERHEADS: [(u64, u64, u64, u64); 2] = [{overheads}];\n\
         pub const MARGIN_PERCENT: i64 = {margin};\n\
         pub const RARE_BIGRAMS: [u8; 85] = [{rare}];\n\
         pub static RUN_CHARS: [[u8; 128]; 3] = [{runs}];\n\
         pub const PAIR_CHARS: [[&[u16]; 4]; 3] = [{pair_chars}];\n",
        n = names.len(),
        names = names.join(", "),
        weights = weights.join(", "),
        overheads = overheads.join(", "),
        rare = rare.join(", "),
        runs = runs.join(", "),
        pair_chars = pair_chars.join(", "),
    );
    let dest = Path::new(&env::var("OUT_DIR").expect("OUT_DIR")).join("profile_data.rs");
    fs::write(dest, out).expect("write profile_data.rs");
}
