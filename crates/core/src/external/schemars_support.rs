//! JSON Schema for `Id` (feature `schemars`).

use std::borrow::Cow;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};

use crate::Id;

/// An integer, format `int64`, from 0 to 9007199254740991
/// (2<sup>53</sup> − 1), inlined where it is used, as integers are:
///
/// ```json
/// {"type": "integer", "format": "int64", "minimum": 0, "maximum": 9007199254740991}
/// ```
///
/// For a field written with [`idutil::serde::string`](crate::serde::string),
/// add `#[schemars(schema_with = "idutil::serde::string::json_schema")]`.
#[cfg_attr(docsrs, doc(cfg(feature = "schemars")))]
impl JsonSchema for Id {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "Id".into()
    }

    fn schema_id() -> Cow<'static, str> {
        "idutil::Id".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "integer",
            "format": "int64",
            "minimum": 0,
            "maximum": Id::MAX.as_u64(),
        })
    }
}

/// The schema of the string form, `null` allowed or not.
#[cfg(feature = "serde")]
pub(crate) fn string_schema(nullable: bool) -> Schema {
    if nullable {
        json_schema!({ "type": ["string", "null"], "pattern": crate::external::STRING_PATTERN })
    } else {
        json_schema!({ "type": "string", "pattern": crate::external::STRING_PATTERN })
    }
}
