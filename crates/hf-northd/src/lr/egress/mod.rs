//! The router egress stages: `lr_out_chk_dnat_local` (is the destination a NAT address
//! local to this chassis: `REGBIT_DST_NAT_IP_LOCAL`), `lr_out_undnat` (reply traffic of
//! DNAT and load balancers gets its source translated back), `lr_out_post_undnat` (gateway
//! routers commit new connections), `lr_out_snat` (SNAT by longest logical prefix, or the
//! 24.09 `match`/`priority` order), `lr_out_post_snat`, `lr_out_egr_loop` (traffic to a
//! NAT address of the same distributed router re-enters the ingress pipeline) and
//! `lr_out_delivery` (output on enabled ports). One function per stage.

use std::collections::BTreeSet;

use hf_expr::Action;
use hf_expr::actions::{NatKind, Pipeline};

use crate::build::{always, and, eq, f, not, num, or, outport, pred};
use crate::diag::Diags;
use crate::flow::{Flows, Owner};
use crate::lr::act::{
    ct_clear, ct_nat, drop, eqn, ip_dst, ip_src, ip_src_net, ipf, loopback, macv, mv, nested, next,
    output, set, set_reg, swap,
};
use crate::lr::ctx::Rtr;
use crate::lr::nat;
use crate::regs::Reg;
use crate::stage::Stage;
use crate::topo::Topo;

mod chk_dnat_local;
mod delivery;
mod egr_loop;
mod post_snat;
mod post_undnat;
mod snat;
mod undnat;
pub use chk_dnat_local::chk_dnat_local;
pub use delivery::delivery;
pub use egr_loop::egr_loop;
pub use post_snat::post_snat;
pub use post_undnat::post_undnat;
pub use snat::snat;
pub use undnat::undnat;
