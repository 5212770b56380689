//! holdfast northd over `ssl:` (certificates made by real `ovs-pki`) to a real
//! `ovsdb-server --remote=pssl:` SB; `ssl:` without the three TLS options is refused at start.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::{self, run, run_ok};
use crate::fixture::{Backend, Dbs, NorthdProc, PidDaemon, wait_for};

const TOOLS: &[&str] = &[
    "ovsdb-server",
    "ovsdb-tool",
    "ovsdb-client",
    "ovn-nbctl",
    "ovn-appctl",
    "ovs-pki",
];

fn pki(d: &Path) {
    run_ok(
        Command::new("ovs-pki")
            .arg(format!("--dir={}", d.join("pki").display()))
            .arg("init")
            .current_dir(d),
    );
    for name in ["server", "client"] {
        run_ok(
            Command::new("ovs-pki")
                .arg(format!("--dir={}", d.join("pki").display()))
                .args(["req+sign", name, "switch"])
                .current_dir(d),
        );
    }
}

#[test]
fn northd_over_ssl_to_a_real_ovsdb_server() {
    if !common::require("northd tls", TOOLS) {
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("hf-northd-tls-")
        .tempdir()
        .expect("tempdir");
    let d = dir.path();
    pki(d);
    let ca = d.join("pki/switchca/cacert.pem");
    // NB on a unix socket (for ovn-nbctl); SB served only over pssl:.
    let dbs = Dbs::start(d, Backend::Ovsdb);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    run_ok(
        Command::new("ovsdb-tool")
            .arg("create")
            .arg(d.join("sbtls.db"))
            .arg("/usr/share/ovn/ovn-sb.ovsschema"),
    );
    run_ok(
        Command::new("ovsdb-server")
            .args(["--detach", "--no-chdir"])
            .arg(format!("--pidfile={}", d.join("sbtls.pid").display()))
            .arg(format!("--log-file={}", d.join("sbtls.log").display()))
            .arg(format!("--unixctl={}", d.join("sbtls.ctl").display()))
            .arg(format!("--remote=pssl:{port}:127.0.0.1"))
            .arg(format!(
                "--private-key={}",
                d.join("server-privkey.pem").display()
            ))
            .arg(format!(
                "--certificate={}",
                d.join("server-cert.pem").display()
            ))
            .arg(format!("--ca-cert={}", ca.display()))
            .arg(d.join("sbtls.db")),
    );
    let _sb = PidDaemon::adopt(d, "sbtls");
    let sb = format!("ssl:127.0.0.1:{port}");
    // Without the TLS options an ssl: database is refused by name, in the foreground.
    let out = run(
        Command::new(common::holdfast()).args([
            "northd",
            &format!("--ovnnb-db={}", dbs.nb),
            &format!("--ovnsb-db={sb}"),
        ]),
        Duration::from_secs(10),
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--private-key") && err.contains("--ca-cert"),
        "{err}"
    );
    let client_key = d.join("client-privkey.pem").display().to_string();
    let client_cert = d.join("client-cert.pem").display().to_string();
    let ca_s = ca.display().to_string();
    let n = NorthdProc::start(
        d,
        "northd",
        &dbs.nb,
        &sb,
        &[
            "-p",
            &client_key,
            "-c",
            &client_cert,
            "-C",
            &ca_s,
            "--ssl-protocols=TLSv1.2,TLSv1.3",
        ],
    );
    assert!(
        wait_for(Duration::from_secs(15), || n.status() == "Status: active"),
        "northd never became active over ssl: {}",
        n.log_text()
    );
    assert_eq!(n.appctl(&["sb-connection-status"]).trim(), "connected");
    run_ok(dbs.nbctl().args(["--wait=sb", "ls-add", "sw0"]));
    let dps = run_ok(
        Command::new("ovsdb-client")
            .arg("dump")
            .arg(&sb)
            .args(["-p", &client_key, "-c", &client_cert, "-C", &ca_s])
            .args(["OVN_Southbound", "Datapath_Binding"]),
    );
    assert!(dps.contains("sw0"), "SB over ssl: lacks sw0: {dps}");
}
