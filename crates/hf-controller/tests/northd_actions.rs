//! Every action family real ovn-northd 23.03 emits compiles: an NB built to make northd use
//! port security, FDB learning, virtual ports, native DHCPv4/DHCPv6, DNS, IPv6 router
//! advertisements, IGMP/MLD snooping, reject and logged/metered ACLs, load balancers with
//! affinity, selection fields, health checks and empty-backend events, ECMP routes with
//! symmetric replies, gateway MTU (ICMP "frag needed"), NAT, forwarding groups and TTL
//! expiry. Real ovn-northd writes the SB; every flow must translate and compile with no
//! per-flow error. The test prints how many flows use each action and function, and fails if
//! one the NB was built to exercise is missing (so the NB keeps its teeth as northd changes).

mod common;

use std::collections::BTreeMap;

use common::{Central, SbOf, require};
use hf_controller::translate::{TranslateOptions, translate};
use hf_pipeline::Program;

#[test]
fn every_action_northd_emits_compiles() {
    if !require(
        "every_action_northd_emits_compiles",
        &[
            "ovsdb-server",
            "ovsdb-tool",
            "ovsdb-client",
            "ovn-northd",
            "ovn-nbctl",
        ],
    ) {
        return;
    }
    let c = Central::start().unwrap();
    let nb = |args: &[&str]| c.nbctl(args).unwrap();
    nb(&["set", "NB_Global", ".", "options:controller_event=true"]);
    nb(&["ls-add", "sw0"]);
    nb(&[
        "set",
        "Logical_Switch",
        "sw0",
        "other_config:mcast_snoop=true",
    ]);
    nb(&["lsp-add", "sw0", "vm1"]);
    nb(&[
        "lsp-set-addresses",
        "vm1",
        "02:00:00:00:00:01 10.0.0.1 fd00::1",
    ]);
    nb(&[
        "lsp-set-port-security",
        "vm1",
        "02:00:00:00:00:01 10.0.0.1 fd00::1",
    ]);
    nb(&["lsp-add", "sw0", "vm2"]);
    nb(&[
        "lsp-set-addresses",
        "vm2",
        "02:00:00:00:00:02 10.0.0.2",
        "unknown",
    ]);
    nb(&["lsp-add", "sw0", "vip"]);
    nb(&["lsp-set-type", "vip", "virtual"]);
    nb(&["lsp-set-addresses", "vip", "02:00:00:00:00:10 10.0.0.10"]);
    nb(&[
        "lsp-set-options",
        "vip",
        "virtual-ip=10.0.0.10",
        "virtual-parents=vm1,vm2",
    ]);
    // DHCPv4, DHCPv6 and DNS for vm1.
    let d4 = nb(&["create", "DHCP_Options", "cidr=10.0.0.0/24"])
        .trim()
        .to_string();
    nb(&[
        "dhcp-options-set-options",
        &d4,
        "lease_time=3600",
        "router=10.0.0.254",
        "server_id=10.0.0.254",
        "server_mac=02:00:00:00:00:fe",
    ]);
    nb(&["lsp-set-dhcpv4-options", "vm1", &d4]);
    let d6 = nb(&["create", "DHCP_Options", "cidr=\"fd00::/64\""])
        .trim()
        .to_string();
    nb(&[
        "dhcp-options-set-options",
        &d6,
        "server_id=02:00:00:00:00:fe",
    ]);
    nb(&["lsp-set-dhcpv6-options", "vm1", &d6]);
    let dns = nb(&["create", "DNS", "records={vm1.example=\"10.0.0.1\"}"])
        .trim()
        .to_string();
    nb(&["add", "Logical_Switch", "sw0", "dns_records", &dns]);
    // ACLs: reject, logged and metered, stateful on a port group with an address set.
    nb(&["meter-add", "m1", "drop", "10", "pktps"]);
    nb(&["pg-add", "pg1", "vm1", "vm2"]);
    nb(&[
        "create",
        "Address_Set",
        "name=as1",
        "addresses=\"10.0.0.1\",\"10.0.0.2\"",
    ]);
    nb(&[
        "acl-add",
        "sw0",
        "from-lport",
        "1000",
        "tcp.dst == 23",
        "reject",
    ]);
    nb(&[
        "--log",
        "--severity=info",
        "--meter=m1",
        "--name=acl-log",
        "acl-add",
        "pg1",
        "to-lport",
        "900",
        "outport == @pg1 && ip4.src == $as1",
        "allow-related",
    ]);
    // Forwarding group.
    nb(&[
        "fwd-group-add",
        "fg1",
        "sw0",
        "10.0.0.50",
        "02:00:00:00:00:50",
        "vm1",
        "vm2",
    ]);
    // A router with IPv6 RA, a gateway port with MTU and ECMP routes with symmetric replies.
    nb(&["lr-add", "lr0"]);
    nb(&[
        "lrp-add",
        "lr0",
        "lrp0",
        "02:00:00:00:00:fe",
        "10.0.0.254/24",
        "fd00::fe/64",
    ]);
    nb(&[
        "set",
        "Logical_Router_Port",
        "lrp0",
        "ipv6_ra_configs:address_mode=slaac",
        "ipv6_ra_configs:send_periodic=true",
    ]);
    nb(&["lsp-add", "sw0", "sw0-lr0"]);
    nb(&["lsp-set-type", "sw0-lr0", "router"]);
    nb(&["lsp-set-addresses", "sw0-lr0", "router"]);
    nb(&["lsp-set-options", "sw0-lr0", "router-port=lrp0"]);
    nb(&["ls-add", "ext"]);
    nb(&[
        "lrp-add",
        "lr0",
        "lrp-ext",
        "02:00:00:00:01:fe",
        "172.16.0.1/24",
    ]);
    nb(&["lrp-set-gateway-chassis", "lrp-ext", "hv1", "10"]);
    nb(&[
        "set",
        "Logical_Router_Port",
        "lrp-ext",
        "options:gateway_mtu=1400",
    ]);
    nb(&["lsp-add", "ext", "ext-lr0"]);
    nb(&["lsp-set-type", "ext-lr0", "router"]);
    nb(&["lsp-set-addresses", "ext-lr0", "router"]);
    nb(&["lsp-set-options", "ext-lr0", "router-port=lrp-ext"]);
    nb(&["lsp-add", "ext", "ln"]);
    nb(&["lsp-set-type", "ln", "localnet"]);
    nb(&["lsp-set-addresses", "ln", "unknown"]);
    nb(&["lsp-set-options", "ln", "network_name=phys"]);
    // ECMP with symmetric replies needs a gateway router.
    nb(&["lr-add", "gr"]);
    nb(&["set", "Logical_Router", "gr", "options:chassis=hv1"]);
    nb(&[
        "lrp-add",
        "gr",
        "gr-ext",
        "02:00:00:00:02:fe",
        "172.17.0.1/24",
    ]);
    for nh in ["172.17.0.10", "172.17.0.11"] {
        nb(&[
            "--ecmp-symmetric-reply",
            "lr-route-add",
            "gr",
            "0.0.0.0/0",
            nh,
        ]);
    }
    nb(&["lr-nat-add", "lr0", "snat", "172.16.0.1", "10.0.0.0/24"]);
    nb(&[
        "lr-nat-add",
        "lr0",
        "dnat_and_snat",
        "172.16.0.100",
        "10.0.0.1",
        "vm1",
        "02:00:00:00:01:01",
    ]);
    // Load balancers: affinity on the switch and router, selection fields, a health check,
    // and one without backends (an empty_lb_backends event).
    nb(&[
        "lb-add",
        "lb-aff",
        "10.0.0.100:80",
        "10.0.0.1:8080,10.0.0.2:8080",
        "tcp",
    ]);
    nb(&[
        "set",
        "Load_Balancer",
        "lb-aff",
        "options:affinity_timeout=60",
    ]);
    nb(&[
        "lb-add",
        "lb-sel",
        "10.0.0.101:80",
        "10.0.0.1:80,10.0.0.2:80",
        "tcp",
    ]);
    nb(&[
        "set",
        "Load_Balancer",
        "lb-sel",
        "selection_fields=ip_src,ip_dst",
    ]);
    nb(&[
        "lb-add",
        "lb-hc",
        "10.0.0.102:80",
        "10.0.0.1:80,10.0.0.2:80",
        "tcp",
    ]);
    nb(&[
        "set",
        "Load_Balancer",
        "lb-hc",
        "ip_port_mappings:10.0.0.1=vm1:10.0.0.254",
        "ip_port_mappings:10.0.0.2=vm2:10.0.0.254",
    ]);
    let hc = nb(&[
        "--id=@hc",
        "create",
        "Load_Balancer_Health_Check",
        "vip=\"10.0.0.102:80\"",
        "--",
        "add",
        "Load_Balancer",
        "lb-hc",
        "health_check",
        "@hc",
    ]);
    let _ = hc;
    nb(&["lb-add", "lb-empty", "10.0.0.103:80", "", "tcp"]);
    for lb in ["lb-aff", "lb-sel", "lb-hc", "lb-empty"] {
        nb(&["ls-lb-add", "sw0", lb]);
    }
    nb(&["lr-lb-add", "lr0", "lb-aff"]);
    c.sync().unwrap();

    let sb = c.sb_snapshot();
    let t = translate(&sb, &TranslateOptions::default());
    let (prog, errors) = Program::compile(&t.spec).expect("program compiles");
    let total: usize = t.spec.datapaths.iter().map(|d| d.flows.len()).sum();
    assert!(total > 300, "only {total} flows: northd did not run?");
    assert!(
        errors.is_empty(),
        "{} of {total} flows did not compile:\n{errors:#?}",
        errors.len()
    );
    assert!(
        prog.flow_count() >= total,
        "{} < {total}",
        prog.flow_count()
    );

    // Count flows per action / function name in the SB text.
    let names = hf_expr::actions::ACTION_NAMES.iter().copied().chain([
        "lookup_arp",
        "lookup_arp_ip",
        "lookup_nd",
        "lookup_nd_ip",
        "get_fdb",
        "lookup_fdb",
        "put_dhcp_opts",
        "put_dhcpv6_opts",
        "put_nd_ra_opts",
        "dns_lookup",
        "check_pkt_larger",
        "select",
        "chk_lb_hairpin",
        "chk_lb_hairpin_reply",
        "check_in_port_sec",
        "check_out_port_sec",
        "chk_ecmp_nh_mac",
        "chk_ecmp_nh",
        "chk_lb_aff",
    ]);
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for lf in sb.logical_flow().values() {
        let a = &lf.actions;
        for n in names.clone() {
            let hit = [" ", ";", "(", "{"]
                .iter()
                .any(|end| a.contains(&format!("{n}{end}")))
                && (a.starts_with(n)
                    || [" ", ";", "{", "="]
                        .iter()
                        .any(|pre| a.contains(&format!("{pre}{n}"))));
            if hit {
                *counts.entry(n).or_default() += 1;
            }
        }
    }
    for (n, k) in &counts {
        println!("{n:24} {k}");
    }
    for want in [
        "check_in_port_sec",
        "check_out_port_sec",
        "put_fdb",
        "lookup_fdb",
        "get_fdb",
        "bind_vport",
        "put_dhcp_opts",
        "put_dhcpv6_opts",
        "dns_lookup",
        "put_nd_ra_opts",
        "igmp",
        "reject",
        "log",
        "chk_lb_aff",
        "commit_lb_aff",
        "chk_ecmp_nh_mac",
        "chk_ecmp_nh",
        "commit_ecmp_nh",
        "check_pkt_larger",
        "icmp4_error",
        "ct_snat_to_vip",
        "handle_svc_check",
        "trigger_event",
        "fwd_group",
        "ct_lb_mark",
        "chk_lb_hairpin",
    ] {
        assert!(
            counts.get(want).copied().unwrap_or(0) > 0,
            "northd emitted no `{want}`: the NB no longer exercises it"
        );
    }
}
