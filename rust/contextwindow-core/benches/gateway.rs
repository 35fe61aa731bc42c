//! Criterion bench of the raw JSON gateway path: `count_request` and `fit_request` on a
//! 1 MB OpenAI request body made of the OpenAI conversations of `../shared/corpus` (a
//! generated agent conversation when the corpus is absent), at a budget that fits and at
//! budgets that drop half and nearly all of it. Reports bytes/s of request body.
use contextwindow_core::gateway::{count_request, fit_request, fit_request_body};
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use serde_json::{json, Value};
use std::path::Path;

fn corpus_messages() -> (Vec<Value>, Value) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus");
    let mut files = Vec::new();
    let mut stack = vec![root];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "json") {
                files.push(p);
            }
        }
    }
    files.sort();
    let (mut msgs, mut tools) = (Vec::new(), Value::Null);
    for p in files {
        let Ok(bytes) = std::fs::read(&p) else {
            continue;
        };
        let Ok(doc) = serde_json::from_slice::<Value>(&bytes) else {
            continue;
        };
        if doc["format"] != "openai" {
            continue;
        }
        if tools.is_null() {
            tools = doc["tools"].clone();
        }
        if let Some(ms) = doc["messages"].as_array() {
            msgs.extend(ms.iter().filter(|m| m["role"] != "system").cloned());
        }
    }
    (msgs, tools)
}

fn generated() -> Vec<Value> {
    let prose = "The quick brown fox jumps over the lazy dog, again and again. ";
    let mut out = Vec::new();
    for i in 0..40 {
        out.push(json!({"role": "user", "content": prose.repeat(5)}));
        out.push(json!({"role": "assistant", "content": null, "tool_calls": [{"id": format!("c{i}"),
            "type": "function", "function": {"name": "read_file", "arguments": "{\"path\": \"a.txt\"}"}}]}));
        out.push(
            json!({"role": "tool", "tool_call_id": format!("c{i}"), "content": prose.repeat(60)}),
        );
        out.push(json!({"role": "assistant", "content": prose.repeat(3)}));
    }
    out
}

/// An OpenAI request body of at least 1 MB.
fn body() -> Vec<u8> {
    let (mut pool, tools) = corpus_messages();
    if pool.is_empty() {
        pool = generated();
    }
    let mut msgs = vec![json!({"role": "system", "content": "You are a helpful agent."})];
    loop {
        for m in &pool {
            msgs.push(m.clone());
        }
        let doc = json!({"model": "gpt-4o", "temperature": 0.2, "messages": msgs, "tools": tools});
        let b = serde_json::to_vec(&doc).unwrap_or_default();
        if b.len() >= 1_000_000 {
            return b;
        }
    }
}

fn bench(c: &mut Criterion) {
    let body = body();
    let mut g = c.benchmark_group("gateway");
    g.throughput(Throughput::Bytes(body.len() as u64));
    g.sample_size(20);
    for profile in ["conservative", "bytes4"] {
        let total = count_request(&body, profile, None).unwrap_or(0);
        g.bench_function(format!("count_request/{profile}"), |b| {
            b.iter(|| count_request(black_box(&body), profile, None))
        });
        for (name, budget) in [("fits", total), ("half", total / 2), ("2000", 2000)] {
            g.bench_function(format!("fit_request/{profile}/{name}"), |b| {
                b.iter(|| fit_request(black_box(&body), budget, profile, None, true, &[]))
            });
            // the body alone (Python's `fit_request(report=False)`): kept turns estimated
            g.bench_function(format!("fit_request_body/{profile}/{name}"), |b| {
                b.iter(|| fit_request_body(black_box(&body), budget, profile, None, true, &[]))
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
