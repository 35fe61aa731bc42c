//! Criterion bench of the text estimator over generated ASCII prose, code, JSON (a chat message with a tool call), CJK and
//! mixed text,
//! and over the text of `../shared/corpus` when it is there (reported as `corpus`).
use contextwindow_core::estimate::{BYTES4, CL100K, CONSERVATIVE, FIM, TEKKEN};
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use std::path::Path;

fn strings(v: &serde_json::Value, out: &mut String) {
    match v {
        serde_json::Value::String(s) if !s.starts_with("data:") => {
            out.push_str(s);
            out.push('\n');
        }
        serde_json::Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
        serde_json::Value::Object(o) => o
            .iter()
            .filter(|(k, _)| *k != "data")
            .for_each(|(_, x)| strings(x, out)),
        _ => {}
    }
}

/// Every string of the corpus conversations (image data left out), concatenated.
fn corpus_text() -> Option<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus");
    let mut out = String::new();
    let mut stack = vec![root];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).ok()?.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "json") {
                let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).ok()?).ok()?;
                strings(&v, &mut out);
            }
        }
    }
    (!out.is_empty()).then_some(out)
}

fn texts() -> Vec<(&'static str, String)> {
    let prose = "The quick brown fox jumps over the lazy dog, again and again. ".repeat(16_000);
    let code = "fn main() { let x = vec![1, 2, 3]; println!(\"{:?}\", x); }\n".repeat(16_000);
    let cjk = "これは日本語の文章です。中文文本也在这里。한국어 문장입니다. ".repeat(8_000);
    let json = "{\"role\": \"assistant\", \"tool_calls\": [{\"id\": \"call_7\", \"type\": \"function\", \
                \"function\": {\"name\": \"read_file\", \"arguments\": \"{\\\"path\\\": \\\"src/main.rs\\\", \
                \\\"limit\\\": 200}\"}}], \"content\": null},\n"
        .repeat(6_000);
    let cut = |s: &str| s.chars().take(100_000).collect::<String>();
    let mixed = format!("{}{}{}", cut(&prose), cut(&cjk), cut(&code));
    let mut v = vec![
        ("prose", prose),
        ("code", code),
        ("json", json),
        ("cjk", cjk),
        ("mixed", mixed),
    ];
    if let Some(c) = corpus_text() {
        v.push(("corpus", c));
    }
    v
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("estimate");
    for (name, text) in texts() {
        g.throughput(Throughput::Bytes(text.len() as u64));
        for p in [&CONSERVATIVE, &CL100K, &TEKKEN, &FIM, &BYTES4] {
            g.bench_function(format!("{}/{}", p.name, name), |b| {
                b.iter(|| p.text_tokens(black_box(&text)))
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
