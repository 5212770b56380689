//! ACL log lines against real ovn-controller 23.03 (issue 21: "ACL log lines parsed by the
//! same regex that parses ovn-controller's", "same fields, same format"): real ovn-northd
//! compiles a switch with logged ACLs (named and unnamed, drop, reject and allow-related, from-
//! and to-lport, severities), a real chassis (ovs-vswitchd's dummy datapath) runs them, and
//! packets enter its VIF with `netdev-dummy/receive`. Each `acl_log` line ovn-controller writes
//! must equal, after its `acl_log(...)|INFO|` prefix, the line holdfast's chassis (translation,
//! program and datapath in process, on the same SB) writes for the same packet, which must be
//! the case's expected line; and both must read the same through
//! `hf_testkit::acl_log::parse` (OVN's `check_acl_log.py` reading).
//!
//! IPv4 only: IPv6 datagrams injected this way were conntrack-invalid in ovs-vswitchd's
//! userspace datapath and never reached the ACL (the IPv6 text is checked against OVS's
//! `flow_format` by `tests/datapath/acl_log_format.rs`).

use std::process::Command;
use std::time::{Duration, Instant};

use hf_testkit::ovn::{ChassisOpts, RealChassis, in_rundir};

use crate::common::run_ok;
use crate::oracle::{Backend, Env};

const M1: [u8; 6] = [2, 0, 0, 0, 0, 1];
const M2: [u8; 6] = [2, 0, 0, 0, 0, 2];

fn nbctl(env: &Env, args: &[&str]) {
    run_ok(
        Command::new("ovn-nbctl")
            .arg(format!("--db={}", env.nb))
            .args(args),
    );
}

fn csum(b: &[u8]) -> u16 {
    let mut s: u32 = 0;
    for c in b.chunks(2) {
        s += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// `l4` with its checksum (at `at`) computed over the pseudo-header `pseudo` (conntrack
/// marks a TCP segment or an IPv6 UDP datagram with a bad checksum invalid).
fn with_csum(pseudo: &[u8], l4: &[u8], at: usize) -> Vec<u8> {
    let mut l = l4.to_vec();
    l[at] = 0;
    l[at + 1] = 0;
    let c = csum(&[pseudo, &l].concat());
    l[at..at + 2].copy_from_slice(&c.to_be_bytes());
    l
}

fn ipv4(proto: u8, l4: &[u8], ttl: u8) -> Vec<u8> {
    let mut f = M2.to_vec();
    f.extend(M1);
    f.extend([0x08, 0x00]);
    let mut h = vec![
        0x45, 0, 0, 0, 0, 7, 0x40, 0, ttl, proto, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ];
    h[2..4].copy_from_slice(&((20 + l4.len()) as u16).to_be_bytes());
    let c = csum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend(h);
    f.extend(l4);
    f
}

fn udp(dport: u16) -> Vec<u8> {
    ipv4(
        17,
        &[
            &[0x30, 0x39][..],
            &dport.to_be_bytes(),
            &[0, 12, 0, 0],
            b"ping",
        ]
        .concat(),
        64,
    )
}

fn tcp_syn(dport: u16) -> Vec<u8> {
    let mut t = vec![0x30, 0x39];
    t.extend(dport.to_be_bytes());
    t.extend([0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0]);
    let pseudo = [10, 0, 0, 1, 10, 0, 0, 2, 0, 6, 0, 20];
    ipv4(6, &with_csum(&pseudo, &t, 16), 64)
}

fn icmp_echo() -> Vec<u8> {
    ipv4(1, &[8, 0, 0xf7, 0xfe, 0, 1, 0, 0], 64)
}

/// (frame, ACL name, verdict, severity, direction).
type Case<'a> = (Vec<u8>, Option<&'a str>, &'a str, &'a str, &'a str);

/// holdfast's chassis `hv1` on the same SB, in process (translation, program, datapath with
/// the two VIFs); with no controller attached its datapath writes the `acl_log` lines to its
/// own log as `acl_log: LINE`.
fn holdfast_chassis(sb_remote: &str) -> hf_datapath::Datapath {
    use hf_controller::program_msg::{NoLastGood, program_msg};
    use hf_controller::translate::{Extra, TranslateOptions, translate_with};
    let sb = crate::flows::load_sb(sb_remote);
    let t = translate_with(
        &sb,
        &TranslateOptions {
            chassis: Some("hv1".into()),
        },
        &Extra {
            only_needed: true,
            ..Extra::default()
        },
    );
    let build = program_msg(
        &t,
        "hv1",
        1,
        0,
        &std::collections::BTreeMap::new(),
        &NoLastGood,
    );
    let mut dp = hf_datapath::Datapath::new(hf_datapath::DatapathConfig::new(
        "hv1",
        "127.0.0.21".parse().unwrap(),
    ));
    for p in ["vm1", "vm2"] {
        dp.add_port(p, None);
    }
    let errs = dp.install(build.msg).expect("install");
    assert!(errs.is_empty(), "flow errors: {errs:?}");
    dp
}

/// The `acl_log` lines holdfast's datapath writes for `frame` entering `vm1`.
fn holdfast_lines(dp: &mut hf_datapath::Datapath, frame: &[u8], at: Duration) -> Vec<String> {
    dp.handle_port_frame("vm1", frame, at);
    while dp.poll_transmit().is_some() {}
    std::iter::from_fn(|| dp.poll_log())
        .filter_map(|(_, l)| l.strip_prefix("acl_log: ").map(str::to_string))
        .collect()
}

/// The `acl_log` lines of ovn-controller's log, each after its `|INFO|`.
fn real_lines(ch: &RealChassis) -> Vec<String> {
    ch.controller_log()
        .lines()
        .filter(|l| l.contains("|acl_log("))
        .filter_map(|l| l.split_once("|INFO|").map(|(_, d)| d.to_string()))
        .collect()
}

#[test]
fn real_controller_acl_log_lines_equal_holdfast() {
    if !crate::common::require("real_controller_acl_log_lines_equal_holdfast", crate::TOOLS) {
        return;
    }
    let env = Env::start(Backend::OvsdbServer);
    nbctl(&env, &["ls-add", "sw0"]);
    for (p, mac, ip) in [
        ("vm1", "02:00:00:00:00:01", "10.0.0.1 fd00::1"),
        ("vm2", "02:00:00:00:00:02", "10.0.0.2 fd00::2"),
    ] {
        nbctl(&env, &["lsp-add", "sw0", p]);
        nbctl(&env, &["lsp-set-addresses", p, &format!("{mac} {ip}")]);
    }
    let acls: &[&[&str]] = &[
        &[
            "--log",
            "--name=udp-drop",
            "--severity=alert",
            "acl-add",
            "sw0",
            "from-lport",
            "1001",
            "udp.dst == 7",
            "drop",
        ],
        &[
            "--log",
            "--name=tcp-80",
            "acl-add",
            "sw0",
            "to-lport",
            "1002",
            "tcp.dst == 80",
            "allow-related",
        ],
        &[
            "--log",
            "--name=no-ping",
            "--severity=notice",
            "acl-add",
            "sw0",
            "from-lport",
            "1003",
            "icmp4",
            "reject",
        ],
        &[
            "--log",
            "acl-add",
            "sw0",
            "from-lport",
            "1004",
            "udp.dst == 9",
            "drop",
        ],
        &[
            "--log",
            "--name=tcp-81",
            "--severity=debug",
            "acl-add",
            "sw0",
            "from-lport",
            "1005",
            "tcp.dst == 81",
            "drop",
        ],
    ];
    for a in acls {
        nbctl(&env, a);
    }
    let vifs = ["vm1".to_string(), "vm2".to_string()];
    let ch = RealChassis::start(
        &env.dir,
        &ChassisOpts {
            name: "hv1",
            sb: &env.sb,
            encap_ip: "127.0.0.21",
            vifs: &vifs,
        },
    )
    .unwrap();
    // Both ports claimed by the real chassis before holdfast's translation reads SB for hv1
    // (`--wait=hv` alone can return before the claims land on a loaded machine: vm1 then is
    // not local to holdfast's chassis and nothing is logged).
    for p in &vifs {
        crate::wait_for(
            &format!("{p} up"),
            Duration::from_secs(60),
            || ch.controller_log(),
            || crate::find(&env.sb, "Port_Binding", "up", &format!("logical_port={p}")) == "true",
        );
    }
    nbctl(&env, &["--timeout=60", "--wait=hv", "sync"]);
    // (frame, ACL name, verdict, severity, direction): each enters vm1.
    let cases: Vec<Case<'_>> = vec![
        (udp(7), Some("udp-drop"), "drop", "alert", "from-lport"),
        (tcp_syn(80), Some("tcp-80"), "allow", "info", "to-lport"),
        (
            icmp_echo(),
            Some("no-ping"),
            "reject",
            "notice",
            "from-lport",
        ),
        (udp(9), None, "drop", "info", "from-lport"),
        (tcp_syn(81), Some("tcp-81"), "drop", "debug", "from-lport"),
    ];
    let ctl = ch.dir().join("ovs-vswitchd.ctl");
    let mut ours = holdfast_chassis(&env.sb);
    let mut compared = 0;
    for (i, (frame, name, verdict, severity, direction)) in cases.iter().enumerate() {
        let hex: String = frame.iter().map(|b| format!("{b:02x}")).collect();
        // holdfast's chassis, on the same packet: exactly one line, the one this case is.
        let mine = holdfast_lines(&mut ours, frame, Duration::from_secs(1 + i as u64));
        assert_eq!(
            mine,
            [hf_datapath::acl_log::line(
                *name, verdict, severity, direction, frame
            )],
            "holdfast's chassis"
        );
        let want = mine[0].clone();
        // One case at a time. A packet-in is best effort in OVS (one sent while pinctrl or
        // the datapath flow is not ready is lost), so the packet is sent again each second
        // until a line comes; every line that comes must be this case's.
        let before = real_lines(&ch).len();
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut sent = 0;
        while real_lines(&ch).len() == before && Instant::now() < deadline {
            run_ok(
                in_rundir(&mut Command::new("ovs-appctl"), ch.dir())
                    .arg("-t")
                    .arg(&ctl)
                    .args(["netdev-dummy/receive", "vm1", &hex]),
            );
            sent += 1;
            let until = Instant::now() + Duration::from_secs(1);
            while real_lines(&ch).len() == before && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        std::thread::sleep(Duration::from_millis(200));
        let got: Vec<String> = real_lines(&ch).split_off(before);
        eprintln!(
            "sent {sent}x: {}",
            got.first().map_or("(nothing)", String::as_str)
        );
        assert!(
            !got.is_empty(),
            "ovn-controller wrote no acl_log line for {want} ({sent} sends):\n{}",
            ch.controller_log()
        );
        for g in &got {
            assert_eq!(
                g, &want,
                "ovn-controller's line (left) and holdfast's (right)"
            );
            assert_eq!(
                hf_testkit::acl_log::parse(g),
                hf_testkit::acl_log::parse(&want)
            );
        }
        compared += 1;
    }
    assert_eq!(compared, cases.len());
}
