//! `SELVEDGE_TRACE` (feature `trace`): every runtime built without
//! `trace_to` is traced, the first to the variable's path, the next ones
//! beside it. A test binary of its own: the variable is process-wide.
#![cfg(feature = "trace")]

use selvedge::Runtime;

#[test]
fn selvedge_trace_traces_every_runtime_each_to_a_file_of_its_own() {
    let dir = std::env::temp_dir().join(format!("selvedge-trace-env-{}", std::process::id()));
    let path = dir.join("run.json");
    std::env::set_var("SELVEDGE_TRACE", &path);
    let first = Runtime::builder().num_threads(1).build().unwrap();
    let second = Runtime::builder().num_threads(2).build().unwrap();
    // An explicit path wins over the variable.
    let explicit = dir.join("explicit.json");
    let third = Runtime::builder()
        .num_threads(1)
        .trace_to(&explicit)
        .build()
        .unwrap();
    std::env::remove_var("SELVEDGE_TRACE");
    let untraced = Runtime::builder().num_threads(1).build().unwrap();
    assert_eq!(first.trace_path(), Some(path.as_path()));
    assert_eq!(second.trace_path(), Some(dir.join("run-2.json").as_path()));
    assert_eq!(third.trace_path(), Some(explicit.as_path()));
    assert_eq!(untraced.trace_path(), None);
    for rt in [&first, &second, &third] {
        assert_eq!(rt.run(|| selvedge::spawn(|| 7).join()), 7);
    }
    drop((first, second, third, untraced));
    for file in ["run.json", "run-2.json", "explicit.json"] {
        let text = std::fs::read_to_string(dir.join(file)).expect("written at the drop");
        let json: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
        assert!(json["traceEvents"]
            .as_array()
            .is_some_and(|e| !e.is_empty()));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
