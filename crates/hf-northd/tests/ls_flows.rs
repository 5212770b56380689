//! The switch stages' tricky parts, checked on what `compile` writes to SB: every flow is read
//! back from its SB text with hf-expr's parser and compared, as a tree, with the flow OVN 23.03
//! writes for the same NB (ovn-northd(8), `northd/northd.c`), or evaluated on packets with
//! hf-expr's reference evaluator against what port security means.

mod common;

use common::{Nb, gen_topo_like};
use hf_expr::eval::{Packet, eval_expr};
use hf_expr::features::{FeatureSet, Level};
use hf_expr::{Action, Sets, SymbolTable, parse_actions, parse_match};
use hf_northd::output::{FlowDps, FlowRow, SbDesired};
use hf_northd::{Compiled, Options, RenderOptions, compile};
use serde_json::json;

fn canon_match(text: &str) -> String {
    parse_match(SymbolTable::shared(), text)
        .unwrap_or_else(|e| panic!("match {text:?} does not parse: {e}"))
        .to_string()
}

fn canon_actions(text: &str) -> String {
    let a = parse_actions(SymbolTable::shared(), text)
        .unwrap_or_else(|e| panic!("actions {text:?} do not parse: {e}"));
    hf_expr::printer::actions_to_string(&a)
}

fn on(f: &FlowRow, dp: &str) -> bool {
    match &f.dps {
        FlowDps::One(d) => d == dp,
        FlowDps::Group(g) => g.iter().any(|d| d == dp),
    }
}

/// The flows of `stage` on `dp` at `prio`, as canonical (match, actions).
fn at(sb: &SbDesired, dp: &str, stage: &str, prio: u16) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = sb
        .flows
        .values()
        .filter(|f| {
            f.external_ids.get("stage-name") == Some(stage) && f.priority == prio && on(f, dp)
        })
        .map(|f| (canon_match(&f.match_), canon_actions(&f.actions)))
        .collect();
    v.sort();
    v
}

/// Asserts that `dp` has exactly these flows in `stage` at `prio` (OVN's texts).
fn expect(sb: &SbDesired, dp: &str, stage: &str, prio: u16, want: &[(&str, &str)]) {
    let mut w: Vec<(String, String)> = want
        .iter()
        .map(|(m, a)| (canon_match(m), canon_actions(a)))
        .collect();
    w.sort();
    assert_eq!(
        at(sb, dp, stage, prio),
        w,
        "{stage} priority {prio} on {dp}"
    );
}

fn compiled(nb: &Nb, features: FeatureSet) -> Compiled {
    let opts = Options {
        render: RenderOptions { features },
        ..Default::default()
    };
    compile(&nb.snapshot(), &opts)
}

/// sw0 with vm1 (port-secured, in pg_web) and vm2, a router port, and the ACL classes.
fn acl_nb(stateful: bool) -> (Nb, uuid::Uuid) {
    let mut nb = Nb::new();
    nb.ls("sw0");
    let vm1 = nb.vif("sw0", "vm1", "0a:00:00:00:00:01 10.0.0.11", true);
    nb.vif("sw0", "vm2", "0a:00:00:00:00:02 10.0.0.12", false);
    nb.lr("lr0", &[]);
    nb.link(
        "sw0",
        "lr0",
        "lr0-sw0",
        "0a:00:00:00:ff:00",
        &["10.0.0.1/24"],
    );
    nb.pg("pg_web", &[vm1]);
    if stateful {
        nb.acl_pg(
            "pg_web",
            "to-lport",
            1002,
            "outport == @pg_web && tcp.dst == 80",
            "allow-related",
        );
    }
    nb.acl_pg(
        "pg_web",
        "from-lport",
        1001,
        "inport == @pg_web && udp",
        "allow-stateless",
    );
    nb.acl_pg(
        "pg_web",
        "to-lport",
        1000,
        "outport == @pg_web && ip",
        "drop",
    );
    nb.acl_pg(
        "pg_web",
        "from-lport",
        900,
        "inport == @pg_web && tcp.dst == 23",
        "reject",
    );
    let labelled = nb.acl_ls("sw0", "from-lport", 800, "ip4", "allow");
    nb.set("ACL", labelled, "label", json!(7));
    let after = nb.acl_ls("sw0", "from-lport", 700, "ip4.dst == 10.0.0.99", "drop");
    nb.set(
        "ACL",
        after,
        "options",
        json!(["map", [["apply-after-lb", "true"]]]),
    );
    (nb, labelled)
}

#[test]
fn stateful_acls_have_23_03_priorities_hints_and_commits() {
    let (nb, _) = acl_nb(true);
    let c = compiled(&nb, FeatureSet::all());
    let sb = &c.sb;
    assert!(c.diagnostics.is_empty(), "{:#?}", c.diagnostics);
    // allow-related: committed when new, passed when established (NB priority + 1000).
    expect(
        sb,
        "sw0",
        "ls_out_acl",
        2002,
        &[
            (
                "reg0[7] == 1 && (outport == @pg_web && tcp.dst == 80)",
                "reg0[1] = 1; next;",
            ),
            (
                "reg0[8] == 1 && (outport == @pg_web && tcp.dst == 80)",
                "next;",
            ),
        ],
    );
    // allow-stateless: bypasses conntrack in pre-ACL, then passes.
    expect(
        sb,
        "sw0",
        "ls_in_pre_acl",
        2001,
        &[("inport == @pg_web && udp", "reg0[16] = 1; next;")],
    );
    expect(
        sb,
        "sw0",
        "ls_in_acl",
        2001,
        &[("inport == @pg_web && udp", "next;")],
    );
    // drop: dropped when new, committed as blocked when established.
    expect(
        sb,
        "sw0",
        "ls_out_acl",
        2000,
        &[
            ("reg0[9] == 1 && (outport == @pg_web && ip)", ""),
            (
                "reg0[10] == 1 && (outport == @pg_web && ip)",
                "ct_commit { ct_mark.blocked = 1; };",
            ),
        ],
    );
    // reject from-lport: turned around into the egress pipeline after its ACL stage.
    expect(
        sb,
        "sw0",
        "ls_in_acl",
        1900,
        &[
            (
                "reg0[9] == 1 && (inport == @pg_web && tcp.dst == 23)",
                "reg0 = 0; reject { outport <-> inport; next(pipeline=egress,table=5); };",
            ),
            (
                "reg0[10] == 1 && (inport == @pg_web && tcp.dst == 23)",
                "ct_commit { ct_mark.blocked = 1; }; reg0 = 0; reject { outport <-> inport; next(pipeline=egress,table=5); };",
            ),
        ],
    );
    // A labelled allow commits its label through REG_LABEL in both directions of use.
    expect(
        sb,
        "sw0",
        "ls_in_acl",
        1800,
        &[
            (
                "reg0[7] == 1 && (ip4)",
                "reg0[1] = 1; reg0[13] = 1; reg3 = 7; next;",
            ),
            (
                "reg0[8] == 1 && (ip4)",
                "reg0[1] = 1; reg0[13] = 1; reg3 = 7; next;",
            ),
        ],
    );
    expect(
        sb,
        "sw0",
        "ls_in_stateful",
        100,
        &[
            (
                "reg0[1] == 1 && reg0[13] == 1",
                "ct_commit { ct_mark.blocked = 0; ct_label.label = reg3; }; next;",
            ),
            (
                "reg0[1] == 1 && reg0[13] == 0",
                "ct_commit { ct_mark.blocked = 0; }; next;",
            ),
        ],
    );
    // apply-after-lb: in ls_in_acl_after_lb only.
    expect(
        sb,
        "sw0",
        "ls_in_acl_after_lb",
        1700,
        &[
            ("reg0[9] == 1 && (ip4.dst == 10.0.0.99)", ""),
            (
                "reg0[10] == 1 && (ip4.dst == 10.0.0.99)",
                "ct_commit { ct_mark.blocked = 1; };",
            ),
        ],
    );
    assert!(at(sb, "sw0", "ls_in_acl", 1700).is_empty());
    // The stateful frame: reply/related traffic at 65532, new connections committed at 1,
    // conntrack skipped for the router port.
    expect(
        sb,
        "sw0",
        "ls_in_acl",
        1,
        &[
            ("ip && !ct.est", "reg0[1] = 1; next;"),
            ("ip && ct.est && ct_mark.blocked == 1", "reg0[1] = 1; next;"),
        ],
    );
    let top = at(sb, "sw0", "ls_in_acl", 65532);
    assert!(top.contains(&(
        canon_match("ct.inv || (ct.est && ct.rpl && ct_mark.blocked == 1)"),
        canon_actions("drop;")
    )));
    assert!(top.contains(&(
        canon_match("!ct.est && ct.rel && !ct.new && !ct.inv && ct_mark.blocked == 0"),
        canon_actions("reg0[17] = 1; ct_commit_nat;")
    )));
    expect(
        sb,
        "sw0",
        "ls_in_pre_acl",
        100,
        &[("ip", "reg0[0] = 1; next;")],
    );
    let skip = at(sb, "sw0", "ls_in_pre_acl", 110);
    assert!(skip.contains(&(
        canon_match("ip && inport == \"sw0-lr0-sw0\""),
        canon_actions("next;")
    )));
    expect(
        sb,
        "sw0",
        "ls_in_acl_hint",
        7,
        &[("ct.new && !ct.est", "reg0[7] = 1; reg0[9] = 1; next;")],
    );
}

#[test]
fn acls_without_stateful_ones_are_plain_matches() {
    let (nb, _) = acl_nb(false);
    let c = compiled(&nb, FeatureSet::all());
    let sb = &c.sb;
    expect(
        sb,
        "sw0",
        "ls_out_acl",
        2000,
        &[("outport == @pg_web && ip", "")],
    );
    expect(
        sb,
        "sw0",
        "ls_in_acl",
        1900,
        &[(
            "inport == @pg_web && tcp.dst == 23",
            "reg0 = 0; reject { outport <-> inport; next(pipeline=egress,table=5); };",
        )],
    );
    // An allow with a label on a stateless switch commits nothing.
    expect(sb, "sw0", "ls_in_acl", 1800, &[("ip4", "next;")]);
    // No conntrack at all: no defrag mark, no hints beyond the default.
    assert!(at(sb, "sw0", "ls_in_pre_acl", 100).is_empty());
    assert!(at(sb, "sw0", "ls_in_acl_hint", 7).is_empty());
    assert!(at(sb, "sw0", "ls_in_acl", 1).is_empty());
    expect(sb, "sw0", "ls_in_acl", 0, &[("1", "next;")]);
}

#[test]
fn default_acl_drop_drops_what_no_acl_allows() {
    let (mut nb, _) = acl_nb(true);
    nb.global_option("default_acl_drop", "true");
    let c = compiled(&nb, FeatureSet::all());
    expect(&c.sb, "sw0", "ls_in_acl", 0, &[("1", "drop;")]);
    expect(&c.sb, "sw0", "ls_out_acl", 0, &[("1", "drop;")]);
    let one = at(&c.sb, "sw0", "ls_in_acl", 1);
    assert!(one.contains(&(canon_match("ip && !ct.est"), canon_actions("drop;"))));
}

/// The rows of `stage` on `dp` at `prio`.
fn rows<'a>(sb: &'a SbDesired, dp: &str, stage: &str, prio: u16) -> Vec<&'a FlowRow> {
    sb.flows
        .values()
        .filter(|f| {
            f.external_ids.get("stage-name") == Some(stage) && f.priority == prio && on(f, dp)
        })
        .collect()
}

#[test]
fn an_unparsable_drop_acl_fails_closed_and_the_rest_compiles() {
    let (mut nb, _) = acl_nb(true);
    let bad = nb.acl_pg(
        "pg_web",
        "to-lport",
        1500,
        "outport == @pg_web && tcp.dst ==",
        "drop",
    );
    let c = compiled(&nb, FeatureSet::all());
    let about: Vec<_> = c.diagnostics.iter().filter(|d| d.row == bad).collect();
    assert_eq!(about.len(), 1, "{:#?}", c.diagnostics);
    assert_eq!(about[0].table, "ACL");
    assert!(about[0].name.contains("pg_web"), "{}", about[0]);
    assert!(about[0].reason.contains("does not parse"), "{}", about[0]);
    assert!(about[0].reason.contains("fails closed"), "{}", about[0]);
    // Not left out: its drop covers everything to the group's ports (a typo must not open the
    // group), and its flows say so.
    let closed = rows(&c.sb, "sw0", "ls_out_acl", 2500);
    assert_eq!(closed.len(), 2, "{closed:#?}");
    for f in &closed {
        assert_eq!(f.external_ids.get("hf-acl-broken"), Some("fail-closed"));
        assert!(f.match_.contains("outport == @pg_web"), "{f:?}");
        assert!(
            !f.match_.contains("tcp.dst"),
            "the whole group, not a guess at the match: {f:?}"
        );
        // An empty action list drops, as OVN writes it.
        let a = canon_actions(&f.actions);
        assert!(
            a.is_empty() || a.contains("drop") || a.contains("ct_mark.blocked = 1"),
            "{a:?} {f:?}"
        );
    }
    // Nothing it could not cover is no longer dropped; the rest compiles as before.
    assert_eq!(at(&c.sb, "sw0", "ls_out_acl", 2002).len(), 2);
    assert!(
        c.sb.flows
            .values()
            .filter(|f| f.external_ids.contains_key("hf-acl-broken"))
            .all(|f| f.priority == 2500)
    );
    // Its match is not remembered as a good one.
    assert!(!c.acl_last_good.contains_key(&bad));
}

#[test]
fn an_acl_whose_edit_breaks_it_keeps_its_last_good_version_until_a_restart() {
    let (mut nb, _) = acl_nb(true);
    let row = nb.acl_pg(
        "pg_web",
        "to-lport",
        1500,
        "outport == @pg_web && tcp.dst == 22",
        "drop",
    );
    let good = compiled(&nb, FeatureSet::all());
    assert_eq!(
        good.acl_last_good.get(&row).map(String::as_str),
        Some("outport == @pg_web && tcp.dst == 22")
    );
    let before: Vec<&FlowRow> = rows(&good.sb, "sw0", "ls_out_acl", 2500);
    assert_eq!(before.len(), 2);
    // The edit breaks the match; this northd still knows the last version that parsed.
    nb.set(
        "ACL",
        row,
        "match",
        json!("outport == @pg_web && tcp.dst == 2 2"),
    );
    let opts = |last_good| Options {
        keys: hf_northd::topo::Keys {
            acl_last_good: last_good,
            ..Default::default()
        },
        ..Default::default()
    };
    let kept = compile(&nb.snapshot(), &opts(good.acl_last_good.clone()));
    let after = rows(&kept.sb, "sw0", "ls_out_acl", 2500);
    assert_eq!(after.len(), 2);
    for (a, b) in before.iter().zip(&after) {
        assert_eq!((&a.match_, &a.actions), (&b.match_, &b.actions));
        assert_eq!(
            a.external_ids.get("hf-flow-id"),
            b.external_ids.get("hf-flow-id")
        );
        assert_eq!(b.external_ids.get("hf-acl-broken"), Some("last-good"));
    }
    let d: Vec<_> = kept.diagnostics.iter().filter(|d| d.row == row).collect();
    assert_eq!(d.len(), 1, "{d:#?}");
    assert!(d[0].reason.contains("stays in force"), "{}", d[0]);
    // It carries over to the compile after.
    assert_eq!(kept.acl_last_good, good.acl_last_good);
    // A restarted northd never saw it parse: the ACL fails closed.
    let fresh = compile(&nb.snapshot(), &opts(Default::default()));
    let closed = rows(&fresh.sb, "sw0", "ls_out_acl", 2500);
    assert_eq!(closed.len(), 2, "{closed:#?}");
    for f in closed {
        assert_eq!(f.external_ids.get("hf-acl-broken"), Some("fail-closed"));
        assert!(!f.match_.contains("tcp.dst"), "{f:?}");
    }
    // Fixed: the marks go.
    nb.set(
        "ACL",
        row,
        "match",
        json!("outport == @pg_web && tcp.dst == 23"),
    );
    let fixed = compile(&nb.snapshot(), &opts(kept.acl_last_good.clone()));
    assert!(
        fixed
            .sb
            .flows
            .values()
            .all(|f| !f.external_ids.contains_key("hf-acl-broken"))
    );
}

#[test]
fn an_unparsable_allow_acl_is_left_out() {
    let (mut nb, _) = acl_nb(true);
    let bad = nb.acl_pg(
        "pg_web",
        "to-lport",
        1500,
        "outport == @pg_web &&",
        "allow-related",
    );
    let c = compiled(&nb, FeatureSet::all());
    let d: Vec<_> = c.diagnostics.iter().filter(|d| d.row == bad).collect();
    assert_eq!(d.len(), 1, "{d:#?}");
    assert!(d[0].reason.contains("left out"), "{}", d[0]);
    assert!(rows(&c.sb, "sw0", "ls_out_acl", 2500).is_empty());
}

#[test]
fn port_security_is_checked_by_the_controller_with_the_sb_column() {
    let mut nb = Nb::new();
    nb.ls("sw0");
    nb.vif("sw0", "vm1", "0a:00:00:00:00:01 10.0.0.11", true);
    let off = nb.vif("sw0", "vm2", "0a:00:00:00:00:02 10.0.0.12", false);
    nb.set("Logical_Switch_Port", off, "enabled", json!(false));
    let c = compiled(&nb, FeatureSet::all());
    let sb = &c.sb;
    assert_eq!(
        sb.ports["vm1"].port_security.iter().collect::<Vec<_>>(),
        ["0a:00:00:00:00:01 10.0.0.11"]
    );
    expect(
        sb,
        "sw0",
        "ls_in_check_port_sec",
        50,
        &[("1", "reg0[15] = check_in_port_sec(); next;")],
    );
    expect(
        sb,
        "sw0",
        "ls_in_check_port_sec",
        100,
        &[
            ("vlan.present", "drop;"),
            ("eth.src[40]", "drop;"),
            ("inport == \"vm2\"", "reg0[15] = 1; next;"),
        ],
    );
    expect(
        sb,
        "sw0",
        "ls_out_check_port_sec",
        0,
        &[("1", "reg0[15] = check_out_port_sec(); next;")],
    );
    expect(
        sb,
        "sw0",
        "ls_in_apply_port_sec",
        50,
        &[("reg0[15] == 1", "drop;")],
    );
    // A disabled port receives nothing: its MAC's lookup drops, l2_unknown drops too.
    expect(
        sb,
        "sw0",
        "ls_in_l2_lkup",
        50,
        &[
            ("eth.dst == 0a:00:00:00:00:01", "outport = \"vm1\"; output;"),
            ("eth.dst == 0a:00:00:00:00:02", "drop;"),
        ],
    );
    let unk = at(sb, "sw0", "ls_in_l2_unknown", 50);
    assert!(unk.contains(&(canon_match("outport == \"vm2\""), canon_actions("drop;"))));
}

/// The verdict of the lowered check stage for packet `p`: true when it fails port security.
fn fails(sb: &SbDesired, stage: &str, p: &Packet) -> bool {
    let symtab = SymbolTable::shared();
    let sets = Sets::default();
    let mut best: Option<&FlowRow> = None;
    for f in sb.flows.values() {
        if f.external_ids.get("stage-name") != Some(stage) || !on(f, "sw0") {
            continue;
        }
        let m = parse_match(symtab, &f.match_).expect("SB match parses");
        if eval_expr(symtab, &m, p, &sets) && best.is_none_or(|b| f.priority > b.priority) {
            best = Some(f);
        }
    }
    let best = best.expect("some flow matches (the stage has a default)");
    let acts = parse_actions(symtab, &best.actions).expect("SB actions parse");
    acts.iter().any(|a| {
        matches!(a, Action::Drop { .. })
            || matches!(a, Action::Assign { dst, value, .. }
                if dst.to_string() == "reg0[15]" && value.to_string() == "1")
    })
}

fn pkt(inport: &str, fields: &[(&str, u128)]) -> Packet {
    let mut p = Packet::default();
    p.ports[0] = inport.to_string();
    for (k, v) in fields {
        assert!(p.set(k, *v), "no field {k}");
    }
    p
}

const MAC1: u128 = 0x0a00_0000_0001;
const IP1: u128 = 0x0a00_000b; // 10.0.0.11

#[test]
fn lowered_port_security_for_old_chassis_means_port_security() {
    let mut nb = Nb::new();
    nb.ls("sw0");
    nb.vif("sw0", "vm1", "0a:00:00:00:00:01 10.0.0.11 fd00::11", true);
    nb.vif("sw0", "vm2", "0a:00:00:00:00:02 10.0.0.12", false);
    let c = compiled(&nb, FeatureSet::level(Level::Hf1));
    let sb = &c.sb;
    // No flow uses check_in_port_sec() (hf-1 does not have it).
    assert!(
        sb.flows
            .values()
            .all(|f| !f.actions.contains("check_in_port_sec")
                && !f.actions.contains("check_out_port_sec"))
    );
    let ing = "ls_in_check_port_sec";
    let ip4 = |src: u128, mac: u128| {
        pkt(
            "vm1",
            &[
                ("eth.src", mac),
                ("eth.type", 0x0800),
                ("ip4.src", src),
                ("ip.proto", 17),
            ],
        )
    };
    assert!(!fails(sb, ing, &ip4(IP1, MAC1)), "own MAC and IP pass");
    assert!(fails(sb, ing, &ip4(0x0a00_0063, MAC1)), "spoofed IP fails");
    assert!(
        fails(sb, ing, &ip4(IP1, 0x0266_6666_6666)),
        "spoofed MAC fails"
    );
    let dhcp = pkt(
        "vm1",
        &[
            ("eth.src", MAC1),
            ("eth.type", 0x0800),
            ("ip4.src", 0),
            ("ip4.dst", 0xffff_ffff),
            ("ip.proto", 17),
            ("udp.src", 68),
            ("udp.dst", 67),
        ],
    );
    assert!(!fails(sb, ing, &dhcp), "DHCP discovery passes");
    let arp = |spa: u128, sha: u128| {
        pkt(
            "vm1",
            &[
                ("eth.src", MAC1),
                ("eth.type", 0x0806),
                ("arp.op", 1),
                ("arp.spa", spa),
                ("arp.sha", sha),
            ],
        )
    };
    assert!(!fails(sb, ing, &arp(IP1, MAC1)), "own ARP passes");
    assert!(
        fails(sb, ing, &arp(0x0a00_0063, MAC1)),
        "ARP for another IP fails"
    );
    assert!(
        fails(sb, ing, &arp(IP1, 0x0266_6666_6666)),
        "ARP with another sha fails"
    );
    // IPv6: own address passes, another fails; ND with a foreign source MAC fails.
    let own6: u128 = u128::from("fd00::11".parse::<std::net::Ipv6Addr>().unwrap());
    let ip6 = |src: u128, sll: Option<u128>| {
        let mut f = vec![
            ("eth.src", MAC1),
            ("eth.type", 0x86dd),
            ("ip6.src", src),
            ("ip.proto", 58),
        ];
        if let Some(sll) = sll {
            f.extend([
                ("icmp6.type", 135),
                ("icmp6.code", 0),
                ("ip.ttl", 255),
                ("nd.sll", sll),
            ]);
        } else {
            f.extend([("icmp6.type", 128), ("icmp6.code", 0), ("ip.ttl", 64)]);
        }
        pkt("vm1", &f)
    };
    assert!(!fails(sb, ing, &ip6(own6, None)), "own IPv6 passes");
    assert!(fails(sb, ing, &ip6(own6 + 1, None)), "spoofed IPv6 fails");
    assert!(!fails(sb, ing, &ip6(own6, Some(MAC1))), "own ND passes");
    assert!(
        fails(sb, ing, &ip6(own6, Some(0x0266_6666_6666))),
        "ND with a foreign sll fails"
    );
    // vm2 has no port security: anything from it passes.
    let other = pkt(
        "vm2",
        &[
            ("eth.src", 0x0266_6666_6666),
            ("eth.type", 0x0800),
            ("ip4.src", 0x0101_0101),
        ],
    );
    assert!(!fails(sb, ing, &other));
    // Egress to vm1: its own IP passes, another destination IP fails, broadcast passes.
    let to = |dst: u128, mac: u128| {
        let mut p = pkt(
            "vm2",
            &[("eth.dst", mac), ("eth.type", 0x0800), ("ip4.dst", dst)],
        );
        p.ports[1] = "vm1".to_string();
        p
    };
    let eg = "ls_out_check_port_sec";
    assert!(!fails(sb, eg, &to(IP1, MAC1)));
    assert!(fails(sb, eg, &to(0x0a00_0063, MAC1)));
    assert!(fails(sb, eg, &to(IP1, 0x0a00_0000_0009)));
    assert!(!fails(sb, eg, &to(0xffff_ffff, 0xffff_ffff_ffff)));
}

#[test]
fn switch_load_balancer_vips_balance_new_connections() {
    let mut nb = Nb::new();
    nb.ls("sw0");
    nb.vif("sw0", "vm1", "0a:00:00:00:00:01 10.0.0.11", true);
    nb.lb(
        "lb-sw",
        &[("10.0.0.100:80", "10.0.0.11:8080,10.0.0.12:8080")],
        &["sw0"],
        &[],
    );
    let c = compiled(&nb, FeatureSet::all());
    let sb = &c.sb;
    expect(
        sb,
        "sw0",
        "ls_in_lb",
        120,
        &[(
            "ct.new && ip4.dst == 10.0.0.100 && tcp.dst == 80",
            "reg0[1] = 0; ct_lb_mark(backends=10.0.0.11:8080,10.0.0.12:8080);",
        )],
    );
    expect(
        sb,
        "sw0",
        "ls_in_pre_stateful",
        120,
        &[(
            "reg0[2] == 1 && ip4.dst == 10.0.0.100 && tcp.dst == 80",
            "reg1 = 10.0.0.100; reg2[0..15] = 80; ct_lb_mark;",
        )],
    );
    expect(
        sb,
        "sw0",
        "ls_in_pre_lb",
        100,
        &[("ip", "reg0[2] = 1; next;")],
    );
    expect(
        sb,
        "sw0",
        "ls_in_nat_hairpin",
        100,
        &[
            (
                "ip && ct.new && ct.trk && reg0[6] == 1",
                "ct_snat_to_vip; next;",
            ),
            ("ip && ct.est && ct.trk && reg0[6] == 1", "ct_snat;"),
        ],
    );
    // Older chassis get ct_lb.
    let old = compiled(&nb, FeatureSet::level(Level::Hf1));
    let lb: Vec<_> = old
        .sb
        .flows
        .values()
        .filter(|f| f.external_ids.get("stage-name") == Some("ls_in_lb") && f.priority == 120)
        .collect();
    assert_eq!(lb.len(), 1);
    assert!(lb[0].actions.contains("ct_lb("), "{}", lb[0].actions);
}

#[test]
fn router_addresses_are_answered_and_their_requests_go_to_the_router() {
    let mut nb = Nb::new();
    nb.ls("sw0");
    nb.vif("sw0", "vm1", "0a:00:00:00:00:01 10.0.0.11", true);
    nb.lr("lr0", &[]);
    nb.link(
        "sw0",
        "lr0",
        "lr0-sw0",
        "0a:00:00:00:ff:00",
        &["10.0.0.1/24"],
    );
    nb.nat("lr0", "dnat_and_snat", "10.0.0.50", "10.0.0.11");
    let c = compiled(&nb, FeatureSet::all());
    let sb = &c.sb;
    let rsp = at(sb, "sw0", "ls_in_arp_rsp", 50);
    assert!(rsp.contains(&(
        canon_match("arp.tpa == 10.0.0.1 && arp.op == 1"),
        canon_actions("eth.dst = eth.src; eth.src = 0a:00:00:00:ff:00; arp.op = 2; arp.tha = arp.sha; arp.sha = 0a:00:00:00:ff:00; arp.tpa = arp.spa; arp.spa = 10.0.0.1; outport = inport; flags.loopback = 1; output;")
    )));
    assert!(rsp.contains(&(
        canon_match("arp.tpa == 10.0.0.11 && arp.op == 1"),
        canon_actions("eth.dst = eth.src; eth.src = 0a:00:00:00:00:01; arp.op = 2; arp.tha = arp.sha; arp.sha = 0a:00:00:00:00:01; arp.tpa = arp.spa; arp.spa = 10.0.0.11; outport = inport; flags.loopback = 1; output;")
    )));
    let req = at(sb, "sw0", "ls_in_l2_lkup", 80);
    for ip in ["10.0.0.1", "10.0.0.50"] {
        assert!(
            req.contains(&(
                canon_match(&format!("flags[1] == 0 && arp.op == 1 && arp.tpa == {ip}")),
                canon_actions("clone { outport = \"sw0-lr0-sw0\"; output; }; outport = \"_MC_flood_l2\"; output;")
            )),
            "{req:#?}"
        );
    }
    expect(
        sb,
        "sw0",
        "ls_in_l2_lkup",
        70,
        &[("eth.mcast", "outport = \"_MC_flood\"; output;")],
    );
}

/// The 500 × 40 figure (run in release: `cargo test --release -p hf-northd --test ls_flows
/// scale -- --ignored --nocapture`): the switch stages alone and the whole compile.
#[test]
#[ignore]
// A benchmark reads the clock.
#[allow(clippy::disallowed_methods)]
fn scale_500x40() {
    let n: usize = std::env::var("HF_SCALE_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    let p: usize = std::env::var("HF_SCALE_P")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let nb = gen_topo_like(n, p).snapshot();
    let mut best_ls = f64::MAX;
    let mut best_all = f64::MAX;
    let mut flows = 0;
    let mut rows = 0;
    for _ in 0..3 {
        let t = std::time::Instant::now();
        let mut diags = hf_northd::diag::Diags::default();
        let topo =
            hf_northd::topo::Topo::build(&nb, &Default::default(), FeatureSet::all(), &mut diags);
        let mut out = hf_northd::flow::Flows::default();
        for dp in 0..topo.datapaths.len() {
            if topo.datapaths[dp].kind == hf_northd::DpKind::Switch {
                hf_northd::ls::build(&topo, dp, &mut out, &mut diags);
            }
        }
        best_ls = best_ls.min(t.elapsed().as_secs_f64());
        flows = out.len();
        let t = std::time::Instant::now();
        let mut diags = hf_northd::diag::Diags::default();
        let topo =
            hf_northd::topo::Topo::build(&nb, &Default::default(), FeatureSet::all(), &mut diags);
        let t_topo = t.elapsed().as_secs_f64();
        let t = std::time::Instant::now();
        let mut bytes = 0;
        for fl in &out.flows {
            bytes += fl.matches.to_string().len();
            bytes += hf_expr::printer::actions_to_string(&fl.actions).len();
        }
        println!(
            "  printing the switch flows {:.0} ms ({bytes} bytes)",
            t.elapsed().as_secs_f64() * 1e3
        );
        let t = std::time::Instant::now();
        let rendered = hf_northd::render::flows(&topo, &out, &RenderOptions::default(), &mut diags);
        println!(
            "  topo+index {:.0} ms, render of the switch flows {:.0} ms ({} rows)",
            t_topo * 1e3,
            t.elapsed().as_secs_f64() * 1e3,
            rendered.len()
        );
        let t = std::time::Instant::now();
        let c = compile(&nb, &Options::default());
        best_all = best_all.min(t.elapsed().as_secs_f64());
        rows = c.sb.flows.len();
    }
    println!(
        "{n}x{p}: switch stages {:.0} ms ({flows} flows before grouping); whole compile {:.0} ms ({rows} Logical_Flow rows)",
        best_ls * 1e3,
        best_all * 1e3
    );
    assert!(flows > n * p * 4, "{flows} flows");
}

#[test]
fn dhcp_options_become_put_dhcp_opts_and_bad_rows_are_diagnosed() {
    let mut nb = Nb::new();
    nb.ls("sw0");
    let vm1 = nb.vif("sw0", "vm1", "0a:00:00:00:00:01 10.0.0.11", true);
    let vm2 = nb.vif("sw0", "vm2", "0a:00:00:00:00:02 10.0.0.12", true);
    let good = nb.txn(vec![json!({"op": "insert", "table": "DHCP_Options", "row": {
        "cidr": "10.0.0.0/24",
        "options": ["map", [["server_id", "10.0.0.1"], ["server_mac", "0a:00:00:00:00:fe"],
            ["lease_time", "3600"], ["router", "10.0.0.1"], ["dns_server", "{8.8.8.8, 8.8.4.4}"]]]}})]);
    let bad = nb.txn(vec![
        json!({"op": "insert", "table": "DHCP_Options", "row": {
        "cidr": "10.0.0.0/24",
        "options": ["map", [["server_id", "10.0.0.1"], ["server_mac", "0a:00:00:00:00:fe"]]]}}),
    ]);
    nb.set(
        "Logical_Switch_Port",
        vm1,
        "dhcpv4_options",
        json!(["uuid", good.to_string()]),
    );
    nb.set(
        "Logical_Switch_Port",
        vm2,
        "dhcpv4_options",
        json!(["uuid", bad.to_string()]),
    );
    let c = compiled(&nb, FeatureSet::all());
    let opts = "reg0[3] = put_dhcp_opts(offerip = 10.0.0.11, dns_server = {8.8.8.8, 8.8.4.4}, lease_time = 3600, netmask = 255.255.255.0, router = 10.0.0.1, server_id = 10.0.0.1); next;";
    expect(
        &c.sb,
        "sw0",
        "ls_in_dhcp_options",
        100,
        &[
            (
                "inport == \"vm1\" && eth.src == 0a:00:00:00:00:01 && ip4.src == 0.0.0.0 && ip4.dst == 255.255.255.255 && udp.src == 68 && udp.dst == 67",
                opts,
            ),
            (
                "inport == \"vm1\" && eth.src == 0a:00:00:00:00:01 && ip4.src == 10.0.0.11 && ip4.dst == {10.0.0.1, 255.255.255.255} && udp.src == 68 && udp.dst == 67",
                opts,
            ),
        ],
    );
    expect(
        &c.sb,
        "sw0",
        "ls_in_dhcp_response",
        100,
        &[(
            "inport == \"vm1\" && eth.src == 0a:00:00:00:00:01 && ip4 && udp.src == 68 && udp.dst == 67 && reg0[3]",
            "eth.dst = eth.src; eth.src = 0a:00:00:00:00:fe; ip4.src = 10.0.0.1; udp.src = 67; udp.dst = 68; outport = inport; flags.loopback = 1; output;",
        )],
    );
    let about: Vec<_> = c.diagnostics.iter().filter(|d| d.row == bad).collect();
    assert_eq!(about.len(), 1, "{:#?}", c.diagnostics);
    assert_eq!(about[0].table, "DHCP_Options");
    assert!(about[0].reason.contains("vm2"), "{}", about[0]);
}

/// Options real ovn-controller would not parse (unknown name, string where a number is
/// wanted and the other way round) are diagnosed, and the port gets no DHCP flows.
#[test]
fn dhcp_options_the_controller_cannot_parse_are_diagnosed() {
    let mut nb = Nb::new();
    nb.ls("sw0");
    let cases: [(&str, &str, &str, &str); 4] = [
        ("vm1", "dhcpv4_options", "no_such_option", "1"),
        ("vm2", "dhcpv4_options", "domain_name", "10.0.0.1"),
        ("vm3", "dhcpv4_options", "router", "\"gw\""),
        ("vm4", "dhcpv6_options", "dns_server", "\"ns\""),
    ];
    let mut rows = Vec::new();
    for (i, (vm, col, k, v)) in cases.iter().enumerate() {
        let p = nb.vif(
            "sw0",
            vm,
            &format!("0a:00:00:00:00:0{} 10.0.0.1{i} fd00::1{i}", i + 1),
            true,
        );
        let (cidr, base) = if *col == "dhcpv4_options" {
            (
                "10.0.0.0/24",
                vec![
                    json!(["server_id", "10.0.0.1"]),
                    json!(["server_mac", "0a:00:00:00:00:fe"]),
                    json!(["lease_time", "3600"]),
                ],
            )
        } else {
            ("fd00::/64", vec![json!(["server_id", "0a:00:00:00:00:fe"])])
        };
        let mut opts = base;
        opts.push(json!([k, v]));
        let row = nb.txn(vec![
            json!({"op": "insert", "table": "DHCP_Options", "row": {
            "cidr": cidr, "options": ["map", opts]}}),
        ]);
        nb.set(
            "Logical_Switch_Port",
            p,
            col,
            json!(["uuid", row.to_string()]),
        );
        rows.push(row);
    }
    let c = compiled(&nb, FeatureSet::all());
    for ((vm, _, k, _), row) in cases.iter().zip(&rows) {
        let about: Vec<_> = c.diagnostics.iter().filter(|d| d.row == *row).collect();
        assert_eq!(about.len(), 1, "{vm}: {:#?}", c.diagnostics);
        assert!(
            about[0].reason.contains(&format!("option {k} ")) && about[0].reason.contains(vm),
            "{}",
            about[0]
        );
        let port = format!("inport == \"{vm}\"");
        let dhcp_flows =
            c.sb.flows
                .values()
                .filter(|f| {
                    f.external_ids.get("stage-name") == Some("ls_in_dhcp_options")
                        && f.match_.contains(&port)
                })
                .count();
        assert_eq!(dhcp_flows, 0, "{vm} gets no DHCP flows");
    }
}
