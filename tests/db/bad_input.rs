//! Bad input: each kind gets the RFC 7047 error or a disconnect, and the server keeps serving
//! every other client.

use std::time::Duration;

use serde_json::json;

use crate::common::*;

fn still_serves(addr: &str) {
    let mut other = Rpc::connect(addr);
    let r = other
        .call("echo", json!(["still here"]))
        .expect("echo after bad input");
    assert_eq!(r["result"], json!(["still here"]));
}

#[test]
fn protocol_errors() {
    let dir = tempfile::tempdir().unwrap();
    let hf = HoldfastDb::start(
        dir.path(),
        &[("nb.db", &nb_schema())],
        &["--max-message", "65536"],
    );
    let addr = hf.tcp_addr();
    let mut bystander = Rpc::connect(&addr);

    // Unknown method: the exact string OVS's IDLs fall back on.
    let mut c = Rpc::connect(&addr);
    assert_eq!(
        c.call("no_such_method", json!([])).unwrap(),
        json!({"id": 1, "error": "unknown method"})
    );
    // Wrong parameters.
    let r = c.call("transact", json!([])).unwrap();
    assert_eq!(r["error"]["error"], "syntax error");
    let r = c.call("get_schema", json!(["NoSuchDb"])).unwrap();
    assert_eq!(r["error"]["error"], "unknown database");
    let r = c
        .call(
            "monitor_cond",
            json!(["OVN_Northbound", "m", {"NoSuchTable": [{}]}]),
        )
        .unwrap();
    assert_eq!(r["error"]["error"], "syntax error");
    assert!(
        r["error"]["details"]
            .as_str()
            .unwrap()
            .contains("NoSuchTable")
    );
    // Schema violations.
    let r = c.call("transact", json!(["OVN_Northbound", {"op": "insert", "table": "Logical_Switch", "row": {"name": 5}}])).unwrap();
    assert_eq!(r["result"][0]["error"], "syntax error");
    let r = c
        .call(
            "transact",
            json!(["OVN_Northbound", {"op": "insert", "table": "ACL", "row": {"action": "maybe"}}]),
        )
        .unwrap();
    assert_eq!(r["result"][0]["error"], "constraint violation");
    let r = c.call("transact", json!(["OVN_Northbound", {"op": "insert", "table": "Logical_Switch", "row": {"ports": ["uuid", "8b7f2b9a-0000-4000-8000-000000000000"]}}])).unwrap();
    assert_eq!(r["result"][1]["error"], "referential integrity violation");
    // The connection survives all of that.
    assert_eq!(c.call("echo", json!([1])).unwrap()["result"], json!([1]));

    // Malformed JSON: disconnect.
    let mut m = Rpc::connect(&addr);
    m.send_raw(b"{\"method\": \"echo\", \"params\": [}")
        .unwrap();
    assert!(
        m.closed_within(Duration::from_secs(10)),
        "malformed JSON closes the connection"
    );
    // Not an object at top level: disconnect.
    let mut n = Rpc::connect(&addr);
    n.send_raw(b"42 ").unwrap();
    assert!(n.closed_within(Duration::from_secs(10)));
    // Oversized message: disconnect.
    let mut o = Rpc::connect(&addr);
    let big = json!({"method": "echo", "params": ["x".repeat(100_000)], "id": 1}).to_string();
    let _ = o.send_raw(big.as_bytes());
    assert!(
        o.closed_within(Duration::from_secs(10)),
        "a message over --max-message closes the connection"
    );

    assert_eq!(
        bystander.call("echo", json!(["ok"])).unwrap()["result"],
        json!(["ok"])
    );
    still_serves(&addr);
}

#[test]
fn slow_readers_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let hf = HoldfastDb::start(
        dir.path(),
        &[("nb.db", &nb_schema())],
        &["--max-backlog", "2000000"],
    );
    let addr = hf.tcp_addr();

    // A monitor that never reads while another client writes a lot.
    let mut slow = Rpc::connect(&addr);
    assert!(
        slow.call(
            "monitor_cond",
            json!(["OVN_Northbound", "m", {"Logical_Switch": [{}]}])
        )
        .unwrap()["result"]
            .is_object()
    );
    // Why this test was flaky under load: the server never dropped the writer; the test's
    // client gave up on it. The harness's `Rpc::recv` took every read error for the end of the
    // connection, and a read on a socket with a timeout (SO_RCVTIMEO) fails with EINTR, never
    // restarted, when the process is stopped and continued or frozen (signal(7)) -- which
    // happens on a loaded, managed machine (seen here as "read: Interrupted system call" in
    // the differential test of the same binary). `recv` now retries EINTR. A second,
    // load-dependent limit: the 20-second read timeout, against the one long stall in this
    // test, the compaction at about the 2,500th insert (a 10 MB snapshot; since session 7 it is
    // written and fsynced off the core lock, but the swap still appends and fsyncs the commits
    // made meanwhile under it, docs/db-scale.md), which under heavy I/O can be far longer. So the writer waits as long as its connection
    // is open (the read timeout is only a hang guard), a failure says whether the server
    // closed it or it timed out, and it answers echo probes as every OVSDB client must.
    let mut w = Rpc::connect(&addr);
    w.stream
        .set_read_timeout(Some(Duration::from_secs(300)))
        .unwrap();
    let pad = "p".repeat(4000);
    let mut worst = (Duration::ZERO, 0);
    for i in 0..3000 {
        let t0 = std::time::Instant::now();
        let r = w
            .call_or_why("transact", json!(["OVN_Northbound", {"op": "insert", "table": "Logical_Switch", "row": {"name": format!("s{i}"), "external_ids": ["map", [["pad", pad]]]}}]))
            .unwrap_or_else(|e| panic!("insert {i}: the writer is not served while the slow reader lags: {e}"));
        assert!(r["result"][0]["uuid"].is_array(), "insert {i}: {r}");
        worst = worst.max((t0.elapsed(), i));
    }
    eprintln!("slowest insert: {worst:?}");
    let rss = rss_bytes(hf.pid());
    assert!(
        rss < 400 << 20,
        "server RSS {rss} bytes: the slow reader's backlog is bounded"
    );
    assert!(
        slow.closed_within(Duration::from_secs(120)),
        "the slow reader (12 MB of updates behind) was disconnected"
    );

    // A client that floods requests and never reads replies: the server stops reading it.
    let flood = std::net::TcpStream::connect(&addr).unwrap();
    flood
        .set_write_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    let msg = json!({"method": "echo", "params": ["x".repeat(60_000)], "id": 1}).to_string();
    let mut written = 0usize;
    let start = std::time::Instant::now();
    let mut f = &flood;
    while start.elapsed() < Duration::from_secs(5) {
        match std::io::Write::write(&mut f, msg.as_bytes()) {
            Ok(n) => written += n,
            Err(_) => break,
        }
        if written > 200 << 20 {
            break;
        }
    }
    assert!(
        written < 200 << 20,
        "the server stopped reading a client that never reads ({written} bytes accepted)"
    );
    let rss = rss_bytes(hf.pid());
    assert!(rss < 400 << 20, "server RSS {rss} bytes while flooded");
    still_serves(&addr);
}
