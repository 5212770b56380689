//! Reading received messages without building one JSON tree per message: [`Envelope`] splits a
//! JSON-RPC message into its members as raw JSON text borrowed from the framed bytes, and
//! [`load_table_updates2`] feeds a `<table-updates2>` text to a [`Model`] row by row
//! ([`Model::load_row`]), so that a monitor reply of tens of megabytes never exists as a
//! `serde_json::Value` tree (several times its byte size): only the bytes and one row's small
//! tree at a time.
//!
//! What this does not do: it does not stream update notifications (they are applied with a
//! change set, as a whole; see `session.rs`), and it does not make the load all or nothing by
//! itself: the session only streams into an empty replica and empties it again on error.

use hf_model::ModelError;
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::model::Model;

/// A JSON-RPC message's members, each as raw JSON text (`None`: the member is absent; a JSON
/// `null` is `Some("null")`). Other members are ignored, as [`crate::jsonrpc::Message`] does.
#[derive(Debug, Deserialize)]
pub(crate) struct Envelope<'a> {
    #[serde(default, borrow, deserialize_with = "present")]
    pub id: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    pub method: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    pub params: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    pub result: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    pub error: Option<&'a RawValue>,
}

fn present<'de, D: de::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

impl<'a> Envelope<'a> {
    /// Split a framed message (a JSON object; anything else is an error naming what it is).
    pub fn parse(bytes: &'a [u8]) -> Result<Self, String> {
        serde_json::from_slice(bytes).map_err(|e| e.to_string())
    }

    /// The whole message as a JSON tree, for [`crate::jsonrpc::Message::from_json`].
    pub fn to_value(&self) -> Result<Value, String> {
        let mut m = Map::new();
        for (k, v) in [
            ("id", self.id),
            ("method", self.method),
            ("params", self.params),
            ("result", self.result),
            ("error", self.error),
        ] {
            if let Some(raw) = v {
                m.insert(k.to_string(), parse(raw)?);
            }
        }
        Ok(Value::Object(m))
    }

    /// The id of a successful reply (a message with `result`, without `method`, whose
    /// `error` is absent or null) when it is an unsigned integer.
    pub fn reply_id(&self) -> Option<u64> {
        if self.method.is_some() || self.error.is_some_and(|e| e.get() != "null") {
            return None;
        }
        self.result?;
        self.id?.get().parse().ok()
    }
}

/// One member's tree.
pub(crate) fn parse(raw: &RawValue) -> Result<Value, String> {
    serde_json::from_str(raw.get()).map_err(|e| e.to_string())
}

/// Why a streamed load failed.
#[derive(Debug)]
pub(crate) enum LoadError {
    /// The text is not a `<table-updates2>` (not an object of objects, or bad JSON).
    Json(String),
    /// The model refused a row.
    Model(ModelError),
}

/// Load the `<table-updates2>` `text` into `model` row by row with [`Model::load_row`];
/// returns the number of row entries. On error, the rows loaded before it stay loaded: the
/// caller discards the model.
pub(crate) fn load_table_updates2<M: Model>(model: &mut M, text: &str) -> Result<usize, LoadError> {
    let mut stash = None;
    let mut de = serde_json::Deserializer::from_str(text);
    let r = Tables {
        model,
        stash: &mut stash,
    }
    .deserialize(&mut de)
    .and_then(|n| de.end().map(|()| n));
    match (r, stash) {
        (_, Some(e)) => Err(LoadError::Model(e)),
        (Ok(n), None) => Ok(n),
        (Err(e), None) => Err(LoadError::Json(e.to_string())),
    }
}

/// The seed of the outer object (`{table: {uuid: row-update2}}`).
struct Tables<'m, M> {
    model: &'m mut M,
    stash: &'m mut Option<ModelError>,
}

impl<'de, M: Model> DeserializeSeed<'de> for Tables<'_, M> {
    type Value = usize;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<usize, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, M: Model> Visitor<'de> for Tables<'_, M> {
    type Value = usize;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an object of table updates")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<usize, A::Error> {
        let mut n = 0;
        while let Some(table) = map.next_key::<String>()? {
            n += map.next_value_seed(Rows {
                table: &table,
                model: &mut *self.model,
                stash: &mut *self.stash,
            })?;
        }
        Ok(n)
    }
}

/// The seed of one table's rows (`{uuid: row-update2}`).
struct Rows<'m, M> {
    table: &'m str,
    model: &'m mut M,
    stash: &'m mut Option<ModelError>,
}

impl<'de, M: Model> DeserializeSeed<'de> for Rows<'_, M> {
    type Value = usize;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<usize, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, M: Model> Visitor<'de> for Rows<'_, M> {
    type Value = usize;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "an object of row updates of table {}", self.table)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<usize, A::Error> {
        let mut n = 0;
        while let Some(uuid) = map.next_key::<String>()? {
            let row: Value = map.next_value()?;
            if let Err(e) = self.model.load_row(self.table, &uuid, row) {
                *self.stash = Some(e);
                return Err(de::Error::custom("the model refused a row"));
            }
            n += 1;
        }
        Ok(n)
    }
}
