//! The NB the meter and CoPP tests add to a generated topology (`copp::extras`): shared by
//! the parity test against real ovn-northd (`northd_parity/copp.rs`) and the real
//! ovn-controller test (`northd_controller.rs`).

use crate::topo::Topology;

/// Every proto OVN 23.03 knows.
const PROTOS: &[&str] = &[
    "arp",
    "arp-resolve",
    "dhcpv4-opts",
    "dhcpv6-opts",
    "dns",
    "event-elb",
    "icmp4-error",
    "icmp6-error",
    "igmp",
    "nd-na",
    "nd-ns",
    "nd-ns-resolve",
    "nd-ra-opts",
    "tcp-reset",
    "reject",
    "bfd",
];

fn cmd(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// What the test adds to a generated topology.
pub fn extras(t: &Topology) -> Vec<Vec<String>> {
    let mut c = vec![
        cmd(&["meter-add", "m-pkt", "drop", "10", "pktps", "5"]),
        cmd(&["meter-add", "m-kbps", "drop", "2000", "kbps", "300"]),
        cmd(&["--fair", "meter-add", "m-fair", "drop", "3", "pktps"]),
    ];
    let meters = ["m-pkt", "m-kbps", "m-fair"];
    for (i, p) in PROTOS.iter().enumerate() {
        c.push(cmd(&["copp-add", "copp0", p, meters[i % meters.len()]]));
    }
    c.push(cmd(&["ls-copp-add", "copp0", "sw0"]));
    c.push(cmd(&["ls-copp-add", "copp0", "ext"]));
    c.push(cmd(&["lr-copp-add", "copp0", "lr0"]));
    if t.n_switches > 1 {
        c.push(cmd(&["copp-add", "copp1", "arp", "m-pkt"]));
        c.push(cmd(&["copp-add", "copp1", "reject", "m-fair"]));
        c.push(cmd(&["copp-add", "copp1", "dhcpv4-opts", "m-none"]));
        c.push(cmd(&["ls-copp-add", "copp1", "sw1"]));
    }
    c.extend([
        cmd(&[
            "--log",
            "--meter=m-fair",
            "--name=fair-drop",
            "--severity=alert",
            "acl-add",
            "sw0",
            "from-lport",
            "1005",
            "tcp.dst == 23",
            "drop",
        ]),
        cmd(&[
            "--log",
            "--meter=m-fair",
            "--name=fair-allow",
            "acl-add",
            "sw0",
            "to-lport",
            "1006",
            "udp.dst == 5353",
            "allow-related",
        ]),
        cmd(&[
            "--log",
            "--meter=m-pkt",
            "acl-add",
            "sw0",
            "from-lport",
            "1007",
            "tcp.dst == 24",
            "reject",
        ]),
        cmd(&[
            "--log",
            "--severity=debug",
            "acl-add",
            "sw0",
            "from-lport",
            "1008",
            "tcp.dst == 25",
            "allow",
        ]),
        cmd(&[
            "create",
            "Load_Balancer",
            "name=lb-rej",
            "protocol=tcp",
            "vips:\"10.0.0.240:80\"=\"\"",
            "options:reject=true",
        ]),
        cmd(&["ls-lb-add", "sw0", "lb-rej"]),
        cmd(&["lr-lb-add", "lr0", "lb-rej"]),
        cmd(&[
            "create",
            "Load_Balancer",
            "name=lb-ev",
            "protocol=tcp",
            "vips:\"10.0.0.241:80\"=\"\"",
        ]),
        cmd(&["ls-lb-add", "sw0", "lb-ev"]),
        cmd(&["lr-lb-add", "lr0", "lb-ev"]),
        cmd(&["set", "NB_Global", ".", "options:controller_event=true"]),
    ]);
    c
}

