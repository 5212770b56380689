//! `holdfast sandbox` end to end, as a user runs it: the built binary, its printed outcome, and
//! real OVN tools (`ovn-sbctl`, `ovn-nbctl --wait=hv`) against its databases.
//!
//! - `default_scenario_succeeds`: `holdfast sandbox --scenario default --nb-port 0 --sb-port 0`
//!   exits 0 and reports a ping answered across chassis, TCP bytes moved across chassis and
//!   through SNAT to the external host (with the SNAT address the external host saw).
//! - `stays_up_for_real_ovn_tools`: the sandbox left running; real `ovn-sbctl show` lists every
//!   chassis; real `ovn-nbctl --wait=hv lsp-add` returns once every chassis reports the new
//!   `nb_cfg`, the port is bound, and the sandbox reports that the new host answers ping; the
//!   `holdfast trace` and `ovn-trace` commands it printed work as printed; a port added with
//!   DHCP options gets its address by DHCP and answers ping.
//! - `restarts_scenario_loses_nothing`, `rebuild_scenario_loses_nothing`: `--scenario
//!   restarts` restarts every controller and northd, `--scenario rebuild` rebuilds both
//!   databases with new UUIDs, while TCP transfers run; none retransmits a segment or sees a
//!   reset, no zone changes or is flushed, and `--wait=hv` is reached again afterwards.
//! - `db_rebuild_scenario_keeps_the_routers_zones_and_tcp`: `--scenario db-rebuild` (incident
//!   D; `rebuild` is its alias) runs on `ovnk-l2` by default: the gateway routers' request for
//!   zone 0 (`options:snat-ct-zone=0`) is refused with a diagnostic and a zone by name, and the
//!   rebuild with every controller stopped and started keeps both zone maps (printed in full)
//!   identical, flushes nothing, and both transfers verify every byte.
//! - `live_migration_scenario_keeps_tcp`: `--scenario live-migration` (incident C) exits 0;
//!   vm1, with its own egress address and a security group, migrates hv1 -> hv2 -> hv1, each
//!   migration moving connections, and each connection prints every byte verified, a stall
//!   under 50 ms, no retransmission timeout, no reset, and the external host seeing vm1's own
//!   address throughout.
//! - `ovnk_l2_default_scenario_snats_to_each_node`: `--topology ovnk-l2 --scenario default`
//!   (OVN-Kubernetes' layer-2 design, no gateway chassis) exits 0: pings across chassis on
//!   `l2`, a transfer across chassis, and a transfer to the external host from each node, which
//!   sees that node's own address (172.16.0.11 from hv1's router, 172.16.0.12 from hv2's).
//! - `ovnk_l2_restarts_and_rebuild_lose_nothing`: the `restarts` and `rebuild` stories on
//!   `--topology ovnk-l2`, with the same checks (every node's controller and northd restarted,
//!   the transfer to the external host through its client's node).
//! - `ovnk_l2_live_migration_scenario_breaks_the_download`: `--topology ovnk-l2 --scenario
//!   live-migration` exits 1, as incident C did: the CMS adds no floating IP, the VM's egress
//!   moves to hv2's node address with it, the external host resets what reaches it from there,
//!   and the verdict names the broken download; the east-west stream is kept.
//! - `snat_exemption_scenario_tells_incident_a`: `--scenario snat-exemption` exits 0: `holdfast
//!   check` names the incident's row, etcd refuses the node's address, and each of the three
//!   scoping forms gives etcd the pod's address, the outside the node's, and NodePort replies.
//! - `upgrade_scenario_keeps_tcp_through_the_security_group`: `--scenario upgrade` (incident
//!   B) exits 0; one report line per step; the forced newer form gives parse errors that all
//!   run on last good flows (none failed closed); every other step has none; the SB form
//!   changes to hf-2 only with the last chassis at hf-2; no reset, no retransmission, every
//!   byte verified.
//! - `bad_arguments_are_refused_by_name`, `two_runs_print_the_same_story`: an unknown scenario
//!   or topology (the error lists both topologies), one port for both databases and too few
//!   chassis are refused; two runs with one seed print the same story.
//! - `control_socket_drives_the_sandbox`: real `ovs-appctl -t PATH` on `--unixctl PATH`: a
//!   ping, TCP streams (one a download from the external host through SNAT) and a UDP stream
//!   across a controller restart, a datapath handoff, a northd restart and a rebuild of both
//!   databases; stopped, every stream reports bytes, all verified, no reset; wrong commands and
//!   arguments exit 2 with a message naming what was wrong; `exit` stops the sandbox.
//! - `control_socket_migrates_a_vm`: the CMS's steps through real `ovn-nbctl` (a security
//!   group and a floating IP for vm1, `requested-chassis=hv1,hv2` with
//!   `activation-strategy=rarp`, then `requested-chassis=hv2`) around the hypervisor's
//!   `sandbox/migrate vm1 hv2`, while streams run; then a controller restart and a datapath
//!   handoff on the destination; the report shows the migration completed with connections
//!   moved, and every stream verified every byte with no reset and one address throughout.
//!
//! Needs real OVN's `ovn-nbctl`/`ovn-sbctl`/`ovn-trace` for the second test and OVS's
//! `ovs-appctl` for the control socket's (with `CI=true` their absence fails them). The
//! sandbox is stopped by pid, also when an assertion fails.

// Tests are I/O shells: they read the clock and spawn readers.
#![allow(clippy::disallowed_methods)]

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A running `holdfast sandbox`, killed by pid on drop; its stdout lines arrive on a channel
/// and are kept for failure messages.
struct Sandbox {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Sandbox {
    fn start(args: &[&str]) -> Sandbox {
        let mut child = Command::new(common::holdfast())
            .arg("sandbox")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("cannot start holdfast sandbox");
        let out = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Sandbox {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Wait for a line satisfying `f`; panics with everything seen so far on timeout or exit.
    fn wait_line(&mut self, what: &str, timeout: Duration, f: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    self.seen.push(l.clone());
                    if f(&l) {
                        return l;
                    }
                }
                Err(e) => panic!(
                    "no line {what} ({e:?}; status {:?}); output so far:\n{}",
                    self.child.try_wait(),
                    self.seen.join("\n")
                ),
            }
        }
    }

    fn output(&self) -> String {
        self.seen.join("\n")
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The two ports of the `databases listening on tcp:127.0.0.1:N (NB), tcp:127.0.0.1:M (SB)`
/// line.
fn ports(line: &str) -> (u16, u16) {
    let mut ports = line.split("tcp:127.0.0.1:").skip(1).map(|s| {
        let digits: String = s.chars().take_while(|c| c.is_ascii_digit()).collect();
        digits.parse::<u16>().expect("port")
    });
    let nb = ports.next().expect("NB port");
    let sb = ports.next().expect("SB port");
    assert!(nb != 0 && sb != 0 && nb != sb, "{line}");
    (nb, sb)
}

/// The number in `text` right before `unit` (e.g. "262144 bytes").
fn number_before(text: &str, unit: &str) -> Option<u64> {
    let i = text.find(unit)?;
    let head = text[..i].trim_end();
    let digits: String = head
        .chars()
        .rev()
        .take_while(|c| c.is_ascii_digit())
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    digits.parse().ok()
}

#[test]
fn default_scenario_succeeds() {
    let mut sb = Sandbox::start(&["--scenario", "default", "--nb-port", "0", "--sb-port", "0"]);
    let listening = sb.wait_line("listening", Duration::from_secs(60), |l| {
        l.contains("databases listening on")
    });
    ports(&listening);
    let verdict = sb.wait_line("with the story's verdict", Duration::from_secs(300), |l| {
        l.starts_with("story default:")
    });
    let status = sb.child.wait().expect("wait");
    // Drain what is left.
    while let Ok(l) = sb.lines.recv_timeout(Duration::from_secs(5)) {
        sb.seen.push(l);
    }
    let out = sb.output();
    assert_eq!(verdict, "story default: ok", "{out}");
    assert!(status.success(), "exit status {status:?}\n{out}");
    for step in [
        "[2/5] northd compiled",
        "[3/5] chassis",
        "[4/5] hosts attached",
    ] {
        assert!(out.contains(step), "no progress line {step:?}:\n{out}");
    }
    // Ping across chassis: every request answered.
    let ping = sb
        .seen
        .iter()
        .find(|l| l.trim_start().starts_with("ping "))
        .unwrap_or_else(|| panic!("no ping result:\n{out}"));
    assert!(ping.contains("answered") && !ping.contains(" 0/"), "{ping}");
    assert!(ping.contains("hv1") && ping.contains("hv2"), "{ping}");
    // TCP across chassis and through SNAT: bytes moved and verified by the receiver.
    let tcp: Vec<&String> = sb
        .seen
        .iter()
        .filter(|l| l.trim_start().starts_with("tcp "))
        .collect();
    assert_eq!(tcp.len(), 2, "{out}");
    for l in &tcp {
        let bytes = number_before(l, "bytes").unwrap_or(0);
        assert!(bytes > 0, "no bytes moved: {l}");
        assert!(l.contains("verified"), "{l}");
    }
    let snat = tcp
        .iter()
        .find(|l| l.contains("SNAT"))
        .unwrap_or_else(|| panic!("no SNAT transfer:\n{out}"));
    assert!(
        snat.contains("the external host saw source 172.16.0.100"),
        "{snat}"
    );
}

#[test]
fn stays_up_for_real_ovn_tools() {
    if !common::require("sandbox stays up", &["ovn-nbctl", "ovn-sbctl", "ovn-trace"]) {
        return;
    }
    let mut sb = Sandbox::start(&["--nb-port", "0", "--sb-port", "0"]);
    let listening = sb.wait_line("listening", Duration::from_secs(60), |l| {
        l.contains("databases listening on")
    });
    let (nb_port, sb_port) = ports(&listening);
    sb.wait_line("saying the sandbox is up", Duration::from_secs(300), |l| {
        l.starts_with("sandbox up:")
    });
    let nbdb = format!("--db=tcp:127.0.0.1:{nb_port}");
    let sbdb = format!("--db=tcp:127.0.0.1:{sb_port}");

    // The trace commands it printed work as printed (holdfast's and real ovn-trace), and
    // follow vm1's ping through lr0 to the host on ls2.
    let bin_dir = common::holdfast()
        .parent()
        .expect("binary directory")
        .to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for tool in ["holdfast trace", "ovn-trace"] {
        let line = sb
            .seen
            .iter()
            .find(|l| {
                l.trim_start()
                    .starts_with(&format!("{tool} --db=tcp:127.0.0.1:{sb_port}"))
            })
            .unwrap_or_else(|| panic!("no {tool} command printed:\n{}", sb.output()))
            .trim()
            .to_string();
        let out = common::run_ok(Command::new("sh").arg("-c").arg(&line).env("PATH", &path));
        assert!(
            out.contains("output(\"vm3\")") || out.contains("output to \"vm3\""),
            "{line}:\n{out}"
        );
    }

    let show = common::run_ok(Command::new("ovn-sbctl").args([&sbdb, "--timeout=30", "show"]));
    for ch in ["hv1", "hv2", "gw1"] {
        assert!(
            show.contains(&format!("Chassis {ch}")) || show.contains(&format!("Chassis \"{ch}\"")),
            "ovn-sbctl show lacks chassis {ch}:\n{show}"
        );
    }

    common::run_ok(Command::new("ovn-nbctl").args([
        &nbdb,
        "--timeout=60",
        "--wait=hv",
        "lsp-add",
        "ls1",
        "p9",
        "--",
        "lsp-set-addresses",
        "p9",
        "00:00:00:00:01:09 10.0.1.9",
    ]));
    // --wait=hv returned: every chassis has reported the NB configuration that added p9.
    let nb_cfg: i64 =
        common::run_ok(Command::new("ovn-nbctl").args([&nbdb, "get", "NB_Global", ".", "nb_cfg"]))
            .trim()
            .parse()
            .expect("nb_cfg");
    assert!(nb_cfg > 0);
    let hv_cfg: i64 =
        common::run_ok(Command::new("ovn-nbctl").args([&nbdb, "get", "NB_Global", ".", "hv_cfg"]))
            .trim()
            .parse()
            .expect("hv_cfg");
    assert!(hv_cfg >= nb_cfg, "hv_cfg {hv_cfg} < nb_cfg {nb_cfg}");
    let privs = common::run_ok(Command::new("ovn-sbctl").args([
        &sbdb,
        "--bare",
        "--columns=name,nb_cfg",
        "list",
        "Chassis_Private",
    ]));
    let words: Vec<&str> = privs.split_whitespace().collect();
    for ch in ["hv1", "hv2", "gw1"] {
        let i = words
            .iter()
            .position(|w| *w == ch)
            .unwrap_or_else(|| panic!("no Chassis_Private {ch}:\n{privs}"));
        let cfg: i64 = words
            .get(i + 1)
            .and_then(|w| w.parse().ok())
            .unwrap_or_else(|| panic!("no nb_cfg for {ch}:\n{privs}"));
        assert!(cfg >= nb_cfg, "{ch} reports nb_cfg {cfg} < {nb_cfg}");
    }
    let bound = common::run_ok(Command::new("ovn-sbctl").args([
        &sbdb,
        "--bare",
        "--columns=chassis",
        "find",
        "Port_Binding",
        "logical_port=p9",
    ]));
    assert!(!bound.trim().is_empty(), "p9 is not bound to a chassis");

    let ping = sb.wait_line(
        "for p9's host answering ping",
        Duration::from_secs(60),
        |l| l.starts_with("host p9 (10.0.1.9) on "),
    );
    assert!(ping.contains("answers ping"), "{ping}\n{}", sb.output());
    // A port with DHCP options: its host takes its address by DHCP from the datapath's
    // packet-in answers, then answers ping.
    let dhcp = common::run_ok(Command::new("ovn-nbctl").args([
        &nbdb,
        "create",
        "DHCP_Options",
        "cidr=10.0.1.0/24",
        "options=\"lease_time\"=\"3600\" \"router\"=\"10.0.1.1\" \"server_id\"=\"10.0.1.1\" \"server_mac\"=\"00:00:00:00:ff:01\"",
    ]));
    common::run_ok(Command::new("ovn-nbctl").args([
        &nbdb,
        "--timeout=60",
        "--wait=hv",
        "lsp-add",
        "ls1",
        "p6",
        "--",
        "lsp-set-addresses",
        "p6",
        "00:00:00:00:01:06 10.0.1.6",
        "--",
        "lsp-set-dhcpv4-options",
        "p6",
        dhcp.trim(),
    ]));
    let ping = sb.wait_line(
        "for p6's host answering ping",
        Duration::from_secs(60),
        |l| l.starts_with("host p6 (10.0.1.6") && !l.ends_with("pinging it"),
    );
    assert!(
        ping.starts_with("host p6 (10.0.1.6, by DHCP) on ") && ping.contains("answers ping"),
        "{ping}\n{}",
        sb.output()
    );
    // A dynamic port (issue 21): northd assigns its address from ls1's subnet (past the
    // excluded ones) and writes it to NB; its host takes it by DHCP, then answers ping.
    common::run_ok(Command::new("ovn-nbctl").args([
        &nbdb,
        "--timeout=60",
        "--wait=hv",
        "set",
        "Logical_Switch",
        "ls1",
        "other_config:subnet=10.0.1.0/24",
        "other_config:exclude_ips=\"10.0.1.2..10.0.1.99\"",
        "--",
        "lsp-add",
        "ls1",
        "p7",
        "--",
        "lsp-set-addresses",
        "p7",
        "dynamic",
        "--",
        "lsp-set-dhcpv4-options",
        "p7",
        dhcp.trim(),
    ]));
    let assigned = common::run_ok(Command::new("ovn-nbctl").args([
        &nbdb,
        "get",
        "Logical_Switch_Port",
        "p7",
        "dynamic_addresses",
    ]));
    let ip = assigned
        .trim()
        .trim_matches('"')
        .split_whitespace()
        .nth(1)
        .unwrap_or_else(|| panic!("p7's dynamic_addresses: {assigned}"))
        .to_string();
    assert!(ip.starts_with("10.0.1.") && ip != "10.0.1.1", "{assigned}");
    let ping = sb.wait_line(
        "for p7's host answering ping",
        Duration::from_secs(60),
        |l| l.starts_with("host p7 (") && !l.ends_with("pinging it"),
    );
    assert!(
        ping.starts_with(&format!("host p7 ({ip}, by DHCP) on ")) && ping.contains("answers ping"),
        "{ping}\n{}",
        sb.output()
    );
    // Still up and serving after all that.
    let show = common::run_ok(Command::new("ovn-nbctl").args([&nbdb, "show"]));
    assert!(show.contains("p9"), "{show}");
}

/// Runs a disruption scenario (`restarts`, `rebuild`) and checks what every such story must
/// show: exit 0, the disruption happened mid-transfer, both transfers complete without a
/// retransmitted segment or a reset, `--wait=hv` reached afterwards, every chassis's zone map
/// unchanged and nothing flushed.
fn disruption(name: &str, what_line: &str) -> Sandbox {
    disruption_on("default", &["hv1", "hv2", "gw1"], name, what_line)
}

/// [`disruption`] on `topology`, whose chassis are `chassis`.
fn disruption_on(topology: &str, chassis: &[&str], name: &str, what_line: &str) -> Sandbox {
    let mut sb = Sandbox::start(&[
        "--topology",
        topology,
        "--scenario",
        name,
        "--nb-port",
        "0",
        "--sb-port",
        "0",
    ]);
    // `rebuild` is an alias: the story's name is `db-rebuild`.
    let story = if name == "rebuild" {
        "db-rebuild"
    } else {
        name
    };
    let verdict = sb.wait_line("with the story's verdict", Duration::from_secs(300), |l| {
        l.starts_with(&format!("story {story}:"))
    });
    let status = sb.child.wait().expect("wait");
    let out = sb.output();
    assert_eq!(verdict, format!("story {story}: ok"), "{out}");
    assert!(status.success(), "exit status {status:?}\n{out}");
    assert!(
        sb.seen.iter().any(|l| l.trim_start().starts_with(what_line)
            && l.contains("while the transfers ran")),
        "no {what_line:?} line:\n{out}"
    );
    let tcp: Vec<&String> = sb
        .seen
        .iter()
        .filter(|l| l.trim_start().starts_with("tcp "))
        .collect();
    assert_eq!(tcp.len(), 2, "{out}");
    for l in tcp {
        assert!(number_before(l, "bytes in").unwrap_or(0) > 0, "{l}");
        assert!(
            l.contains("0 segments retransmitted, 0 resets"),
            "lost something: {l}"
        );
    }
    assert!(
        sb.seen.iter().any(|l| l.contains("--wait=hv reached")),
        "the control plane did not come back:\n{out}"
    );
    for ch in chassis {
        assert!(
            sb.seen.iter().any(|l| l
                .trim_start()
                .starts_with(&format!("{ch}: zone map unchanged"))
                && l.contains("no zone flushed")),
            "{ch}'s zones:\n{out}"
        );
    }
    sb
}

#[test]
fn restarts_scenario_loses_nothing() {
    let sb = disruption("restarts", "restarted ");
    let restarted = sb
        .seen
        .iter()
        .find(|l| l.trim_start().starts_with("restarted "))
        .expect("restart line");
    for what in [
        "controller hv1",
        "controller hv2",
        "controller gw1",
        "northd",
    ] {
        assert!(
            restarted.contains(what),
            "{what} not restarted: {restarted}"
        );
    }
}

#[test]
fn rebuild_scenario_loses_nothing() {
    let sb = disruption("rebuild", "rebuilt NB and SB");
    assert!(
        sb.seen.iter().any(|l| l.contains("every UUID new")),
        "{}",
        sb.output()
    );
}

#[test]
fn ovnk_l2_restarts_and_rebuild_lose_nothing() {
    let sb = disruption_on("ovnk-l2", &["hv1", "hv2"], "restarts", "restarted ");
    let restarted = sb
        .seen
        .iter()
        .find(|l| l.trim_start().starts_with("restarted "))
        .expect("restart line");
    assert!(
        restarted.contains("controller hv1, controller hv2, northd"),
        "every node's controller, then northd: {restarted}"
    );
    assert!(!sb.output().contains("gw1"), "{}", sb.output());
    let sb = disruption_on("ovnk-l2", &["hv1", "hv2"], "rebuild", "rebuilt NB and SB");
    assert!(
        sb.seen
            .iter()
            .any(|l| l.contains("through SNAT on GR_hv2 on hv2 to the external host")),
        "{}",
        sb.output()
    );
}

/// The number in `text` right before `unit`, with a decimal point (e.g. "32.03 ms").
fn decimal_before(text: &str, unit: &str) -> Option<f64> {
    let i = text.find(unit)?;
    let head = text[..i].trim_end();
    let start = head
        .rfind(|c: char| !(c.is_ascii_digit() || c == '.'))
        .map_or(0, |j| j + 1);
    head[start..].parse().ok()
}

#[test]
fn live_migration_scenario_keeps_tcp() {
    let mut sb = Sandbox::start(&[
        "--scenario",
        "live-migration",
        "--nb-port",
        "0",
        "--sb-port",
        "0",
    ]);
    let verdict = sb.wait_line("with the story's verdict", Duration::from_secs(300), |l| {
        l.starts_with("story live-migration:")
    });
    let status = sb.child.wait().expect("wait");
    while let Ok(l) = sb.lines.recv_timeout(Duration::from_secs(5)) {
        sb.seen.push(l);
    }
    let out = sb.output();
    assert_eq!(verdict, "story live-migration: ok", "{out}");
    assert!(status.success(), "exit status {status:?}\n{out}");
    assert!(!out.contains("FAILED"), "{out}");
    // The external host is on the provider network; vm1 has its own address and a security
    // group.
    assert!(out.contains("ext1 on physnet1"), "{out}");
    assert!(out.contains("cms: dnat_and_snat 172.16.0.50"), "{out}");
    assert!(out.contains("cms: security group on vm1"), "{out}");
    // Two migrations, hv1 -> hv2 -> hv1, each moving connections, each completed.
    let migrations: Vec<&String> = sb
        .seen
        .iter()
        .filter(|l| l.trim_start().starts_with("migration "))
        .collect();
    assert_eq!(migrations.len(), 2, "{out}");
    for (m, hop) in migrations.iter().zip(["vm1 hv1 -> hv2", "vm1 hv2 -> hv1"]) {
        assert!(m.contains(hop), "{m}");
        assert!(m.contains("paused 30.00 ms"), "{m}");
        assert!(
            number_before(m, "connection entries moved").unwrap_or(0) > 0,
            "{m}"
        );
        assert!(m.ends_with("; completed"), "{m}");
    }
    // Each connection: every byte verified, its stall printed and under 50 ms, no reset, no
    // retransmission timeout; the external host saw vm1's own address throughout.
    for (name, far) in [
        ("download", "ext1 saw 172.16.0.50:"),
        ("east-west", "vm4 saw 10.0.1.11:"),
    ] {
        let line = sb
            .seen
            .iter()
            .find(|l| l.trim_start().starts_with(&format!("{name}: ")))
            .unwrap_or_else(|| panic!("no {name} results:\n{out}"));
        let bytes = number_before(line, "bytes,").unwrap_or(0);
        assert!(bytes > 0, "{line}");
        assert_eq!(number_before(line, "verified"), Some(bytes), "{line}");
        let stall = decimal_before(line, "ms,").unwrap_or_else(|| panic!("no stall: {line}"));
        assert!(line.contains("longest stall "), "{line}");
        assert!(stall > 0.0 && stall < 50.0, "{line}");
        assert!(line.contains("/ 0 timeouts"), "{line}");
        assert!(line.contains(" 0 resets (stopped)"), "{line}");
        assert!(
            line.contains(far) && line.ends_with(" throughout"),
            "{line}"
        );
    }
}

/// `holdfast sandbox ARGS... --nb-port 0 --sb-port 0` run to its end: (exit code, stdout lines).
fn run_story(args: &[&str]) -> (Option<i32>, Vec<String>) {
    let out = common::run(
        Command::new(common::holdfast())
            .arg("sandbox")
            .args(args)
            .args(["--nb-port", "0", "--sb-port", "0"]),
        Duration::from_secs(300),
    );
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    (out.status.code(), lines)
}

/// Incident D's story: without `--topology` it runs on OVN-Kubernetes's design; the gateway
/// routers ask for zone 0 and get zones by name (with the controllers' diagnostic), and the
/// rebuild with every controller restarted keeps every zone map whole (printed in full before
/// and after), flushes nothing, and the transfers through SNAT and across chassis verify every
/// byte without a retransmission or a reset.
#[test]
fn db_rebuild_scenario_keeps_the_routers_zones_and_tcp() {
    let (code, lines) = run_story(&["--scenario", "db-rebuild"]);
    let out = lines.join("\n");
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(
        lines.last().map(String::as_str),
        Some("story db-rebuild: ok"),
        "{out}"
    );
    let has = |pat: &str| lines.iter().any(|l| l.contains(pat));
    assert!(
        has("[3/5] chassis hv1, hv2 up"),
        "ovnk-l2 by default:\n{out}"
    );
    for (r, ch) in [("GR_hv1", "hv1"), ("GR_hv2", "hv2")] {
        let l = lines
            .iter()
            .find(|l| l.trim_start().starts_with(&format!("{r} asks for zone 0")))
            .unwrap_or_else(|| panic!("no line for {r}:\n{out}"));
        let zone = number_before(l, &format!("on {ch};")).unwrap_or(0);
        assert!(
            zone > 0
                && l.contains(&format!("refused, lr/{r}/snat is zone"))
                && l.contains(&format!("{ch}'s controller says:"))
                && l.contains("never allocates or flushes"),
            "{l}"
        );
        // The preflight warned about the request.
        assert!(
            has(&format!(
                "warning[zone-risk]: router {r} requests conntrack zone 0"
            )),
            "{out}"
        );
    }
    assert!(
        lines
            .iter()
            .any(|l| l.trim_start().starts_with("rebuilt NB and SB")
                && l.contains("every UUID new")
                && l.contains("every controller (hv1, hv2) stopped before and started after")
                && l.contains("while the transfers ran")),
        "{out}"
    );
    let tcp: Vec<&String> = lines
        .iter()
        .filter(|l| l.trim_start().starts_with("tcp "))
        .collect();
    assert_eq!(tcp.len(), 2, "{out}");
    assert!(
        tcp.iter().any(|l| l.contains("through SNAT on GR_hv")),
        "{out}"
    );
    for l in tcp {
        let bytes = number_before(l, "bytes in").unwrap_or(0);
        assert!(
            bytes > 0
                && l.contains(&format!("{bytes} verified"))
                && l.contains("0 segments retransmitted, 0 resets"),
            "{l}"
        );
    }
    for ch in ["hv1", "hv2"] {
        let map = |when: &str| {
            lines
                .iter()
                .find_map(|l| l.trim_start().strip_prefix(&format!("{ch} {when}")))
                .map(|m| m.trim().trim_end_matches(" (identical)").to_string())
                .unwrap_or_else(|| panic!("no {ch} {when} line:\n{out}"))
        };
        let (before, after) = (map("before:"), map("after:"));
        assert!(
            before.contains(&format!("lr/GR_{ch}/snat="))
                && before.split(' ').all(|kv| !kv.ends_with("=0")),
            "{before}"
        );
        assert_eq!(before, after, "{ch}'s zone map changed");
        assert!(has(&format!("{ch} flushes: 0")), "{out}");
    }
}

#[test]
fn snat_exemption_scenario_tells_incident_a() {
    let (code, lines) = run_story(&["--scenario", "snat-exemption"]);
    let out = lines.join("\n");
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(
        lines.last().map(String::as_str),
        Some("story snat-exemption: ok"),
        "{out}"
    );
    assert!(
        lines.iter().any(|l| l.contains("error[snat-internal]")
            && l.contains("GR_node1")
            && l.contains("10.129.0.9")),
        "{out}"
    );
    assert!(
        out.contains("etcd saw 10.6.158.12: refused"),
        "the control case: {out}"
    );
    for form in ["exempted_ext_ips:", "allowed_ext_ips:", "match:"] {
        let i = lines
            .iter()
            .position(|l| l.trim() == form)
            .unwrap_or_else(|| panic!("no {form} section: {out}"));
        let section = lines[i + 1..i + 4].join("\n");
        assert!(
            section.contains("etcd saw 10.129.0.9: complete, 262144 of 262144"),
            "{section}"
        );
        assert!(
            section.contains("outside saw 10.6.158.12: 262144 of 262144"),
            "{section}"
        );
        assert!(
            section.contains("complete, 262144 of 262144 bytes verified at the client"),
            "{section}"
        );
    }
    assert!(
        out.contains(
            "no snat-internal finding with exempted_ext_ips, allowed_ext_ips, match (3 of 3)"
        ),
        "{out}"
    );
}

#[test]
fn ovnk_l2_default_scenario_snats_to_each_node() {
    let (code, lines) = run_story(&["--topology", "ovnk-l2", "--scenario", "default"]);
    let out = lines.join("\n");
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(
        lines.last().map(String::as_str),
        Some("story default: ok"),
        "{out}"
    );
    // The design: no gateway chassis, one switch, a gateway router per node.
    for want in [
        "[2/5] northd compiled",
        "(3 switches, 2 routers)",
        "[3/5] chassis hv1, hv2 up",
        "switch l2 10.100.0.0/24",
        "router GR_hv1 (options:chassis=hv1)",
        "router GR_hv2 (options:chassis=hv2)",
        "snat 10.100.0.0/24 -> 172.16.0.12 (hv2's own address)",
    ] {
        assert!(out.contains(want), "no {want:?}:\n{out}");
    }
    assert!(!out.contains("gw1"), "no gateway chassis:\n{out}");
    let ping = lines
        .iter()
        .find(|l| {
            l.trim_start()
                .starts_with("ping vm1 (10.100.0.11, hv1) -> vm2 ")
        })
        .unwrap_or_else(|| panic!("no ping across chassis:\n{out}"));
    assert!(ping.contains("3/3 answered"), "{ping}");
    let tcp: Vec<&String> = lines
        .iter()
        .filter(|l| l.trim_start().starts_with("tcp "))
        .collect();
    assert_eq!(tcp.len(), 3, "{out}");
    for l in &tcp {
        let bytes = number_before(l, "bytes in").unwrap_or(0);
        assert!(bytes > 0, "no bytes moved: {l}");
        assert_eq!(number_before(l, "verified"), Some(bytes), "{l}");
    }
    // Each node's router SNATs to that node's own address, and the external host saw it.
    for (router, node_ip) in [("GR_hv1", "172.16.0.11"), ("GR_hv2", "172.16.0.12")] {
        let l = tcp
            .iter()
            .find(|l| l.contains(&format!("through SNAT on {router} ")))
            .unwrap_or_else(|| panic!("no transfer through {router}:\n{out}"));
        assert!(
            l.ends_with(&format!("the external host saw source {node_ip}")),
            "{l}"
        );
    }
}

#[test]
fn ovnk_l2_live_migration_scenario_breaks_the_download() {
    let (code, lines) = run_story(&["--topology", "ovnk-l2", "--scenario", "live-migration"]);
    let out = lines.join("\n");
    assert_eq!(
        code,
        Some(1),
        "the story fails on ovnk-l2, as incident C did:\n{out}"
    );
    let verdict = lines.last().map_or("", String::as_str);
    assert!(
        verdict.starts_with("story live-migration: FAILED (the download "),
        "{out}"
    );
    // No floating IP in this design: the external host first sees hv1's node address.
    assert!(out.contains("cms: no floating IP"), "{out}");
    assert!(!out.contains("dnat_and_snat"), "{out}");
    assert!(out.contains("ext1 sees vm1 as 172.16.0.11:"), "{out}");
    let migration = lines
        .iter()
        .find(|l| l.trim_start().starts_with("migration 1: vm1 hv1 -> hv2"))
        .unwrap_or_else(|| panic!("no first migration:\n{out}"));
    assert!(migration.ends_with("; completed"), "{migration}");
    // The download's line says how it broke: reset, and vm1's segments reaching the external
    // host from hv2's node address after the migration to hv2.
    let download = lines
        .iter()
        .find(|l| l.trim_start().starts_with("download: "))
        .unwrap_or_else(|| panic!("no download results:\n{out}"))
        .trim();
    assert!(download.contains("(reset)"), "{download}");
    assert!(
        download.contains("ext1 saw 172.16.0.11:")
            && download.contains("after migration 1 (to hv2) segments from 172.16.0.12:")
            && download.contains("(hv2's node address)"),
        "{download}"
    );
    assert!(
        verdict.contains("from 172.16.0.12:") && verdict.contains("reset"),
        "{verdict}"
    );
    assert!(out.contains("expected on ovnk-l2"), "{out}");
    // What the design keeps: the east-west stream on l2, whose conntrack state moved.
    let east_west = lines
        .iter()
        .find(|l| l.trim_start().starts_with("east-west: "))
        .unwrap_or_else(|| panic!("no east-west results:\n{out}"));
    assert!(
        east_west.contains(" 0 resets (stopped)") && east_west.ends_with(" throughout"),
        "{east_west}"
    );
}

#[test]
fn upgrade_scenario_keeps_tcp_through_the_security_group() {
    let (code, lines) = run_story(&["--scenario", "upgrade"]);
    let out = lines.join("\n");
    assert_eq!(code, Some(0), "{out}");
    assert!(lines.iter().any(|l| l == "story upgrade: ok"), "{out}");
    let steps: Vec<&str> = lines
        .iter()
        .map(|l| l.trim_start())
        .filter(|l| l.contains("; SB form "))
        .collect();
    let names: Vec<&str> = steps
        .iter()
        .map(|l| l.split(": advertised").next().unwrap_or(""))
        .collect();
    assert_eq!(
        names,
        [
            "start: every controller at hf-1",
            "ignore_chassis_features=true",
            "ignore_chassis_features removed",
            "hv1 at hf-2",
            "hv2 at hf-2",
            "gw1 at hf-2",
            "northd restarted"
        ],
        "{out}"
    );
    let forms: Vec<&str> = steps
        .iter()
        .map(|l| {
            l.split("; SB form ")
                .nth(1)
                .unwrap_or("")
                .get(..4)
                .unwrap_or("")
        })
        .collect();
    assert_eq!(
        forms,
        ["hf-1", "hf-2", "hf-1", "hf-1", "hf-1", "hf-2", "hf-2"],
        "{out}"
    );
    for (i, l) in steps.iter().enumerate() {
        assert!(l.contains("; resets 0; retransmitted 0; "), "{l}");
        if i == 1 {
            // Forced: every chassis reports errors, all on their last good flows.
            assert!(!l.contains("parse errors 0;"), "{l}");
            for c in ["hv1", "hv2", "gw1"] {
                assert!(l.contains(&format!("{c}: ")), "{l}");
            }
            assert_eq!(l.matches(" 0 failed closed").count(), 3, "{l}");
        } else {
            assert!(l.contains("parse errors 0;"), "{l}");
        }
    }
    // The preflight names every hf-1 chassis while the newer form is forced.
    let check = lines
        .iter()
        .find(|l| l.trim_start().starts_with("holdfast check: "))
        .unwrap_or_else(|| panic!("no holdfast check line:\n{out}"));
    assert!(check.ends_with("naming hv1, hv2, gw1"), "{check}");
    let result = lines
        .iter()
        .find(|l| l.trim_start().starts_with("vm2-vm1: "))
        .unwrap_or_else(|| panic!("no stream result:\n{out}"));
    let bytes = number_before(result, "bytes,").unwrap_or(0);
    assert!(bytes > 1_000_000, "{result}");
    assert_eq!(number_before(result, "verified"), Some(bytes), "{result}");
    assert!(
        result.ends_with(" 0 retransmitted, 0 resets (stopped)"),
        "{result}"
    );
}

#[test]
fn bad_arguments_are_refused_by_name() {
    let run = |args: &[&str]| {
        let out = common::run(
            Command::new(common::holdfast()).arg("sandbox").args(args),
            Duration::from_secs(30),
        );
        assert!(!out.status.success(), "{args:?} was accepted");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let e = run(&["--scenario", "nope"]);
    assert!(
        e.contains("nope")
            && e.contains("default")
            && e.contains("restarts")
            && e.contains("rebuild")
            && e.contains("live-migration")
            && e.contains("snat-exemption")
            && e.contains("upgrade")
            && e.contains("db-rebuild"),
        "{e}"
    );
    let e = run(&["--topology", "ring"]);
    assert!(
        e.contains("ring") && e.contains("default") && e.contains("ovnk-l2"),
        "{e}"
    );
    let e = run(&["--topology", "ovnk-l2", "--chassis", "1"]);
    assert!(e.contains("--chassis"), "{e}");
    let e = run(&["--nb-port", "7001", "--sb-port", "7001"]);
    assert!(e.contains("--nb-port") && e.contains("--sb-port"), "{e}");
    let e = run(&["--chassis", "1"]);
    assert!(e.contains("--chassis"), "{e}");
    // A story in its own cluster takes no topology.
    let e = run(&["--scenario", "snat-exemption", "--topology", "ovnk-l2"]);
    assert!(
        e.contains("--topology") && e.contains("snat-exemption"),
        "{e}"
    );
    let e = run(&["--scenario", "snat-exemption", "--chassis", "4"]);
    assert!(
        e.contains("--chassis") && e.contains("snat-exemption"),
        "{e}"
    );
    // A story that exits has nothing to control.
    let e = run(&["--scenario", "default", "--unixctl", "/tmp/never.ctl"]);
    assert!(e.contains("--unixctl") && e.contains("--scenario"), "{e}");
}

/// Two runs with one seed print the same story, line for line (everything but the ports): the
/// run is reproducible (no wall clock, no hash order in what it prints). The printed story does
/// not depend on the seed itself (the links are lossless and jitter-free, ISNs and ephemeral
/// ports are not printed; seeds 5 and 6 print the same lines), so this is no check that the seed
/// reaches the world: hf-sim's `same_seed_same_record` (tests/world.rs) checks that.
#[test]
fn two_runs_print_the_same_story() {
    let story = |seed: &str| {
        let out = common::run(
            Command::new(common::holdfast()).args([
                "sandbox",
                "--scenario",
                "default",
                "--nb-port",
                "0",
                "--sb-port",
                "0",
                "--seed",
                seed,
            ]),
            Duration::from_secs(300),
        );
        assert!(out.status.success(), "seed {seed}: {out:?}");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.contains("listening on"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let a = story("5");
    assert!(a.iter().any(|l| l == "story default: ok"), "{a:?}");
    assert_eq!(a, story("5"));
}

/// `ovs-appctl -t SOCKET ARGS...`: (exit status, stdout, stderr).
fn appctl(socket: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let out = common::run(
        Command::new("ovs-appctl").arg("-t").arg(socket).args(args),
        Duration::from_secs(60),
    );
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `ovs-appctl` that must succeed; its stdout.
fn appctl_ok(socket: &std::path::Path, args: &[&str]) -> String {
    let (code, out, err) = appctl(socket, args);
    assert_eq!(code, 0, "ovs-appctl {args:?}: {err}{out}");
    out
}

/// `sandbox/report --format json`, parsed.
fn report(socket: &std::path::Path) -> serde_json::Value {
    let text = appctl_ok(socket, &["sandbox/report", "--format", "json"]);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// Every stream's `bytes` (by name), from a report.
fn bytes_by_stream(r: &serde_json::Value) -> Vec<(String, u64)> {
    r["streams"]
        .as_array()
        .unwrap_or_else(|| panic!("no streams list: {r}"))
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap_or("?").to_string(),
                s["bytes"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

/// Polls the report until every stream moved more than `past` bytes (per stream, by name),
/// or panics after a minute of wall time with the last report.
fn wait_progress(socket: &std::path::Path, past: &[(String, u64)]) -> Vec<(String, u64)> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = report(socket);
        let now = bytes_by_stream(&r);
        let moved = now.len() == past.len()
            && now
                .iter()
                .zip(past)
                .all(|((n, b), (pn, pb))| n == pn && b > pb);
        if moved {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "the streams did not move past {past:?}: {r:#}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn control_socket_drives_the_sandbox() {
    if !common::require("sandbox control socket", &["ovs-appctl"]) {
        return;
    }
    let dir = tempfile::tempdir().expect("temporary directory");
    let socket = dir.path().join("sandbox.ctl");
    let socket_arg = socket.to_string_lossy().into_owned();
    let mut sb = Sandbox::start(&["--nb-port", "0", "--sb-port", "0", "--unixctl", &socket_arg]);
    let line = sb.wait_line("naming the control socket", Duration::from_secs(60), |l| {
        l.starts_with("control socket: ")
    });
    assert!(line.contains(&socket_arg), "{line}");
    sb.wait_line("saying the sandbox is up", Duration::from_secs(300), |l| {
        l.starts_with("sandbox up:")
    });

    let list = appctl_ok(&socket, &["list-commands"]);
    for c in [
        "sandbox/ping",
        "sandbox/stream",
        "sandbox/stop",
        "sandbox/restart",
        "sandbox/handoff",
        "sandbox/rebuild",
        "sandbox/migrate",
        "sandbox/report",
    ] {
        assert!(list.contains(c), "{c} not listed:\n{list}");
    }
    let ping = appctl_ok(&socket, &["sandbox/ping", "vm1", "vm4"]);
    assert!(
        ping.starts_with("ping vm1 (10.0.1.11, hv1) -> vm4 (10.0.2.14, hv2): 3/3 answered"),
        "{ping}"
    );
    let ping = appctl_ok(&socket, &["sandbox/ping", "vm2", "172.16.0.10"]);
    assert!(ping.contains("3/3 answered"), "{ping}");

    for args in [
        &["sandbox/stream", "t1", "vm1", "vm4", "tcp"][..],
        &["sandbox/stream", "t2", "vm2", "ext1", "tcp", "--download"],
        &["sandbox/stream", "u1", "vm3", "ext1:7000", "udp"],
    ] {
        let out = appctl_ok(&socket, args);
        assert!(
            out.starts_with(&format!("stream {} started", args[1])),
            "{out}"
        );
    }
    let names: Vec<(String, u64)> = ["t1", "t2", "u1"]
        .iter()
        .map(|n| (n.to_string(), 0))
        .collect();
    let mut seen = wait_progress(&socket, &names);

    for (args, says) in [
        (
            &["sandbox/restart", "controller", "hv1"][..],
            "controller hv1 restarted",
        ),
        (
            &["sandbox/handoff", "datapath", "hv2"],
            "datapath hv2 handed its state",
        ),
        (&["sandbox/restart", "northd"], "northd restarted"),
        (&["sandbox/rebuild"], "rebuilt NB and SB"),
    ] {
        let out = appctl_ok(&socket, args);
        assert!(out.contains(says), "{args:?}: {out}");
        // The streams go on after each disruption.
        seen = wait_progress(&socket, &seen);
    }

    for name in ["t1", "t2", "u1"] {
        let out = appctl_ok(&socket, &["sandbox/stop", name]);
        assert!(out.starts_with(&format!("{name} ")), "{out}");
        assert!(out.contains(", stopped: "), "{out}");
    }
    let r = report(&socket);
    assert_eq!(r["migrations"], serde_json::json!([]), "{r:#}");
    let streams = r["streams"].as_array().expect("streams");
    assert_eq!(streams.len(), 3, "{r:#}");
    for s in streams {
        for field in [
            "name",
            "kind",
            "client",
            "server",
            "bytes",
            "verified",
            "max_stall_ms",
            "retransmitted",
            "timeouts",
            "duplicates",
            "resets",
            "lost",
            "peer_saw",
        ] {
            assert!(s.get(field).is_some(), "no {field}: {s:#}");
        }
        let bytes = s["bytes"].as_u64().expect("bytes");
        assert!(bytes > 0, "{s:#}");
        assert_eq!(s["state"], "stopped", "{s:#}");
        assert_eq!(s["resets"], 0, "{s:#}");
        assert!(s["max_stall_ms"].as_f64().is_some(), "{s:#}");
        match s["kind"].as_str() {
            Some("tcp") => {
                assert_eq!(s["verified"].as_u64(), Some(bytes), "{s:#}");
                assert!(s["lost"].is_null(), "{s:#}");
            }
            Some("udp") => assert_eq!(s["lost"], 0, "{s:#}"),
            k => panic!("kind {k:?}: {s:#}"),
        }
        // The external host sees the SNAT address; the others the client's own.
        let saw = s["peer_saw"].as_str().unwrap_or("");
        let want = if s["server"] == "ext1" {
            "172.16.0.100:"
        } else {
            "10.0.1.11:"
        };
        assert!(saw.starts_with(want), "{s:#}");
    }
    let text = appctl_ok(&socket, &["sandbox/report"]);
    assert!(
        text.contains("t1 tcp vm1 -> vm4:5201 upload, stopped: "),
        "{text}"
    );
    assert!(text.contains("migrations: none"), "{text}");

    // Refusals: ovs-appctl exits 2 and prints the server's message.
    for (args, says) in [
        (
            &["sandbox/nope"][..],
            "\"sandbox/nope\" is not a valid command",
        ),
        (&["sandbox/ping", "vm1"], "requires at least 2 arguments"),
        (
            &["sandbox/ping", "vm1", "vm99"],
            "\"vm99\" is neither an IP address nor a host",
        ),
        (
            &["sandbox/restart", "controller", "hv9"],
            "no chassis named \"hv9\"",
        ),
        (
            &["sandbox/restart", "vswitchd"],
            "\"vswitchd\" is no process",
        ),
        (
            &["sandbox/stream", "t1", "vm1", "vm4", "tcp"],
            "\"t1\" exists already",
        ),
        (
            &["sandbox/stream", "t9", "vm1", "vm4", "sctp"],
            "\"sctp\" is no stream kind",
        ),
        (
            &["sandbox/stream", "t9", "vm1", "nowhere", "tcp"],
            "no host named \"nowhere\"",
        ),
        (&["sandbox/stop", "t9"], "no stream \"t9\""),
        (&["sandbox/stop", "t1"], "stream t1 is stopped already"),
        (&["sandbox/report", "--format", "xml"], "--format \"xml\""),
        (
            &["sandbox/migrate", "vm1", "hv1"],
            "vm1 already runs on hv1",
        ),
        (
            &["sandbox/migrate", "ext1", "hv2"],
            "ext1 is an external host on a provider network, not a VM",
        ),
        (
            &["sandbox/migrate", "vm1", "hv9"],
            "no chassis named \"hv9\"",
        ),
    ] {
        let (code, out, err) = appctl(&socket, args);
        assert_eq!(code, 2, "{args:?} exit {code}: {out}{err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }

    appctl_ok(&socket, &["exit"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = sb.child.try_wait().expect("wait") {
            break s;
        }
        assert!(Instant::now() < deadline, "the sandbox did not exit");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    assert!(!socket.exists(), "the socket was left behind");
}

/// Polls the report until the first migration's outcome is `completed` (or panics after a
/// minute of wall time, or when it ends otherwise); the report.
fn wait_migration_completed(socket: &std::path::Path) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = report(socket);
        let outcome = r["migrations"][0]["outcome"]
            .as_str()
            .unwrap_or("")
            .to_string();
        if outcome == "completed" {
            return r;
        }
        assert!(
            !outcome.starts_with("aborted") && !outcome.starts_with("completed-"),
            "the migration ended {outcome:?}: {r:#}"
        );
        assert!(
            Instant::now() < deadline,
            "the migration did not complete: {r:#}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn control_socket_migrates_a_vm() {
    if !common::require("sandbox migration", &["ovs-appctl", "ovn-nbctl"]) {
        return;
    }
    let dir = tempfile::tempdir().expect("temporary directory");
    let socket = dir.path().join("sandbox.ctl");
    let socket_arg = socket.to_string_lossy().into_owned();
    let mut sb = Sandbox::start(&["--nb-port", "0", "--sb-port", "0", "--unixctl", &socket_arg]);
    let listening = sb.wait_line("listening", Duration::from_secs(60), |l| {
        l.contains("databases listening on")
    });
    let (nb_port, _) = ports(&listening);
    sb.wait_line("saying the sandbox is up", Duration::from_secs(300), |l| {
        l.starts_with("sandbox up:")
    });
    let nbdb = format!("--db=tcp:127.0.0.1:{nb_port}");
    let nbctl = |args: &[&str]| {
        common::run_ok(
            Command::new("ovn-nbctl")
                .args([nbdb.as_str(), "--timeout=60"])
                .args(args),
        )
    };

    // The CMS gives vm1 a security group and its own egress address.
    nbctl(&[
        "--wait=hv",
        "acl-add",
        "ls1",
        "from-lport",
        "1002",
        "inport == \"vm1\" && ip4",
        "allow-related",
        "--",
        "acl-add",
        "ls1",
        "from-lport",
        "1001",
        "inport == \"vm1\" && ip",
        "drop",
        "--",
        "acl-add",
        "ls1",
        "to-lport",
        "1001",
        "outport == \"vm1\" && ip",
        "drop",
        "--",
        "lr-nat-add",
        "lr0",
        "dnat_and_snat",
        "172.16.0.50",
        "10.0.1.11",
        "vm1",
        "02:00:00:00:ee:01",
    ]);
    for dst in ["ext1", "vm4"] {
        let ping = appctl_ok(&socket, &["sandbox/ping", "vm1", dst]);
        assert!(ping.contains("answered"), "{ping}");
    }
    for args in [
        &[
            "sandbox/stream",
            "down",
            "vm1",
            "ext1:80",
            "tcp",
            "--download",
        ][..],
        &["sandbox/stream", "ew", "vm1", "vm4", "tcp"],
    ] {
        let out = appctl_ok(&socket, args);
        assert!(
            out.starts_with(&format!("stream {} started", args[1])),
            "{out}"
        );
    }
    let names: Vec<(String, u64)> = ["down", "ew"].iter().map(|n| (n.to_string(), 0)).collect();
    let mut seen = wait_progress(&socket, &names);
    let before = report(&socket);
    let saw: Vec<String> = before["streams"]
        .as_array()
        .expect("streams")
        .iter()
        .map(|s| s["peer_saw"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(saw[0].starts_with("172.16.0.50:"), "{before:#}");

    // The CMS's first step, the hypervisor's migration, the CMS's last step.
    nbctl(&[
        "--wait=hv",
        "lsp-set-options",
        "vm1",
        "requested-chassis=hv1,hv2",
        "activation-strategy=rarp",
    ]);
    let out = appctl_ok(&socket, &["sandbox/migrate", "vm1", "hv2", "--pause", "30"]);
    assert!(out.starts_with("migrating vm1 to hv2"), "{out}");
    wait_migration_completed(&socket);
    nbctl(&[
        "--wait=hv",
        "lsp-set-options",
        "vm1",
        "requested-chassis=hv2",
    ]);
    seen = wait_progress(&socket, &seen);
    // vm1 runs on hv2 now; its security group lets it reach out (and nobody else in).
    let ping = appctl_ok(&socket, &["sandbox/ping", "vm1", "vm4"]);
    assert!(
        ping.starts_with("ping vm1 (10.0.1.11, hv2) -> vm4"),
        "{ping}"
    );
    assert!(ping.contains("3/3 answered"), "{ping}");
    let (code, _, err) = appctl(&socket, &["sandbox/ping", "vm4", "vm1"]);
    assert_eq!(code, 2, "the security group let a ping in: {err}");
    assert!(err.contains("0/3 answered"), "{err}");

    // The destination's controller restarts and its datapath hands its state over.
    for (args, says) in [
        (
            &["sandbox/restart", "controller", "hv2"][..],
            "controller hv2 restarted",
        ),
        (
            &["sandbox/handoff", "datapath", "hv2"],
            "datapath hv2 handed its state",
        ),
    ] {
        let out = appctl_ok(&socket, args);
        assert!(out.contains(says), "{args:?}: {out}");
        seen = wait_progress(&socket, &seen);
    }

    for name in ["down", "ew"] {
        let out = appctl_ok(&socket, &["sandbox/stop", name]);
        assert!(out.contains(", stopped: "), "{out}");
    }
    let r = report(&socket);
    let migrations = r["migrations"].as_array().expect("migrations");
    assert_eq!(migrations.len(), 1, "{r:#}");
    let m = &migrations[0];
    assert_eq!(
        (&m["host"], &m["from"], &m["to"]),
        (&"vm1".into(), &"hv1".into(), &"hv2".into()),
        "{m:#}"
    );
    assert_eq!(m["outcome"], "completed", "{m:#}");
    assert_eq!(m["pause_ms"].as_f64(), Some(30.0), "{m:#}");
    assert!(m["entries_moved"].as_u64().unwrap_or(0) > 0, "{m:#}");
    assert!(m["bytes_moved"].as_u64().unwrap_or(0) > 0, "{m:#}");
    for (s, saw) in r["streams"].as_array().expect("streams").iter().zip(&saw) {
        let bytes = s["bytes"].as_u64().expect("bytes");
        assert!(bytes > 0, "{s:#}");
        assert_eq!(s["verified"].as_u64(), Some(bytes), "{s:#}");
        assert_eq!(s["state"], "stopped", "{s:#}");
        assert_eq!(s["resets"], 0, "{s:#}");
        assert_eq!(s["peer_saw"].as_str(), Some(saw.as_str()), "{s:#}");
    }
    let text = appctl_ok(&socket, &["sandbox/report"]);
    assert!(
        text.contains("vm1 hv1 -> hv2: paused 30.00 ms;") && text.contains("; completed"),
        "{text}"
    );
    appctl_ok(&socket, &["exit"]);
}
