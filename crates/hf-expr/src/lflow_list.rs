//! Reading the text `ovn-sbctl lflow-list` prints.
//!
//! ```text
//! Datapath: "sw0" (5f2c...)  Pipeline: ingress
//!   table=0 (ls_in_port_sec_l2  ), priority=100  , match=(eth.src[40]), action=(drop;)
//!   uuid=0x1234abcd, table=1 (...), priority=..., match=(...), action=(...)
//! ```
//!
//! A flow shared by a datapath group is printed, and counted, once per datapath.

/// One logical flow from the dump.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Flow {
    /// Datapath name.
    pub datapath: String,
    /// `ingress` or `egress`.
    pub pipeline: String,
    /// Table number.
    pub table: u32,
    /// Stage name, unpadded.
    pub stage: String,
    /// Priority.
    pub priority: u32,
    /// Match text.
    pub match_text: String,
    /// Action text.
    pub actions: String,
    /// 1-based line number in the dump.
    pub line: usize,
}

/// A line that is neither a header nor a flow.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct DumpError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

/// Parses a whole dump: the flows, and the lines that could not be read.
pub fn parse_dump(text: &str) -> (Vec<Flow>, Vec<DumpError>) {
    let mut flows = Vec::new();
    let mut errors = Vec::new();
    let mut dp = String::new();
    let mut pipeline = String::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let l = raw.trim();
        if l.is_empty() {
            continue;
        }
        if let Some(rest) = l.strip_prefix("Datapath:") {
            match parse_header(rest) {
                Some((d, p)) => {
                    dp = d;
                    pipeline = p;
                }
                None => errors.push(DumpError {
                    line,
                    message: "malformed `Datapath:` header".into(),
                }),
            }
            continue;
        }
        match parse_flow(l) {
            Some(mut f) => {
                f.datapath.clone_from(&dp);
                f.pipeline.clone_from(&pipeline);
                f.line = line;
                flows.push(f);
            }
            None => errors.push(DumpError {
                line,
                message: format!(
                    "not a logical flow: {}",
                    l.chars().take(60).collect::<String>()
                ),
            }),
        }
    }
    (flows, errors)
}

fn parse_header(rest: &str) -> Option<(String, String)> {
    let rest = rest.trim();
    let rest = rest.strip_prefix('"')?;
    let end = rest.find('"')?;
    let name = rest[..end].to_string();
    let pipe = rest[end..].split("Pipeline:").nth(1)?.trim().to_string();
    Some((name, pipe))
}

fn parse_flow(l: &str) -> Option<Flow> {
    let mut l = l;
    if let Some(rest) = l.strip_prefix("uuid=") {
        l = rest.split_once(',')?.1.trim_start();
    }
    let rest = l.strip_prefix("table=")?;
    let digits = rest.find(|c: char| !c.is_ascii_digit())?;
    let table = rest[..digits].parse().ok()?;
    let rest = rest[digits..].trim_start().strip_prefix('(')?;
    let close = rest.find(')')?;
    let stage = rest[..close].trim().to_string();
    let rest = rest[close + 1..]
        .trim_start()
        .strip_prefix(',')?
        .trim_start();
    let rest = rest.strip_prefix("priority=")?;
    let digits = rest.find(|c: char| !c.is_ascii_digit())?;
    let priority = rest[..digits].parse().ok()?;
    let rest = rest[digits..].trim_start().strip_prefix(',')?.trim_start();
    let rest = rest.strip_prefix("match=(")?;
    let (m, a) = rest.split_once("), action=(")?;
    let a = a.trim_end().strip_suffix(')')?;
    Some(Flow {
        datapath: String::new(),
        pipeline: String::new(),
        table,
        stage,
        priority,
        match_text: m.to_string(),
        actions: a.to_string(),
        line: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_headers_padded_stages_uuids_and_two_digit_tables() {
        let text = "Datapath: \"sw0\" (b8430069-da5a-4e5e-a255-1111f8daebde)  Pipeline: ingress\n  \
            table=0 (ls_in_port_sec_l2  ), priority=100  , match=(eth.src[40]), action=(drop;)\n  \
            uuid=0x1a2b3c4d, table=18(ls_in_stateful     ), priority=100  , match=(reg0[1] == 1), action=(ct_commit { ct_label.blocked = 0; }; next;)\n\
            Datapath: \"lr0\" (f2f022f7-00e5-4243-aae9-97324b6ae7f3)  Pipeline: egress\n  \
            table=2 (lr_out_snat        ), priority=0    , match=(1), action=(next;)\n";
        let (flows, errors) = parse_dump(text);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(flows.len(), 3);
        assert_eq!(
            (flows[1].table, flows[1].stage.as_str(), flows[1].priority),
            (18, "ls_in_stateful", 100)
        );
        assert_eq!(
            flows[1].actions,
            "ct_commit { ct_label.blocked = 0; }; next;"
        );
        assert_eq!(
            (flows[2].datapath.as_str(), flows[2].pipeline.as_str()),
            ("lr0", "egress")
        );
        assert_eq!(flows[2].line, 5);
    }

    #[test]
    fn garbage_lines_are_errors_not_flows() {
        let (flows, errors) = parse_dump("Datapath: sw0\n  table=x\n");
        assert!(flows.is_empty());
        assert_eq!(
            errors.iter().map(|e| e.line).collect::<Vec<_>>(),
            vec![1, 2]
        );
    }
}
