//! Router load balancer affinity (`Load_Balancer options:affinity_timeout`):
//! `lr_in_lb_aff_check` asks the controller whether a new connection to a VIP has a
//! remembered backend (`REGBIT_KNOWN_LB_SESSION = chk_lb_aff()`, which also loads the backend
//! into `REG_LB_AFF_BACKEND_IP4`/`xxreg1` and `REG_LB_AFF_MATCH_PORT`), `lr_in_dnat` sends it
//! there (priority 150, [`dnat_flows`]), and `lr_in_lb_aff_learn` remembers the backend
//! `ct_lb_mark` chose for a connection without one (`commit_lb_aff`).

use hf_expr::Action;
use hf_expr::actions::ResultFn;
use hf_expr::ast::Expr;

use crate::build::{always, and, eq, f, not, num, pred};
use crate::diag::Diags;
use crate::flow::Flows;
use crate::lr::act::{eqn, ipv, mv, next, nh_reg, result, set, src_reg};
use crate::lr::ctx::{Rtr, Vip};
use crate::regs::Reg;
use crate::stage::Stage;
use crate::topo::Topo;

mod check;
mod dnat_flows;
mod learn;
pub use check::check;
pub use dnat_flows::dnat_flows;
pub use learn::learn;

fn ipport(ip: std::net::IpAddr, port: Option<u16>) -> String {
    match (ip, port) {
        (std::net::IpAddr::V6(a), Some(p)) => format!("[{a}]:{p}"),
        (a, Some(p)) => format!("{a}:{p}"),
        (a, None) => a.to_string(),
    }
}

fn fam(v: &Vip) -> &'static str {
    if v.ip.is_ipv6() { "ip6" } else { "ip4" }
}
