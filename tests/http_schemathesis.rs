//! Schemathesis (property-based API testing from /openapi.json) against the real binary:
//! thousands of generated requests, none may get a 5xx or break the connection.

mod support;

use std::process::Command;

use serde_json::json;
use support::{HttpApi, Runnel};

/// The schemathesis CLI: `$RUNNEL_SCHEMATHESIS` (scripts/test.sh installs it in a venv), else
/// `schemathesis` on the PATH.
fn schemathesis() -> Option<String> {
    if let Ok(path) = std::env::var("RUNNEL_SCHEMATHESIS") {
        return Some(path);
    }
    Command::new("schemathesis")
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|_| "schemathesis".into())
}

#[test]
fn schemathesis_finds_no_server_errors() {
    // Proves every operation of /openapi.json, fed generated valid and invalid input, never
    // answers 5xx nor drops the connection (schemathesis' not_a_server_error check).
    let Some(schemathesis) = schemathesis() else {
        assert!(
            std::env::var("RUNNEL_REQUIRE_TOOLS").is_err(),
            "schemathesis is required (RUNNEL_REQUIRE_TOOLS is set) but not installed"
        );
        support::skip("schemathesis not installed (pip install schemathesis)");
        return;
    };
    // Generated partition counts go up to i32::MAX: bounded here so that a valid creation of
    // thousands of partitions (seconds of work on a debug build) cannot exceed schemathesis'
    // 10 s read timeout; past the bound the broker answers 422, as any user past it.
    let node = Runnel::start(&["--max-broker-partitions", "500"]);
    let api = HttpApi::new(&node);
    let cluster = api.cluster_id();
    // Real resources for the path parameters, so operations get past 404.
    assert_eq!(api.post("/v1/topics", &json!({"name": "fuzz", "partitions": 2})).status, 201);
    api.send_json("POST", "/topics/fuzz", None, &json!({"records": [{"value": 1}, {"key": "k", "value": 2}]}));
    assert_eq!(api.post("/consumers/fuzzers", &json!({"name": "c1", "auto.offset.reset": "earliest"})).status, 200);
    api.post(
        "/consumers/fuzzers/instances/c1/assignments",
        &json!({"partitions": [{"topic": "fuzz", "partition": 0}]}),
    );
    api.post(
        "/consumers/fuzzers/instances/c1/offsets",
        &json!({"offsets": [{"topic": "fuzz", "partition": 0, "offset": 0}]}),
    );
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(
        dir.path().join("schemathesis.toml"),
        format!(
            "[parameters]\n\"path.cluster_id\" = \"{cluster}\"\n\"path.topic\" = \"fuzz\"\n\"path.topic_name\" = \"fuzz\"\n\
             \"path.group\" = \"fuzzers\"\n\"path.consumer_group_id\" = \"fuzzers\"\n\"path.instance\" = \"c1\"\n"
        ),
    )
    .expect("config");
    let output = Command::new(&schemathesis)
        .current_dir(dir.path())
        .args(["run", &format!("{}/openapi.json", node.http_url()), "--checks", "not_a_server_error"])
        .args(["--max-examples", "25", "--no-color"])
        .output()
        .expect("run schemathesis");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let summary: Vec<&str> = stdout.lines().filter(|l| l.contains("generated") || l.contains("Seed")).collect();
    println!("schemathesis: {}", summary.join(" | "));
    assert!(output.status.success(), "schemathesis failed:\n{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(summary.iter().any(|l| l.contains("generated")), "schemathesis ran no test cases:\n{stdout}");
    // The node still serves after the barrage.
    assert_eq!(api.get("/v1/cluster").status, 200);
}
