//! `hf-trace`: the sans-I/O core of `holdfast trace`, OVN's `ovn-trace` on holdfast's own
//! pipeline.
//!
//! - [`microflow`] parses ovn-trace's microflow syntax (an expression in the logical-flow
//!   language that names one packet) and [`frame`] builds the frame it describes.
//! - [`fetch`] plans which SB rows a trace needs: the datapath named on the command line and
//!   what its patch ports reach, widened until closed, as `monitor_cond` conditions.
//! - [`engine`] runs the frame through an `hf_pipeline::Pipeline` built from the translated
//!   program, with conntrack in what-if mode on a scratch table and ovn-trace's `--ct` and
//!   `--lb-dst` overrides, and turns the walk into a [`engine::Outcome`]: every stage, the
//!   logical ports reached, the NAT applied and why a packet dropped.
//! - [`render`] prints an outcome as text close to ovn-trace's `--detailed`, `--summary` and
//!   `--minimal` styles, and as the JSON shape documented in the README.
//!
//! What it does not do: talk to databases, open sockets or read clocks (the `holdfast trace`
//! shell in the binary does), or translate SB rows into a program (`hf-controller`'s
//! `translate` does).

pub mod engine;
pub mod fetch;
pub mod frame;
#[doc(hidden)]
pub mod fuzzing;
pub mod microflow;
pub mod nb;
pub mod render;
