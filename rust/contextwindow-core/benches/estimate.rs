//! Criterion bench of the text estimator over generated prose, code, CJK and mixed text.
use contextwindow_core::estimate::{BYTES4, CONSERVATIVE, FIM};
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};

fn texts() -> Vec<(&'static str, String)> {
    let prose = "The quick brown fox jumps over the lazy dog, again and again. ".repeat(16_000);
    let code = "fn main() { let x = vec![1, 2, 3]; println!(\"{:?}\", x); }\n".repeat(16_000);
    let cjk = "これは日本語の文章です。中文文本也在这里。한국어 문장입니다. ".repeat(8_000);
    let mixed = format!(
        "{}{}{}",
        &prose[..300_000],
        &cjk[..300_000],
        &code[..300_000]
    );
    vec![
        ("prose", prose),
        ("code", code),
        ("cjk", cjk),
        ("mixed", mixed),
    ]
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("estimate");
    for (name, text) in texts() {
        g.throughput(Throughput::Bytes(text.len() as u64));
        for p in [&CONSERVATIVE, &FIM, &BYTES4] {
            g.bench_function(format!("{}/{}", p.name, name), |b| {
                b.iter(|| p.text_tokens(black_box(&text)))
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
