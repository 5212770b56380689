//! holdfast's schemas (`schemas/*.ovsschema`) against OVN 23.03's installed ones.
//!
//! Every difference, table by table and column by column, is printed; the test fails when a
//! difference is not listed in `schemas/README.md`, or when a listed one no longer exists.
//! Needs `/usr/share/ovn/*.ovsschema` (Debian's `ovn-common`) and `ovsdb-tool`
//! (`openvswitch-common`): without them it prints a skip line, or fails when `CI=true`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use hf_ovsdb::{Schema, TableSchema};

const SCHEMAS: [&str; 2] = ["ovn-nb.ovsschema", "ovn-sb.ovsschema"];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Skip (or fail in CI) when a prerequisite is missing.
fn missing(what: &str) {
    assert!(!in_ci(), "CI=true but {what} is missing");
    eprintln!("SKIP: {what} is missing (install OVN 23.03: scripts/test.sh does)");
}

fn ours(file: &str) -> Schema {
    let path = repo().join("schemas").join(file);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    Schema::parse(&text).unwrap_or_else(|e| panic!("{} does not parse: {e}", path.display()))
}

fn installed(file: &str) -> Option<Schema> {
    installed_in(Path::new("/usr/share/ovn"), file)
}

fn installed_in(dir: &Path, file: &str) -> Option<Schema> {
    let path = dir.join(file);
    let Ok(text) = std::fs::read_to_string(&path) else {
        missing(&path.display().to_string());
        return None;
    };
    Some(Schema::parse(&text).unwrap_or_else(|e| panic!("{} does not parse: {e}", path.display())))
}

/// One difference: (schema, table, column, change), as spelled in README.md.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    schema: String,
    table: String,
    column: String,
    change: String,
}

#[derive(Debug)]
struct Difference {
    key: Key,
    detail: String,
}

fn key(schema: &str, table: &str, column: &str, change: &str) -> Key {
    Key {
        schema: schema.into(),
        table: table.into(),
        column: column.into(),
        change: change.into(),
    }
}

fn index_names(t: &TableSchema) -> BTreeSet<Vec<String>> {
    t.indexes
        .iter()
        .map(|ix| {
            let mut names: Vec<String> = ix.iter().map(|c| t.columns[*c].name.clone()).collect();
            names.sort();
            names
        })
        .collect()
}

/// Every difference between `ours` and `theirs` (OVN's).
fn differences(ours: &Schema, theirs: &Schema) -> Vec<Difference> {
    let db = theirs.name.as_str();
    let mut out = Vec::new();
    let mut push = |k: Key, detail: String| out.push(Difference { key: k, detail });
    if ours.name != theirs.name {
        push(
            key(db, "-", "-", "name"),
            format!("{} vs {}", ours.name, theirs.name),
        );
    }
    if ours.version != theirs.version {
        push(
            key(db, "-", "-", "version"),
            format!("ours {} vs OVN {}", ours.version, theirs.version),
        );
    }
    for t in &theirs.tables {
        let Some(o) = ours.table(&t.name) else {
            push(key(db, &t.name, "-", "table-removed"), String::new());
            continue;
        };
        if o.is_root != t.is_root || o.max_rows != t.max_rows || index_names(o) != index_names(t) {
            push(
                key(db, &t.name, "-", "table-attr"),
                format!(
                    "ours isRoot={} maxRows={:?} indexes={:?}; OVN isRoot={} maxRows={:?} \
                     indexes={:?}",
                    o.is_root,
                    o.max_rows,
                    index_names(o),
                    t.is_root,
                    t.max_rows,
                    index_names(t)
                ),
            );
        }
        for c in &t.columns {
            let Some(oc) = o.column_index(&c.name).map(|i| &o.columns[i]) else {
                push(
                    key(db, &t.name, &c.name, "column-removed"),
                    c.ty.to_json().to_string(),
                );
                continue;
            };
            if oc.ty.to_json() != c.ty.to_json()
                || oc.ephemeral != c.ephemeral
                || oc.mutable != c.mutable
            {
                push(
                    key(db, &t.name, &c.name, "column-type"),
                    format!(
                        "ours {} (ephemeral={}, mutable={}); OVN {} (ephemeral={}, mutable={})",
                        oc.ty.to_json(),
                        oc.ephemeral,
                        oc.mutable,
                        c.ty.to_json(),
                        c.ephemeral,
                        c.mutable
                    ),
                );
            }
        }
        for oc in &o.columns {
            if t.column_index(&oc.name).is_none() {
                push(
                    key(db, &t.name, &oc.name, "column-added"),
                    oc.ty.to_json().to_string(),
                );
            }
        }
    }
    for o in &ours.tables {
        if theirs.table(&o.name).is_none() {
            push(key(db, &o.name, "-", "table-added"), String::new());
        }
    }
    out
}

/// The machine-readable list in README.md: table rows between the two markers.
fn listed() -> Vec<Key> {
    let path = repo().join("schemas/README.md");
    let text = std::fs::read_to_string(&path).expect("schemas/README.md");
    let begin = text
        .find("<!-- differences:begin -->")
        .expect("README.md has <!-- differences:begin -->");
    let end = text
        .find("<!-- differences:end -->")
        .expect("README.md has <!-- differences:end -->");
    let mut keys = Vec::new();
    for line in text[begin..end].lines() {
        let cells: Vec<&str> = line
            .trim()
            .trim_matches('|')
            .split('|')
            .map(str::trim)
            .collect();
        if cells.len() < 5 || cells[0] == "schema" || cells[0].starts_with("---") {
            continue;
        }
        assert!(
            !cells[4].is_empty(),
            "README.md lists {cells:?} without a reason"
        );
        keys.push(key(cells[0], cells[1], cells[2], cells[3]));
    }
    keys
}

fn check_against_ovn(file: &str) {
    let Some(theirs) = installed(file) else {
        return;
    };
    let ours = ours(file);
    let found = differences(&ours, &theirs);
    let listed: Vec<Key> = listed()
        .into_iter()
        .filter(|k| k.schema == theirs.name)
        .collect();
    println!("{} differences from OVN's {file}:", found.len());
    for d in &found {
        println!(
            "  {} {} {} {}: {}",
            d.key.schema, d.key.table, d.key.column, d.key.change, d.detail
        );
    }
    let unlisted: Vec<&Difference> = found.iter().filter(|d| !listed.contains(&d.key)).collect();
    let stale: Vec<&Key> = listed
        .iter()
        .filter(|k| !found.iter().any(|d| &d.key == *k))
        .collect();
    assert!(
        unlisted.is_empty(),
        "differences not listed in schemas/README.md: {unlisted:#?}"
    );
    assert!(
        stale.is_empty(),
        "schemas/README.md lists differences that no longer exist: {stale:#?}"
    );
}

#[test]
fn nb_differences_from_ovn_are_listed() {
    check_against_ovn("ovn-nb.ovsschema");
}

#[test]
fn sb_differences_from_ovn_are_listed() {
    check_against_ovn("ovn-sb.ovsschema");
}

/// `vswitch.ovsschema` is a subset of Open vSwitch's own schema (the tables and columns a
/// chassis reads and writes in its local database), with each listed table's attributes and
/// each listed column's type exactly OVS's: the only differences are tables and columns left
/// out.
#[test]
fn vswitch_is_a_subset_of_ovs_with_the_same_types() {
    let Some(theirs) = installed_in(Path::new("/usr/share/openvswitch"), "vswitch.ovsschema")
    else {
        return;
    };
    let ours = ours("vswitch.ovsschema");
    let wrong: Vec<String> = differences(&ours, &theirs)
        .into_iter()
        .filter(|d| !matches!(d.key.change.as_str(), "table-removed" | "column-removed"))
        .map(|d| format!("{:?}: {}", d.key, d.detail))
        .collect();
    assert!(
        wrong.is_empty(),
        "schemas/vswitch.tables differs from OVS's vswitch.ovsschema beyond leaving things out: \
         {wrong:#?}"
    );
    // What the chassis cannot work without is there.
    for (t, c) in [
        ("Open_vSwitch", "external_ids"),
        ("Open_vSwitch", "next_cfg"),
        ("Open_vSwitch", "cur_cfg"),
        ("Bridge", "ports"),
        ("Port", "interfaces"),
        ("Interface", "ofport"),
        ("Interface", "error"),
    ] {
        assert!(
            ours.table(t).and_then(|tt| tt.column_index(c)).is_some(),
            "vswitch.ovsschema lacks {t}.{c}"
        );
    }
}

/// The comparison itself finds each kind of difference (on our own schema, so this runs
/// everywhere).
#[test]
fn differences_detects_each_kind() {
    let base = ours("ovn-nb.ovsschema");
    let mut v = base.to_json().clone();
    let tables = v["tables"].as_object_mut().expect("tables");
    tables
        .remove("Chassis_Template_Var")
        .expect("Chassis_Template_Var");
    tables.insert(
        "Extra".into(),
        serde_json::json!({"columns": {"x": {"type": "integer"}}}),
    );
    let acl = tables["ACL"]["columns"].as_object_mut().expect("ACL");
    acl.remove("label");
    acl.insert("extra".into(), serde_json::json!({"type": "string"}));
    acl["priority"] = serde_json::json!({"type": "integer"});
    tables["Meter"]["isRoot"] = serde_json::json!(false);
    let changed = Schema::from_json(&v).expect("changed schema parses");
    let mut got: Vec<Key> = differences(&changed, &base)
        .into_iter()
        .map(|d| d.key)
        .collect();
    got.sort();
    let mut want = vec![
        key("OVN_Northbound", "ACL", "extra", "column-added"),
        key("OVN_Northbound", "ACL", "label", "column-removed"),
        key("OVN_Northbound", "ACL", "priority", "column-type"),
        key(
            "OVN_Northbound",
            "Chassis_Template_Var",
            "-",
            "table-removed",
        ),
        key("OVN_Northbound", "Extra", "-", "table-added"),
        key("OVN_Northbound", "Meter", "-", "table-attr"),
    ];
    want.sort();
    assert_eq!(got, want);
    assert!(differences(&base, &base).is_empty());
}

/// The extensions have OVN 24.09's types, whatever OVN is installed.
#[test]
fn nat_match_and_priority_have_ovn_24_09_types() {
    let nb = ours("ovn-nb.ovsschema");
    let nat = nb.table("NAT").expect("NAT table");
    let col = |n: &str| {
        &nat.columns[nat
            .column_index(n)
            .unwrap_or_else(|| panic!("NAT.{n} missing"))]
    };
    assert_eq!(col("match").ty.to_json(), serde_json::json!("string"));
    let p = &col("priority").ty;
    assert!(p.is_scalar());
    assert_eq!(p.key.atomic, hf_ovsdb::AtomicType::Integer);
    assert_eq!(
        (p.key.min_integer, p.key.max_integer),
        (Some(0), Some(32767))
    );
    assert!(p.key.check(&hf_ovsdb::Atom::Integer(32768)).is_err());
}

/// Run `program` with `args` and return its stdout, failing the test if it fails; `None` (after
/// the skip line, or a failure in CI) when `program` is not installed.
fn run<I, A>(program: &str, args: I) -> Option<String>
where
    I: IntoIterator<Item = A>,
    A: AsRef<std::ffi::OsStr>,
{
    let args: Vec<std::ffi::OsString> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
    let Ok(out) = Command::new(program).args(&args).output() else {
        missing(program);
        return None;
    };
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn ovsdb_tool_creates_databases_from_both_schemas() {
    let dir = tempfile::tempdir().expect("tempdir");
    for file in SCHEMAS {
        let db = dir.path().join(file.replace(".ovsschema", ".db"));
        let schema = repo().join("schemas").join(file);
        if run(
            "ovsdb-tool",
            ["create".as_ref(), db.as_os_str(), schema.as_os_str()],
        )
        .is_none()
        {
            return;
        }
        let name = run("ovsdb-tool", ["db-name".as_ref(), db.as_os_str()]).unwrap_or_default();
        assert_eq!(name.trim(), ours(file).name, "{file}");
    }
}

/// The .ovsschema files are what gen.py makes of the .tables files.
#[test]
fn generated_schemas_are_current() {
    let gen_py = repo().join("schemas/gen.py");
    run("python3", [gen_py.as_os_str(), "--check".as_ref()]);
}

/// A real ovsdb-server serving a database of one of our schemas, on a unix socket in a
/// temporary directory; killed when dropped.
struct Server {
    child: std::process::Child,
    remote: String,
    _dir: tempfile::TempDir,
}

impl Server {
    fn start(file: &str) -> Option<Server> {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("db");
        let schema = repo().join("schemas").join(file);
        run(
            "ovsdb-tool",
            ["create".as_ref(), db.as_os_str(), schema.as_os_str()],
        )?;
        let sock = dir.path().join("sock");
        let child = match Command::new("ovsdb-server")
            .arg(format!("--remote=punix:{}", sock.display()))
            .arg(format!("--unixctl={}", dir.path().join("ctl").display()))
            .arg("--no-chdir")
            .arg(&db)
            .stderr(std::process::Stdio::null())
            .spawn()
        {
            Ok(c) => c,
            Err(_) => {
                missing("ovsdb-server");
                return None;
            }
        };
        let server = Server {
            child,
            remote: format!("unix:{}", sock.display()),
            _dir: dir,
        };
        for _ in 0..100 {
            if sock.exists() {
                return Some(server);
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("ovsdb-server did not create {}", sock.display());
    }

    /// Run `tool --db=REMOTE args...`; its stdout, or a panic with its stderr.
    fn run(&self, tool: &str, args: &[&str]) -> Option<String> {
        let db = format!("--db={}", self.remote);
        run(
            tool,
            std::iter::once(db.as_str()).chain(args.iter().copied()),
        )
    }

    /// Run each command; false when the tool is missing.
    fn run_all(&self, tool: &str, commands: &[&[&str]]) -> bool {
        commands.iter().all(|c| self.run(tool, c).is_some())
    }

    /// `TOOL show` prints every one of `wanted`.
    fn show_contains(&self, tool: &str, wanted: &[&str]) {
        let show = self.run(tool, &["show"]).unwrap_or_default();
        for want in wanted {
            assert!(show.contains(want), "{tool} show lacks {want:?}:\n{show}");
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// OVN 23.03's ovn-nbctl drives our NB schema on a real ovsdb-server, and the extension columns
/// are reachable with ovsdb-client.
#[test]
fn ovn_nbctl_works_on_our_nb_schema() {
    let Some(server) = Server::start("ovn-nb.ovsschema") else {
        return;
    };
    let nbctl = |args: &[&str]| server.run("ovn-nbctl", args);
    let commands: &[&[&str]] = &[
        &["init"],
        &["ls-add", "sw0"],
        &["lsp-add", "sw0", "p1"],
        &["lsp-set-addresses", "p1", "00:00:00:00:00:01 10.0.0.1"],
        &["lsp-set-port-security", "p1", "00:00:00:00:00:01 10.0.0.1"],
        &["lr-add", "lr0"],
        &[
            "lrp-add",
            "lr0",
            "lrp0",
            "00:00:00:00:ff:01",
            "10.0.0.254/24",
        ],
        &["lrp-set-gateway-chassis", "lrp0", "hv1", "10"],
        &["lr-nat-add", "lr0", "snat", "172.16.0.1", "10.0.0.0/24"],
        &["lr-route-add", "lr0", "0.0.0.0/0", "172.16.0.254"],
        &["pg-add", "pg1", "p1"],
        &["acl-add", "pg1", "to-lport", "1001", "ip4", "allow-related"],
        &["lb-add", "lb0", "10.96.0.1:80", "10.0.0.1:8080", "tcp"],
        &["ls-lb-add", "sw0", "lb0"],
    ];
    if !server.run_all("ovn-nbctl", commands) {
        return;
    }
    let wanted = [
        "switch",
        "(sw0)",
        "port p1",
        "router",
        "(lr0)",
        "172.16.0.1",
    ];
    server.show_contains("ovn-nbctl", &wanted);
    let txn = r#"["OVN_Northbound",
        {"op": "update", "table": "NAT", "where": [],
         "row": {"match": "ip4.dst != 10.0.0.0/8", "priority": 100}},
        {"op": "select", "table": "NAT", "where": [], "columns": ["match", "priority"]}]"#;
    let Some(text) = run("ovsdb-client", ["transact", &server.remote, txn]) else {
        return;
    };
    assert!(
        text.contains(r#"{"match":"ip4.dst != 10.0.0.0/8","priority":100}"#),
        "{text}"
    );
    // ovn-nbctl still lists the NAT row, ignoring the columns it does not know.
    let nat = nbctl(&["lr-nat-list", "lr0"]).unwrap_or_default();
    assert!(nat.contains("10.0.0.0/24"), "{nat}");
}

/// OVN 23.03's ovn-sbctl works on our SB schema.
#[test]
fn ovn_sbctl_works_on_our_sb_schema() {
    let Some(server) = Server::start("ovn-sb.ovsschema") else {
        return;
    };
    let sbctl = |args: &[&str]| server.run("ovn-sbctl", args);
    let features = "other_config:holdfast-features=ct-commit-block";
    let commands: &[&[&str]] = &[
        &["init"],
        &["chassis-add", "hv1", "geneve", "192.168.0.1"],
        &["set", "Chassis", "hv1", features],
    ];
    if !server.run_all("ovn-sbctl", commands) {
        return;
    }
    server.show_contains("ovn-sbctl", &["Chassis hv1", "geneve", "192.168.0.1"]);
    let feats =
        sbctl(&["get", "Chassis", "hv1", "other_config:holdfast-features"]).unwrap_or_default();
    assert_eq!(feats.trim(), "ct-commit-block");
}
