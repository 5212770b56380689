//! JSON-RPC 1.0 messages as OVSDB uses them (RFC 7047 section 4): requests carry a non-null
//! `id`, notifications a null one; replies carry `result` or `error`.

use serde_json::{Map, Value, json};

/// One message.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// A call that wants a reply.
    Request {
        /// Method name.
        method: String,
        /// Parameters (always an array on the wire).
        params: Vec<Value>,
        /// Non-null id.
        id: Value,
    },
    /// A call without reply (`id` null).
    Notification {
        /// Method name.
        method: String,
        /// Parameters.
        params: Vec<Value>,
    },
    /// A successful reply.
    Reply {
        /// The result.
        result: Value,
        /// The id of the request.
        id: Value,
    },
    /// An error reply.
    Error {
        /// The error (a string or an object).
        error: Value,
        /// The id of the request.
        id: Value,
    },
}

/// A message that is not valid JSON-RPC 1.0, with the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid JSON-RPC message: {0}")]
pub struct MessageError(pub String);

impl Message {
    /// Classify a JSON value.
    pub fn from_json(v: Value) -> Result<Self, MessageError> {
        let Value::Object(mut o) = v else {
            return Err(MessageError("message is not a JSON object".into()));
        };
        let id = o.remove("id");
        if let Some(m) = o.remove("method") {
            let Value::String(method) = m else {
                return Err(MessageError("\"method\" is not a string".into()));
            };
            let params = match o.remove("params") {
                Some(Value::Array(a)) => a,
                None => {
                    return Err(MessageError(format!(
                        "\"{method}\" request has no \"params\""
                    )));
                }
                Some(_) => {
                    return Err(MessageError(format!(
                        "\"params\" of \"{method}\" is not an array"
                    )));
                }
            };
            return Ok(match id {
                None | Some(Value::Null) => Message::Notification { method, params },
                Some(id) => Message::Request { method, params, id },
            });
        }
        let id = id.ok_or_else(|| MessageError("reply has no \"id\"".into()))?;
        match (o.remove("result"), o.remove("error")) {
            (_, Some(e)) if !e.is_null() => Ok(Message::Error { error: e, id }),
            (Some(r), _) => Ok(Message::Reply { result: r, id }),
            _ => Err(MessageError(
                "message has neither \"method\", \"result\" nor \"error\"".into(),
            )),
        }
    }

    /// The wire form, shaped exactly as ovsdb-server shapes it.
    pub fn to_json(&self) -> Value {
        match self {
            Message::Request { method, params, id } => {
                json!({"method": method, "params": params, "id": id})
            }
            Message::Notification { method, params } => {
                json!({"method": method, "params": params, "id": null})
            }
            Message::Reply { result, id } => json!({"id": id, "result": result, "error": null}),
            Message::Error { error, id } => {
                let mut m = Map::new();
                m.insert("id".into(), id.clone());
                m.insert("error".into(), error.clone());
                Value::Object(m)
            }
        }
    }

    /// Serialised bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.to_json().to_string().into_bytes()
    }
}

/// Serialise a reply without building an intermediate [`Message`].
pub fn reply_bytes(id: &Value, result: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(b"{\"id\":");
    out.extend_from_slice(id.to_string().as_bytes());
    out.extend_from_slice(b",\"result\":");
    // Serialising a Value into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut out, result);
    out.extend_from_slice(b",\"error\":null}");
    out
}

/// Serialise a reply whose result is already-serialised JSON text.
pub fn reply_bytes_raw(id: &Value, result: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(40 + result.len());
    out.extend_from_slice(b"{\"id\":");
    out.extend_from_slice(id.to_string().as_bytes());
    out.extend_from_slice(b",\"result\":");
    out.extend_from_slice(result);
    out.extend_from_slice(b",\"error\":null}");
    out
}

/// Serialise a notification.
pub fn notification_bytes(method: &str, params: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(b"{\"id\":null,\"method\":\"");
    out.extend_from_slice(method.as_bytes());
    out.extend_from_slice(b"\",\"params\":");
    let _ = serde_json::to_writer(&mut out, params);
    out.push(b'}');
    out
}

/// Serialise a notification whose params are already-serialised JSON values (so that one
/// serialisation of a monitor update serves every client with the same monitor).
pub fn notification_bytes_raw(method: &str, params: &[&[u8]]) -> Vec<u8> {
    let len: usize = params.iter().map(|p| p.len() + 1).sum();
    let mut out = Vec::with_capacity(40 + method.len() + len);
    out.extend_from_slice(b"{\"id\":null,\"method\":\"");
    out.extend_from_slice(method.as_bytes());
    out.extend_from_slice(b"\",\"params\":[");
    for (i, p) in params.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(p);
    }
    out.extend_from_slice(b"]}");
    out
}
