//! Real OVS clients against `holdfast db`: `ovsdb-client` and the Python IDL (`ovs.db.idl`).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;

#[test]
fn ovsdb_client_commands() {
    if !require("ovsdb_client_commands", &["ovsdb-client"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let hf = HoldfastDb::start(
        dir.path(),
        &[("nb.db", &nb_schema()), ("sb.db", &sb_schema())],
        &[],
    );
    let db = hf.tcp.as_str();

    let dbs = run_ok(Command::new("ovsdb-client").args(["list-dbs", db]));
    let mut dbs: Vec<&str> = dbs.lines().collect();
    dbs.sort_unstable();
    assert_eq!(dbs, vec!["OVN_Northbound", "OVN_Southbound", "_Server"]);

    // ovsdb-client re-prints the schema in its own normal form: compare meaning, not text.
    let got = hf_ovsdb::Schema::parse(&run_ok(Command::new("ovsdb-client").args([
        "get-schema",
        db,
        "OVN_Northbound",
    ])))
    .unwrap();
    let ours = hf_ovsdb::Schema::parse(&std::fs::read_to_string(nb_schema()).unwrap()).unwrap();
    assert_eq!((&got.name, &got.version), (&ours.name, &ours.version));
    assert_eq!(got.tables.len(), ours.tables.len());
    for (a, b) in got.tables.iter().zip(&ours.tables) {
        assert_eq!(
            (&a.name, a.is_root, a.max_rows, &a.indexes),
            (&b.name, b.is_root, b.max_rows, &b.indexes)
        );
        let cols = |t: &hf_ovsdb::TableSchema| {
            t.columns
                .iter()
                .map(|c| (c.name.clone(), c.ty.clone(), c.ephemeral, c.mutable))
                .collect::<Vec<_>>()
        };
        assert_eq!(cols(a), cols(b), "table {}", a.name);
    }

    // monitor in the background, then transact.
    let mut mon = Command::new("ovsdb-client")
        .args([
            "monitor",
            db,
            "OVN_Northbound",
            "Logical_Switch",
            "name",
            "other_config",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mon_out = mon.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(mon_out).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    // The monitor prints its (empty) initial contents only after it is registered; give it a
    // moment by waiting for a round trip of our own.
    run_ok(Command::new("ovsdb-client").args(["list-dbs", db]));
    std::thread::sleep(Duration::from_millis(300));

    let r = run_ok(Command::new("ovsdb-client").args([
        "transact",
        db,
        r#"["OVN_Northbound",{"op":"insert","table":"Logical_Switch","row":{"name":"sw-t","other_config":["map",[["k","v"]]]}},{"op":"comment","comment":"from the test"}]"#,
    ]));
    let r: serde_json::Value = serde_json::from_str(&r).unwrap();
    assert_eq!(
        r[0]["uuid"][0], "uuid",
        "transact returns the new row's uuid: {r}"
    );

    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(l) => {
                let done = l.contains("insert") && l.contains("sw-t");
                seen.push(l);
                if done {
                    break;
                }
            }
            Err(_) => continue,
        }
    }
    let _ = mon.kill();
    let _ = mon.wait();
    assert!(
        seen.iter()
            .any(|l| l.contains("insert") && l.contains("sw-t") && l.contains("k=v")),
        "monitor saw the insert: {seen:#?}"
    );

    let dump = run_ok(Command::new("ovsdb-client").args([
        "dump",
        db,
        "OVN_Northbound",
        "Logical_Switch",
        "name",
    ]));
    assert!(dump.contains("sw-t"), "{dump}");
    // The _Server database describes the served databases.
    let server = run_ok(Command::new("ovsdb-client").args([
        "dump",
        db,
        "_Server",
        "Database",
        "name",
        "model",
        "connected",
        "leader",
    ]));
    assert!(
        server.lines().any(|l| l.contains("OVN_Southbound")
            && l.contains("standalone")
            && l.contains("true")),
        "{server}"
    );
}

const IDL_SCRIPT: &str = r#"
import sys, time, subprocess
import ovs.db.idl, ovs.poller
remote, schema, other = sys.argv[1], sys.argv[2], sys.argv[3]
helper = ovs.db.idl.SchemaHelper(location=schema)
helper.register_table("Logical_Switch")
helper.register_table("Logical_Switch_Port")
idl = ovs.db.idl.Idl(remote, helper)

def wait_for(pred, what):
    deadline = time.time() + 15
    while time.time() < deadline:
        idl.run()
        if idl.has_ever_connected() and pred():
            print(what, flush=True)
            return
        p = ovs.poller.Poller(); idl.wait(p); p.timer_wait(50); p.block()
    print("TIMEOUT " + what, flush=True)
    sys.exit(1)

def switch(name):
    return [r for r in idl.tables["Logical_Switch"].rows.values() if r.name == name]

wait_for(lambda: True, "connected")
subprocess.run(["ovn-nbctl", "--db=" + other, "ls-add", "idl-sw"], check=True)
wait_for(lambda: len(switch("idl-sw")) == 1, "saw insert")
subprocess.run(["ovn-nbctl", "--db=" + other, "set", "Logical_Switch", "idl-sw", "other_config:x=1"], check=True)
wait_for(lambda: switch("idl-sw") and switch("idl-sw")[0].other_config.get("x") == "1", "saw update")

# Optional columns (min 0, max 1): update2 carries their new value, never a set difference.
def port(name):
    return [r for r in idl.tables["Logical_Switch_Port"].rows.values() if r.name == name]
def nbctl(*args):
    subprocess.run(["ovn-nbctl", "--db=" + other] + list(args), check=True)
nbctl("lsp-add", "idl-sw", "idl-p")
wait_for(lambda: port("idl-p") and port("idl-p")[0].enabled == [], "saw port")
for value, want in [("disabled", [False]), ("enabled", [True]), ("disabled", [False])]:
    nbctl("lsp-set-enabled", "idl-p", value)
    wait_for(lambda: port("idl-p")[0].enabled == want, "saw enabled " + str(want))
nbctl("set", "Logical_Switch_Port", "idl-p", "tag_request=5")
wait_for(lambda: port("idl-p")[0].tag_request == [5], "saw tag_request [5]")
nbctl("set", "Logical_Switch_Port", "idl-p", "tag_request=7")
wait_for(lambda: port("idl-p")[0].tag_request == [7], "saw tag_request [7]")
nbctl("clear", "Logical_Switch_Port", "idl-p", "tag_request", "enabled")
wait_for(lambda: port("idl-p")[0].tag_request == [] and port("idl-p")[0].enabled == [], "saw both cleared")
# The IDL writes an optional column too; it reads back what it wrote.
txn = ovs.db.idl.Transaction(idl)
port("idl-p")[0].enabled = [True]
print("set enabled " + ovs.db.idl.Transaction.status_to_string(txn.commit_block()), flush=True)
wait_for(lambda: port("idl-p")[0].enabled == [True], "saw own enabled [True]")
subprocess.run(["ovn-nbctl", "--db=" + other, "ls-del", "idl-sw"], check=True)
wait_for(lambda: len(switch("idl-sw")) == 0, "saw delete")

# The IDL also writes: a transaction through it reaches the server.
txn = ovs.db.idl.Transaction(idl)
row = txn.insert(idl.tables["Logical_Switch"])
row.name = "from-idl"
status = txn.commit_block()
print("commit " + ovs.db.idl.Transaction.status_to_string(status), flush=True)
"#;

#[test]
fn python_idl_sees_other_clients_changes() {
    if !require(
        "python_idl_sees_other_clients_changes",
        &["/usr/bin/python3", "ovn-nbctl"],
    ) {
        return;
    }
    let ok = Command::new("/usr/bin/python3")
        .args(["-c", "import ovs.db.idl"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok
        && !require(
            "python_idl_sees_other_clients_changes",
            &["python3-openvswitch"],
        )
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let hf = HoldfastDb::start(dir.path(), &[("nb.db", &nb_schema())], &[]);
    let out = run(
        Command::new("/usr/bin/python3").args([
            "-c",
            IDL_SCRIPT,
            &hf.unix,
            nb_schema().to_str().unwrap(),
            &hf.tcp,
        ]),
        Duration::from_secs(60),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "IDL script failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines,
        vec![
            "connected",
            "saw insert",
            "saw update",
            "saw port",
            "saw enabled [False]",
            "saw enabled [True]",
            "saw enabled [False]",
            "saw tag_request [5]",
            "saw tag_request [7]",
            "saw both cleared",
            "set enabled success",
            "saw own enabled [True]",
            "saw delete",
            "commit success"
        ]
    );
    let names = run_ok(
        Command::new("ovn-nbctl")
            .arg(format!("--db={}", hf.tcp))
            .args(["--bare", "--columns=name", "list", "Logical_Switch"]),
    );
    assert_eq!(names.trim(), "from-idl");
}
