//! Remotes added and removed at run time, and per-remote inactivity probes, through real
//! sockets: a client sends `echo` and must get its reply (RFC 7047's echo).
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use crate::server::{Config, Core};

fn core() -> Core {
    Core::new(
        Config {
            probe_interval_ms: None,
            ..Config::default()
        },
        7,
    )
}

/// Read from `s` until `want` appears (or EOF / timeout); returns what was read.
async fn read_until<S: AsyncRead + Unpin>(s: &mut S, want: &str) -> String {
    let mut got = Vec::new();
    let mut b = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let r = tokio::time::timeout_at(deadline, s.read(&mut b)).await;
        match r {
            Ok(Ok(n)) if n > 0 => {
                got.extend_from_slice(&b[..n]);
                if String::from_utf8_lossy(&got).contains(want) {
                    break;
                }
            }
            _ => break,
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remotes_come_and_go_at_run_time() {
    let dir = tempfile::tempdir().unwrap();
    let tcp: Remote = "ptcp:0:127.0.0.1".parse().unwrap();
    let server = start(core(), std::slice::from_ref(&tcp), ServeOptions::default())
        .await
        .unwrap();
    let unix = Remote::Unix(dir.path().join("s.sock"));
    assert!(server.add_remote(&tcp).await.is_err(), "added twice");
    let bound = server.add_remote(&unix).await.unwrap();
    assert_eq!(
        bound,
        format!("unix:{}", dir.path().join("s.sock").display())
    );
    assert_eq!(server.remotes().len(), 2);

    let mut c = tokio::net::UnixStream::connect(dir.path().join("s.sock"))
        .await
        .unwrap();
    let echo = json!({"method": "echo", "params": ["x"], "id": 1}).to_string();
    c.write_all(echo.as_bytes()).await.unwrap();
    let reply = read_until(&mut c, "\"result\"").await;
    assert!(reply.contains("\"x\""), "{reply}");
    assert_eq!(server.remote_sessions(&unix), Some(1));

    // Removing the remote closes its session and the socket file.
    assert!(server.remove_remote(&unix));
    assert!(!server.remove_remote(&unix));
    let rest = read_until(&mut c, "never").await;
    assert!(rest.is_empty(), "{rest}");
    assert!(!dir.path().join("s.sock").exists());
    assert!(
        tokio::net::UnixStream::connect(dir.path().join("s.sock"))
            .await
            .is_err()
    );
    assert_eq!(server.remotes().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_probe_applies_to_its_sessions() {
    let tcp: Remote = "ptcp:0:127.0.0.1".parse().unwrap();
    let server = start(core(), std::slice::from_ref(&tcp), ServeOptions::default())
        .await
        .unwrap();
    let addr = server.local_addrs()[0]
        .trim_start_matches("tcp:")
        .to_string();
    assert!(server.set_remote_probe(&tcp, Some(Some(200))));
    let t0 = std::time::Instant::now();
    let mut c = tokio::net::TcpStream::connect(&addr).await.unwrap();
    // Probes are off by default (Config above): only the remote's 200 ms probe can send this.
    let got = read_until(&mut c, "\"echo\"").await;
    assert!(got.contains("\"echo\""), "{got:?}");
    // Unanswered, the session is dropped after as long again.
    let rest = read_until(&mut c, "never").await;
    assert!(!rest.contains("never"));
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(3), "{took:?}");
    assert_eq!(server.remote_sessions(&tcp), Some(0));
}

/// `c` served on an ephemeral loopback TCP port, with the port's `IP:PORT`.
async fn serve_on_tcp(c: Core) -> (Server, String) {
    let tcp: Remote = "ptcp:0:127.0.0.1".parse().unwrap();
    let server = start(c, std::slice::from_ref(&tcp), ServeOptions::default())
        .await
        .unwrap();
    let addr = server.local_addrs()[0]
        .trim_start_matches("tcp:")
        .to_string();
    (server, addr)
}

/// Through the shell, with its record writer and its compaction runner: sequential
/// transactions are each answered once their record is in the file, and the file is compacted
/// as it grows (the compaction's start waits for the writer to catch up, its finish for the
/// records queued meanwhile).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_are_written_off_the_lock_and_the_file_still_compacts() {
    const SCHEMA: &str = r#"{"name": "T", "version": "1.0.0", "tables": {
      "S": {"isRoot": true, "columns": {"name": {"type": "string"}}}}}"#;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.db");
    crate::storage::create(&path, SCHEMA).unwrap();
    let loaded = crate::storage::open(&path, 1, 100).unwrap();
    let mut c = Core::new(
        Config {
            probe_interval_ms: None,
            compact_min_bytes: 4000,
            ..Config::default()
        },
        7,
    );
    c.add_database(loaded.db, Some(Box::new(loaded.storage)), loaded.history)
        .unwrap();
    let (_server, addr) = serve_on_tcp(c).await;
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let records = || {
        let bytes = std::fs::read(&path).unwrap();
        hf_ovsdb::file::RecordReader::new(&bytes).count()
    };
    let n = 200;
    for i in 0..n {
        let msg = json!({"method": "transact", "id": i, "params": ["T",
            {"op": "insert", "table": "S", "row": {"name": format!("row-{i}-{}", "x".repeat(40))}}]});
        s.write_all(msg.to_string().as_bytes()).await.unwrap();
        let got = read_until(&mut s, &format!("\"id\":{i}")).await;
        assert!(got.contains("uuid"), "{got}");
        // The reply follows the record.
        let file = std::fs::read(&path).unwrap();
        let name = format!("row-{i}-");
        assert!(
            file.windows(name.len()).any(|w| w == name.as_bytes()),
            "answered before its record was written"
        );
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while records() > n / 2 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        records() <= n / 2,
        "no compaction: {} records after {n} transactions",
        records()
    );
    let reopened = crate::storage::open(&path, 1, 100).unwrap();
    assert_eq!(reopened.db.tables[0].rows.len(), n);
}

/// A large monitor update goes out in parts (encoded and written as they are made) and
/// arrives as one valid JSON message holding every row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_update_streamed_in_parts_arrives_as_one_message() {
    const SCHEMA: &str = r#"{"name": "T", "version": "1.0.0", "tables": {
      "S": {"isRoot": true, "columns": {"name": {"type": "string"}}}}}"#;
    let mut c = core();
    let db = hf_ovsdb::Database::new(Arc::new(hf_ovsdb::Schema::parse(SCHEMA).unwrap()), 1);
    c.add_database(db, None, vec![]).unwrap();
    let (_server, addr) = serve_on_tcp(c).await;
    let mut m = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let req = json!({"method": "monitor_cond_since", "id": 1, "params": ["T", "m",
        {"S": [{"columns": ["name"]}]}, "00000000-0000-0000-0000-000000000000"]});
    m.write_all(req.to_string().as_bytes()).await.unwrap();
    read_until(&mut m, "\"id\":1").await;
    let mut w = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let n = 6000;
    let mut ops = vec![json!("T")];
    ops.extend((0..n).map(|i| {
        json!({"op": "insert", "table": "S", "row": {"name": format!("{i:05}-{}", "é\"x".repeat(100))}})
    }));
    let txn = json!({"method": "transact", "id": 2, "params": ops});
    w.write_all(txn.to_string().as_bytes()).await.unwrap();
    // Read until one whole JSON value has arrived.
    let mut got = Vec::new();
    let mut b = vec![0u8; 64 * 1024];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let update: serde_json::Value = loop {
        let r = tokio::time::timeout_at(deadline, m.read(&mut b)).await;
        let k = match r {
            Ok(Ok(k)) if k > 0 => k,
            other => panic!("no whole update: {other:?} after {} bytes", got.len()),
        };
        got.extend_from_slice(&b[..k]);
        let mut it = serde_json::Deserializer::from_slice(&got).into_iter::<serde_json::Value>();
        match it.next() {
            Some(Ok(v)) => {
                assert_eq!(it.byte_offset(), got.len(), "one message, nothing after");
                break v;
            }
            Some(Err(e)) if e.is_eof() => continue,
            other => panic!("not JSON: {other:?}"),
        }
    };
    assert!(
        got.len() > 3 << 20,
        "a multi-part update: {} bytes",
        got.len()
    );
    assert_eq!(update["method"], "update3");
    assert_eq!(update["params"][0], "m");
    let rows = update["params"][2]["S"].as_object().unwrap();
    assert_eq!(rows.len(), n);
    assert!(rows.values().any(|r| {
        r["insert"]["name"]
            .as_str()
            .unwrap()
            .starts_with("05999-é\"x")
    }));
}
