//! TLS (`pssl:`/`ssl:`) with certificates made by real `ovs-pki`: real `ovn-nbctl` and
//! `openssl s_client` against holdfast's `pssl:` remote, refusals of a plain TCP client and of a
//! certificate from another CA (logged, the server keeps serving), the `--ssl-protocols` and
//! `--ssl-ciphers` settings as OpenSSL negotiates them, and holdfast's client replica over
//! `ssl:` against real `ovsdb-server --remote=pssl:` and against holdfast; holdfast as
//! `ovsdb-server` under OVN's `ovn-ctl` with TLS configured through the `SSL` table
//! (`ovn-nbctl set-ssl`, `set-connection pssl:`) and a `pssl:` remote added through unixctl.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hf_model::NbSnapshot;
use hf_ovsdb_net::client::{Client, Config, TableSelect, TxnOutcome};
use hf_ovsdb_net::tls::{TlsFiles, TlsSettings};
use serde_json::json;

use crate::common::*;

/// A PKI made by `ovs-pki` in `dir`: a server and a client certificate signed by the switch
/// CA, and an intruder certificate signed by the switch CA of another PKI.
struct Pki {
    dir: PathBuf,
}

impl Pki {
    fn new(dir: &Path) -> Self {
        let pki = |d: &Path| {
            std::fs::create_dir_all(d).unwrap();
            run_ok(
                Command::new("ovs-pki")
                    .arg(format!("--dir={}", d.join("pki").display()))
                    .arg("init")
                    .current_dir(d),
            );
        };
        let sign = |d: &Path, name: &str| {
            run_ok(
                Command::new("ovs-pki")
                    .arg(format!("--dir={}", d.join("pki").display()))
                    .arg("req+sign")
                    .arg(name)
                    .arg("switch")
                    .current_dir(d),
            );
        };
        pki(dir);
        sign(dir, "server");
        sign(dir, "client");
        let other = dir.join("other");
        pki(&other);
        sign(&other, "intruder");
        Pki {
            dir: dir.to_path_buf(),
        }
    }

    fn ca(&self) -> PathBuf {
        self.dir.join("pki/switchca/cacert.pem")
    }

    fn other_ca(&self) -> PathBuf {
        self.dir.join("other/pki/switchca/cacert.pem")
    }

    fn key(&self, name: &str) -> PathBuf {
        let d = if name == "intruder" {
            self.dir.join("other")
        } else {
            self.dir.clone()
        };
        d.join(format!("{name}-privkey.pem"))
    }

    fn cert(&self, name: &str) -> PathBuf {
        self.key(name)
            .to_string_lossy()
            .replace("-privkey.pem", "-cert.pem")
            .into()
    }

    /// `-p KEY -c CERT -C CA` for `name`, trusting `ca`.
    fn args(&self, name: &str, ca: &Path) -> Vec<String> {
        vec![
            "-p".into(),
            self.key(name).display().to_string(),
            "-c".into(),
            self.cert(name).display().to_string(),
            "-C".into(),
            ca.display().to_string(),
        ]
    }

    fn client_tls(&self, name: &str, ca: &Path) -> std::sync::Arc<hf_ovsdb_net::tls::ClientConfig> {
        TlsSettings::load(&TlsFiles {
            private_key: self.key(name),
            certificate: self.cert(name),
            ca_cert: ca.to_path_buf(),
            protocols: None,
            ciphers: None,
        })
        .unwrap()
        .client_config()
        .unwrap()
    }
}

/// `holdfast db` with one `pssl:` remote and one `punix:` remote, logging to a file.
struct TlsDb {
    child: Child,
    /// `IP:PORT` of the pssl: remote.
    addr: String,
    unix: String,
    log: PathBuf,
}

impl TlsDb {
    fn start(dir: &Path, extra: &[String]) -> Self {
        let db = dir.join("nb.db");
        if !db.exists() {
            run_ok(
                Command::new(holdfast())
                    .args(["db", "create"])
                    .arg(&db)
                    .arg(nb_schema()),
            );
        }
        let log = dir.join("holdfast.log");
        let sock = dir.join("nb.sock");
        let mut child = Command::new(holdfast())
            .arg("db")
            .args(["--remote", "pssl:0:127.0.0.1"])
            .arg("--remote")
            .arg(format!("punix:{}", sock.display()))
            .arg(format!("--log-file={}", log.display()))
            .args(extra)
            .arg(&db)
            .env("HOLDFAST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn holdfast db");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut addrs = Vec::new();
        while addrs.len() < 2 {
            match lines.next() {
                Some(Ok(l)) => {
                    if let Some(a) = l.strip_prefix("listening on ") {
                        addrs.push(a.to_string());
                    }
                }
                _ => panic!("holdfast db exited before listening: {:?}", child.wait()),
            }
        }
        std::thread::spawn(move || for _ in lines {});
        let addr = addrs[0]
            .strip_prefix("ssl:")
            .unwrap_or_else(|| panic!("first remote is not ssl: {addrs:?}"))
            .to_string();
        TlsDb {
            child,
            addr,
            unix: addrs[1].clone(),
            log,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Wait (up to 10 s) for a log line holding every one of `parts`; returns it.
    fn wait_log(&self, parts: &[&str]) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(l) = self
                .log()
                .lines()
                .find(|l| parts.iter().all(|p| l.contains(p)))
            {
                return l.to_string();
            }
            assert!(
                Instant::now() < deadline,
                "no log line with {parts:?} in:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl Drop for TlsDb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn nbctl(db: &str, tls: &[String], cmd: &[&str]) -> std::process::Output {
    run(
        Command::new("ovn-nbctl")
            .arg(format!("--db={db}"))
            .arg("--timeout=10")
            .args(tls)
            .args(cmd),
        Duration::from_secs(30),
    )
}

fn nbctl_ok(db: &str, tls: &[String], cmd: &[&str]) -> String {
    let out = nbctl(db, tls, cmd);
    assert!(
        out.status.success(),
        "ovn-nbctl {cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn nbctl_over_pssl_and_refusals() {
    if !require(
        "nbctl_over_pssl_and_refusals",
        &["ovs-pki", "ovn-nbctl", "openssl"],
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(&dir.path().join("pki"));
    let mut db = TlsDb::start(dir.path(), &pki.args("server", &pki.ca()));
    let ssl = format!("ssl:{}", db.addr);
    let good = pki.args("client", &pki.ca());

    // Real ovn-nbctl, several commands, over TLS.
    nbctl_ok(&ssl, &good, &["ls-add", "sw0"]);
    nbctl_ok(&ssl, &good, &["lsp-add", "sw0", "sw0-p1"]);
    nbctl_ok(
        &ssl,
        &good,
        &["lsp-set-addresses", "sw0-p1", "00:00:00:00:00:01 10.0.0.11"],
    );
    nbctl_ok(&ssl, &good, &["lr-add", "lr0"]);
    nbctl_ok(
        &ssl,
        &good,
        &[
            "lrp-add",
            "lr0",
            "lr0-sw0",
            "00:00:00:00:ff:01",
            "10.0.0.1/24",
        ],
    );
    let show = nbctl_ok(&ssl, &good, &["show"]);
    assert!(show.contains("(sw0)") && show.contains("sw0-p1"), "{show}");
    assert!(
        show.contains("(lr0)") && show.contains("10.0.0.1/24"),
        "{show}"
    );
    assert_eq!(
        nbctl_ok(
            &ssl,
            &good,
            &["get", "Logical_Switch_Port", "sw0-p1", "addresses"]
        )
        .trim(),
        "[\"00:00:00:00:00:01 10.0.0.11\"]"
    );

    // A plain TCP client on the pssl: port: no reply, the connection is closed, and the log
    // names the peer and the reason.
    let mut plain = std::net::TcpStream::connect(&db.addr).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    let me = plain.local_addr().unwrap().to_string();
    plain
        .write_all(br#"{"method":"list_dbs","params":[],"id":1}"#)
        .unwrap();
    let mut got = Vec::new();
    let _ = plain.read_to_end(&mut got);
    assert!(
        !String::from_utf8_lossy(&got).contains("OVN_Northbound"),
        "a plain client got an answer: {got:?}"
    );
    let line = db.wait_log(&["refused", &me, "plain JSON-RPC"]);
    assert!(line.contains("WARN"), "{line}");
    // And real ovn-nbctl speaking plain TCP to it fails.
    let out = nbctl(
        &format!("tcp:{}", db.addr),
        &[],
        &["--timeout=3", "ls-list"],
    );
    assert!(
        !out.status.success(),
        "plain tcp: ovn-nbctl succeeded on a pssl: port"
    );

    // A certificate from another CA: ovn-nbctl fails, the server logs why.
    let intruder = pki.args("intruder", &pki.ca());
    let out = nbctl(&ssl, &intruder, &["--timeout=3", "ls-list"]);
    assert!(
        !out.status.success(),
        "a certificate from another CA was accepted: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    // (UnknownIssuer, or BadSignature when both CAs were made in the same second and so
    // share a subject name.)
    db.wait_log(&["refused", "127.0.0.1:", "invalid peer certificate"]);
    // A client that does not trust the server's CA refuses the server (OpenSSL's side).
    let distrust = pki.args("client", &pki.other_ca());
    assert!(
        !nbctl(&ssl, &distrust, &["--timeout=3", "ls-list"])
            .status
            .success()
    );

    // The server keeps serving, over TLS and over unix.
    assert!(db.alive(), "holdfast db died");
    assert_eq!(nbctl_ok(&ssl, &good, &["ls-list"]).lines().count(), 1);
    nbctl_ok(&ssl, &good, &["ls-add", "sw1"]);
    let list = nbctl_ok(&db.unix, &[], &["ls-list"]);
    assert!(list.contains("(sw0)") && list.contains("(sw1)"), "{list}");

    // OpenSSL's own client as the oracle of what is negotiated: default TLS 1.3 is offered.
    let s_client = |addr: &str, extra: &[&str]| {
        let mut c = Command::new("openssl");
        c.args(["s_client", "-brief", "-connect", addr])
            .arg("-cert")
            .arg(pki.cert("client"))
            .arg("-key")
            .arg(pki.key("client"))
            .arg("-CAfile")
            .arg(pki.ca())
            .args(extra);
        let out = run(&mut c, Duration::from_secs(20));
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    let o = s_client(&db.addr, &[]);
    assert!(o.contains("Protocol version: TLSv1.3"), "{o}");
    assert!(o.contains("Verification: OK"), "{o}");
    // A client that presents no certificate at all is refused too.
    let out = run(
        Command::new("openssl")
            .args(["s_client", "-brief", "-connect", &db.addr])
            .arg("-CAfile")
            .arg(pki.ca()),
        Duration::from_secs(20),
    );
    db.wait_log(&["refused", "127.0.0.1:", "no certificates"]);
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("OVN_Northbound"),
        "{out:?}"
    );
    assert!(db.alive(), "holdfast db died");
    drop(db);

    // --ssl-protocols and --ssl-ciphers, as OpenSSL sees them.
    let d2 = dir.path().join("restricted");
    std::fs::create_dir_all(&d2).unwrap();
    let mut args = pki.args("server", &pki.ca());
    args.extend([
        "--ssl-protocols=TLSv1.2".to_string(),
        "--ssl-ciphers=ECDHE-RSA-AES256-GCM-SHA384".to_string(),
    ]);
    let db2 = TlsDb::start(&d2, &args);
    let o = s_client(&db2.addr, &["-tls1_2"]);
    assert!(o.contains("Protocol version: TLSv1.2"), "{o}");
    assert!(
        o.contains("Ciphersuite: ECDHE-RSA-AES256-GCM-SHA384"),
        "{o}"
    );
    let o = s_client(&db2.addr, &["-tls1_3"]);
    assert!(!o.contains("Protocol version: TLSv1.3"), "{o}");
    let o = s_client(
        &db2.addr,
        &["-tls1_2", "-cipher", "ECDHE-RSA-AES128-GCM-SHA256"],
    );
    assert!(!o.contains("Ciphersuite:"), "{o}");
    nbctl_ok(
        &format!("ssl:{}", db2.addr),
        &good,
        &["ls-add", "sw-restricted"],
    );
    drop(db2);

    // Settings holdfast cannot honour are refused at start-up, naming them.
    let refuse = |extra: &[String], want: &str| {
        let out = run(
            Command::new(holdfast())
                .arg("db")
                .args(["--remote", "pssl:0:127.0.0.1"])
                .args(extra)
                .arg(d2.join("nb.db")),
            Duration::from_secs(20),
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(want),
            "{extra:?}: {err}"
        );
    };
    let mut a = pki.args("server", &pki.ca());
    a.push("--ssl-ciphers=AES256-SHA".into());
    refuse(
        &a,
        "\"AES256-SHA\": a cipher suite rustls does not implement",
    );
    let mut a = pki.args("server", &pki.ca());
    a.push("--ssl-protocols=TLSv1,TLSv1.1".into());
    refuse(&a, "rustls implements TLSv1.2 and TLSv1.3 only");
    refuse(&pki.args("server", &pki.ca())[..4], "missing --ca-cert");
    refuse(&[], "missing --private-key, --certificate, --ca-cert");
    let mut a = pki.args("server", &pki.ca());
    a[1] = pki.key("intruder").display().to_string();
    refuse(&a, "--private-key and --certificate");
}

/// A real `ovsdb-server` serving holdfast's NB schema on `pssl:`; stopped on drop.
struct OvsdbSsl {
    pidfile: PathBuf,
    addr: String,
}

impl OvsdbSsl {
    fn start(dir: &Path, tls: &[String]) -> Self {
        let db = dir.join("ovs-nb.db");
        run_ok(
            Command::new("ovsdb-tool")
                .arg("create")
                .arg(&db)
                .arg(nb_schema()),
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let pidfile = dir.join("ovs.pid");
        run_ok(
            Command::new("ovsdb-server")
                .arg("--detach")
                .arg(format!("--pidfile={}", pidfile.display()))
                .arg(format!("--log-file={}", dir.join("ovs.log").display()))
                .arg(format!("--unixctl={}", dir.join("ovs.ctl").display()))
                .arg(format!("--remote=pssl:{port}:127.0.0.1"))
                .args(tls)
                .arg(&db),
        );
        OvsdbSsl {
            pidfile,
            addr: format!("127.0.0.1:{port}"),
        }
    }
}

impl Drop for OvsdbSsl {
    fn drop(&mut self) {
        if let Ok(p) = std::fs::read_to_string(&self.pidfile) {
            let _ = Command::new("kill").arg(p.trim()).status();
        }
    }
}

fn replica(
    remote: &str,
    tls: std::sync::Arc<hf_ovsdb_net::tls::ClientConfig>,
) -> Client<NbSnapshot> {
    Client::spawn_tls(
        vec![remote.to_string()],
        Config {
            tables: vec![TableSelect::all("Logical_Switch")],
            probe_interval_ms: Some(2_000),
            backoff_max_ms: 500,
            ..Config::default()
        },
        Some(tls),
    )
    .0
}

/// The replica over `ssl:` against one server: sync, write, see its write; a replica with a
/// certificate from another CA, or not trusting the server's CA, never syncs.
/// `refusals` reads the server's log lines that report a refused handshake.
async fn replica_scenario(remote: &str, pki: &Pki, refusals: impl Fn() -> Vec<String>) {
    let r = replica(remote, pki.client_tls("client", &pki.ca()));
    assert!(
        r.wait_until(Duration::from_secs(30), |r| r.is_synced())
            .await,
        "{remote}: the replica never synced over TLS"
    );
    let ops = vec![json!({"op": "insert", "table": "Logical_Switch", "row": {"name": "via-tls"}})];
    let (outcome, _) = r.transact(Box::new(move |_| ops.clone())).await;
    assert!(matches!(outcome, TxnOutcome::Committed(_)), "{outcome:?}");
    assert!(
        r.wait_until(Duration::from_secs(10), |r| r
            .model()
            .logical_switch_by_name("via-tls")
            .is_some())
            .await
    );
    // Reconnect (a new handshake: ovsdb-server refuses resumed sessions with client
    // certificates, so the replica must not try one) and write again.
    r.drop_connection();
    let ops = vec![
        json!({"op": "insert", "table": "Logical_Switch", "row": {"name": "after-reconnect"}}),
    ];
    let (outcome, _) = r.transact(Box::new(move |_| ops.clone())).await;
    assert!(
        matches!(outcome, TxnOutcome::Committed(_)),
        "{remote}: after reconnecting: {outcome:?}"
    );
    assert!(
        r.wait_until(Duration::from_secs(10), |r| r.is_synced()
            && r.model()
                .logical_switch_by_name("after-reconnect")
                .is_some())
            .await
    );
    assert!(
        r.with(|r| r.stats().connects) >= 2,
        "{remote}: no reconnect happened"
    );
    assert_eq!(
        refusals(),
        Vec::<String>::new(),
        "{remote}: the server refused a handshake of the good replica"
    );
    let bad = replica(remote, pki.client_tls("intruder", &pki.ca()));
    let distrust = replica(remote, pki.client_tls("client", &pki.other_ca()));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!bad.with(|r| r.is_synced()), "{remote}: intruder synced");
    assert!(
        !distrust.with(|r| r.is_synced()),
        "{remote}: distrusting replica synced"
    );
    // The good replica is unaffected.
    assert!(r.with(|r| r.is_synced()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_over_ssl_with_ovsdb_server_and_holdfast() {
    if !require(
        "replica_over_ssl_with_ovsdb_server_and_holdfast",
        &["ovs-pki", "ovsdb-server", "ovsdb-tool"],
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(&dir.path().join("pki"));
    let ovs_dir = dir.path().join("ovs");
    std::fs::create_dir_all(&ovs_dir).unwrap();
    let ovs = OvsdbSsl::start(&ovs_dir, &pki.args("server", &pki.ca()));
    let ovs_log = ovs_dir.join("ovs.log");
    replica_scenario(&format!("ssl:{}", ovs.addr), &pki, || {
        std::fs::read_to_string(&ovs_log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("SSL_accept"))
            .map(String::from)
            .collect()
    })
    .await;

    let hf_dir = dir.path().join("hf");
    std::fs::create_dir_all(&hf_dir).unwrap();
    let db = TlsDb::start(&hf_dir, &pki.args("server", &pki.ca()));
    replica_scenario(&format!("ssl:{}", db.addr), &pki, || {
        db.log()
            .lines()
            .filter(|l| l.contains("refused"))
            .map(String::from)
            .collect()
    })
    .await;
    db.wait_log(&["refused", "invalid peer certificate"]);
}

/// One member of a TLS-only Raft cluster: Raft between members over `ssl:`, clients on
/// `pssl:`; stopped on drop.
struct TlsMember {
    dir: PathBuf,
    client_port: u16,
}

impl TlsMember {
    fn pid(&self) -> Option<String> {
        std::fs::read_to_string(self.dir.join("ovsdb.pid"))
            .ok()
            .map(|p| p.trim().to_string())
    }

    fn status(&self) -> String {
        Command::new("ovs-appctl")
            .arg("-t")
            .arg(self.dir.join("ovsdb.ctl"))
            .args(["cluster/status", "OVN_Northbound"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }

    fn kill(&self) {
        if let Some(p) = self.pid() {
            let _ = Command::new("kill").arg("-9").arg(p).status();
        }
    }
}

impl Drop for TlsMember {
    fn drop(&mut self) {
        if let Some(p) = self.pid() {
            let _ = Command::new("kill").arg(p).status();
        }
    }
}

fn port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The replica follows a three-member Raft cluster reachable only over TLS (`ssl:` remotes, the
/// three options), and moves to the new leader when the leader dies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_follows_a_tls_only_raft_cluster() {
    if !require(
        "replica_follows_a_tls_only_raft_cluster",
        &["ovs-pki", "ovsdb-server", "ovsdb-tool", "ovs-appctl"],
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(&dir.path().join("pki"));
    let tls = pki.args("server", &pki.ca());
    let raft: Vec<u16> = (0..3).map(|_| port()).collect();
    let mut members = Vec::new();
    for (i, rp) in raft.iter().enumerate() {
        let d = dir.path().join(format!("m{i}"));
        std::fs::create_dir_all(&d).unwrap();
        let db = d.join("db");
        let local = format!("ssl:127.0.0.1:{rp}");
        if i == 0 {
            run_ok(
                Command::new("ovsdb-tool")
                    .arg("create-cluster")
                    .arg(&db)
                    .arg(nb_schema())
                    .arg(&local),
            );
        } else {
            run_ok(
                Command::new("ovsdb-tool")
                    .arg("join-cluster")
                    .arg(&db)
                    .arg("OVN_Northbound")
                    .arg(&local)
                    .args(raft[..i].iter().map(|p| format!("ssl:127.0.0.1:{p}"))),
            );
        }
        let m = TlsMember {
            dir: d.clone(),
            client_port: port(),
        };
        run_ok(
            Command::new("ovsdb-server")
                .arg("--detach")
                .arg(format!("--pidfile={}", d.join("ovsdb.pid").display()))
                .arg(format!("--log-file={}", d.join("ovsdb.log").display()))
                .arg(format!("--unixctl={}", d.join("ovsdb.ctl").display()))
                .arg(format!("--remote=pssl:{}:127.0.0.1", m.client_port))
                .args(&tls)
                .arg(&db),
        );
        members.push(m);
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while !members
        .iter()
        .all(|m| m.status().contains("Status: cluster member"))
    {
        assert!(Instant::now() < deadline, "the TLS cluster never formed");
        std::thread::sleep(Duration::from_millis(100));
    }
    let remotes: Vec<String> = members
        .iter()
        .map(|m| format!("ssl:127.0.0.1:{}", m.client_port))
        .collect();
    let (r, _events) = Client::<NbSnapshot>::spawn_tls(
        remotes,
        Config {
            tables: vec![TableSelect::all("Logical_Switch")],
            leader_only: true,
            probe_interval_ms: Some(2_000),
            backoff_max_ms: 500,
            ..Config::default()
        },
        Some(pki.client_tls("client", &pki.ca())),
    );
    assert!(
        r.wait_until(Duration::from_secs(60), |r| r.is_synced()
            && r.server().is_some_and(|s| s.leader))
            .await,
        "the replica never synced on the leader over TLS"
    );
    let write = |name: &'static str| {
        let ops = vec![json!({"op": "insert", "table": "Logical_Switch", "row": {"name": name}})];
        r.transact(Box::new(move |_| ops.clone()))
    };
    let (outcome, _) = write("before").await;
    assert!(matches!(outcome, TxnOutcome::Committed(_)), "{outcome:?}");
    let leader = r.with(|r| r.synced_remote()).unwrap();
    members[leader].kill();
    let (outcome, _) = write("after").await;
    assert!(matches!(outcome, TxnOutcome::Committed(_)), "{outcome:?}");
    assert!(
        r.wait_until(Duration::from_secs(60), |r| r.is_synced()
            && r.synced_remote() != Some(leader)
            && r.model().logical_switch_by_name("before").is_some()
            && r.model().logical_switch_by_name("after").is_some())
            .await,
        "the replica did not move to the new leader over TLS"
    );
}

/// holdfast as `ovsdb-server` under OVN's `ovn-ctl start_nb_ovsdb`, with TLS configured the
/// OVN way: ovn-ctl passes `--private-key=db:OVN_Northbound,SSL,private_key` (and the
/// certificate, CA certificate, protocols and ciphers likewise) and
/// `--remote=db:OVN_Northbound,NB_Global,connections`; real `ovn-nbctl set-ssl` and
/// `set-connection pssl:PORT:127.0.0.1` configure it at run time, and real `ovn-nbctl
/// --db=ssl:` works over it. Pointing the SSL row at another CA takes effect for new
/// connections (the client is then refused).
#[test]
fn ovn_ctl_nb_with_ssl_from_the_ssl_table() {
    use crate::daemon::{OvnCtl, Reaper, alive, free_port, nix_is_root, pid_of, wait_for};
    if !nix_is_root() {
        eprintln!("SKIP ovn_ctl_nb_with_ssl_from_the_ssl_table: OVN's scripts need root");
        return;
    }
    if !require(
        "ovn_ctl_nb_with_ssl_from_the_ssl_table",
        &[
            "/usr/share/ovn/scripts/ovn-ctl",
            "ovsdb-tool",
            "ovn-nbctl",
            "ovs-pki",
        ],
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let pki = Pki::new(&dir.join("pki"));
    let ctl = OvnCtl::new(dir);
    let run_dir = ctl.run_dir.clone();
    let _reaper = Reaper(vec![run_dir.join("ovnnb_db.pid")]);
    let ovn_ctl = |args: &[&str]| {
        ctl.run(args);
    };
    // No insecure remote: only the unix socket until the Connection row says pssl:.
    ovn_ctl(&["start_nb_ovsdb"]);
    let pid = pid_of(&run_dir.join("ovnnb_db.pid")).expect("NB pidfile");
    let cmdline = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap();
    assert!(
        cmdline.contains("--private-key=db:OVN_Northbound,SSL,private_key"),
        "ovn-ctl did not pass the SSL table: {cmdline:?}"
    );
    let unix = format!("unix:{}", run_dir.join("ovnnb_db.sock").display());
    let log_file = dir.join("log/ovsdb-server-nb.log");
    let log = || std::fs::read_to_string(&log_file).unwrap_or_default();

    let port = free_port();
    let ssl = format!("ssl:127.0.0.1:{port}");
    let good = pki.args("client", &pki.ca());
    let server = |ca: &Path| {
        vec![
            pki.key("server").display().to_string(),
            pki.cert("server").display().to_string(),
            ca.display().to_string(),
        ]
    };
    let s = server(&pki.ca());
    nbctl_ok(&unix, &[], &["set-ssl", &s[0], &s[1], &s[2]]);
    nbctl_ok(
        &unix,
        &[],
        &["set-connection", &format!("pssl:{port}:127.0.0.1")],
    );
    wait_for(
        "the TLS configuration to load",
        Duration::from_secs(20),
        || log().contains("TLS configuration loaded"),
    );
    wait_for(
        "the pssl: remote to listen",
        Duration::from_secs(20),
        || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok(),
    );
    // Real ovn-nbctl over TLS with ovs-pki's client certificate.
    nbctl_ok(&ssl, &good, &["ls-add", "sw-tls"]);
    nbctl_ok(&ssl, &good, &["lsp-add", "sw-tls", "p1"]);
    let show = nbctl_ok(&unix, &[], &["show"]);
    assert!(
        show.contains("(sw-tls)") && show.contains("port p1"),
        "{show}"
    );
    // The Connection row's status is written by the server.
    wait_for("the Connection status", Duration::from_secs(20), || {
        nbctl_ok(&unix, &[], &["get", "Connection", ".", "status"])
            .contains(&format!("bound_port=\"{port}\""))
    });
    // Plain TCP and another CA's certificate are refused, logged, the server stays up.
    assert!(
        !nbctl(
            &format!("tcp:127.0.0.1:{port}"),
            &[],
            &["--timeout=3", "ls-list"]
        )
        .status
        .success(),
        "plain tcp: worked on the pssl: remote"
    );
    let intruder = pki.args("intruder", &pki.ca());
    assert!(
        !nbctl(&ssl, &intruder, &["--timeout=3", "ls-list"])
            .status
            .success(),
        "another CA's certificate was accepted"
    );
    wait_for("the refusals to be logged", Duration::from_secs(10), || {
        let l = log();
        l.contains("plain JSON-RPC") && l.contains("invalid peer certificate")
    });
    assert!(alive(pid));
    // The SSL row now trusts only the other CA: the client's certificate is refused.
    let s = server(&pki.other_ca());
    nbctl_ok(&unix, &[], &["set-ssl", &s[0], &s[1], &s[2]]);
    wait_for(
        "the new CA certificate to apply",
        Duration::from_secs(20),
        || {
            !nbctl(&ssl, &good, &["--timeout=3", "ls-list"])
                .status
                .success()
        },
    );
    // And back: it works again.
    let s = server(&pki.ca());
    nbctl_ok(&unix, &[], &["set-ssl", &s[0], &s[1], &s[2]]);
    wait_for(
        "the CA certificate to apply",
        Duration::from_secs(20),
        || {
            nbctl(&ssl, &good, &["--timeout=3", "ls-list"])
                .status
                .success()
        },
    );
    // A pssl: remote added at run time through unixctl serves TLS the same way.
    let ctl = run_dir.join("ovnnb_db.ctl");
    let port2 = free_port();
    run_ok(
        Command::new("ovn-appctl")
            .arg("-t")
            .arg(&ctl)
            .arg("ovsdb-server/add-remote")
            .arg(format!("pssl:{port2}:127.0.0.1")),
    );
    let ssl2 = format!("ssl:127.0.0.1:{port2}");
    wait_for("the added pssl: remote", Duration::from_secs(20), || {
        nbctl(&ssl2, &good, &["--timeout=3", "ls-list"])
            .status
            .success()
    });
    assert!(nbctl_ok(&ssl2, &good, &["ls-list"]).contains("(sw-tls)"));
    let remotes = run_ok(
        Command::new("ovn-appctl")
            .arg("-t")
            .arg(&ctl)
            .arg("ovsdb-server/list-remotes"),
    );
    assert!(
        remotes.contains(&format!("pssl:{port2}:127.0.0.1")),
        "{remotes}"
    );
    assert!(
        !log().contains("TLS settings not applied"),
        "unexpected TLS error: {}",
        log()
    );
    ovn_ctl(&["stop_nb_ovsdb"]);
    wait_for("the server to exit", Duration::from_secs(10), || {
        !alive(pid)
    });
}
