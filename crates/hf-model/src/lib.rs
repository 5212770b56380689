//! hf-model: typed OVN NB and SB rows generated from `schemas/` at build time.
