//! Multicast snooping (`hf_datapath::snoop`) fed with what the Linux kernel sends, an
//! implementation that shares nothing with holdfast: a namespace `h` joins and leaves groups
//! through sockets (`IP_ADD_MEMBERSHIP`, `IPV6_JOIN_GROUP`, closed to leave), first with the
//! kernel's defaults (IGMPv3 and MLDv2 reports: `CHANGE_TO_EXCLUDE` records to join,
//! `CHANGE_TO_INCLUDE` with no source to leave), then forced to IGMPv2 and MLDv1
//! (`force_igmp_version=2`, `force_mld_version=1`: reports, leaves to 224.0.0.2, dones).
//! tcpdump captures the frames on the other end of the veth; each goes through the snooper in
//! order. Every frame must parse and verify (no error), each group must be joined while the
//! socket holds it and gone after the leave.

use std::collections::BTreeSet;
use std::time::Duration;

use hf_datapath::snoop::{McastCfgMsg, Snooper};
use hf_testkit::{Lab, require_root, require_tools};

/// The Python program run in `h`: join, wait, leave, wait, per phase.
const PROGRAM: &str = r#"
import socket, struct, sys, time
g4, g6, ifname = sys.argv[1], sys.argv[2], sys.argv[3]
idx = socket.if_nametoindex(ifname)
s4 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s4.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP,
              socket.inet_aton(g4) + socket.inet_aton("0.0.0.0") + struct.pack("@i", idx))
s6 = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_JOIN_GROUP,
              socket.inet_pton(socket.AF_INET6, g6) + struct.pack("@I", idx))
time.sleep(1.5)
s4.close()
s6.close()
time.sleep(1.5)
"#;

/// Reads a classic pcap file's frames.
fn read_pcap(b: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    if b.len() < 24 {
        return out;
    }
    let le = b[..4] == [0xd4, 0xc3, 0xb2, 0xa1];
    let u32_at = |at: usize| {
        let w = [b[at], b[at + 1], b[at + 2], b[at + 3]];
        if le {
            u32::from_le_bytes(w)
        } else {
            u32::from_be_bytes(w)
        }
    };
    let mut at = 24;
    while at + 16 <= b.len() {
        let n = u32_at(at + 8) as usize;
        at += 16;
        if at + n > b.len() {
            break;
        }
        out.push(b[at..at + n].to_vec());
        at += n;
    }
    out
}

#[test]
fn the_kernels_igmp_and_mld_reports_join_and_leave() {
    let t = "the_kernels_igmp_and_mld_reports_join_and_leave";
    if !require_root(t, "network namespaces") || !require_tools(t, &["ip", "tcpdump", "python3"]) {
        return;
    }
    let lab = Lab::new().expect("lab");
    let h = lab.netns("h").expect("netns h");
    let sw = lab.netns("sw").expect("netns sw");
    lab.veth((&h, "eth0"), (&sw, "eth0")).expect("veth");
    h.addr_add("eth0", "192.0.2.1/24").expect("addr");
    sw.addr_add("eth0", "192.0.2.2/24").expect("addr");
    let pcap = lab.dir().join("igmp.pcap");
    let mut cap = sw
        .spawn_command("tcpdump", {
            let mut c = sw.command("tcpdump");
            c.args(["-i", "eth0", "-U", "-w"])
                .arg(&pcap)
                .args(["igmp or ip6"]);
            c
        })
        .expect("tcpdump");
    std::thread::sleep(Duration::from_secs(1));
    let phases = [
        ("239.7.7.7", "ff0e::77", None),
        ("239.8.8.8", "ff0e::88", Some(())),
    ];
    for (g4, g6, force_old) in phases {
        if force_old.is_some() {
            h.sysctl("net.ipv4.conf.eth0.force_igmp_version", "2")
                .expect("sysctl");
            h.sysctl("net.ipv6.conf.eth0.force_mld_version", "1")
                .expect("sysctl");
        }
        let out = h
            .output(
                &["python3", "-c", PROGRAM, g4, g6, "eth0"],
                Duration::from_secs(20),
            )
            .expect("python3");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    std::thread::sleep(Duration::from_millis(500));
    cap.stop();
    let frames = read_pcap(&std::fs::read(&pcap).expect("pcap"));
    assert!(frames.len() >= 8, "captured {} frames", frames.len());

    let mut s = Snooper::default();
    s.set(
        vec![McastCfgMsg {
            datapath: "sw0".into(),
            table_size: 2048,
            idle_timeout: 300,
            query_interval: 150,
            query_max_resp: 1,
            ports: vec!["h".into()],
            ..Default::default()
        }],
        Duration::ZERO,
    );
    let ours: BTreeSet<&str> = ["239.7.7.7", "ff0e::77", "239.8.8.8", "ff0e::88"].into();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut kinds: BTreeSet<String> = BTreeSet::new();
    for (i, f) in frames.iter().enumerate() {
        // Neighbour discovery is ICMPv6 too, but not MLD: skipped by type.
        let ty = if f.len() > 14 + 40 + 8 && f[12..14] == [0x86, 0xdd] {
            // After the hop-by-hop header (MLD always carries one).
            (f[20] == 0).then(|| f[14 + 40 + 8])
        } else {
            f.get(14 + 24).copied()
        };
        kinds.insert(format!("{:?}", ty));
        if f[12..14] == [0x86, 0xdd] && !matches!(ty, Some(130..=132 | 143)) {
            continue;
        }
        let r = s.handle("sw0", "h", f, Duration::from_millis(i as u64));
        assert!(r.is_ok(), "frame {i} ({} bytes): {r:?}\n{f:02x?}", f.len());
        for g in s.groups().iter().flat_map(|d| d.groups.iter()) {
            if ours.contains(g.address.as_str()) {
                assert_eq!(g.ports, vec!["h".to_string()]);
                seen.insert(g.address.clone());
            }
        }
    }
    assert_eq!(
        seen.iter().map(String::as_str).collect::<BTreeSet<_>>(),
        ours,
        "groups joined (messages {kinds:?})"
    );
    let left: Vec<String> = s
        .groups()
        .iter()
        .flat_map(|d| d.groups.iter())
        .filter(|g| ours.contains(g.address.as_str()))
        .map(|g| g.address.clone())
        .collect();
    assert!(left.is_empty(), "still joined after the leaves: {left:?}");
    assert_eq!(s.bad, 0);
    eprintln!(
        "kernel IGMP/MLD: {} frames, message types {kinds:?}, groups joined and left: {seen:?}",
        frames.len()
    );
}
