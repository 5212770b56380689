//! Unit tests of the switch stages' helpers (the flows themselves are checked against OVN's in
//! `tests/ls_flows.rs` and against real ovn-northd by `tests/northd_parity.rs`).

use hf_expr::actions::OptValue;

use super::arp_rsp::{ns_for, solicited};
use super::dhcp::opt_value;

#[test]
fn solicited_node_addresses_are_rfc4291s() {
    assert_eq!(
        solicited("fd00::1:2:3".parse().unwrap()).to_string(),
        "ff02::1:ff02:3"
    );
    assert_eq!(
        solicited("fe80::ff:fe00:ff01".parse().unwrap()).to_string(),
        "ff02::1:ff00:ff01"
    );
    // The match OVN writes for a solicitation of an address, read back by hf-expr.
    let e = ns_for("fd00::a".parse().unwrap());
    let back = hf_expr::parse_match(hf_expr::SymbolTable::shared(), &e.to_string()).unwrap();
    assert_eq!(
        back.to_string(),
        "nd_ns && ip6.dst == {fd00::a, ff02::1:ff00:a} && nd.target == fd00::a"
    );
}

#[test]
fn dhcp_option_values_are_typed() {
    assert!(matches!(opt_value("10.0.0.1"), Ok(OptValue::Const(_))));
    assert!(matches!(opt_value("\"ovn.org\""), Ok(OptValue::Str(s)) if s == "ovn.org"));
    match opt_value("{8.8.8.8, 8.8.4.4}") {
        Ok(OptValue::Set(v)) => assert_eq!(v.len(), 2),
        other => panic!("{other:?}"),
    }
    assert!(opt_value("vm0").is_err(), "a bare word is not a value");
    assert!(opt_value("10.0.0.1 10.0.0.2").is_err());
    assert!(opt_value("{").is_err());
}
