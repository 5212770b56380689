//! `holdfast lflow check|normalize` through the library entry points (reader in, writer out).

use hf_expr::cli;
use hf_expr::lflow_list::parse_dump;
use std::path::Path;

fn fixture(name: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data")
            .join(name),
    )
    .expect("fixture")
}

fn run_check(features: Option<&str>, text: &str) -> (i32, String) {
    let mut out = Vec::new();
    let code = cli::check(features, text.as_bytes(), &mut out).expect("io");
    (code, String::from_utf8(out).expect("utf8"))
}

#[test]
fn a_clean_dump_passes_and_the_last_line_counts_flows() {
    let text = fixture("ovn-23.03-lflows.txt");
    let (flows, _) = parse_dump(&text);
    let (code, out) = run_check(None, &text);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out.lines().last(),
        Some(format!("checked {} flows: 0 errors", flows.len()).as_str())
    );
    assert!(out.contains("flows by the OVN release"), "{out}");
}

#[test]
fn bad_flows_are_reported_with_their_place_and_fail_the_run() {
    let mut text = fixture("ovn-23.03-lflows.txt");
    text.push_str("Datapath: \"sw9\" (00000000-0000-0000-0000-000000000000)  Pipeline: egress\n");
    text.push_str("  uuid=0xdeadbeef, table=3 (ls_out_acl_hint    ), priority=7    , match=(tcp.dts == 80), action=(next;)\n");
    text.push_str("  table=12(ls_out_acl         ), priority=1001 , match=(ip4), action=(frobnicate; next;)\n");
    text.push_str(
        "  table=13(ls_out_acl         ), priority=1002 , match=(ip4 ==), action=(next(;)\n",
    );
    let (flows, _) = parse_dump(&text);
    let (code, out) = run_check(None, &text);
    assert_eq!(code, 1);
    assert!(
        out.contains("datapath \"sw9\" egress table=3 (ls_out_acl_hint) priority=7"),
        "{out}"
    );
    assert!(
        out.contains("unknown field `tcp.dts`") && out.contains("did you mean `tcp.dst`?"),
        "{out}"
    );
    assert!(
        out.contains("datapath \"sw9\" egress table=12 (ls_out_acl) priority=1001"),
        "{out}"
    );
    assert!(out.contains("unknown action `frobnicate`"), "{out}");
    // A flow whose match and actions both fail shows both errors.
    let both = out
        .split("priority=1002")
        .nth(1)
        .expect("third flow reported");
    assert!(
        both.contains("--> match:1:7") && both.contains("--> action:1:6"),
        "{both}"
    );
    assert_eq!(
        out.lines().last(),
        Some(format!("checked {} flows: 3 errors", flows.len()).as_str())
    );
}

#[test]
fn features_of_an_older_level_name_every_flow_an_old_controller_would_reject() {
    let text = fixture("ovn-23.03-lflows-legacy-chassis.txt");
    let (code, out) = run_check(Some("20.06"), &text);
    assert_eq!(code, 1);
    let (flows, _) = parse_dump(&text);
    let mut block = 0;
    for f in flows.iter().filter(|f| f.actions.contains("ct_commit {")) {
        block += 1;
        assert!(
            out.contains(&format!("flow at line {}:", f.line)),
            "line {} not reported",
            f.line
        );
    }
    assert!(block > 0);
    assert!(
        out.contains("`ct-commit-block` (holdfast level hf-2, OVN 20.09)"),
        "{out}"
    );
    let last = out.lines().last().expect("last line");
    assert!(
        last.starts_with(&format!(
            "checked {} flows under features 20.06: ",
            flows.len()
        )),
        "{last}"
    );
    // Under the release that produced the dump nothing is rejected.
    assert_eq!(run_check(Some("23.03"), &text).0, 0);
}

#[test]
fn bad_feature_names_and_unreadable_lines_are_reported() {
    let (code, out) = run_check(Some("hf-7"), "");
    assert_eq!(code, 2);
    assert!(out.contains("unknown feature or level `hf-7`"), "{out}");
    let (code, out) = run_check(None, "this is not lflow-list output\n");
    assert_eq!(code, 1);
    assert!(out.contains("line 1: not a logical flow"), "{out}");
    assert_eq!(out.lines().last(), Some("checked 0 flows: 1 errors"));
}

#[test]
fn normalize_prints_conjunctions_or_the_error() {
    let mut out = Vec::new();
    assert_eq!(
        cli::normalize("tcp.dst == 80 && ip4", &mut out).expect("io"),
        0
    );
    assert_eq!(
        String::from_utf8_lossy(&out),
        "eth.type == 0x800 && ip.proto == 0x6 && tcp.dst == 0x50\n"
    );
    let mut out = Vec::new();
    assert_eq!(cli::normalize("tcp.dts == 80", &mut out).expect("io"), 1);
    let text = String::from_utf8_lossy(&out);
    assert!(
        text.starts_with("error[unknown-symbol]: unknown field `tcp.dts`"),
        "{text}"
    );
    assert!(text.contains("1 | tcp.dts == 80\n  | ^^^^^^^"), "{text}");
}
